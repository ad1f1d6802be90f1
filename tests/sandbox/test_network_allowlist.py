"""A network allowlist on Bubblewrap: only listed destinations are reachable, through the gateway."""

from __future__ import annotations

import os
import socket
import threading

import pytest

from lg_core.errors import CapabilityError
from lg_core.sandbox import NetworkPolicy
from lg_core.sandboxes import Bubblewrap
from tests.sandbox.conftest import errno_probe, python, requires_bwrap

pytestmark = requires_bwrap

FETCH = """
import http.client, os, sys, urllib.request
port = int(sys.argv[1])
try:
    print(urllib.request.urlopen(f"http://127.0.0.1:{port}/hello", timeout=10).read().decode())
except Exception as error:
    print("http failed:", error)
tunnel = http.client.HTTPConnection("127.0.0.1", 3128, timeout=10)
tunnel.set_tunnel("127.0.0.1", port)
try:
    tunnel.request("GET", "/tunnel")
    print(tunnel.getresponse().read().decode())
except OSError as error:
    print("tunnel failed:", error)
"""


class Server:
    """A tiny HTTP server on the host's loopback that answers with its own name."""

    def __init__(self, name):
        self.name = name
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.requests = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            with connection:
                request = connection.recv(65536)
                self.requests.append(request.split(b"\r\n", 1)[0].decode())
                body = f"reached {self.name}".encode()
                connection.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    def close(self):
        self.listener.close()


@pytest.fixture
def servers():
    allowed, forbidden = Server("allowed"), Server("forbidden")
    yield allowed, forbidden
    allowed.close()
    forbidden.close()


@pytest.fixture
def allowlisted(workspace, servers):
    allowed, _ = servers
    policy = {"files": {"root": "read_write"}, "network": {"allow": [f"127.0.0.1:{allowed.port}"]}}
    with Bubblewrap(workspace=workspace, policy=policy) as sandbox:
        yield sandbox


def fetch(sandbox, port):
    result = sandbox.execute_program([*python(FETCH), str(port)], timeout=30)
    assert result.exit_code == 0, result
    return result.stdout.splitlines()


def test_an_allowlisted_destination_is_reachable_over_http_and_connect(allowlisted, servers):
    allowed, _ = servers
    assert fetch(allowlisted, allowed.port) == ["reached allowed", "reached allowed"]
    assert allowed.requests == ["GET /hello HTTP/1.1", "GET /tunnel HTTP/1.1"]


def test_a_host_not_on_the_allowlist_is_refused_by_the_gateway(allowlisted, servers):
    _, forbidden = servers
    lines = fetch(allowlisted, forbidden.port)
    assert lines == ["http failed: HTTP Error 403: Forbidden", "tunnel failed: Tunnel connection failed: 403 Forbidden"]
    assert forbidden.requests == []


def test_a_direct_connection_bypassing_the_gateway_has_no_route(allowlisted, servers):
    allowed, _ = servers
    direct = allowlisted.execute_program(
        python(errno_probe(f"socket.create_connection(('127.0.0.1', {allowed.port}), timeout=5)")), timeout=30
    )
    assert direct.stdout.strip() == "ECONNREFUSED", direct
    outside = allowlisted.execute_program(
        python(errno_probe("socket.create_connection(('1.1.1.1', 443), timeout=5)")), timeout=30
    )
    assert outside.stdout.strip() == "ENETUNREACH", outside
    assert allowed.requests == []


def test_a_scope_narrowing_the_allowlist_gets_its_own_gateway(workspace, servers):
    allowed, forbidden = servers
    policy = {"network": {"allow": [f"127.0.0.1:{allowed.port}", f"127.0.0.1:{forbidden.port}"]}}
    with Bubblewrap(workspace=workspace, policy=policy) as sandbox:
        assert fetch(sandbox, forbidden.port)[0] == "reached forbidden"
        narrow = sandbox.scope(network={"allow": [f"127.0.0.1:{allowed.port}"]})
        result = narrow.execute_program([*python(FETCH), str(forbidden.port)], timeout=30)
        assert result.stdout.splitlines()[0] == "http failed: HTTP Error 403: Forbidden"
        assert sandbox.scope(network="none").network == NetworkPolicy("none")


def test_closing_the_sandbox_stops_its_gateways(workspace, servers):
    allowed, _ = servers
    sandbox = Bubblewrap(workspace=workspace, policy={"network": {"allow": [f"127.0.0.1:{allowed.port}"]}}).open()
    directory = sandbox._gateways[(f"127.0.0.1:{allowed.port}",)].directory
    assert os.path.exists(os.path.join(directory, "proxy.sock"))
    sandbox.close()
    assert not os.path.exists(directory)


def test_an_allowlist_without_an_interpreter_for_the_bridge_is_refused(workspace):
    with pytest.raises(CapabilityError, match="proxy variables alone are not an allowlist"):
        Bubblewrap(workspace=workspace, policy={"network": {"allow": ["example.com"]}}, bridge_python="/nope/python")


