"""Drain a child's stdout and stderr on one thread into bounded buffers.

The child must never block on a full pipe (it would stall while its parent waits for
it) and the parent must never hold unbounded output, so every byte is read at once
and bytes past the capture limit are counted and dropped. One thread with a selector
serves both pipes and stops on request even when a detached descendant still holds
a pipe open, which a blocking read could not.
"""

from __future__ import annotations

import os
import selectors
import threading
import time
from typing import IO

_CHUNK = 65536


class OutputPump:
    """Bounded capture of named output pipes; ``per_stream`` bounds each pipe instead of their sum."""

    def __init__(self, streams: dict[str, IO[bytes]], limit: int, per_stream: bool = False) -> None:
        self._limit = limit
        self._per_stream = per_stream
        self._buffers = {name: bytearray() for name in streams}
        self._captured = dict.fromkeys(streams, 0)
        self.truncated = dict.fromkeys(streams, False)
        self._open = set(streams)
        self._condition = threading.Condition()
        self._wake_read, self._wake_write = os.pipe()
        self._selector = selectors.DefaultSelector()
        for name, stream in streams.items():
            os.set_blocking(stream.fileno(), False)
            self._selector.register(stream.fileno(), selectors.EVENT_READ, name)
        self._selector.register(self._wake_read, selectors.EVENT_READ, None)
        self._thread = threading.Thread(target=self._run, name="sandbox-output", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while self._open:
                for key, _ in self._selector.select():
                    if key.data is None:
                        return
                    self._read_once(key.fd, key.data)
        finally:
            with self._condition:
                self._open.clear()
                self._condition.notify_all()

    def _read_once(self, fd: int, name: str) -> None:
        try:
            chunk = os.read(fd, _CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        with self._condition:
            if not chunk:
                self._selector.unregister(fd)
                self._open.discard(name)
            else:
                used = self._captured[name] if self._per_stream else sum(self._captured.values())
                kept = chunk[: max(0, self._limit - used)]
                self._buffers[name] += kept
                self._captured[name] += len(kept)
                if len(kept) < len(chunk):
                    self.truncated[name] = True
            self._condition.notify_all()

    def take(self, name: str, timeout: float = 0) -> bytes:
        """The bytes captured from ``name`` since the last take, waiting up to ``timeout`` for some."""
        deadline = time.monotonic() + max(0.0, timeout)
        with self._condition:
            while not self._buffers[name] and name in self._open:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._condition.wait(remaining)
            data = bytes(self._buffers[name])
            self._buffers[name].clear()
            return data

    def wait_closed(self, timeout: float) -> bool:
        """Whether every pipe reached end of file within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._condition:
            while self._open:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._condition.wait(remaining)
            return True

    def stop(self) -> None:
        """Stop reading (what was captured stays available) and release the thread."""
        if self._thread.is_alive():
            try:
                os.write(self._wake_write, b"x")
            except OSError:
                pass
            self._thread.join(timeout=5)
        for fd in (self._wake_read, self._wake_write):
            try:
                os.close(fd)
            except OSError:
                pass
        self._wake_read = self._wake_write = -1
        self._selector.close()
