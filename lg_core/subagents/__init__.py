"""Subagents: one agent handing focused work to other agents and continuing when they answer.

Modules:

* ``agent_path`` - where a delegated conversation sits (``/root/review_api``), model-chosen names checked;
* ``definition`` - one kind of agent a parent's model may delegate to (kind, description, factory, persistence);
* ``declarations`` - what an Agent class declares: ``subagent``, ``agent_as_tool``, ``assembly_as_tool``;
* ``limits`` - the manager's bounds on one parent run's delegated work;
* ``control_inputs`` - the inputs of the five tools a parent's model manages subagents with, checked;
* ``ledger`` - every child identity of a parent run, its queued turns and answers, saved with the parent;
* ``persistence`` - children kept in the parent's session: transcripts and the registry, framework-owned sessions;
* ``options`` - an Agent class's subagent declarations, limits and long poll, checked; its kinds resolved per run;
* ``control_tools`` - the five control tools as the parent's model is offered them;
* ``steps`` - the step bodies the Agent hands the engine: a control-tool call, a child's turn;
* ``_control_step`` - a control-tool call: the ledger change committed with it, a wait that parks or blocks;
* ``_turn_step`` - one child turn run as a child run, its outcome recorded in the ledger;
* ``_interjection_reply`` - an interject call's answer: the child's next model response, waited for;
* ``_run_agent_path`` - the agent path of a run's Agent (a subagent's turn sits at its path), where its children go.
"""
