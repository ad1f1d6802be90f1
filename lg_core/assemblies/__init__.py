"""Assemblies: Workflows, Swarms and Graphs, which coordinate several Agents behind one calling style.

    from lg_core import Graph, edge

    class SupportFlowGraph(Graph):
        nodes = {"triage": TriageAgent, "respond": CustomerSupportAgent}
        start = "triage"
        edges = [edge("triage", "respond")]
        finish = "respond"

The modules, one concept each: ``assembly`` (the base class and its identity),
``declarations`` (``member``, ``node``, ``edge``, ``error_edge``), ``workflow`` /
``workflow_invocation``, ``swarm``, ``graph`` and ``graph_state`` (the three kinds, each
with its builder), ``swarm_handoffs`` (the handoff tool, its checks and a Swarm run's
journey), ``builder`` (what the builders share), ``definition`` (the fixed, storable
AssemblyDefinition) and ``trajectory`` (Step, Attempt, Trajectory). The private
modules hold the rules each kind's declarations are checked against, the stored form of
code references, the Mermaid rendering, and running a Graph: ``_assembly_runs`` (an
assembly call's Run, refusing what is not supported yet), ``_graph_frame`` (a Graph run's
checkpoint and what committing a node writes), ``_graph_node`` (a node step's body),
``_swarm_frame`` and ``_swarm_member`` (the same for a Swarm run and its member steps),
``child_runs`` (a step's child run, started once and parked on), ``_step_attempts`` (a node's,
member's or Workflow call's attempts under its timeout and retries, each a child run); and running
a Workflow:
``_workflow_step`` (its frame and its one perform step, replayed until it settles) and
``_workflow_calls`` (the replay host answering each ``invoke`` from the frame or a child run).
``swarm_members`` offers a Swarm member's run its handoff tool (every Agent's registry consults it).
``assembly_tools`` makes an Agent or assembly one tool of an Agent, each call a child run of the caller's run;
``agent_overrides`` makes the subclass of a delegated Agent holding a declaration's ``model=``/``tools=`` overrides.
"""
