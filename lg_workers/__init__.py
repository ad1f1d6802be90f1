"""lg_workers: LittleGhost runs on Celery workers (DESIGN 4.2, 4.4).

Importing this package builds nothing: the Celery app is created by
``lg_workers.app`` (for ``celery -A lg_workers.app ...``) or per runtime by
:class:`lg_workers.backend.CeleryBackend`.
"""
