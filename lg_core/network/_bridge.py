"""Runs inside a sandbox: the only way out of its network namespace, to the allowlist gateway.

    python3 _bridge.py <gateway unix socket> <port> -- command [args...]

The sandbox has no network interface but loopback, so the command cannot open a
direct connection anywhere. This bridge listens on 127.0.0.1:<port> inside the
namespace (where the proxy variables point), forwards every connection to the
gateway's Unix socket mounted from the host, and runs the command as its child,
exiting with the command's status. It enforces nothing itself: the gateway outside
the sandbox decides which destinations are allowed, so a program that kills or
bypasses the bridge only loses its network. Standard library only, one thread
(threads would count against the sandbox's process limit).
"""

from __future__ import annotations

import os
import selectors
import socket
import sys


def main(argv: list[str]) -> int:
    if len(argv) < 5 or argv[3] != "--":
        sys.stderr.write("usage: _bridge.py SOCKET PORT -- COMMAND...\n")
        return 2
    gateway, port, command = argv[1], int(argv[2]), argv[4:]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    child = os.fork()
    if child == 0:
        listener.close()
        try:
            os.execvp(command[0], command)
        except OSError as error:
            sys.stderr.write(f"{command[0]}: {error.strerror}\n")
            os._exit(127)
    return _serve(listener, gateway, child)


def _serve(listener: socket.socket, gateway: str, child: int) -> int:
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, None)
    while True:
        for key, _ in selector.select(timeout=0.1):
            if key.data is None:
                _accept(listener, gateway, selector)
            else:
                _forward(key.fileobj, key.data, selector)  # type: ignore[arg-type]
        finished, status = os.waitpid(child, os.WNOHANG)
        if finished:
            return os.waitstatus_to_exitcode(status)


def _accept(listener: socket.socket, gateway: str, selector: selectors.BaseSelector) -> None:
    client, _ = listener.accept()
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(gateway)
    except OSError:
        client.close()
        upstream.close()
        return
    selector.register(client, selectors.EVENT_READ, upstream)
    selector.register(upstream, selectors.EVENT_READ, client)


def _forward(source: socket.socket, target: socket.socket, selector: selectors.BaseSelector) -> None:
    try:
        data = source.recv(65536)
    except OSError:
        data = b""
    if data:
        try:
            target.sendall(data)
            return
        except OSError:
            pass
    for end in (source, target):
        try:
            selector.unregister(end)
        except (KeyError, ValueError):
            pass
        end.close()


if __name__ == "__main__":
    code = main(sys.argv)
    sys.stdout.flush()
    os._exit(code if code >= 0 else 128 - code)
