"""What a node table derives from its node objects alone is built once per node set:
every session of a snapshot, and a live scheduler's cycles while no node changes,
share it, and a changed node is never read from an earlier set."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import kai
from kai.engine import Snapshot
from tests.factory import node, pod, podgroup, queue, statuses

POOL = "kai.scheduler/node-pool"
NOW = "2026-11-22T12:00:00Z"


def cluster(pool_label: bool = False) -> list[dict]:
    nodes = [node("n1", gpus=8), node("n2", gpus=4, gpu_memory=40960)]
    if pool_label:
        for n in nodes:
            n["metadata"]["labels"][POOL] = "a"
    return [
        *nodes,
        queue("q", gpu=(12, -1, 1)),
        podgroup("big", queue="q"),
        pod("big-0", gpus=8, group="big"),
        podgroup("small", queue="q"),
        pod("small-0", gpus=4, group="small"),
    ]


def decided(snapshot: Snapshot) -> dict:
    result = kai.run_session(snapshot, actions=["allocate"], now=NOW)
    return statuses(result.to_json())


def test_a_snapshots_sessions_share_their_node_statics_and_decide_alike():
    snapshot = Snapshot.from_objects(cluster())
    first, second = snapshot.state(), snapshot.state()
    assert second.nodes.statics is first.nodes.statics
    assert second.nodes.idle is not first.nodes.idle  # capacity stays each session's own
    assert decided(snapshot) == decided(snapshot) == decided(Snapshot.from_objects(cluster()))
    assert decided(snapshot)["default/big-0"] == ("Binding", "n1")


def test_node_statics_are_read_only():
    nodes = Snapshot.from_objects(cluster()).state().nodes
    for shared in (nodes.allocatable, nodes.schedulable, nodes.gpu_memory_mib):
        with pytest.raises(ValueError, match="read-only"):
            shared[0] = 0


def test_a_changed_node_object_is_read_again():
    earlier = Snapshot.from_objects(cluster())
    assert decided(earlier)["default/big-0"] == ("Binding", "n1")
    # The next cycle: n1 was replaced by an object with fewer GPUs (a cache replaces a
    # changed node's object), n2 is the same object.
    objects = dataclasses.replace(earlier.objects)
    n1 = next(n for n in objects.nodes if n.name == "n1")
    smaller = dataclasses.replace(n1, allocatable={**n1.allocatable, "nvidia.com/gpu": 2.0})
    objects.nodes = [smaller if n is n1 else n for n in objects.nodes]
    later = Snapshot(objects)
    later.reuse_node_statics(earlier)
    state = later.state()
    assert state.nodes.statics is not earlier.state().nodes.statics
    gpu = state.resources.index["nvidia.com/gpu"]
    assert state.nodes.allocatable[state.nodes.index["n1"], gpu] == 2.0
    out = decided(later)
    assert out["default/big-0"] == ("Pending", None)  # no node has 8 GPUs now
    assert out["default/small-0"][0] == "Binding"


def test_the_same_node_objects_keep_their_statics_across_snapshots():
    earlier = Snapshot.from_objects(cluster())
    statics = earlier.state().nodes.statics
    later = Snapshot(dataclasses.replace(earlier.objects))
    later.reuse_node_statics(earlier)
    assert later.state().nodes.statics is statics
    assert decided(later) == decided(earlier)


def test_a_node_pools_shards_keep_their_statics_across_snapshots():
    earlier = Snapshot.from_objects(cluster(pool_label=True))
    before = decided(earlier)
    pool = earlier.pools()["a"]
    shard = earlier.shard(pool)
    assert earlier.shard(pool) is shard  # one shard per pool: its sessions share statics
    statics = shard._node_statics
    assert statics is not None
    later = Snapshot(dataclasses.replace(earlier.objects))
    later.reuse_node_statics(earlier)
    assert decided(later) == before
    assert later.shard(later.pools()["a"])._node_statics is statics


def test_node_statics_match_only_their_own_objects_and_resources():
    state = Snapshot.from_objects(cluster()).state()
    statics, nodes = state.nodes.statics, list(state.nodes.statics.source)
    assert statics.matches(nodes, state.resources)
    assert not statics.matches(nodes[:1], state.resources)
    assert not statics.matches([dataclasses.replace(n) for n in nodes], state.resources)
    assert not statics.matches(nodes[::-1], state.resources)
    wider = kai.api.resources.ResourceTable(["example.com/fpga"])
    assert not statics.matches(nodes, wider)
    np.testing.assert_array_equal(
        state.nodes.allocatable, kai.api.model.NodeStatics(nodes, state.resources).allocatable
    )


def tainted_cluster() -> list[dict]:
    gpu_taint = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    tolerate = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    return [
        node("a100-1", gpus=8, labels={"gpu": "a100"}, taints=gpu_taint),
        node("h100-1", gpus=8, labels={"gpu": "h100"}, taints=gpu_taint),
        node("cpu-1", gpus=0),
        queue("q", gpu=(16, -1, 1)),
        podgroup("a", queue="q"),
        pod("a-0", gpus=8, group="a", node_selector={"gpu": "h100"}, tolerations=tolerate),
        podgroup("b", queue="q"),
        pod("b-0", gpus=8, group="b", tolerations=tolerate),
        podgroup("c", queue="q"),
        pod("c-0", gpus=1, group="c"),  # tolerates nothing: no GPU node takes it
    ]


def test_predicate_masks_are_shared_by_a_snapshots_sessions():
    snapshot = Snapshot.from_objects(tainted_cluster())
    first = decided(snapshot)
    assert first == {
        "default/a-0": ("Binding", "h100-1"),
        "default/b-0": ("Binding", "a100-1"),
        "default/c-0": ("Pending", None),
    }
    derived = snapshot.state().nodes.statics.derived
    masks = {**derived["predicates.affinity"], **derived["predicates.taints"]}
    assert masks and all(not mask.flags.writeable for mask in masks.values())
    assert decided(snapshot) == first
    # The second session found every mask made: none was added.
    assert {**derived["predicates.affinity"], **derived["predicates.taints"]} == masks
    assert decided(Snapshot.from_objects(tainted_cluster())) == first
