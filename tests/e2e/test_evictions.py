"""Reclaim, preemption, consolidation, stale gangs and min-runtime through a real API
server: victims go through the Eviction API, the fake kubelet finishes their deletion,
and the pods that waited for them are bound afterwards."""

from __future__ import annotations

import time
from datetime import datetime, timezone

from tests.e2e.cluster import Cluster, DeletionRecorder, wait_for


def _running(cluster: Cluster, *names: str) -> bool:
    pods = cluster.pods()
    return all(
        n in pods and pods[n].spec.node_name and pods[n].status.phase == "Running" for n in names
    )


def _gone(cluster: Cluster, *names: str) -> bool:
    pods = cluster.pods()
    return all(n not in pods for n in names)


def test_reclaim_between_queues(cluster: Cluster) -> None:
    node = cluster.node("n0", gpus=8)
    cluster.wait_nodes_ready()
    cluster.queue("train", gpu_quota=4)
    cluster.queue("research", gpu_quota=4)
    # research borrows the whole node while train has nothing to run.
    cluster.pod_group("borrower", "research", min_member=1)
    borrowers = [f"borrower-{i}" for i in range(8)]
    for name in borrowers:
        cluster.pod(name, group="borrower", gpus=1)
    kai = cluster.kai()
    wait_for(lambda: _running(cluster, *borrowers), 60, "the borrower running")

    cluster.pod_group("owner", "train", min_member=4)
    owners = [f"owner-{i}" for i in range(4)]
    for name in owners:
        cluster.pod(name, group="owner", gpus=1)
    # train takes its quota back: four of research's pods are evicted, then train binds.
    wait_for(lambda: cluster.bound(*owners), 90, "the reclaiming gang bound")
    placement = cluster.placement()
    assert all(placement[n] == node for n in owners)
    survivors = [n for n in borrowers if placement.get(n)]
    assert len(survivors) == 4, placement
    evicted = [e for e in cluster.events() if e.reason == "Evicted"]
    assert {e.involved_object.name for e in evicted} == set(borrowers) - set(survivors)
    assert kai.proc.poll() is None


def test_preempt_inside_a_queue(cluster: Cluster) -> None:
    cluster.node("n0", gpus=4)
    cluster.wait_nodes_ready()
    cluster.queue("team", gpu_quota=4)
    low = cluster.priority_class("low", 40)
    high = cluster.priority_class("high", 80)
    cluster.pod_group("batch", "team", min_member=1, priority_class=low)
    batch = [f"batch-{i}" for i in range(4)]
    for name in batch:
        cluster.pod(name, group="batch", gpus=1, priority_class=low)
    cluster.kai()
    wait_for(lambda: _running(cluster, *batch), 60, "the low-priority job running")

    cluster.pod_group("urgent", "team", min_member=2, priority_class=high)
    for i in range(2):
        cluster.pod(f"urgent-{i}", group="urgent", gpus=1, priority_class=high)
    wait_for(lambda: cluster.bound("urgent-0", "urgent-1"), 90, "the preemptor bound")
    placement = cluster.placement()
    assert sum(1 for n in batch if placement.get(n)) == 2


def test_consolidation_moves_a_pod_to_make_room(cluster: Cluster) -> None:
    n0 = cluster.node("n0", gpus=8)
    n1 = cluster.node("n1", gpus=8)
    cluster.wait_nodes_ready()
    cluster.queue("team", gpu_quota=16)
    # Two half-node pods, one on each node (bound elsewhere, as if placed before kai).
    cluster.pod_group("a", "team")
    cluster.pod_group("b", "team")
    cluster.pod("a-0", group="a", gpus=4, node_name=n0)
    cluster.pod("b-0", group="b", gpus=4, node_name=n1)
    wait_for(lambda: _running(cluster, "a-0", "b-0"), 30, "the fragments running")
    recorder = DeletionRecorder(cluster)
    try:
        cluster.pod_group("whole", "team")
        cluster.pod("whole-0", group="whole", gpus=8)
        kai = cluster.kai()
        # One fragment is evicted to be moved next to the other; its controller (played
        # here by the test) recreates it, and kai binds it where consolidation put it.
        moved = wait_for(lambda: [n for n in ("a-0", "b-0") if n in recorder.deleted], 60)[0]
        wait_for(lambda: _gone(cluster, moved), 30, "the moved pod deleted")
        cluster.pod(moved, group=moved[0], gpus=4)
        wait_for(lambda: cluster.bound("whole-0", moved), 90, "whole node job and moved pod")
        placement = cluster.placement()
        stayed = "b-0" if moved == "a-0" else "a-0"
        assert placement[moved] == placement[stayed]
        assert placement["whole-0"] != placement[stayed]
        assert kai.proc.poll() is None
    finally:
        recorder.stop()