def test_an_allowlist_asking_for_http_inspection_is_refused(workspace):
    with pytest.raises(CapabilityError, match="HTTP inspection is not available"):
        Bubblewrap(workspace=workspace, policy={"network": {"allow": ["example.com"], "inspection": "http"}})


def test_the_gateway_serves_a_sandbox_running_as_an_unprivileged_user(unprivileged_workspace, servers):
    allowed, forbidden = servers
    host_user = 65534 if os.geteuid() == 0 else None
    policy = {"files": {"root": "read_write"}, "network": {"allow": [f"127.0.0.1:{allowed.port}"]}}
    with Bubblewrap(workspace=unprivileged_workspace, policy=policy, host_user=host_user) as sandbox:
        assert fetch(sandbox, allowed.port) == ["reached allowed", "reached allowed"]
        assert fetch(sandbox, forbidden.port)[0] == "http failed: HTTP Error 403: Forbidden"


def test_an_allowed_name_resolving_to_an_internal_address_is_refused(workspace, servers):
    allowed, _ = servers
    with Bubblewrap(workspace=workspace, policy={"network": {"allow": [f"localhost:{allowed.port}"]}}) as sandbox:
        lines = fetch_host(sandbox, "localhost", allowed.port)
    assert lines[0] == "http failed: HTTP Error 403: Forbidden"
    assert allowed.requests == []


def fetch_host(sandbox, host, port):
    code = FETCH.replace('f"http://127.0.0.1:{port}/hello"', f'f"http://{host}:{{port}}/hello"')
    result = sandbox.execute_program([*python(code), str(port)], timeout=30)
    assert result.exit_code == 0, result
    return result.stdout.splitlines()


def test_an_external_gateway_in_process_only_paths_carries_the_childs_traffic(tmp_path, servers):
    from lg_core.network import AllowlistGateway, ExternalGateway
    from lg_core.workspace import Workspace

    allowed, forbidden = servers
    application_proxy = AllowlistGateway(NetworkPolicy("allowlist", allow=[f"127.0.0.1:{allowed.port}"])).open()
    try:
        workspace = Workspace(root=tmp_path / "root", paths={"proxy": application_proxy.directory}).open()
        ready = []
        gateway = ExternalGateway(
            NetworkPolicy("allowlist", allow=[f"127.0.0.1:{allowed.port}"]),
            workspace=workspace,
            runtime_paths=["proxy"],
            proxy_mount_path=application_proxy.socket_path,
            validate=lambda: ready.append(True),
        )
        network = NetworkPolicy("allowlist", allow=[f"127.0.0.1:{allowed.port}"], gateway=gateway)
        policy = {"files": {"root": "read_write"}, "runtime_paths": {"proxy": "read_only"}, "network": network}
        with Bubblewrap(workspace=workspace, policy=policy) as sandbox:
            assert fetch(sandbox, allowed.port) == ["reached allowed", "reached allowed"]
            assert fetch(sandbox, forbidden.port)[0] == "http failed: HTTP Error 403: Forbidden"
            assert ready
            with pytest.raises(CapabilityError, match=r"needs runtime paths \['proxy'\]"):
                sandbox.scope(runtime_paths=[]).execute_program(["true"], timeout=10)
        assert application_proxy.socket_path and os.path.exists(application_proxy.socket_path)
    finally:
        application_proxy.close()


def test_an_external_gateway_that_is_not_ready_refuses_the_start(tmp_path):
    from lg_core.errors import SandboxConfigurationError
    from lg_core.network import ExternalGateway
    from lg_core.workspace import Workspace

    (tmp_path / "proxy").mkdir()
    workspace = Workspace(root=tmp_path / "root", paths={"proxy": tmp_path / "proxy"}).open()

    def not_ready():
        raise ConnectionError("proxy health check failed")

    gateway = ExternalGateway(
        NetworkPolicy("allowlist", allow=["example.com"]),
        workspace=workspace,
        runtime_paths=["proxy"],
        proxy_mount_path=str(tmp_path / "proxy" / "proxy.sock"),
        validate=not_ready,
    )
    network = NetworkPolicy("allowlist", allow=["example.com"], gateway=gateway)
    sandbox = Bubblewrap(workspace=workspace, policy={"runtime_paths": {"proxy": "read_only"}, "network": network})
    with pytest.raises(SandboxConfigurationError, match="not ready: proxy health check failed"):
        sandbox.open()
    outside = ExternalGateway(
        NetworkPolicy("allowlist", allow=["example.com"]),
        workspace=workspace,
        runtime_paths=["proxy"],
        proxy_mount_path="/run/elsewhere.sock",
    )
    with pytest.raises(SandboxConfigurationError, match="not inside the gateway's runtime paths"):
        outside.open()
