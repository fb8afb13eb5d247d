"""Across a live scheduler's cycles, what kai derives from the nodes alone (their
order, capacity and masks: the node statics) is kept while the API server's nodes do
not change in what kai reads, and read again from a node that does."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from kubernetes import client as k8s

from kai.engine import Snapshot
from kai.k8s.cache import ClusterCache
from kai.k8s.client import KubeClient, load_configuration
from tests.e2e.cluster import Cluster, wait_for


def _heartbeat(cluster: Cluster, node: str) -> None:
    """What a kubelet writes every few seconds: its Ready condition with a new heartbeat
    time (a second after the last one: the API server keeps whole seconds)."""
    conditions = cluster.core.read_node_status(node).status.conditions or []
    last = max((c.last_heartbeat_time for c in conditions if c.last_heartbeat_time), default=None)
    beat = max(datetime.now(timezone.utc), (last or datetime.min.replace(tzinfo=timezone.utc)))
    stamp = (beat + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": stamp,
    }
    cluster.core.patch_node_status(node, {"status": {"conditions": [ready]}})


def _node_version(cluster: Cluster, node: str) -> str:
    return cluster.core.read_node(node).metadata.resource_version


def test_node_statics_survive_a_heartbeat_and_not_a_resize(cluster: Cluster) -> None:
    names = [cluster.node("a", gpus=8), cluster.node("b", gpus=8)]
    cluster.wait_nodes_ready()
    cfg, _ = load_configuration(kubeconfig=str(cluster.e2e.admin_kubeconfig))
    cache = ClusterCache(KubeClient(k8s.ApiClient(cfg)), partition_label_value=cluster.pool)
    cache.start()
    try:
        assert cache.wait_for_sync(30)

        def cycle(earlier: Snapshot | None) -> Snapshot:
            snapshot = Snapshot(cache.snapshot().objects)
            snapshot.reuse_node_statics(earlier)
            return snapshot

        first = cycle(None)
        statics = first.state().nodes.statics
        assert sorted(statics.names) == sorted(names)

        # A heartbeat changes the node's resource version, not what kai reads of it.
        before = _node_version(cluster, names[0])
        _heartbeat(cluster, names[0])
        wait_for(
            lambda: cache.get("Node", None, names[0])["metadata"]["resourceVersion"] != before,
            30,
            "the heartbeat seen by the cache",
        )
        second = cycle(first)
        assert second.state().nodes.statics is statics

        # A node that loses GPUs is read again.
        smaller = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "2"}
        cluster.core.patch_node_status(
            names[0], {"status": {"capacity": smaller, "allocatable": smaller}}
        )
        wait_for(
            lambda: (
                cache.get("Node", None, names[0])["status"]["allocatable"]["nvidia.com/gpu"] == "2"
            ),
            30,
            "the resize seen by the cache",
        )
        third = cycle(second)
        nodes = third.state().nodes
        assert nodes.statics is not statics
        gpu = nodes.resources.index["nvidia.com/gpu"]
        assert nodes.allocatable[nodes.index[names[0]], gpu] == 2.0
        assert nodes.allocatable[nodes.index[names[1]], gpu] == 8.0
    finally:
        cache.stop()