def test_stale_gang_is_evicted_after_its_grace_period(cluster: Cluster) -> None:
    cluster.node("n0", gpus=4)
    cluster.wait_nodes_ready()
    cluster.queue("team", gpu_quota=4)
    cluster.pod_group("gang", "team", min_member=3, spec={"stalenessGracePeriod": "3s"})
    members = [f"gang-{i}" for i in range(3)]
    for name in members:
        cluster.pod(name, group="gang", gpus=1)
    cluster.kai()
    wait_for(lambda: _running(cluster, *members), 60, "the gang running")
    # One member dies: the gang is below minMember.
    cluster.core.delete_namespaced_pod("gang-0", cluster.ns, grace_period_seconds=0)
    annotations = wait_for(
        lambda: (cluster.get_pod_group("gang")["metadata"].get("annotations") or {}).get(
            "kai.scheduler/stale-podgroup-timestamp"
        ),
        30,
        "the stale mark",
    )
    assert annotations
    wait_for(lambda: _gone(cluster, "gang-1", "gang-2"), 60, "the stale gang evicted")


def test_min_runtime_protects_a_victim_until_its_time(cluster: Cluster) -> None:
    cluster.node("n0", gpus=2)
    cluster.wait_nodes_ready()
    min_runtime = 12.0
    cluster.queue("owner", gpu_quota=2)
    cluster.queue("borrower", gpu_quota=0, spec={"reclaimMinRuntime": f"{min_runtime:.0f}s"})
    cluster.pod_group("job", "borrower")
    cluster.pod("job-0", group="job", gpus=2)
    cluster.kai()
    wait_for(lambda: _running(cluster, "job-0"), 60, "the borrower running")
    # The binder writes the group's last-start annotation once its binds are answered:
    # it may land just after the pod runs.
    started = wait_for(
        lambda: (cluster.get_pod_group("job")["metadata"].get("annotations") or {}).get(
            "kai.scheduler/last-start-timestamp"
        ),
        30,
        "the last-start annotation",
    )
    start = datetime.fromisoformat(started.replace("Z", "+00:00"))

    cluster.pod_group("claim", "owner")
    cluster.pod("claim-0", group="claim", gpus=2)
    # Protected while its min-runtime lasts.
    while (datetime.now(timezone.utc) - start).total_seconds() < min_runtime - 3:
        assert cluster.placement().get("job-0"), "evicted before its min-runtime"
        time.sleep(0.5)
    # Then reclaimed.
    wait_for(lambda: cluster.bound("claim-0"), 60, "the owner's pod bound after min-runtime")
    assert not cluster.placement().get("job-0")
    assert (datetime.now(timezone.utc) - start).total_seconds() >= min_runtime


def test_pending_pods_are_never_deleted(cluster: Cluster) -> None:
    """Many queues competing for a packed cluster, victims slow to terminate: however the
    actions decide, only pods bound to a node are ever deleted."""
    for i in range(4):
        cluster.node(f"n{i}", gpus=8)
    cluster.wait_nodes_ready()
    cluster.queue("a", gpu_quota=8)
    cluster.queue("b", gpu_quota=12)
    cluster.queue("c", gpu_quota=12)
    kubelet = cluster.e2e.kubelet
    assert kubelet is not None
    recorder = DeletionRecorder(cluster)
    kubelet.termination_delay = 3.0
    try:
        cluster.pod_group("big", "a", min_member=4)
        big = [f"big-{i}" for i in range(4)]
        for name in big:
            cluster.pod(name, group="big", gpus=8)
        cluster.kai()
        wait_for(lambda: _running(cluster, *big), 60, "queue a's gang running")
        pending: list[str] = []
        for queue, size in (("b", 2), ("c", 2), ("b", 1), ("c", 1)):
            group = f"{queue}-{len(pending)}"
            cluster.pod_group(group, queue, min_member=size)
            for i in range(size):
                name = f"{group}-{i}"
                cluster.pod(name, group=group, gpus=4 if size == 1 else 8)
                pending.append(name)
        wait_for(lambda: sum(1 for n in pending if cluster.bound(n)) >= 3, 120, "reclaims")
        time.sleep(5)  # several more cycles with victims terminating
        assert any(recorder.deleted.values()), "no victim was evicted: the scenario is moot"
        never_bound = {n: node for n, node in recorder.deleted.items() if not node}
        assert not never_bound, f"pods deleted without ever being bound: {never_bound}"
        assert all(n in cluster.pods() for n in pending)
    finally:
        kubelet.termination_delay = 0.0
        recorder.stop()
