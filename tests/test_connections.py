"""The binds' keep-alive connections: credentials, errors, and servers that hang up."""

from __future__ import annotations

import http.server
import json
import socketserver
import threading
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from kai.k8s.client import KubeClient, status_of
from kai.k8s.connections import DirectConnections


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    requests: list[tuple[str, dict, dict]]
    answer: tuple[int, dict] = (201, {"kind": "Status", "status": "Success"})
    hang_up_after_answer = False


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append((self.path, dict(self.headers), body))
        status, answer = self.server.answer
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        if self.server.hang_up_after_answer:
            # Closed without saying so, as a server does with an idle keep-alive connection.
            self.close_connection = True

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server(("127.0.0.1", 0), _Handler)
    srv.requests = []
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _client(server: _Server, token: str = "secret") -> KubeClient:
    cfg = k8s.Configuration()
    cfg.host = f"http://127.0.0.1:{server.server_address[1]}"
    cfg.api_key = {"authorization": token}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    return KubeClient.from_configuration(cfg, qps=0)


def test_a_bind_posts_the_binding_with_the_credentials(server: _Server) -> None:
    client = _client(server)
    assert client.direct is not None
    client.bind("team-a", "train-0", "node-7", uid="u-1")
    path, headers, body = server.requests[0]
    assert path == "/api/v1/namespaces/team-a/pods/train-0/binding"
    assert headers["authorization"] == "Bearer secret"
    assert body == {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "train-0", "namespace": "team-a", "uid": "u-1"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-7"},
    }
    client.close()


def test_a_refused_bind_raises_with_the_status_and_body(server: _Server) -> None:
    server.answer = (409, {"kind": "Status", "reason": "Conflict", "message": "already"})
    client = _client(server)
    with pytest.raises(k8s.ApiException) as info:
        client.bind("team-a", "train-0", "node-7")
    assert status_of(info.value) == 409
    assert json.loads(info.value.body)["message"] == "already"
    client.close()


def test_a_connection_the_server_closed_is_replaced(server: _Server) -> None:
    server.hang_up_after_answer = True
    client = _client(server)
    for i in range(5):
        client.bind("team-a", f"train-{i}", "node-7")
    assert [r[0].split("/")[6] for r in server.requests] == [f"train-{i}" for i in range(5)]
    client.close()


def test_a_proxy_leaves_binds_to_the_generated_client() -> None:
    cfg = k8s.Configuration()
    cfg.host = "https://10.0.0.1:6443"
    cfg.proxy = "http://proxy.example:3128"
    assert not DirectConnections.usable(k8s.ApiClient(cfg))
