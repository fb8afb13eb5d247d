"""Binds through kai's pipeline against a real API server: their answers, asked for in
protobuf, read back as the JSON ones would be."""

from __future__ import annotations

import json
import threading

import pytest
from kubernetes.client.exceptions import ApiException

from kai.k8s import protobuf
from kai.k8s.binder import _assigned_node
from kai.k8s.client import KubeClient, status_of
from tests.e2e.cluster import Cluster


def _pipelined_binds(
    client: KubeClient, binds: list[tuple[str, str, str]]
) -> list[BaseException | None]:
    """Each bind (namespace, pod, node) sent through a pipeline, in turn; its error."""
    outcomes: list[BaseException | None] = []
    all_answered = threading.Event()
    todo = list(binds)

    def take():  # noqa: ANN202
        if not todo:
            return None
        ns, name, node = todo.pop(0)
        path, body, content_type = client.bind_request(ns, name, node)

        def done(_body: bytes | None, err: BaseException | None) -> None:
            outcomes.append(err)
            if len(outcomes) == len(binds):
                all_answered.set()

        return pipeline.request(
            "POST", path, body, content_type, done, accept=protobuf.PROTOBUF_OR_JSON
        )

    # One connection: the binds are answered in the order they are sent.
    pipeline = client.pipeline(1, take, name="test-binds")
    assert pipeline is not None
    pipeline.wake()
    assert all_answered.wait(30), outcomes
    pipeline.close(5.0)
    return outcomes


def test_refused_binds_read_back_as_json(cluster: Cluster) -> None:
    cluster.node("n0", gpus=1)
    cluster.node("n1", gpus=1)
    cluster.wait_nodes_ready()
    cluster.queue("team", gpu_quota=1)
    cluster.pod("p", queue="team", gpus=1, scheduler="nobody")
    client = KubeClient.from_config(str(cluster.e2e.kai_kubeconfig), qps=0)
    try:
        ok, again, elsewhere, missing = _pipelined_binds(
            client,
            [
                (cluster.ns, "p", "n0"),
                (cluster.ns, "p", "n0"),  # bound already, to that node
                (cluster.ns, "p", "n1"),
                (cluster.ns, "nowhere", "n0"),
            ],
        )
        # The same refusals answered in JSON (a bind that waits for its answer).
        as_json = []
        for name, node in (("p", "n1"), ("nowhere", "n0")):
            with pytest.raises(ApiException) as info:
                client.bind(cluster.ns, name, node)
            as_json.append(info.value)
    finally:
        client.close()
    assert ok is None
    assert cluster.placement()["p"] == "n0"
    # 409 Conflict naming the node the pod is on: how a retry whose first answer was lost
    # knows that it went through.
    for err in (again, elsewhere, as_json[0]):
        assert status_of(err) == 409 and _assigned_node(err) == "n0"  # type: ignore[arg-type]
    assert status_of(missing) == 404  # type: ignore[arg-type]
    body = json.loads(missing.body)  # type: ignore[union-attr]
    assert body["kind"] == "Status" and body["reason"] == "NotFound" and body["code"] == 404
    assert body["details"]["name"] == "nowhere" and body["details"]["kind"] == "pods"
    # Read from protobuf, each refusal is the JSON the API server gives.
    assert json.loads(elsewhere.body) == json.loads(as_json[0].body)  # type: ignore[union-attr]
    assert body == json.loads(as_json[1].body)
