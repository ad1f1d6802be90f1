"""The Graph of bench/graph_overhead.py's section on workers; workers import it by the Graph's path.

WorkerFanOutGraph  a start node, four branches whose model waits BRANCH_SECONDS, and a
                   join; every node a one-turn Agent on the scripted model, so the run's
                   time beyond its slowest branch is what the engine and the workers add.
"""

from __future__ import annotations

from lg_core import Agent, Graph, edge
from lg_core.providers import scripted

BRANCH_SECONDS = 1.0
BRANCHES = ("a", "b", "c", "d")

scripted.register("bench-workers-answer", lambda request: {"text": "answer"})
scripted.register("bench-workers-slow", lambda request: {"text": "branch", "delay": BRANCH_SECONDS})


class WorkerAnswerAgent(Agent):
    model = "scripted:bench-workers-answer"


class WorkerBranchAgent(Agent):
    model = "scripted:bench-workers-slow"


class WorkerFanOutGraph(Graph):
    nodes = {"start": WorkerAnswerAgent, **dict.fromkeys(BRANCHES, WorkerBranchAgent), "join": WorkerAnswerAgent}
    start = "start"
    edges = [edge("start", list(BRANCHES)), edge(list(BRANCHES), "join")]
    finish = "join"


__all__ = ["BRANCHES", "BRANCH_SECONDS", "WorkerFanOutGraph"]
