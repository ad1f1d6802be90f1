"""A FastAPI app that enqueues agent runs on LittleGhost's workers and streams their events.

    POST /runs                      {"agent": "support", "message": "...", "session_id"?: "..."}
                                    -> 202 {"run_id", "events_url", ...}
    GET  /runs/{id}                 state, outcome, response
    GET  /runs/{id}/events          Server-Sent Events (id: event id, event: type, data: JSON);
                                    resumes from the Last-Event-ID header or ?after=; ends after
                                    the run's terminal event; 204 when resumed after it
    POST /runs/{id}/interject       {"message": "..."} -> 202 {"seq"}; 409 once the run finished;
                                    an Idempotency-Key header makes a retried POST return the
                                    first one's seq instead of adding the message twice
    GET  /runs/{id}/interjections/{seq}/reply?wait=25
                                    long poll: 200 {"text", "tool_calls", "seqs"} once the model
                                    turn that read it has committed; 202 {"state": "waiting"}
                                    when ``wait`` seconds (0-60) pass first; 409 when the run
                                    ended without reading it
    POST /runs/{id}/cancel          -> 202
    GET  /healthz

Access: every endpoint but /healthz needs ``Authorization: Bearer TOKEN``, a
token from the file ``LG_WEB_TOKENS_FILE`` names (examples/web_auth.py); the
token's actor is the caller. A run belongs to the caller that started it: any
other caller gets the same 404 as for a run that does not exist, so run ids
cannot be probed. The caller is also the run's ``actor_id`` and its session's
actor (``session_actor``); a body naming ``actor_id`` is refused, and a body's
``session_id`` names one of the caller's own conversations. Request bodies
are limited to ``LG_WEB_MAX_BODY_BYTES`` (1 MiB by default).

Errors: 401 no or unknown token, 404 unknown run (or another caller's), 409
interjection into a finished run, 413 body too large, 422 bad body or event
id, 503 (with Retry-After) while the run store cannot be reached; an event
stream already open waits a database outage out instead. Every handler is ``async`` and uses LittleGhost's async forms
(``start_execution_async``, ``async for ... in execution.events()``, which reads
Redis with redis.asyncio), so a slow run never blocks the event loop; a request
never waits for a run (the reply long poll waits at most its ``wait``). Start it (see README.md here) with

    LG_WEB_TOKENS_FILE=.lg/web-tokens LG_WEB_AGENTS="support=examples.web_agents:SupportAgent" \\
        uvicorn --factory examples.web_app:create_app

``LG_WEB_AGENTS`` lists the agents a client may start, as ``name=module:Class``
(comma-separated): a request names one, never an import path. The run store
and broker come from LittleGhost's usual settings (``LG_RUN_STORE``,
``LG_BROKER_URL``; ``source .lg/stack/env`` after ``lg stack up``).
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import json
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, HTTPException, Path, Query, Request, Response
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, model_validator
from sse_starlette import EventSourceResponse, ServerSentEvent

import lg_core
from examples.web_auth import TokenTable
from lg_core import Agent, ExecutionState, Invocation, RunRecord, StreamEvent, get_execution_async
from lg_core.errors import (
    AgentInterjectionError,
    ConfigurationError,
    DeadlineExceededError,
    InvocationError,
    RunNotFoundError,
    StoreUnavailableError,
)
from lg_core.execution import (
    event_json,
    state_of,
)
from lg_core.execution_event_ids import check_event_id
from lg_core.interjections import MAX_INTERJECTION_NUMBER
from lg_core.run_ids import ID_PATTERN

DEFAULT_AGENTS = "support=examples.web_agents:SupportAgent"
STORE_RETRY_AFTER_SECONDS = 2  # Retry-After of a 503 while the run store cannot be reached
MAX_BODY_BYTES_ENV = "LG_WEB_MAX_BODY_BYTES"
DEFAULT_MAX_BODY_BYTES = 1024 * 1024  # a 100,000-character message, JSON-escaped, fits
CALLER = "web_app.caller"  # the ExecutionState key of the authenticated caller's actor id
RunId = Annotated[str, Path(min_length=1, max_length=200, description="The run id POST /runs returned.")]
_RESUME = "Resume after this event id (the id of the last SSE event received)."
AfterQuery = Annotated[str | None, Query(max_length=200, description=_RESUME)]
LastEventIdHeader = Annotated[str | None, Header(max_length=200, description=_RESUME)]


# -- request and response bodies ---------------------------------------------------------------


class StartRun(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent: str = Field(min_length=1, description="One of the agents this app serves (LG_WEB_AGENTS).")
    message: str = Field(min_length=1, max_length=100_000)
    session_id: str | None = Field(
        default=None,
        pattern=ID_PATTERN.pattern,
        description="A name for one of the caller's conversations: runs naming it continue it. "
        "Another caller's conversation of the same name is another conversation.",
    )
    context: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _no_actor(cls, data: Any) -> Any:
        """Refuse ``actor_id`` with a reason: the actor is who the bearer token says, never the body.

        Ignoring it instead would let a client believe it acted for someone else.
        """
        if isinstance(data, Mapping) and "actor_id" in data:
            raise ValueError("actor_id is not accepted: a run's actor is the caller its bearer token authenticates")
        return data


class Interjection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message: str = Field(min_length=1, max_length=100_000)
    metadata: dict[str, Any] = Field(default_factory=dict)


class RunAccepted(BaseModel):
    run_id: str
    state: str
    url: str
    events_url: str


class RunView(BaseModel):
    run_id: str
    state: str
    outcome: str | None
    response: str | None
    error: str | None  # the error's class name; details stay in the run store
    events: int


class InterjectionAccepted(BaseModel):
    run_id: str
    seq: int


class InterjectionReply(BaseModel):
    run_id: str
    seq: int
    state: str  # "answered", or "waiting" when the wait ended first
    text: str | None = None
    tool_calls: list[str] = Field(default_factory=list, description="Names of the tools the reply asked for.")
    seqs: list[int] = Field(default_factory=list, description="Every interjection this reply answers.")


class CancelAccepted(BaseModel):
    run_id: str
    state: str


# -- who is calling ----------------------------------------------------------------------------

_bearer = HTTPBearer(auto_error=False, description="A token from LG_WEB_TOKENS_FILE; its actor is the caller.")


async def authenticated_caller(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> str:
    """The actor id the request's bearer token authenticates; 401 without one or with an unknown one."""
    tokens: TokenTable = request.app.state.tokens
    actor = None if credentials is None else tokens.actor_for(credentials.credentials)
    if actor is None:
        error = "" if credentials is None else ' error="invalid_token"'
        raise HTTPException(
            status_code=401, detail="a valid bearer token is required", headers={"WWW-Authenticate": f"Bearer{error}"}
        )
    return actor


