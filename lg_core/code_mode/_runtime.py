"""The in-sandbox runtime: the module a fresh interpreter runs for one code-mode program.

It uses the standard library only and is passed to the interpreter as source
(``python3 -I -c``), so the sandbox needs no file of the project. Standard
input and output carry the length-prefixed JSON frames of
:mod:`lg_core.code_mode.protocol`; the first frame is the program, its tool
catalog and limits. The program sees:

* ``tools.<function>(**arguments)`` and ``tools.call(name, arguments)``: each
  call becomes a ``call`` frame, and the parent's Broker runs the tool through
  the agent's normal tool path; the program only ever sees the result (or a
  ``ToolCallError`` carrying the model-safe message);
* ``tools.parallel(*functions)``: runs zero-argument callables concurrently and
  returns their results in argument order;
* ``ALL_TOOLS``: the catalog (name, function, description, signature);
* ``text(value)`` (and ``print``): user-visible output, sent as ``text`` frames;
* ``finish(value)``: completes the program early with ``value``.

The value of a final expression statement is the program's value. Nothing
here holds a credential: the interpreter starts with the sandbox's cleared
environment and only the parent can run a tool.
"""

from __future__ import annotations

import ast
import json
import struct
import sys
import threading
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:  # not imported at run time: the interpreter starts with as little as it can
    from collections.abc import Callable

_HEADER = struct.Struct(">I")
_MAX_FRAME_BYTES = 4 * 1024 * 1024


class ToolCallError(Exception):
    """A brokered tool call failed; the message is what the tool path reports to the model."""


class _Finish(BaseException):
    def __init__(self, value: Any) -> None:
        super().__init__()
        self.value = value


class _Channel:
    """Frames to and from the parent; tool replies are matched to their call by id."""

    def __init__(self, reader: IO[bytes], writer: IO[bytes]) -> None:
        self._reader, self._writer = reader, writer
        self._write_lock = threading.Lock()
        self._replies: dict[int, dict[str, Any]] = {}
        self._condition = threading.Condition()
        self._next_id = 0
        self._closed = False

    def send(self, frame: dict[str, Any]) -> None:
        payload = json.dumps(frame, ensure_ascii=False, allow_nan=False, default=repr).encode("utf-8")
        if len(payload) > _MAX_FRAME_BYTES:
            raise ValueError(f"a message of {len(payload)} bytes exceeds the protocol limit of {_MAX_FRAME_BYTES}")
        with self._write_lock:
            self._writer.write(_HEADER.pack(len(payload)) + payload)
            self._writer.flush()

    def receive(self) -> dict[str, Any] | None:
        header = self._reader.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return None
        (length,) = _HEADER.unpack(header)
        if length > _MAX_FRAME_BYTES:
            raise ValueError("the parent sent an oversized frame")
        value = json.loads(self._reader.read(length).decode("utf-8"))
        return value if isinstance(value, dict) else None

    def serve_replies(self) -> None:
        """Read reply frames until the parent closes the stream (a daemon thread)."""
        try:
            while (frame := self.receive()) is not None:
                with self._condition:
                    self._replies[int(frame.get("id", -1))] = frame
                    self._condition.notify_all()
        finally:
            with self._condition:
                self._closed = True
                self._condition.notify_all()

    def call(self, name: str, arguments: dict[str, Any]) -> Any:
        with self._condition:
            self._next_id += 1
            call_id = self._next_id
        self.send({"type": "call", "id": call_id, "name": name, "arguments": arguments})
        with self._condition:
            while call_id not in self._replies:
                if self._closed:
                    raise ToolCallError(f"the parent stopped answering before {name!r} returned")
                self._condition.wait()
            reply = self._replies.pop(call_id)
        if reply.get("error") is not None:
            raise ToolCallError(str(reply["error"]))
        return reply.get("value")


