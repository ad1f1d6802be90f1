"""An in-process cache of frame state (checkpoint, version, conversation).

Steps of one run usually execute in the same process one after another, so
re-reading the whole conversation before every model turn would make a long
run quadratic. The cache keeps each frame's messages and checkpoint after a
commit; a stale entry is harmless because every commit checks the frame
version and a conflict reloads (and only the missing tail of messages).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lg_core.engine._checkpoint import AgentCheckpoint
from lg_core.engine._driven_checkpoint import checkpoint_of
from lg_core.messages import Message
from lg_core.store import FrameRecord, RunStore


@dataclass(slots=True)
class FrameState:
    id: str
    run_id: str
    path: str
    entrypoint: str
    version: int
    checkpoint: AgentCheckpoint
    messages: tuple[Message, ...]


class FrameCache:
    def __init__(self, store: RunStore, capacity: int = 512) -> None:
        self._store = store
        self._capacity = capacity
        self._lock = threading.Lock()
        self._frames: OrderedDict[str, FrameState] = OrderedDict()

    def get(self, frame_id: str) -> FrameState:
        with self._lock:
            cached = self._frames.get(frame_id)
            if cached is not None:
                self._frames.move_to_end(frame_id)
                return cached
        return self.reload(frame_id)

    def cached(self, frame_id: str) -> FrameState | None:
        """The frame as this process last read or committed it, without reading the store."""
        with self._lock:
            return self._frames.get(frame_id)

    def reload(self, frame_id: str) -> FrameState:
        """Read the frame, and only the messages past those cached."""
        record = self._store.load_frame(frame_id)
        checkpoint = checkpoint_of(record.kind, record.checkpoint)
        known = self._known_prefix(frame_id, checkpoint)
        tail = self._store.load_messages(frame_id, from_seq=len(known))
        return self._build(record, checkpoint, known, tail)

    def known_messages(self, frame_id: str) -> int:
        """How many of the frame's messages are cached: a claim reads the tail after them."""
        with self._lock:
            cached = self._frames.get(frame_id)
        return 0 if cached is None else len(cached.messages)

    def adopt(self, record: FrameRecord, tail: Sequence[dict[str, Any]], tail_from: int) -> FrameState:
        """The frame's state from a record and the messages read with it from ``tail_from``.

        The cache may have changed since ``tail_from`` was taken (a commit in
        this process), or hold messages the store no longer has (a retry cut the
        history back): the part of the tail already known is skipped, and a gap
        is read.
        """
        checkpoint = checkpoint_of(record.kind, record.checkpoint)
        known = self._known_prefix(record.id, checkpoint)
        if len(known) < tail_from:
            tail = self._store.load_messages(record.id, from_seq=len(known))
        else:
            tail = tail[len(known) - tail_from :]
        return self._build(record, checkpoint, known, tail)

    def _known_prefix(self, frame_id: str, checkpoint: AgentCheckpoint) -> tuple[Message, ...]:
        """The cached messages the stored checkpoint still counts.

        None of them once a retry has rewound the history since they were cached
        (another epoch): the positions may hold other messages now.
        """
        with self._lock:
            cached = self._frames.get(frame_id)
        if cached is None or cached.checkpoint.history_epoch != checkpoint.history_epoch:
            return ()
        known = cached.messages
        return known[: checkpoint.message_count] if len(known) > checkpoint.message_count else known

    def _build(
        self,
        record: FrameRecord,
        checkpoint: AgentCheckpoint,
        known: tuple[Message, ...],
        tail: Sequence[dict[str, Any]],
    ) -> FrameState:
        messages = known + tuple(Message.from_dict(data) for data in tail)
        state = FrameState(
            record.id, record.run_id, record.path, record.entrypoint, record.version, checkpoint, messages
        )
        self.put(state)
        return state

    def put(self, state: FrameState) -> None:
        with self._lock:
            current = self._frames.get(state.id)
            if current is not None and current.version > state.version:
                return
            self._frames[state.id] = state
            self._frames.move_to_end(state.id)
            while len(self._frames) > self._capacity:
                self._frames.popitem(last=False)

    def forget_run(self, run_id: str) -> None:
        with self._lock:
            for frame_id in [k for k, v in self._frames.items() if v.run_id == run_id]:
                del self._frames[frame_id]


__all__ = ["FrameCache", "FrameState"]