Caller = Annotated[str, Depends(authenticated_caller)]


# -- the app -----------------------------------------------------------------------------------


def create_app(
    agents: Mapping[str, type[Agent]] | None = None,
    tokens: TokenTable | None = None,
    max_body_bytes: int | None = None,
) -> FastAPI:
    """The app serving ``agents`` (name -> Agent class) to the callers ``tokens`` authenticates.

    Defaults: the agents LG_WEB_AGENTS names, the tokens in LG_WEB_TOKENS_FILE,
    bodies of up to LG_WEB_MAX_BODY_BYTES. Makes the authenticated caller the
    session actor of the configuration in force (``session_actor``), so it
    must be called before that configuration's first run.
    """
    registry = dict(agents) if agents is not None else load_agents(os.environ.get("LG_WEB_AGENTS", DEFAULT_AGENTS))
    tokens = tokens if tokens is not None else TokenTable.from_environment()
    limit = max_body_bytes if max_body_bytes is not None else _max_body_bytes()
    _persist_as_the_caller()

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        # Build the runtime (store, broker connection) now, so bad settings fail at startup.
        await asyncio.to_thread(lambda: lg_core.current_runtime().backend)
        yield

    # max_body_size: 413 for a longer body, declared or chunked, counted as it is read.
    app = FastAPI(title="LittleGhost web app example", lifespan=lifespan, max_body_size=limit)
    app.state.tokens = tokens  # what authenticated_caller checks
    _add_error_handlers(app)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/runs", status_code=202, response_model=RunAccepted)
    async def start_run(body: StartRun, response: Response, caller: Caller) -> RunAccepted:
        agent = registry.get(body.agent)
        if agent is None:
            raise InvocationError(f"unknown agent {body.agent!r}; this app serves {sorted(registry)}")
        options: dict[str, Any] = {"actor_id": caller}  # what tools see as run.invocation.actor_id
        if body.session_id is not None:
            options["session_id"] = conversation_id(caller, body.session_id)
        with ExecutionState.with_({CALLER: caller}):  # what session_actor reads (see there)
            execution = await agent.start_execution_async(body.message, context=body.context, **options)
        record = await execution.record_async()
        url = f"/runs/{execution.run_id}"
        response.headers["Location"] = url
        return RunAccepted(run_id=execution.run_id, state=state_of(record), url=url, events_url=f"{url}/events")

    @app.get("/runs/{run_id}", response_model=RunView)
    async def show_run(run_id: RunId, caller: Caller) -> RunView:
        _execution, record = await _find_run(run_id, caller)
        error = (record.error or {}).get("name")
        return RunView(
            run_id=run_id,
            state=state_of(record),
            outcome=record.outcome,
            response=record.response,
            error=error,
            events=record.event_seq,
        )

    @app.get("/runs/{run_id}/events")
    async def run_events(
        run_id: RunId,
        caller: Caller,
        after: AfterQuery = None,
        last_event_id: LastEventIdHeader = None,
    ) -> Response:
        execution, record = await _find_run(run_id, caller)
        resume_from = last_event_id or after  # a reconnecting browser sends Last-Event-ID
        seen, _position = check_event_id(resume_from, record)  # 422 before the stream starts
        if record.finished and seen >= record.event_seq:
            # Nothing follows the run's last event. A browser's EventSource reconnects
            # whenever a stream closes, forever; 204 No Content is what makes it stop.
            return Response(status_code=204)
        events = execution.events(resume_from)

        async def publish() -> AsyncIterator[ServerSentEvent]:
            async for event in events:
                yield _server_sent(event)

        return EventSourceResponse(publish(), ping=15)

    @app.post("/runs/{run_id}/interject", status_code=202, response_model=InterjectionAccepted)
    async def interject(
        body: Interjection, run_id: RunId, caller: Caller, idempotency_key: Annotated[str | None, Header()] = None
    ) -> InterjectionAccepted:
        execution, _record = await _find_run(run_id, caller)
        seq = await execution.interject_async(body.message, metadata=body.metadata, interjection_id=idempotency_key)
        return InterjectionAccepted(run_id=run_id, seq=seq)

    @app.get("/runs/{run_id}/interjections/{seq}/reply", response_model=InterjectionReply)
    async def interjection_reply(
        run_id: RunId,
        seq: Annotated[
            int, Path(ge=1, le=MAX_INTERJECTION_NUMBER, description="The seq POST /runs/{id}/interject returned.")
        ],
        response: Response,
        caller: Caller,
        wait: Annotated[float, Query(ge=0, le=60, description="Seconds to wait for the reply.")] = 25,
    ) -> InterjectionReply:
        execution, _record = await _find_run(run_id, caller)
        try:
            reply = await execution.reply_async(seq, timeout=wait)
        except DeadlineExceededError:
            response.status_code = 202
            return InterjectionReply(run_id=run_id, seq=seq, state="waiting")
        return InterjectionReply(
            run_id=run_id,
            seq=seq,
            state="answered",
            text=reply.text,
            tool_calls=[use.name for use in reply.tool_uses],
            seqs=list(reply.numbers),
        )

    @app.post("/runs/{run_id}/cancel", status_code=202, response_model=CancelAccepted)
    async def cancel(run_id: RunId, caller: Caller) -> CancelAccepted:
        execution, _record = await _find_run(run_id, caller)
        execution = await execution.cancel_async()
        return CancelAccepted(run_id=run_id, state=state_of(await execution.record_async()))

    return app