class _Tools:
    """``tools``: one function per catalog entry, plus ``call`` and ``parallel``."""

    def __init__(self, channel: _Channel, functions: dict[str, str], concurrency: int) -> None:
        self._channel, self._functions, self._concurrency = channel, functions, max(1, concurrency)

    def __getattr__(self, function: str) -> Callable[..., Any]:
        if function.startswith("_") or function not in self._functions:
            raise AttributeError(f"no tool function named {function!r}; ALL_TOOLS lists the available ones")
        name = self._functions[function]
        return lambda **arguments: self._channel.call(name, arguments)

    def __dir__(self) -> list[str]:
        return [*self._functions, "call", "parallel"]

    def call(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        """Call a tool by its catalog name or its function name (``tools.<function>``)."""
        function = name[len("tools.") :] if name.startswith("tools.") else name
        tool = self._functions.get(function) or (name if name in self._functions.values() else None)
        if tool is None:
            raise ToolCallError(f"no tool named {name!r}; ALL_TOOLS lists the available ones")
        if arguments is not None and not isinstance(arguments, dict):
            raise TypeError("tools.call takes the arguments as a dict")
        return self._channel.call(tool, dict(arguments or {}))

    def parallel(self, *functions: Callable[[], Any]) -> list[Any]:
        """Run zero-argument callables concurrently; their results in argument order (first failure raises)."""
        if not functions:
            return []
        from concurrent.futures import ThreadPoolExecutor  # loaded by the programs that use it

        with ThreadPoolExecutor(max_workers=min(len(functions), self._concurrency)) as pool:
            futures = [pool.submit(function) for function in functions]
            return [future.result() for future in futures]


class _TextOutput:
    """``sys.stdout`` inside the program: what it prints becomes ``text`` frames."""

    def __init__(self, channel: _Channel) -> None:
        self._channel = channel

    def write(self, value: str) -> int:
        if value:
            self._channel.send({"type": "text", "text": str(value)})
        return len(value)

    def flush(self) -> None:
        pass


def _compiled(source: str) -> Any:
    """The program compiled so that a final expression statement's value is kept as ``__value__``."""
    tree = ast.parse(source, filename="<program>")
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = tree.body[-1]
        tree.body[-1] = ast.Assign(targets=[ast.Name(id="__value__", ctx=ast.Store())], value=last.value)
        ast.copy_location(tree.body[-1], last)
        ast.fix_missing_locations(tree)
    return compile(tree, "<program>", "exec")


def _program_error(error: BaseException) -> str:
    """The traceback lines of the program's own frames, and the error."""
    import traceback

    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == "<program>"]
    lines = traceback.format_list(frames)
    return "".join(["Traceback (most recent call last):\n", *lines, *traceback.format_exception_only(error)])


def main() -> None:
    channel = _Channel(sys.stdin.buffer, sys.stdout.buffer)
    start = channel.receive()
    if start is None or start.get("type") != "program":
        return
    catalog = list(start.get("catalog") or [])
    functions = {str(entry["function"]): str(entry["name"]) for entry in catalog}
    tools = _Tools(channel, functions, int(start.get("concurrency") or 4))
    threading.Thread(target=channel.serve_replies, daemon=True).start()
    sys.stdout = _TextOutput(channel)

    def text(value: Any) -> None:
        channel.send({"type": "text", "text": value if isinstance(value, str) else json.dumps(value, default=repr)})

    def finish(value: Any = None) -> None:
        raise _Finish(value)

    namespace: dict[str, Any] = {
        "__name__": "__main__",
        "tools": tools,
        "ALL_TOOLS": catalog,
        "ToolCallError": ToolCallError,
        "text": text,
        "finish": finish,
    }
    try:
        exec(_compiled(str(start.get("source", ""))), namespace)  # noqa: S102 - the sandboxed program itself
        value = namespace.get("__value__")
    except _Finish as finished:
        value = finished.value
    except Exception as error:  # noqa: BLE001 - the program's error is its result
        channel.send({"type": "error", "error": _program_error(error)})
        return
    try:
        channel.send({"type": "done", "value": value})
    except ValueError as error:
        channel.send({"type": "error", "error": f"the program's value could not be returned: {error}"})


if __name__ == "__main__":
    main()
