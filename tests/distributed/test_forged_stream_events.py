"""A forged event in a run's Redis stream makes its reader import nothing.

Whoever can write to Redis can add an entry to a run's stream; a reader
(``Execution.events()`` through lg_workers' RedisLiveSource) decodes its error
from the allow-list of lg_core.engine.codec, never by importing the module the
entry names. Against the real redis-server.
"""

from __future__ import annotations

import json
import sys
import uuid

from lg_core import Error
from lg_workers.streams import RedisLiveSource, connect, stream_key


def test_a_forged_run_error_entry_naming_a_module_imports_nothing(redis_server, tmp_path, monkeypatch):
    name = f"planted_{uuid.uuid4().hex[:10]}"
    marker = tmp_path / f"{name}.imported"
    (tmp_path / f"{name}.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    client = connect(redis_server.url)
    run_id = f"forged-{uuid.uuid4().hex[:8]}"
    error = {"class": f"{name}:Boom", "name": "Boom", "message": "forged"}
    client.xadd(
        stream_key(run_id), {"type": "run_error", "seq": "1", "data": json.dumps({"message": "m", "error": error})}
    )
    try:
        [(_position, event)] = RedisLiveSource(client, run_id).read("0", 1.0) or []
    finally:
        client.delete(stream_key(run_id))
        client.close()

    assert event.type == "run_error"
    assert type(event.data["error"]) is Error and str(event.data["error"]) == "Boom: forged"
    assert not marker.exists() and name not in sys.modules