# -- who may do what ---------------------------------------------------------------------------


def conversation_id(caller: str, name: str) -> str:
    """The session id of the caller's conversation ``name``.

    Session ids are shared by every actor of the store, and a session belongs
    to the actor that created it. Derived from both, two callers' conversations
    of one name are two sessions, and a caller cannot name (or learn about)
    another's session, or a run's own session (a run id), with any name.
    """
    return "web-" + hashlib.sha256(f"{caller}\x00{name}".encode()).hexdigest()


def session_actor(invocation: Invocation) -> str:
    """The session actor of every run this app starts: the authenticated caller.

    ``create_app`` installs it as ``session_actor``. The run row keeps it
    (``lg_runs.actor_id``), which is what ``_find_run`` checks. It is read from
    the request's authenticated state, not from the invocation, so no change to
    how a handler builds the invocation (a field copied from a body) can put a
    run in another caller's session or let another caller see it. A run started
    outside an authenticated request is refused before it is stored.
    """
    caller = ExecutionState[CALLER]
    if not isinstance(caller, str):
        raise InvocationError(f"run {invocation.run_id} was started without an authenticated caller")
    return caller


def _persist_as_the_caller() -> None:
    """Make :func:`session_actor` the configuration's (unless it already is)."""
    configuration = lg_core.current_configuration()
    if configuration.session_actor is not session_actor:
        configuration.configure(session_actor=session_actor)


