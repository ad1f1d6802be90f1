"""lg_scheduler: recovery, schedules, batches and the local stack.

Depends on lg_workers and lg_core (never the other way round).
"""
