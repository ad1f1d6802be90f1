"""A Workflow for the distributed tests, calling graph_dist_app's Agents, each of which records a side effect.

Workers import it by the Workflow's path when they first meet one of its runs. ``perform``
asks triage, then ledger and policy in parallel, then returns the respond call fed with their
findings; every child's Agent calls ``effect`` once with its number (graph_dist_app), and
``perform`` passes the ``perform:1`` hang point (dist_app) once triage has answered, so a test
can kill the worker while ``perform`` itself runs. The answer is fixed, so an undisturbed run
and a disturbed one give the same answer. DelayedRetryWorkflow's one call fails once and is retried
after graph_dist_app.RETRY_DELAY seconds.
"""

from __future__ import annotations

import dist_app
from graph_dist_app import (
    ANSWERS,
    RETRY_DELAY,
    FailsOnceThenWaitsAgent,
    GraphLedgerAgent,
    GraphPolicyAgent,
    GraphRespondAgent,
    GraphTriageAgent,
    TransferGraph,
)

from lg_core import Agent, Graph, ProviderError, Workflow
from lg_core.providers import scripted

__all__ = [
    "ANSWERS",
    "RETRY_DELAY",
    "DelayedRetryWorkflow",
    "GraphInWorkflow",
    "LongWorkflow",
    "OneAtATimeWorkflow",
    "TransferWorkflow",
    "WorkflowInGraph",
]
LONG_CALLS = 12  # more than max_step_attempts (10): the perform step is woken once per call


class TransferWorkflow(Workflow):
    """triage, then ledger and policy at once, then respond with both findings."""

    def perform(self):
        triage = self.invoke(GraphTriageAgent, as_="triage").output
        dist_app._maybe_hang("perform", 1, f"perform-{triage}")
        findings = self.parallel(
            self.invoke(GraphLedgerAgent, as_="ledger"), self.invoke(GraphPolicyAgent, as_="policy"), max_concurrency=2
        )
        return self.invoke(GraphRespondAgent, input="\n".join(findings), as_="respond")


class WorkflowInGraph(Graph):
    """A Graph whose one node is the Workflow: the Workflow runs as a child run on the workers."""

    nodes = {"flow": TransferWorkflow}
    start = "flow"
    finish = "flow"


class GraphInWorkflow(Workflow):
    """A Workflow whose final call is a Graph: the Graph runs as the Workflow's child run on the workers."""

    def perform(self):
        return self.invoke(TransferGraph, as_="graph")


class OneAtATimeWorkflow(Workflow):
    """ledger and policy through ``parallel`` with max_concurrency=1: the second starts when a replay
    after the first's ending finds the slot free."""

    def perform(self):
        findings = self.parallel(
            self.invoke(GraphLedgerAgent, as_="ledger"), self.invoke(GraphPolicyAgent, as_="policy"), max_concurrency=1
        )
        return self.invoke(GraphRespondAgent, input="\n".join(findings), as_="respond")


scripted.register(
    "workflow-count", lambda request: {"text": str(int(request.messages[-1].text) + 1), "delay": 0.3}
)  # slow enough that the step parks before each child ends


class CountingAgent(Agent):
    """Answers its input plus one."""

    model = "scripted:workflow-count"


class LongWorkflow(Workflow):
    """LONG_CALLS calls one after another, each fed the previous output: the step parks and is woken each time."""

    def perform(self):
        count = "0"
        for _ in range(LONG_CALLS - 1):
            count = self.invoke(CountingAgent, input=count, as_="count").output
        return self.invoke(CountingAgent, input=count, as_="count")


class DelayedRetryWorkflow(Workflow):
    """One call whose first attempt fails with a ProviderError and whose retry starts RETRY_DELAY s later."""

    def perform(self):
        return self.invoke(FailsOnceThenWaitsAgent, retries=1, retry_on=ProviderError, retry_delay=RETRY_DELAY)
