"""A Workflow calling resumable_graph's Agents, whose tool can raise KeyboardInterrupt once, as if the process died.

Module level, so that ``lg_core.resume`` rebuilds the Workflow run and its calls' child runs
from their import paths.
"""

from __future__ import annotations

from lg_core import Workflow
from tests.assemblies.resumable_graph import FirstAgent, SecondAgent


class ResumableWorkflow(Workflow):
    def perform(self):
        first = self.invoke(FirstAgent, as_="first").output
        return self.invoke(SecondAgent, input=f"after {first}", as_="second")
