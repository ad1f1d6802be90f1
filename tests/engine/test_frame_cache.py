"""FrameCache.adopt: a frame read together with a claim, joined to what the cache holds.

The claim reads the message tail after the messages cached when it started;
by the time the tail arrives the cache may have grown (a commit in this
process), or the stored history may have been cut back (a retry), so adopt
must neither duplicate nor skip messages. Real SQLite store, no doubles.
"""

from __future__ import annotations

import pytest

from lg_core.engine._checkpoint import AgentCheckpoint
from lg_core.engine._frames import FrameCache, FrameState
from lg_core.messages import Message
from lg_core.store import NewStep, RunStore, StepCommit

FRAME = "r1/root"


@pytest.fixture
def store():
    store = RunStore("sqlite://")
    store.create_run(
        {
            "id": "r1",
            "entrypoint": "app:Agent",
            "kind": "agent",
            "status": "running",
            "invocation": {"message": "m0"},
            "session_id": "r1",
            "actor_id": None,
            "holder": None,
            "deadline_at": None,
        },
        {
            "id": FRAME,
            "run_id": "r1",
            "path": "root",
            "kind": "agent",
            "entrypoint": "app:Agent",
            "version": 0,
            "checkpoint": AgentCheckpoint(message_count=1).to_dict(),
        },
        [(0, Message(role="user", content="m0"))],
        [("invocation_start", {})],
        [NewStep(key="root/s", frame_id=FRAME, kind="tool", input={})],
    )
    yield store
    store.close()


def _append(store: RunStore, version: int, texts: list[str], first_seq: int) -> None:
    """One commit adding ``texts`` as messages ``first_seq``... (frame version -> version + 1)."""
    messages = [(first_seq + i, Message(role="assistant", content=text)) for i, text in enumerate(texts)]
    checkpoint = AgentCheckpoint(message_count=first_seq + len(texts)).to_dict()
    commit = StepCommit(
        run_id="r1",
        frame_id=FRAME,
        expected_version=version,
        checkpoint=checkpoint,
        step_key=None,
        messages=messages,
        events=[],
    )
    assert store.commit(commit).applied


def _texts(state: FrameState) -> list[str]:
    return [m.text for m in state.messages]


def _claim(store: RunStore, cache: FrameCache):
    start = store.claim_and_load("r1", "root/s", "host:1:1", 30, known_messages=cache.known_messages, frame_guess=FRAME)
    assert start.attempts == 1
    return start


def test_adopt_with_nothing_cached_takes_the_whole_conversation(store):
    _append(store, 0, ["m1", "m2"], 1)
    cache = FrameCache(store)
    start = _claim(store, cache)
    state = cache.adopt(start.frame, start.messages, start.messages_from)
    assert (state.version, _texts(state), start.messages_from) == (1, ["m0", "m1", "m2"], 0)
    assert cache.get(FRAME) is state


def test_adopt_reads_only_the_tail_after_the_cache(store):
    cache = FrameCache(store)
    cache.reload(FRAME)  # caches m0
    _append(store, 0, ["m1"], 1)
    start = _claim(store, cache)
    assert (start.messages_from, len(start.messages)) == (1, 1)
    assert _texts(cache.adopt(start.frame, start.messages, start.messages_from)) == ["m0", "m1"]


def test_adopt_skips_what_the_cache_learned_meanwhile(store):
    cache = FrameCache(store)
    cache.reload(FRAME)
    _append(store, 0, ["m1", "m2"], 1)
    start = _claim(store, cache)  # tail from 1: m1, m2
    cache.reload(FRAME)  # meanwhile this process learned m1 and m2 itself
    assert _texts(cache.adopt(start.frame, start.messages, start.messages_from)) == ["m0", "m1", "m2"]


def test_adopt_drops_cached_messages_a_retry_cut(store):
    """A retry cut the history back to fewer messages than this process cached."""
    cache = FrameCache(store)
    _append(store, 0, ["old1", "old2"], 1)
    cache.reload(FRAME)  # caches m0 old1 old2
    frame = store.load_frame(FRAME)
    store.reopen_run(
        "r1",
        expected_status="running",
        invocation={"message": "m0"},
        deadline_at=None,
        holder=None,
        frame_id=FRAME,
        frame_version=frame.version,
        checkpoint=AgentCheckpoint(message_count=1).to_dict(),
        message_count=1,
        reschedule=[],
        event=("run_retried", {}),
    )
    start = _claim(store, cache)  # the tail after the 3 cached: nothing
    assert (start.messages_from, start.messages) == (3, ())
    state = cache.adopt(start.frame, start.messages, start.messages_from)
    assert (state.version, _texts(state)) == (2, ["m0"])


def _rewind_to(store: RunStore, message_count: int, epoch: int) -> None:
    """A retry's rewrite of the frame: back to ``message_count`` messages, in a new history epoch."""
    frame = store.load_frame(FRAME)
    checkpoint = AgentCheckpoint(message_count=message_count, history_epoch=epoch).to_dict()
    store.reopen_run(
        "r1",
        expected_status="running",
        invocation={"message": "m0"},
        deadline_at=None,
        holder=None,
        frame_id=FRAME,
        frame_version=frame.version,
        checkpoint=checkpoint,
        message_count=message_count,
        reschedule=[],
        event=("run_retried", {}),
    )


def _append_in_epoch(store: RunStore, texts: list[str], first_seq: int, epoch: int) -> None:
    version = store.load_frame(FRAME).version
    messages = [(first_seq + i, Message(role="assistant", content=text)) for i, text in enumerate(texts)]
    checkpoint = AgentCheckpoint(message_count=first_seq + len(texts), history_epoch=epoch).to_dict()
    commit = StepCommit(
        run_id="r1",
        frame_id=FRAME,
        expected_version=version,
        checkpoint=checkpoint,
        step_key=None,
        messages=messages,
        events=[],
    )
    assert store.commit(commit).applied


@pytest.mark.parametrize("path", ["reload", "claim"])
def test_messages_cached_before_a_retry_are_not_reused_after_it(store, path):
    # A worker cached m0, m1, m2-old; a retry elsewhere cut the history back to
    # m0, m1 and the retried run wrote m2-new at the same position. Counting
    # messages alone cannot tell the two m2 apart; the history epoch can.
    _append(store, 0, ["m1", "m2-old"], 1)
    worker = FrameCache(store)
    assert _texts(worker.reload(FRAME)) == ["m0", "m1", "m2-old"]
    _rewind_to(store, 2, epoch=1)
    _append_in_epoch(store, ["m2-new"], 2, epoch=1)
    if path == "reload":
        state = worker.reload(FRAME)
    else:
        start = _claim(store, worker)
        state = worker.adopt(start.frame, start.messages, start.messages_from)
    assert _texts(state) == ["m0", "m1", "m2-new"]
    assert state.checkpoint.history_epoch == 1
