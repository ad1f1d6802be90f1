"""lg_workers: LittleGhost runs on Celery workers: the tasks, queues and routing, the
``lg worker`` command and the Celery dispatch backend.

Importing this package builds nothing: the Celery app is created by
``lg_workers.celery`` (for ``celery -A lg_workers ...``) or per runtime by
:class:`lg_workers.celery_backend.CeleryBackend`.
"""
