"""The agent of the distributed replay test; workers import it (LG_IMPORTS=dist_app,replay_dist_app).

Its model fails at turn 3 while the file named by $REPLAY_OUTAGE exists: a
provider outage every worker process sees, which the test ends by deleting
the file before it retries the run.
"""

from __future__ import annotations

import os

from dist_app import StepTool

from lg_core import Agent
from lg_core.providers import scripted

TOOL_TURNS = 3


def _outage(request) -> dict:
    sequence = int(request.metadata.get("sequence", 0))
    if sequence < TOOL_TURNS:
        return {"tool_calls": [{"name": "step", "arguments": {"n": sequence}}]}
    marker = os.environ.get("REPLAY_OUTAGE")
    if marker and os.path.exists(marker):
        return {"error": {"kind": "http", "status": 503, "message": "the provider is down"}}
    return {"text": "All steps recorded."}


scripted.register("replay-outage", _outage)
scripted.register("replay-alt", lambda request: {"text": f"Forked after {len(request.messages)} messages."})


class OutageAgent(Agent):
    model = "scripted:replay-outage"
    tools = [StepTool]
