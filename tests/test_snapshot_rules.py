"""The snapshot rules of the acceptance interface, section 1."""

from __future__ import annotations

import kai
from tests.factory import node, pod, podgroup, priority_class, queue, run, statuses


def job(objs, key):
    return kai.Snapshot.from_objects(objs).state().jobs[key]


def test_pod_joins_its_podgroup_by_annotation_and_lone_pods_are_groups_of_one():
    objs = [
        node("n1"),
        queue("q"),
        podgroup("pg", min_member=2),
        pod("a", group="pg"),
        pod("b", group="pg"),
        pod("solo", queue="q"),
    ]
    state = kai.Snapshot.from_objects(objs).state()
    assert sorted(t.name for t in state.jobs["default/pg"].tasks) == ["a", "b"]
    assert state.jobs["default/pg"].min_member == 2
    solo = state.jobs["default/solo"]
    assert [t.name for t in solo.tasks] == ["solo"] and solo.min_member == 1


def test_queue_comes_from_podgroup_else_pod_label():
    objs = [
        queue("q1"),
        queue("q2"),
        podgroup("pg", queue="q1"),
        pod("a", group="pg", queue="q2"),
        podgroup("nq", queue=None),
        pod("b", group="nq", queue="q2"),
    ]
    assert job(objs, "default/pg").queue == "q1"
    assert job(objs, "default/nq").queue == "q2"


def test_priority_resolution_order():
    pcs = [priority_class("high", 200), priority_class("default-pc", 30, global_default=True)]
    assert (
        job(
            pcs + [podgroup("g", priority_class="high"), pod("a", group="g", priority=7)],
            "default/g",
        ).priority
        == 200
    )
    assert job(pcs + [pod("a", priority=7, priority_class="high")], "default/a").priority == 7
    assert job(pcs + [pod("a", priority_class="high")], "default/a").priority == 200
    assert job(pcs + [pod("a")], "default/a").priority == 30
    assert job([pod("a")], "default/a").priority == 50
    # An unknown class falls through to the next rule.
    assert (
        job(pcs + [podgroup("g", priority_class="nope"), pod("a", group="g")], "default/g").priority
        == 30
    )


def test_legacy_preemptibility_follows_priority():
    pcs = [priority_class("build", 100), priority_class("train", 50)]
    assert job(pcs + [pod("a", priority_class="build")], "default/a").preemptible is False
    assert job(pcs + [pod("a", priority_class="train")], "default/a").preemptible is True


def test_pod_statuses_running_releasing_pending_completed():
    objs = [
        node("n1"),
        queue("q"),
        pod("run", node="n1", queue="q", phase="Running"),
        pod("bound", node="n1", queue="q", phase="Pending"),
        pod("gone", node="n1", queue="q", deleting=True),
        pod("wait", queue="q"),
        pod("ok", node="n1", queue="q", phase="Succeeded"),
        pod("bad", node="n1", queue="q", phase="Failed"),
    ]
    out = run(objs, [])
    assert statuses(out) == {
        "default/run": ("Running", "n1"),
        "default/bound": ("Running", "n1"),
        "default/gone": ("Releasing", "n1"),
        "default/wait": ("Pending", None),
        "default/ok": ("Succeeded", "n1"),
        "default/bad": ("Failed", "n1"),
    }


def test_running_and_releasing_pods_hold_node_capacity():
    state = kai.Snapshot.from_objects(
        [
            node("n1", gpus=8),
            queue("q"),
            pod("run", gpus=3, node="n1", queue="q"),
            pod("gone", gpus=2, node="n1", queue="q", deleting=True),
        ]
    ).state()
    gpu = state.resources.index["nvidia.com/gpu"]
    assert state.nodes.idle[0, gpu] == 3
    assert state.nodes.releasing[0, gpu] == 2


def test_fractional_pods_on_one_device_share_one_gpu():
    state = kai.Snapshot.from_objects(
        [
            node("n1", gpus=2),
            queue("q"),
            pod("a", queue="q", fraction=0.5, node="n1", labels={"runai-gpu-group": "g1"}),
            pod("b", queue="q", fraction=0.25, node="n1", labels={"runai-gpu-group": "g1"}),
        ]
    ).state()
    gpu = state.resources.index["nvidia.com/gpu"]
    assert state.nodes.idle[0, gpu] == 1
    assert abs(state.nodes.gpu_groups[0]["g1"].used - 0.75) < 1e-12


def test_start_time_from_annotation_else_earliest_running_pod():
    from datetime import datetime, timezone

    ann = {"kai.scheduler/last-start-timestamp": "2026-11-22T08:00:00Z"}
    assert job(
        [podgroup("g", annotations=ann), pod("a", group="g")], "default/g"
    ).last_start_timestamp == datetime(2026, 11, 22, 8, tzinfo=timezone.utc)
    p = pod("a", group="g", node="n1")
    p["status"]["startTime"] = "2026-11-22T09:30:00Z"
    assert job([node("n1"), podgroup("g"), p], "default/g").last_start_timestamp == datetime(
        2026, 11, 22, 9, 30, tzinfo=timezone.utc
    )


def test_pods_of_other_schedulers_are_reported_but_never_scheduled():
    out = run([node("n1"), queue("q"), pod("x", scheduler="default-scheduler")], ["allocate"])
    assert statuses(out)["default/x"] == ("Pending", None)
    assert "default/x" not in out["podGroups"]


def test_a_kubectl_list_dump_is_valid_input():
    items = [node("n1"), queue("q"), pod("a", gpus=1, queue="q")]
    snap = kai.Snapshot.from_objects([{"apiVersion": "v1", "kind": "List", "items": items}])
    result = kai.run_session(snap, actions=["allocate"], now="2026-11-22T12:00:00Z")
    assert result.pods["default/a"].status == "Binding"


def test_a_bad_gpu_fraction_makes_its_group_unschedulable_with_the_reason():
    out = run([node("n1"), queue("q"), pod("f", queue="q", fraction=7)], ["allocate"])
    assert statuses(out)["default/f"] == ("Pending", None)
    assert "gpu-fraction" in out["podGroups"]["default/f"]["reason"]
