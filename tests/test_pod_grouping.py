"""Which job each pod belongs to is worked out once per snapshot: every session of a
snapshot starts from the same grouping, and a grouping is never used for other
objects than its own."""

from __future__ import annotations

import random

import pytest

import kai
from kai import _fast
from kai.engine import Snapshot
from kai.snapshot.builder import build_state, group_pods
from kai.snapshot.loader import load_objects
from tests.factory import node, pod, podgroup, queue, statuses

NOW = "2026-11-22T12:00:00Z"


def cluster() -> list[dict]:
    return [
        node("n1", gpus=8),
        node("n2", gpus=8),
        queue("q", gpu=(16, -1, 1)),
        podgroup("gang", queue="q", min_member=2),
        pod("gang-1", gpus=2, group="gang"),
        pod("gang-0", gpus=2, group="gang"),
        # Names a PodGroup the snapshot lacks: one job, unschedulable, with a reason.
        pod("orphan-0", gpus=1, group="absent", queue="q"),
        # No PodGroup annotation: a job of its own.
        pod("solo", gpus=1, queue="q"),
        # Another scheduler's pod on n2: it holds GPUs and is left alone.
        pod("other", gpus=4, node="n2", phase="Running", scheduler="default-scheduler"),
    ]


def decided(snapshot: Snapshot) -> dict:
    result = kai.run_session(snapshot, actions=["allocate"], now=NOW)
    return statuses(result.to_json())


def test_a_snapshots_sessions_share_one_grouping_and_decide_alike():
    snapshot = Snapshot.from_objects(cluster())
    first = decided(snapshot)
    grouping = snapshot._grouping
    assert grouping is not None
    second = decided(snapshot)
    assert snapshot._grouping is grouping
    assert first == second == decided(Snapshot.from_objects(cluster()))
    assert first["default/gang-0"][0] == first["default/gang-1"][0] == "Binding"
    assert first["default/orphan-0"] == ("Pending", None)
    assert first["default/solo"][0] == "Binding"
    assert first["default/other"] == ("Running", "n2")


def test_the_grouping_says_which_job_each_pod_belongs_to():
    grouping = group_pods(load_objects(cluster()))
    assert [p.name for p in grouping.foreign] == ["other"]
    assert [g.name for g in grouping.groups] == ["gang"]
    assert [[p.name for p in pods] for pods in grouping.members] == [["gang-1", "gang-0"]]
    assert [(key, [p.name for p in pods]) for key, pods in grouping.missing] == [
        (("default", "absent"), ["orphan-0"])
    ]
    assert [p.name for p in grouping.singles] == ["solo"]


def test_a_grouping_of_other_objects_is_not_used():
    objects = load_objects(cluster())
    other = load_objects([*cluster(), pod("late", gpus=1, queue="q")])
    state = build_state(other, grouping=group_pods(objects))
    assert "default/late" in {t.key for t in state.tasks}
    assert sorted(t.key for t in state.tasks) == sorted(t.key for t in build_state(other).tasks)
    # The same objects for another scheduler: that scheduler's grouping.
    state = build_state(objects, scheduler_name="default-scheduler", grouping=group_pods(objects))
    assert [t.key for t in state.tasks] == ["default/other"]


@pytest.mark.skipif(_fast.module("build") is None, reason="the compiled builder is not built")
@pytest.mark.parametrize("seed", range(6))
def test_compiled_grouping_is_the_reference(seed: int):
    rng = random.Random(seed)
    docs = [node(f"n{i}", gpus=8) for i in range(3)] + [queue("q", gpu=(24, -1, 1))]
    groups = [f"g{i}" for i in range(8)]
    for g in rng.sample(groups, 5):  # the others are named by pods but missing
        docs.append(podgroup(g, queue="q", namespace=rng.choice(["a", "b"])))
    for i in range(40):
        namespace = rng.choice(["a", "b"])
        group = rng.choice([None, *groups])
        scheduler = rng.choice(["kai-scheduler"] * 4 + ["default-scheduler"])
        docs.append(
            pod(
                f"p{rng.randrange(1000)}-{i}",
                namespace,
                1,
                group=group,
                queue="q",
                scheduler=scheduler,
            )
        )
    rng.shuffle(docs)
    objects = load_objects(docs)
    compiled = group_pods(objects)
    with _fast.pure_python():
        reference = group_pods(objects)
    for field in (
        "foreign",
        "groups",
        "members",
        "missing",
        "singles",
        "group_keys",
        "single_keys",
        "single_uids",
    ):
        assert getattr(compiled, field) == getattr(reference, field), field
