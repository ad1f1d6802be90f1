"""AllowlistGateway: an enforcing HTTP proxy the sandbox starts, reachable only over a Unix socket.

The proxy runs in the worker, outside the sandbox, on a Unix socket in a private
directory that the sandbox mounts read-only. Inside, the bridge (``_bridge.py``) is
the child's only route out of its network namespace; the proxy answers HTTP
``CONNECT host:port`` (HTTPS and other TLS) and absolute-form plain HTTP requests,
and opens an upstream connection only when ``host:port`` is on the allowlist
(``*.example.com`` entries match subdomains). Anything else gets ``403`` and no
connection is made. The check is on the requested name and port: the proxy resolves
the name itself, so a child cannot choose the address behind an allowed name, and a
name (unlike an IP address written in the allowlist) never leads to a loopback,
private, link-local or otherwise internal address, so an allowed domain whose DNS
points at the worker's own services does not reach them. At most
``MAX_CONNECTIONS`` connections are served at once, and a request head must arrive
within ``HEAD_TIMEOUT_SECONDS``, so a child cannot tie up the worker's threads.
"""

from __future__ import annotations

import collections
import ipaddress
import os
import shutil
import socket
import socketserver
import tempfile
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from lg_core.errors import SandboxConfigurationError
from lg_core.network.gateway import Gateway
from lg_core.sandbox.network_policy import NetworkPolicy

PROXY_PORT = 3128
CONNECT_TIMEOUT_SECONDS = 10
HEAD_TIMEOUT_SECONDS = 10
MAX_CONNECTIONS = 64
_MAX_HEAD_BYTES = 16384
_BRIDGE = Path(__file__).with_name("_bridge.py")


class AllowlistGateway(Gateway):
    """A supervised proxy permitting only the policy's ``host:port`` destinations."""

    def __init__(self, policy: NetworkPolicy, owner: int | None = None) -> None:
        super().__init__(policy)
        self.owner = owner
        self.directory: str | None = None
        self.denied: collections.deque[str] = collections.deque(maxlen=100)
        self._server: _ProxyServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def socket_path(self) -> str:
        if self.directory is None:
            raise SandboxConfigurationError("the network gateway is not open")
        return os.path.join(self.directory, "proxy.sock")

    @property
    def bridge_path(self) -> str:
        if self.directory is None:
            raise SandboxConfigurationError("the network gateway is not open")
        return os.path.join(self.directory, "bridge.py")

    def open(self, run: Any = None) -> AllowlistGateway:
        if self._server is not None:
            return self
        self.directory = tempfile.mkdtemp(prefix="lg-gateway-")
        shutil.copyfile(_BRIDGE, self.bridge_path)
        self._server = _ProxyServer(self.socket_path, self)
        os.chmod(self.socket_path, 0o600)
        os.chmod(self.bridge_path, 0o444)
        if self.owner is not None:
            for path in (self.directory, self.socket_path):
                os.chown(path, self.owner, -1)
        self._thread = threading.Thread(target=self._server.serve_forever, name="lg-gateway", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None

    def validate(self) -> None:
        if self._server is None or self._thread is None or not self._thread.is_alive():
            raise SandboxConfigurationError("the network allowlist gateway is not running; refusing network access")

    def mounts(self) -> tuple[str, ...]:
        return (self.directory,) if self.directory else ()

    def environment(self) -> dict[str, str]:
        proxy = f"http://127.0.0.1:{PROXY_PORT}"
        names = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
        return {**dict.fromkeys(names, proxy), "NO_PROXY": "", "no_proxy": ""}

    def bridge_command(self, python: str) -> list[str]:
        """The argv prefix that runs a command behind the bridge inside the sandbox."""
        return [python, self.bridge_path, self.socket_path, str(PROXY_PORT), "--"]

    def allows(self, host: str, port: int) -> bool:
        """Whether ``host:port`` is on the allowlist (``*.domain`` entries match subdomains)."""
        host = host.lower().rstrip(".")
        for entry in self.policy.allow:
            allowed_host, _, allowed_port = entry.rpartition(":")
            if int(allowed_port) != port:
                continue
            if allowed_host == host or (allowed_host.startswith("*.") and host.endswith(allowed_host[1:])):
                return True
        return False


class _ProxyServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str, gateway: AllowlistGateway) -> None:
        self.gateway = gateway
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(path, _ProxyHandler)


