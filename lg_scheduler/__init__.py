"""lg_scheduler: recovery, batches and the local stack.

It owns what keeps runs moving when processes die or messages are lost, and the
operator's tools around the workers. It depends on lg_workers and lg_core,
never the other way round.

* ``recovery`` - the sweeps: outbox relay, lease sweep, stall detection, overdue runs, sessions' next runs
* ``scheduler``, ``cli`` - ``lg scheduler``: the sweeps once or in a loop
* ``lost_tasks`` - the scheduler's report to Flower of the tasks a dead worker held
* ``tasks``, ``beat`` - the sweeps as the ``lg.recover`` task, sent by Celery beat
* ``batch``, ``batch_inputs``, ``batch_output``, ``output_lock``, ``batch_cli`` - ``lg batch``
* ``stack/`` - ``lg stack``: Redis, PostgreSQL, workers, scheduler and Flower as local processes
"""