async def _find_run(run_id: str, caller: str) -> tuple[lg_core.Execution, RunRecord]:
    """The caller's run (its Execution and record), or 404 naming only the id.

    Another caller's run gets the same 404 as a run that does not exist, so a
    caller cannot tell the two apart and probe for ids. The store's own message
    also names the run store (host, user, database): for operators and logs,
    not for whoever sends a request.
    """
    try:
        execution = await get_execution_async(run_id)
        record = await execution.record_async()
    except RunNotFoundError:
        raise _no_run(run_id) from None
    if record.actor_id != caller:
        raise _no_run(run_id)
    return execution, record


def _no_run(run_id: str) -> HTTPException:
    return HTTPException(status_code=404, detail=f"no run with id {run_id!r}")


def _max_body_bytes() -> int:
    """``$LG_WEB_MAX_BODY_BYTES``, or the default; ConfigurationError for anything but a positive integer."""
    text = os.environ.get(MAX_BODY_BYTES_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_BODY_BYTES
    if not text.isdigit() or int(text) <= 0:
        raise ConfigurationError(f"{MAX_BODY_BYTES_ENV} must be a positive number of bytes, got {text!r}")
    return int(text)


def _server_sent(event: StreamEvent) -> ServerSentEvent:
    """One SSE message. The raw ``error`` is left out: ``message`` is the caller-safe text."""
    data = event_json(event)
    data.pop("error", None)
    return ServerSentEvent(data=json.dumps({"seq": event.seq, "data": data}), event=event.type, id=event.id)


def _add_error_handlers(app: FastAPI) -> None:
    """LittleGhost's errors become HTTP statuses here, in one place."""

    def status(code: int):
        async def handler(_request: Request, exc: Exception) -> Response:
            return _error_response({"detail": str(exc)}, code)

        return handler

    async def invalid_request(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return _error_response({"detail": jsonable_encoder(exc.errors())}, 422)

    async def store_unavailable(_request: Request, _exc: Exception) -> Response:
        # The database is restarting or out of reach for longer than a store transaction
        # retries (a few seconds). Nothing was started; the error's message names the
        # server, so it stays in the log. Event streams already open wait the outage out.
        response = _error_response({"detail": "the run store cannot be reached right now; try again shortly"}, 503)
        response.headers["Retry-After"] = str(STORE_RETRY_AFTER_SECONDS)
        return response

    app.add_exception_handler(StoreUnavailableError, store_unavailable)
    app.add_exception_handler(RunNotFoundError, status(404))
    app.add_exception_handler(AgentInterjectionError, status(409))
    app.add_exception_handler(InvocationError, status(422))
    app.add_exception_handler(RequestValidationError, invalid_request)


def _error_response(content: Any, status_code: int) -> Response:
    """An error as JSON with every non-ASCII character escaped.

    An error may quote the request (FastAPI's validation errors echo the input,
    ours name the bad value), and JSON may carry a lone surrogate ("\\ud800"),
    which is no character UTF-8 can encode: JSONResponse then failed with a 500
    instead of answering 422. Escaped, the same text is valid JSON in ASCII.
    """
    return Response(json.dumps(content, ensure_ascii=True), status_code=status_code, media_type="application/json")


def load_agents(spec: str) -> dict[str, type[Agent]]:
    """``"name=module:Class,..."`` -> {name: class}; raises ConfigurationError naming the bad entry."""
    agents: dict[str, type[Agent]] = {}
    for entry in filter(None, (part.strip() for part in spec.split(","))):
        name, _, path = entry.partition("=")
        module_name, _, class_name = path.partition(":")
        if not (name and module_name and class_name):
            raise ConfigurationError(f"LG_WEB_AGENTS entry {entry!r} must look like name=module:Class")
        try:
            agent = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError) as exc:
            raise ConfigurationError(f"LG_WEB_AGENTS entry {entry!r} cannot be imported: {exc}") from None
        if not (isinstance(agent, type) and issubclass(agent, Agent)):
            raise ConfigurationError(f"LG_WEB_AGENTS entry {entry!r} is not an Agent class")
        agents[name] = agent
    if not agents:
        raise ConfigurationError(
            "LG_WEB_AGENTS names no agent; e.g. LG_WEB_AGENTS=support=examples.web_agents:SupportAgent"
        )
    return agents


__all__ = ["conversation_id", "create_app", "load_agents", "session_actor"]
