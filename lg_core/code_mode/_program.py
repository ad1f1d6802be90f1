"""One running code-mode program: its temporary workspace, sandbox, interpreter and frame pump.

A pump thread reads the interpreter's frames: ``text`` is output (bounded by
``output_bytes``), ``call`` is handed to the Broker on a bounded pool and
answered with a ``result`` frame, ``done`` and ``error`` end the program. The
same thread enforces the lifetime (``wall_seconds``), so a program nobody
observes is still stopped on time. A malformed frame, an unknown frame type or
output past the limit ends the program with an ``error`` naming the cause.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from lg_core.code_mode import protocol
from lg_core.code_mode.broker import Broker
from lg_core.code_mode.protocol import ProtocolError
from lg_core.errors import CleanupError, SandboxLimitError
from lg_core.sandbox import ProcessSession, Sandbox
from lg_core.workspace import Workspace

RUNTIME_SOURCE = (Path(__file__).parent / "_runtime.py").read_text(encoding="utf-8")
# The whole protocol stream a program may send, tool calls included; its text output has its own bound.
PROTOCOL_BYTES = 64 * 1024 * 1024
EXIT_GRACE_SECONDS = 1.0
Final = tuple[str, Any, str | None]


class Program:
    """See the module docstring; owned and closed by a Session."""

    def __init__(
        self,
        broker: Broker,
        sandbox_factory: Callable[[Workspace], Sandbox],
        limits: Mapping[str, Any],
        python: str,
        source: str,
    ) -> None:
        self._limits = limits
        self._broker = broker
        self._condition = threading.Condition()
        self._output: list[str] = []
        self._output_total = 0
        self._final: Final | None = None
        self._raised: BaseException | None = None  # a run-level error from a brokered call, raised by observe
        self._write_lock = threading.Lock()
        self._tempdir = tempfile.mkdtemp(prefix="lg-code-")
        self.deadline = time.monotonic() + float(limits["wall_seconds"])
        self._sandbox: Sandbox | None = None
        self._process: ProcessSession | None = None
        self._workspace = Workspace(root=os.path.join(self._tempdir, "root"))
        self._pool = ThreadPoolExecutor(max_workers=int(limits["concurrency"]), thread_name_prefix="lg-code-call")
        try:
            self._workspace.open()
            self._sandbox = sandbox_factory(self._workspace).open()
            self._process = self._sandbox.start_program(
                [python, "-I", "-S", "-c", RUNTIME_SOURCE],
                output_bytes=PROTOCOL_BYTES,
                memory_bytes=limits["memory_bytes"],
                cpu_seconds=limits["cpu_seconds"],
                file_bytes=limits["file_bytes"],
            )
            start = {
                "type": "program",
                "source": source,
                "catalog": broker.catalog.to_list(),
                "concurrency": limits["concurrency"],
            }
            self._send(start)
        except BaseException:
            self.close()
            raise
        self._pump = threading.Thread(target=self._run_pump, name="lg-code-pump", daemon=True)
        self._pump.start()

    # -- observation -------------------------------------------------------------------------

    def observe(self, seconds: float, context: Any = None) -> tuple[str, Final | None]:
        """Wait up to ``seconds`` for the program to end; the output since the last observation and its end."""
        until = time.monotonic() + seconds
        with self._condition:
            while self._final is None and self._raised is None and time.monotonic() < until:
                if context is not None and hasattr(context, "check"):
                    context.check()
                self._condition.wait(min(0.1, max(0.0, until - time.monotonic())))
            if self._raised is not None:
                raise self._raised
            output, self._output = "".join(self._output), []
            return output, self._final

    def stop(self) -> None:
        """End the program now (its end becomes ``terminated`` unless it already ended)."""
        self._end("terminated", None, None)
        self._kill()

    # -- the pump ----------------------------------------------------------------------------

    def _run_pump(self) -> None:
        assert self._process is not None
        buffer = bytearray()
        try:
            while self._final is None:
                if time.monotonic() >= self.deadline:
                    wall = self._limits["wall_seconds"]
                    self._end("error", None, f"the program exceeded its lifetime of {wall} seconds and was stopped")
                    break
                data = self._process.read(0.05)
                if not data and not self._process.alive:
                    data = self._process.read(0.2)  # what was still in flight when it ended
                    if not data:
                        self._ended_without_result(buffer)
                        break
                buffer += data
                while self._final is None and (frame := protocol.extract(buffer)) is not None:
                    self._handle(frame)
        except ProtocolError as error:
            self._end("error", None, f"the program broke the code-mode protocol: {error}")
        except SandboxLimitError as error:
            self._end("error", None, f"the program was stopped at a sandbox limit: {error}")
        finally:
            self._let_exit()
            self._kill()

    def _let_exit(self) -> None:
        """A program that reported its end exits by itself once its input closes; give it a moment."""
        assert self._process is not None
        if self._final is None or self._final[0] == "terminated" or self._process.returncode is not None:
            return
        self._process.close_write()
        try:
            self._process.wait(timeout=EXIT_GRACE_SECONDS)
        except (TimeoutError, SandboxLimitError):
            pass  # _kill ends it

    def _ended_without_result(self, buffer: bytearray) -> None:
        assert self._process is not None
        if buffer:
            raise ProtocolError("the interpreter ended inside a frame")
        if self._process.output_truncated:
            raise ProtocolError(f"the program sent more than {PROTOCOL_BYTES} bytes")
        stderr = self._process.read_stderr(0.2).decode("utf-8", "replace")[-2000:]
        status = self._process.returncode
        detail = f": {stderr.strip()}" if stderr.strip() else ""
        self._end("error", None, f"the program's interpreter ended without a result (exit status {status}){detail}")

    def _handle(self, frame: dict[str, Any]) -> None:
        kind = frame.get("type")
        if kind == "text":
            self._add_output(str(frame.get("text", "")))
        elif kind == "call":
            if not isinstance(frame.get("id"), int):
                raise ProtocolError("a call frame needs an integer id")
            self._pool.submit(self._answer, frame)
        elif kind == "done":
            self._end("completed", frame.get("value"), None)
        elif kind == "error":
            self._end("error", None, str(frame.get("error") or "the program failed"))
        else:
            raise ProtocolError(f"unknown frame type {kind!r}")

    def _add_output(self, text: str) -> None:
        size = len(text.encode("utf-8"))
        limit = int(self._limits["output_bytes"])
        with self._condition:
            self._output_total += size
            if self._output_total > limit:
                self._final = self._final or ("error", None, f"the program exceeded its output limit of {limit} bytes")
            else:
                self._output.append(text)
            self._condition.notify_all()

    def _answer(self, frame: dict[str, Any]) -> None:
        try:
            result = self._broker.call(frame.get("name"), frame.get("arguments"), id=str(frame["id"]))  # type: ignore[arg-type]
            reply: dict[str, Any] = {"type": "result", "id": frame["id"], "value": result.value, "error": result.error}
        except Exception as error:  # noqa: BLE001 - reported to the program by class only
            reply = {"type": "result", "id": frame["id"], "error": f"the call failed ({type(error).__name__})"}
        except BaseException as error:  # a run-level stop (cancellation, deadline) from the tool path
            with self._condition:
                self._raised = self._raised or error
            self.stop()
            return
        try:
            self._send(reply)
        except ProtocolError as error:
            self._send({"type": "result", "id": frame["id"], "error": f"the tool's result cannot be sent: {error}"})
        except (OSError, TimeoutError):
            pass  # the program ended or stopped reading; the pump reports its end

    def _send(self, frame: dict[str, Any]) -> None:
        assert self._process is not None
        with self._write_lock:
            self._process.write(protocol.dump(frame), timeout=float(self._limits["cleanup_seconds"]))

    def _end(self, status: str, value: Any, error: str | None) -> None:
        with self._condition:
            if self._final is None:
                self._final = (status, value, error)
            self._condition.notify_all()

    def _kill(self) -> None:
        if self._process is not None and self._process.returncode is None:
            self._process.terminate()

    # -- cleanup -----------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the interpreter and release everything this program opened, in reverse order."""
        self._end("terminated", None, None)
        errors: list[BaseException] = []
        for step in (self._close_process, self._close_pool, self._close_sandbox, self._workspace.close):
            try:
                step()
            except Exception as error:  # noqa: BLE001 - every step runs; the first failure is raised
                errors.append(error)
        shutil.rmtree(self._tempdir, ignore_errors=True)
        if os.path.exists(self._tempdir):
            errors.append(CleanupError(f"the program's temporary workspace {self._tempdir} could not be removed"))
        if errors:
            raise errors[0]

    def _close_process(self) -> None:
        if self._process is not None:
            self._process.close()
        pump = getattr(self, "_pump", None)
        if pump is not None:
            pump.join(float(self._limits["cleanup_seconds"]))

    def _close_pool(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _close_sandbox(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()
