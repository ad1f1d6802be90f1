"""The engine: executing and committing the steps of durable runs.

Public modules (imported by lg_core, lg_workers and lg_scheduler):

* ``engine``: ``Engine``, the facade every dispatcher, worker task and recovery sweep calls.
* ``step_kinds``: the step-kind table, every kind of step with its task name and queue.
* ``dispatcher``: ``StepRef`` (a step named by ids only) and the ``Dispatcher`` protocol.
* ``local``: ``LocalDispatcher``, which executes steps on threads of this process.
* ``background``: ``ThreadBackend``, ``start_execution`` without a broker.
* ``leases``: the heartbeat that keeps claimed steps' leases alive, and losing a claim.
* ``codec``: the stored form of events, errors and their data.
* ``recent_dict``: ``RecentDict``, the bounded mapping of per-run hints, and the run cache size.
* ``run_once``: ``Run.once``, a block performed at most once per key in a run.
* ``run_endings``: how the step a thread just executed ended its run, for the task that reports it.
* ``driven_frames``: what an entrypoint class that drives its own frame (a Graph) works with.
* ``tool_steps``: what a tool that runs on its tool-call step (and may park it) is handed.
* ``tool_call_bodies``: what an Agent's own body for some tool calls (a subagent control tool) builds on.
* ``subagent_turns``: the subagent turn kind, whose body is the parent Agent's.
* ``graph_nodes``: the graph node kind, whose body is the run's entrypoint class's.
* ``workflow_steps``: a workflow's perform step, whose body is the run's entrypoint class's too.

Engine-private modules:

* ``_run_registry``: live runs, rebuilt handles and their eviction, event sinks, per-run hints.
* ``_step_executor``: look up, claim and execute a step; release a failed attempt.
* ``_committer``: a transition's commit, through version races and outages; successor pre-claim; session writes.
* ``_run_protocol``: what the engine needs of a Run, a Runtime and its sessions.
* ``_step_kind``: ``StepKind`` and ``StepBody``, what one kind of step declares.
* ``_model_turn``: the model turn kind; ``_model_call``: its streamed model call, with retries and pacing;
  ``_structured_results``: its structured-result rules.
* ``_tool_admission``: a model turn's tool calls checked against their ids and budget, and made steps.
* ``_tool_call``: the tool call kind; ``_tool_execution``: the tool path it shares with code-mode programs' calls.
* ``_code_exec``: the code-mode control kind (``exec``, ``wait``, ``stop``) and its brokered calls;
  ``_code_mode_offer``: what a code-mode agent's turn offers, and where its ``wait`` or ``stop`` runs.
* ``_turn_keys``: the names and step keys of the agent loop's kinds.
* ``_step_scope``: ``StepScope``, what one step works with: events, interrupts, commits, endings.
* ``_checkpoint``: ``AgentCheckpoint``, a frame's stored state.
* ``_driven_checkpoint``: ``DrivenCheckpoint``, the state of a frame its entrypoint class drives.
* ``_frames``: ``FrameCache``, the frames this process last read or wrote.
* ``_frame_locks``: parallel tool calls of one frame commit in turn.
* ``_opening``: opening a run's conversation, at once or when its session's turn comes.
* ``_preclaim``: the successor a commit claims for the thread that runs it next.
* ``_at_most_once``: the durable mark that an at_most_once tool started.
* ``_step_failures``: retry delays and the attempt limit of failing steps.
* ``_caller_errors``: the caller-safe form of the error that ends a run.
* ``_cancel_watch``: noticing a cancel requested by another process.
* ``_event_bus``: in-process subscribers to a run's events.
* ``_executing_runs``: which runs the current thread is executing a step of.

The package imports none of them: importing one module stays as cheap as that module.
"""
