"""lg_workers: LittleGhost runs on Celery workers.

It owns the Celery side of the step protocol: one task per step kind, the
queues and their routing, the Redis streams of live events, the backend that
hands runs to the workers, and the ``lg worker`` command. It depends on lg_core
and never the other way round; lg_core finds the backend through the
``littleghost.backends`` entry point.

* ``app_factory`` - the Celery app and its settings, built from a Configuration
* ``celery`` - the app ``celery -A lg_workers ...`` finds (Flower, inspect)
* ``tasks`` - ``lg.model_turn``, ``lg.tool_call``, ``lg.graph_node``, ``lg.workflow`` (from the step-kind table)
  and ``lg.advance``
* ``queues`` - the queues, their pools, and the routing read from the step-kind table
* ``continuation`` - the successor step a task runs itself instead of publishing it
* ``task_display``, ``task_outcomes`` - what Flower shows of a step's task: run, step and tool; a failed run
* ``celery_backend`` - ``CeleryBackend``: start_execution, publishing steps, live events
* ``streams`` - the Redis streams of live events, and every Redis key the project uses
* ``broker_check`` - the broker ping before work is handed over
* ``sandbox_check`` - the sandbox backend probe before a worker serving `lg.sandbox` (or sandboxed tools) starts
* ``worker_runtime`` - the runtime of a worker process, rebuilt after a fork
* ``worker``, ``_supervisor``, ``cli`` - the ``lg worker`` command and the process it becomes
* ``_program_home`` - a sandbox worker's own queue, where its code-mode programs' ``wait`` and ``stop`` go
* ``_root_notice`` - one line instead of Celery's root warning, for a worker that accepts no pickle
* ``faults`` - fault injection for the chaos tests, inert unless ``LG_FAULT`` is set

Importing this package builds nothing: the Celery app is created by
``lg_workers.celery`` or per runtime by ``CeleryBackend``.
"""
