"""Sessions: conversations that continue across runs, processes and restarts.

Ownership: this package owns the SessionStore contract and its built-in
stores, the Session object, and the bridge the engine uses to load a run's
history and append its turn (``run_sessions.py``). The SQL tables and the
transaction helpers that serialize runs sharing a session live with the run
store (``lg_core.store.session_transactions``), because they run inside its transactions.

    base.py        SessionStore, SessionSnapshot, the input rules every store applies
    memory.py      MemorySessionStore (one process)
    filesystem.py  FilesystemSessionStore (JSON files, file locks)
    sql.py         SqlSessionStore (SQLite / PostgreSQL; the default, in the run store's database)
    run_sessions.py RunSessions: how a run opens its session and appends its turn
    declaration.py the session_store setting: checking it, and building the store it names

Configure the store with ``configure(session_store=...)``:

    "sql"                                   the run store's database (default)
    "memory"                                this process only
    "none"                                  runs neither read nor write sessions
    {"provider": "filesystem", "root": ...} a provider name or SessionStore subclass, with options
    {"provider": "sql", "url": ...}         another database
    a SessionStore subclass or instance     (an instance is shared, and owned by the application)
"""

from __future__ import annotations

from lg_core.sessions.base import SessionSnapshot, SessionStore, persistable
from lg_core.sessions.declaration import build_session_store, check_declaration
from lg_core.sessions.filesystem import FilesystemSessionStore
from lg_core.sessions.memory import MemorySessionStore
from lg_core.sessions.run_sessions import RunSessions
from lg_core.sessions.sql import SqlSessionStore

__all__ = [
    "FilesystemSessionStore",
    "MemorySessionStore",
    "RunSessions",
    "SessionSnapshot",
    "SessionStore",
    "SqlSessionStore",
    "build_session_store",
    "check_declaration",
    "persistable",
]