class _ProxyHandler(socketserver.BaseRequestHandler):
    server: _ProxyServer

    def handle(self) -> None:
        client: socket.socket = self.request
        if not self.server.slots.acquire(blocking=False):
            client.sendall(_response(503, "too many connections through the sandbox gateway"))
            return
        try:
            self._proxy(client)
        finally:
            self.server.slots.release()

    def _proxy(self, client: socket.socket) -> None:
        client.settimeout(HEAD_TIMEOUT_SECONDS)
        try:
            head, extra = _read_head(client)
        except OSError:
            return
        client.settimeout(None)
        if head is None:
            return
        target = _destination(head)
        if target is None:
            client.sendall(_response(400, "malformed proxy request"))
            return
        host, port, first_bytes, reply = target
        gateway = self.server.gateway
        if not gateway.allows(host, port):
            gateway.denied.append(f"{host}:{port}")
            client.sendall(_response(403, f"{host}:{port} is not on the sandbox's network allowlist"))
            return
        try:
            upstream = _connect(host, port)
        except PermissionError as refused:
            gateway.denied.append(f"{host}:{port}")
            client.sendall(_response(403, str(refused)))
            return
        except OSError:
            client.sendall(_response(502, f"could not connect to {host}:{port}"))
            return
        with upstream:
            upstream.settimeout(None)
            if reply:
                client.sendall(reply)
            upstream.sendall(first_bytes + extra)
            _relay(client, upstream)


def _connect(host: str, port: int) -> socket.socket:
    """A connection to ``host:port``; a name must not resolve to an internal address."""
    literal = _ip_address(host)
    if literal is not None:
        return socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_SECONDS)
    addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    public = [info for info in addresses if _is_public(_ip_address(str(info[4][0])))]
    if not public:
        raise PermissionError(f"{host} resolves only to internal addresses, which the gateway does not reach")
    family, kind, protocol, _, address = public[0]
    upstream = socket.socket(family, kind, protocol)
    upstream.settimeout(CONNECT_TIMEOUT_SECONDS)
    try:
        upstream.connect(address)
    except OSError:
        upstream.close()
        raise
    return upstream


def _ip_address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None


def _is_public(address: ipaddress.IPv4Address | ipaddress.IPv6Address | None) -> bool:
    return address is not None and address.is_global and not address.is_multicast


def _read_head(client: socket.socket) -> tuple[bytes | None, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = client.recv(4096)
        if not chunk or len(data) > _MAX_HEAD_BYTES:
            return None, b""
        data += chunk
    head, _, extra = data.partition(b"\r\n\r\n")
    return head + b"\r\n\r\n", extra


def _destination(head: bytes) -> tuple[str, int, bytes, bytes] | None:
    """Host, port, bytes to send upstream first, and the reply owed to the client."""
    request_line, _, headers = head.partition(b"\r\n")
    parts = request_line.decode("latin-1").split()
    if len(parts) != 3:
        return None
    method, target, version = parts
    if method.upper() == "CONNECT":
        host, _, port_text = target.rpartition(":")
        host = host.strip("[]")
        if not host or not port_text.isdigit():
            return None
        return host, int(port_text), b"", b"HTTP/1.1 200 Connection Established\r\n\r\n"
    url = urlsplit(target)
    try:
        port = url.port or 80
    except ValueError:
        return None
    if url.scheme != "http" or not url.hostname:
        return None
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    return url.hostname, port, f"{method} {path} {version}\r\n".encode("latin-1") + headers, b""


def _response(status: int, reason: str) -> bytes:
    phrase = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway", 503: "Service Unavailable"}[status]
    body = reason.encode()
    return (
        f"HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body


def _relay(client: socket.socket, upstream: socket.socket) -> None:
    """Copy bytes both ways until both directions have ended."""

    def pump(source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass
        try:
            target.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    other = threading.Thread(target=pump, args=(upstream, client), daemon=True)
    other.start()
    pump(client, upstream)
    other.join()
