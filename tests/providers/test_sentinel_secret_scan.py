"""Acceptance: a connection's credentials appear nowhere after a set of provider failures.

One connection per adapter carries a sentinel in each place a credential can be
configured (the API key, a header, the base URL's userinfo and query). A local
server then fails its requests in the ways endpoints and gateways do, echoing
every sentinel: error statuses (400, 401, 500 retried to the end) with the
credentials in the body, a response header repeating one, a JSON error where a
stream belongs, an error frame mid-stream and a malformed status line (a
transport error). Afterwards the whole SQLite file, every log record of every
logger at DEBUG, every event (as delivered live, as read back from the store
through ``Execution.events``, which is what the example web app streams) and
what the application gets (``run.error`` with its traceback, the run's
diagnostics) are scanned: no sentinel may occur once.
"""

from __future__ import annotations

import json
import logging
import traceback
from pathlib import Path

import lg_core
from lg_core.execution import event_json
from tests.providers.agents import SupportAgent, use_connection
from tests.providers.sse_server import body_reply, json_reply
from tests.providers.wire_formats import MODEL_ID

SENTINELS = {
    "api_key": "sk-SENTINEL-apikey-4b7e19d2",
    "header": "SENTINEL-header-9c31f0a7",
    "password": "SENTINEL-password-62d8e5b3",
    "query": "SENTINEL-query-0f4a7c91",
}
ECHO = " ".join(SENTINELS.values())  # what the server quotes back, as a gateway echoing the request would


def malformed_status_line(handler):
    handler.wfile.write(f"HTTP/1.1 2OO {ECHO}\r\n\r\n".encode())
    handler.wfile.flush()
    handler.close_connection = True


def failures(wire):
    """Each failure as the replies of one run (a retried failure answers every attempt)."""
    return {
        "400 echoing the request": [wire.error(400, f"bad request headers: {ECHO}")],
        "401 echoing the credentials": [wire.error(401, f"invalid credentials {ECHO}")],
        "500 to the last retry": [wire.error(500, f"internal error handling {ECHO}")] * 3,
        "a response header": [body_reply(403, b"{}", content_type="application/json", headers={"X-Echo": ECHO})],
        "JSON in place of a stream": [json_reply(200, wire.error_body(f"stream refused for {ECHO}"))],
        "an error frame mid-stream": [
            wire.stream([*wire.partial("Hel"), wire.error_event(f"aborted {ECHO}", transient=False)])
        ],
        "a malformed status line": [malformed_status_line] * 3,
    }


def database_bytes(configuration) -> bytes:
    path = Path(configuration.run_store.removeprefix("sqlite:///"))
    return b"".join(part.read_bytes() for part in (path, Path(f"{path}-wal")) if part.exists())


def test_no_sentinel_reaches_the_store_a_log_an_event_or_the_application(wire, server, file_config, caplog):
    caplog.set_level(logging.DEBUG)
    base_url = server.base_url.replace("://", f"://relay:{SENTINELS['password']}@", 1) + f"?key={SENTINELS['query']}"
    use_connection(
        f"gateway:{MODEL_ID}",
        {
            "adapter": wire.adapter,
            "api_key": SENTINELS["api_key"],
            "headers": {"X-Gateway-Key": SENTINELS["header"]},
            "base_url": base_url,
            "allow_insecure_http": True,
        },
    )
    seen: list[str] = []

    planned = failures(wire)
    for name, replies in planned.items():
        server.reply(*replies)
        live = []
        run = SupportAgent.ask("Hi", on_event=live.append)
        assert run.outcome == "failed", name
        served = list(lg_core.get_execution(run.id).events())
        seen += [repr(event) for event in [*live, *run.events(), *served]]
        seen += [json.dumps(event_json(event), default=str) for event in [*live, *served]]
        seen += ["".join(traceback.format_exception(run.error)), json.dumps(run.diagnostics, default=str)]

    assert len(server.received) == sum(map(len, planned.values()))
    assert all(r.headers.get("x-gateway-key") == SENTINELS["header"] for r in server.received)
    stored, logged = database_bytes(file_config), caplog.text + "".join(r.getMessage() for r in caplog.records)
    assert b"[redacted]" in stored and "[redacted]" in logged  # the failures did quote the sentinels
    for place, sentinel in SENTINELS.items():
        assert sentinel.encode() not in stored, f"the {place} sentinel is in the SQLite file"
        assert sentinel not in logged, f"the {place} sentinel is in the log"
        assert not [text for text in seen if sentinel in text], (
            f"the {place} sentinel is in an event or the run's error"
        )
