"""Node pools: one scheduling shard per value of the kai.scheduler/node-pool label."""

from __future__ import annotations

import pytest

import kai
from tests.factory import node, pod, podgroup, queue, run, statuses

POOL = "kai.scheduler/node-pool"


def labelled(obj, pool):
    obj["metadata"].setdefault("labels", {})[POOL] = pool
    return obj


def cluster():
    return [
        labelled(node("a1", gpus=8), "a"),
        labelled(node("b1", gpus=8), "b"),
        node("plain", gpus=8),
        labelled(queue("qa", gpu=(8, -1, 1)), "a"),
        labelled(queue("qb", gpu=(8, -1, 1)), "b"),
        queue("q", gpu=(8, -1, 1)),
        labelled(podgroup("ja", queue="qa"), "a"),
        pod("ja-0", gpus=8, group="ja"),
        labelled(podgroup("jb", queue="qb"), "b"),
        pod("jb-0", gpus=8, group="jb"),
        podgroup("j", queue="q"),
        pod("j-0", gpus=8, group="j"),
        # A pool-a job whose queue lives in the default pool: that shard has no such queue.
        labelled(podgroup("lost", queue="q"), "a"),
        pod("lost-0", gpus=1, group="lost"),
    ]


def test_each_pool_is_scheduled_on_its_own_nodes_and_queues():
    out = run(cluster(), ["allocate"])
    s = statuses(out)
    assert s["default/ja-0"] == ("Binding", "a1")
    assert s["default/jb-0"] == ("Binding", "b1")
    assert s["default/j-0"] == ("Binding", "plain")
    assert s["default/lost-0"] == ("Pending", None)
    assert "QueueDoesNotExist" in out["podGroups"]["default/lost"]["reason"]
    # Fair share is computed per pool: each pool's queue shares that pool's 8 GPUs.
    assert {name: q["fairShare"]["gpu"] for name, q in out["queues"].items()} == {
        "q": 8.0,
        "qa": 8.0,
        "qb": 8.0,
    }


def test_a_single_pool_can_be_simulated_alone():
    snap = kai.Snapshot.from_objects(cluster())
    result = kai.run_session(snap, actions=["allocate"], node_pool="b")
    assert set(result.pods) == {"default/jb-0"}
    assert result.pods["default/jb-0"].node == "b1"
    with pytest.raises(kai.InputError, match="no node pool 'c'"):
        kai.run_session(snap, actions=["allocate"], node_pool="c")


def test_a_scheduler_of_another_name_schedules_its_pods_in_every_pool():
    # kai run --scheduler-name: each pool's session schedules the pods naming that
    # scheduler, as the whole snapshot's would.
    objects = cluster()
    for obj in objects:
        if obj["kind"] == "Pod":
            obj["spec"]["schedulerName"] = "gpu-scheduler"
    loaded = kai.Snapshot.from_objects(objects).objects
    snap = kai.Snapshot(loaded, scheduler_name="gpu-scheduler")
    placed = {k: p.node for k, p in kai.run_session(snap, actions=["allocate"]).pods.items()}
    assert placed == {
        "default/ja-0": "a1",
        "default/jb-0": "b1",
        "default/j-0": "plain",
        "default/lost-0": None,
    }
    alone = kai.run_session(snap, actions=["allocate"], node_pool="b")
    assert alone.pods["default/jb-0"].node == "b1"
    # To the default scheduler's sessions these pods are another scheduler's.
    others = kai.run_session(kai.Snapshot(loaded), actions=["allocate"])
    assert all(p.node is None for p in others.pods.values())


def relabelled_node_cluster():
    """Node a1 moved to pool a while pool b's gang still runs a pod on it."""
    return [
        labelled(node("a1", gpus=8), "a"),
        labelled(node("b1", gpus=8), "b"),
        labelled(queue("qa", gpu=(8, -1, 1)), "a"),
        labelled(queue("qb", gpu=(16, -1, 1)), "b"),
        labelled(podgroup("ja", queue="qa"), "a"),
        pod("ja-0", gpus=8, group="ja"),
        labelled(podgroup("jb", queue="qb", min_member=2), "b"),
        pod("jb-0", gpus=8, group="jb", node="a1", phase="Running"),
        pod("jb-1", gpus=8, group="jb"),
    ]


def test_a_pod_on_another_pools_node_holds_that_node_and_stays_its_own_pools():
    # As KAI-Scheduler's shards: every shard adds every pod to its node, and a pod
    # group's pods to its job.
    out = run(relabelled_node_cluster(), ["allocate"])
    s = statuses(out)
    # Pool a does not place onto the GPUs pool b's pod holds on a1.
    assert s["default/ja-0"] == ("Pending", None)
    assert "nvidia.com/gpu" in out["podGroups"]["default/ja"]["reason"]
    # Pool b counts its running pod: the gang needs only jb-1, which fits on b1.
    assert s["default/jb-0"] == ("Running", "a1")
    assert s["default/jb-1"] == ("Binding", "b1")
    assert out["queues"]["qb"]["allocated"]["gpu"] == 16.0
    # The pod is reported once, by its own pool.
    assert "default/jb" in out["podGroups"] and "default/jb-0" not in out["podGroups"]


def test_each_pool_alone_sees_the_pod_on_another_pools_node():
    snap = kai.Snapshot.from_objects(relabelled_node_cluster())
    pool_a = kai.run_session(snap, actions=["allocate"], node_pool="a")
    assert pool_a.pods["default/ja-0"].node is None
    assert pool_a.pods["default/jb-0"].node == "a1"  # a pod holding a1, as another's
    pool_b = kai.run_session(snap, actions=["allocate"], node_pool="b")
    assert pool_b.pods["default/jb-1"].node == "b1"


def test_only_a_pod_on_a_node_no_pool_has_is_on_an_unknown_node():
    """A pod of pool b running on pool a's node is on a known node: no session warns
    about it. A pod on a node the snapshot lacks is warned about, once."""
    objs = relabelled_node_cluster()
    objs.append(pod("stray-0", gpus=1, node="gone", phase="Running"))
    snap = kai.Snapshot.from_objects(objs)
    merged = kai.run_session(snap, actions=["allocate"])
    assert merged.warnings == ["pod default/stray-0 is on unknown node 'gone'"]
    for pool in ("a", "b"):
        alone = kai.run_session(snap, actions=["allocate"], node_pool=pool)
        assert not any("jb-0" in w for w in alone.warnings), (pool, alone.warnings)
