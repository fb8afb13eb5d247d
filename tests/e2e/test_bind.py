"""Gang scheduling through a real API server."""

from __future__ import annotations

import time

from tests.e2e.cluster import POOL_LABEL, Cluster, wait_for


def test_gang_binds_whole_or_not_at_all(cluster: Cluster) -> None:
    for i in range(2):
        cluster.node(f"n{i}", gpus=4)
    cluster.wait_nodes_ready()
    cluster.queue("team", gpu_quota=8)
    cluster.pod_group("fits", "team", min_member=2)
    cluster.pod_group("too-big", "team", min_member=3)
    for i in range(2):
        cluster.pod(f"fits-{i}", group="fits", gpus=4)
    for i in range(3):
        cluster.pod(f"too-big-{i}", group="too-big", gpus=4)
    cluster.kai()

    wait_for(lambda: cluster.bound("fits-0", "fits-1"), 60, "the fitting gang bound")
    placement = cluster.placement()
    assert placement["fits-0"] != placement["fits-1"]  # 4 GPUs each: one node each
    assert not any(placement[f"too-big-{i}"] for i in range(3))
    pods = cluster.pods()
    wait_for(lambda: cluster.pods()["fits-0"].status.phase == "Running", 20, "Running")
    # The gang that cannot fit is told why, on its PodGroup and its pods.
    group = wait_for(
        lambda: (cluster.get_pod_group("too-big").get("status") or {}).get("schedulingConditions"),
        20,
        "an Unschedulable condition on the PodGroup",
    )
    assert group[0]["type"] == "UnschedulableOnNodePool"
    assert pods["too-big-0"].spec.node_name is None


def test_leaves_another_schedulers_groups_alone(cluster: Cluster) -> None:
    cluster.node("n0", gpus=1)
    cluster.wait_nodes_ready()
    cluster.queue("team", gpu_quota=1)
    cluster.pod_group("theirs", "team")
    cluster.pod("theirs-0", group="theirs", gpus=1, scheduler="someone-else")
    cluster.pod("ours", queue="team", gpus=1)
    cluster.kai()
    wait_for(lambda: cluster.bound("ours"), 60, "kai's own pod bound")
    wait_for(lambda: cluster.pods()["ours"].status.phase == "Running", 20, "Running")
    # Several cycles later, nothing of the other scheduler's group was written.
    time.sleep(2)
    group = cluster.get_pod_group("theirs")
    assert not (group.get("status") or {}).get("schedulingConditions")
    assert not cluster.events("theirs") and not cluster.events("theirs-0")
    pod = cluster.pods()["theirs-0"]
    assert pod.spec.node_name is None
    assert not [c for c in pod.status.conditions or [] if c.type == "PodScheduled"]


def test_a_renamed_scheduler_binds_when_its_shard_holds_another_pools_pod(
    cluster: Cluster,
) -> None:
    # kai run --scheduler-name: a pod already running on this shard's node that carries
    # another pool's label makes the snapshot two node pools, each scheduled in a session
    # of its own.  Both sessions schedule the pods naming this scheduler.
    node = cluster.node("n0", gpus=2)
    cluster.wait_nodes_ready()
    cluster.queue("team", gpu_quota=2)
    cluster.pod("stray", cpu="1", node_name=node, labels={POOL_LABEL: "elsewhere"})
    cluster.pod_group("ours", "team")
    cluster.pod("ours-0", group="ours", gpus=1, scheduler="gpu-scheduler")
    cluster.kai("--scheduler-name=gpu-scheduler")
    wait_for(lambda: cluster.bound("ours-0"), 60, "the renamed scheduler's pod bound")
    assert cluster.placement()["ours-0"] == node


def test_a_pool_counts_its_gang_pod_running_on_another_pools_node(cluster: Cluster) -> None:
    # A node moved to this test's pool while pool b's gang still runs a pod on it.  As
    # every KAI-Scheduler shard lists every pod, pool b's scheduler counts that pod in
    # its gang and places the rest; this pool's keeps the node's GPUs it holds.
    pool_b = cluster.other_pool("b")
    moved = cluster.node("moved", gpus=2)
    theirs = cluster.node("theirs", gpus=2, labels=pool_b)
    cluster.wait_nodes_ready()
    cluster.queue("team-b", gpu_quota=4, labels=pool_b)
    cluster.pod_group("gang", "team-b", min_member=2, labels=pool_b)
    cluster.pod("gang-0", group="gang", gpus=2, node_name=moved, labels=pool_b)
    cluster.pod("gang-1", group="gang", gpus=2, labels=pool_b)
    cluster.queue("team", gpu_quota=2)
    cluster.pod_group("ours", "team")
    cluster.pod("ours-0", group="ours", gpus=2)
    b = cluster.kai(f"--partition-label-value={pool_b[POOL_LABEL]}", lease=pool_b[POOL_LABEL])
    cluster.kai()
    wait_for(lambda: cluster.bound("gang-1"), 60, "the rest of pool b's gang bound")
    assert cluster.placement()["gang-1"] == theirs
    time.sleep(2)  # ten cycles of this pool's scheduler
    assert cluster.placement()["ours-0"] is None  # the moved node's GPUs are held
    assert "unknown node" not in b.output()  # the moved node is known: another pool's


def test_a_pod_on_a_node_the_cluster_lacks_is_logged_once(cluster: Cluster) -> None:
    cluster.node("n0", gpus=1)
    cluster.wait_nodes_ready()
    cluster.queue("team", gpu_quota=2)
    cluster.pod("lost", gpus=1, queue="team", node_name="ghost")
    cluster.pod("ours", gpus=1, queue="team")
    kai = cluster.kai()
    wait_for(lambda: cluster.bound("ours"), 60, "the schedulable pod bound")
    time.sleep(2)  # ten more cycles, each with the pod on the missing node
    warned = [line for line in kai.output().splitlines() if "unknown node 'ghost'" in line]
    assert len(warned) == 1, kai.output()
    assert f"pod {cluster.ns}/lost is on unknown node" in warned[0]
