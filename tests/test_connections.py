"""The writes' keep-alive connections: credentials, errors, and servers that hang up."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from kai.k8s.client import KubeClient, status_of
from kai.k8s.connections import DirectConnections
from tests.recording_server import RecordingServer, recording_server


@pytest.fixture
def server() -> Iterator[RecordingServer]:
    with recording_server() as srv:
        yield srv


def _client(server: RecordingServer, token: str = "secret") -> KubeClient:
    cfg = k8s.Configuration()
    cfg.host = server.url
    cfg.api_key = {"authorization": token}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    return KubeClient.from_configuration(cfg, qps=0)


def test_a_bind_posts_the_binding_with_the_credentials(server: RecordingServer) -> None:
    client = _client(server)
    assert client.direct is not None
    client.bind("team-a", "train-0", "node-7", uid="u-1")
    (req,) = server.requests
    assert (req.method, req.path) == ("POST", "/api/v1/namespaces/team-a/pods/train-0/binding")
    assert req.headers["authorization"] == "Bearer secret"
    assert req.body == {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "train-0", "namespace": "team-a", "uid": "u-1"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-7"},
    }
    client.close()


def test_a_refused_write_raises_with_the_status_and_body(server: RecordingServer) -> None:
    server.answer = (409, {"kind": "Status", "reason": "Conflict", "message": "already"})
    client = _client(server)
    with pytest.raises(k8s.ApiException) as info:
        client.bind("team-a", "train-0", "node-7")
    assert status_of(info.value) == 409
    assert json.loads(info.value.body)["message"] == "already"
    client.close()


def test_a_connection_the_server_closed_is_replaced(server: RecordingServer) -> None:
    server.hang_up_after_answer = True
    client = _client(server)
    for i in range(5):
        client.bind("team-a", f"train-{i}", "node-7")
    assert [r.path.split("/")[6] for r in server.requests] == [f"train-{i}" for i in range(5)]
    client.close()


def test_patches_name_their_content_type(server: RecordingServer) -> None:
    client = _client(server)
    client.patch_pod("team-a", "train-0", {"metadata": {"labels": {"a": "b"}}})
    client.patch_pod_group("team-a", "train", {"metadata": {"annotations": {"a": "b"}}})
    types = [r.headers["Content-Type"] for r in server.requests]
    assert types == ["application/strategic-merge-patch+json", "application/merge-patch+json"]
    client.close()


def test_a_proxy_leaves_writes_to_the_pool() -> None:
    cfg = k8s.Configuration()
    cfg.host = "https://10.0.0.1:6443"
    cfg.proxy = "http://proxy.example:3128"
    assert not DirectConnections.usable(k8s.ApiClient(cfg))
