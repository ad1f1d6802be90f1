"""Helpers of bench/distributed.py and bench/startup.py (importable by their worker processes: PYTHONPATH=bench).

app        the agents every LittleGhost worker imports (LG_IMPORTS=distbench.app)
floor_app  the bench-only Celery app of the raw floor (a chain of hops)
bare_app   a Celery app with lg_workers' broker settings and nothing of LittleGhost (startup.py's floor)
stack      PostgreSQL, Redis, worker and scheduler processes for one benchmark run
measure    the five measurements
report     tables, targets and the JSON document
"""
