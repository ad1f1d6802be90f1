"""One line, instead of Celery's warning, when a worker runs as root.

Celery warns at every worker start with uid or gid 0 ("absolutely not
recommended", pointing at ``--uid``), and refuses to start at all when the
worker would accept pickle, because a pickled message can run any code in the
worker (``C_FORCE_ROOT`` overrides that refusal). These workers accept JSON
only (:mod:`lg_workers.app_factory`), so no message can run code: the warning
is noise in every log of a machine that runs as root, a container or the local
stack. It is replaced by one line saying why, and that tools still run with
root's privileges. A worker configured to accept pickle keeps Celery's own check.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterable
from typing import Any

from celery.exceptions import SecurityWarning
from celery.signals import celeryd_init

# What Celery's check treats as pickle (celery.platforms.check_privileges).
CODE_RUNNING_CONTENT = frozenset({"pickle", "application/x-python-serialize", "application/group-python-serialize"})
CELERY_ROOT_WARNING = "You're running the worker with superuser privileges"


def runs_as_root() -> bool:
    return 0 in (os.getuid(), os.geteuid(), os.getgid(), os.getegid())


def root_notice(accept_content: Iterable[str]) -> str | None:
    """The line a worker prints when it runs as root and accepts no pickle; None otherwise."""
    accepted = sorted(accept_content)
    if not runs_as_root() or CODE_RUNNING_CONTENT.intersection(accepted):
        return None
    return (
        f"lg worker: running as root; Celery's root warning is about pickle, and this worker accepts "
        f"only {', '.join(accepted)} messages, which cannot run code (tools still run as root: "
        "use an unprivileged user in production)"
    )


def _replace_celery_root_warning(conf: Any = None, **_signal: Any) -> None:
    """``celeryd_init`` handler: it runs just before Celery checks the worker's privileges."""
    notice = root_notice(conf.accept_content if conf is not None else ())
    if notice is None:
        return
    warnings.filterwarnings("ignore", message=CELERY_ROOT_WARNING, category=SecurityWarning)
    print(notice, file=sys.stderr, flush=True)


def install() -> None:
    """Replace Celery's root warning in the workers this process starts (idempotent)."""
    celeryd_init.connect(_replace_celery_root_warning, weak=False, dispatch_uid="lg-root-notice")


__all__ = ["CELERY_ROOT_WARNING", "install", "root_notice"]
