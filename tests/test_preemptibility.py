"""Preemptibility separated from priority (seed 001): the resolver and its effects."""

from __future__ import annotations

import pytest

import kai
from kai.api.model import ACTIVE_ALLOCATED
from kai.api.preemptibility import (
    can_be_victim,
    evictable_tasks,
    published_status,
    resolve_preemptibility,
)
from tests.factory import NOW, node, pod, podgroup, priority_class, queue, run, statuses

LABEL = "kai.scheduler/preemptibility"


def owner(kind, name, uid, api="apps/v1", labels=None, owned_by=None, namespace="default"):
    meta = {"name": name, "namespace": namespace, "uid": uid, "labels": labels or {}}
    if owned_by is not None:
        okind, oname, ouid = owned_by
        meta["ownerReferences"] = [
            {"apiVersion": "x/v1", "kind": okind, "name": oname, "uid": ouid, "controller": True}
        ]
    return {"apiVersion": api, "kind": kind, "metadata": meta, "spec": {}}


def owned_pod(name, owner_ref, **kwargs):
    obj = pod(name, **kwargs)
    kind, oname, ouid = owner_ref
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "x/v1", "kind": kind, "name": oname, "uid": ouid, "controller": True}
    ]
    return obj


def groups(objs, actions=("allocate",)):
    return run(objs, list(actions))["podGroups"]


def state_of(objs):
    return kai.Snapshot.from_objects(objs).state()


BASE = [
    node("n1"),
    queue("q"),
    priority_class("train", 50),
    priority_class("build", 100),
    priority_class("inference", 125),
]


# ------------------------------------------------------------------ the resolver
def test_seed_example_1_high_priority_preemptible_podgroup():
    objs = BASE + [
        podgroup("high", priority_class="inference", preemptibility="preemptible"),
        pod("high-0", group="high", gpus=1),
    ]
    g = groups(objs)["default/high"]
    assert g["preemptible"] is True
    assert g["preemptibility"] == "preemptible"
    assert g["status"] == {"preemptibility": "preemptible"}


def test_seed_example_2_low_priority_non_preemptible_podgroup():
    objs = BASE + [
        podgroup("data", priority_class="train", preemptibility="non-preemptible"),
        pod("data-0", group="data", gpus=1),
    ]
    g = groups(objs)["default/data"]
    assert g["preemptible"] is False
    assert g["status"] == {"preemptibility": "non-preemptible"}


def test_seed_example_3_external_workload_label_from_deployment_template():
    # The Deployment's template label ends up on the pod: the pod label decides.
    objs = BASE + [
        owner("Deployment", "ext", "u-dep"),
        owner("ReplicaSet", "ext-1", "u-rs", owned_by=("Deployment", "ext", "u-dep")),
        owned_pod(
            "ext-1-a",
            ("ReplicaSet", "ext-1", "u-rs"),
            queue="q",
            priority_class="train",
            labels={LABEL: "non-preemptible"},
        ),
    ]
    g = groups(objs)["default/ext-1-a"]
    assert g["preemptibility"] == "non-preemptible"
    assert g["preemptible"] is False


def test_seed_example_4_default_behaviour_priority_100_is_non_preemptible():
    objs = BASE + [
        podgroup("b", priority_class="build"),
        pod("b-0", group="b"),
        podgroup("t", priority_class="train"),
        pod("t-0", group="t"),
    ]
    g = groups(objs)
    assert g["default/b"]["preemptibility"] == "non-preemptible"
    assert g["default/t"]["preemptibility"] == "preemptible"
    assert "warnings" not in g["default/b"]


@pytest.mark.parametrize("prio,expected", [(99, True), (100, False), (101, False), (0, True)])
def test_priority_rule_boundary(prio, expected):
    objs = [node("n1"), queue("q"), pod("p", queue="q", priority=prio)]
    assert groups(objs)["default/p"]["preemptible"] is expected


def test_owner_label_through_replicaset_to_deployment():
    objs = BASE + [
        owner("Deployment", "web", "u-dep", labels={LABEL: "preemptible"}),
        owner("ReplicaSet", "web-1", "u-rs", owned_by=("Deployment", "web", "u-dep")),
        owned_pod("web-1-a", ("ReplicaSet", "web-1", "u-rs"), queue="q", priority=125),
    ]
    g = groups(objs)["default/web-1-a"]
    assert g["preemptibility"] == "preemptible"  # priority 125 alone would say no
    job = state_of(objs).jobs["default/web-1-a"]
    assert job.preemptible and job.priority == 125


def test_owner_label_on_custom_kind_pytorchjob():
    objs = BASE + [
        owner(
            "PyTorchJob",
            "pt",
            "u-pt",
            api="kubeflow.org/v1",
            labels={LABEL: "non-preemptible"},
        ),
        podgroup("pg-pt", priority_class="train"),
        owned_pod("pt-master-0", ("PyTorchJob", "pt", "u-pt"), group="pg-pt"),
        owned_pod("pt-worker-0", ("PyTorchJob", "pt", "u-pt"), group="pg-pt"),
    ]
    g = groups(objs)["default/pg-pt"]
    assert g["preemptibility"] == "non-preemptible"


def test_top_owner_label_wins_over_intermediate_owner_and_pod_labels():
    objs = BASE + [
        owner(
            "JobSet", "js", "u-js", api="jobset.x-k8s.io/v1alpha2", labels={LABEL: "preemptible"}
        ),
        owner(
            "Job",
            "js-w",
            "u-job",
            api="batch/v1",
            labels={LABEL: "non-preemptible"},
            owned_by=("JobSet", "js", "u-js"),
        ),
        owned_pod(
            "js-w-0",
            ("Job", "js-w", "u-job"),
            queue="q",
            priority=125,
            labels={LABEL: "non-preemptible"},
        ),
    ]
    assert groups(objs)["default/js-w-0"]["preemptibility"] == "preemptible"


def test_owner_lookup_by_name_when_reference_has_no_uid():
    objs = BASE + [
        owner("Deployment", "web", "", labels={LABEL: "preemptible"}),
        owner("ReplicaSet", "web-1", "", owned_by=("Deployment", "web", "")),
        owned_pod("web-1-a", ("ReplicaSet", "web-1", ""), queue="q", priority=125),
    ]
    assert groups(objs)["default/web-1-a"]["preemptibility"] == "preemptible"


def test_owner_in_another_namespace_is_not_used():
    objs = BASE + [
        owner("Deployment", "web", "", labels={LABEL: "preemptible"}, namespace="other"),
        owned_pod("web-a", ("Deployment", "web", ""), queue="q", priority=125),
    ]
    assert groups(objs)["default/web-a"]["preemptibility"] == "non-preemptible"


def test_missing_owner_falls_back_to_pod_label():
    objs = BASE + [
        owned_pod(
            "orphan",
            ("ReplicaSet", "gone", "u-gone"),
            queue="q",
            priority=125,
            labels={LABEL: "preemptible"},
        ),
    ]
    g = groups(objs)["default/orphan"]
    assert g["preemptibility"] == "preemptible"


def test_owner_cycle_terminates():
    objs = BASE + [
        owner("A", "a", "u-a", api="x/v1", owned_by=("B", "b", "u-b")),
        owner("B", "b", "u-b", api="x/v1", owned_by=("A", "a", "u-a"), labels={LABEL: "x"}),
        owned_pod("p", ("A", "a", "u-a"), queue="q", priority=10),
    ]
    g = groups(objs)["default/p"]
    assert g["preemptibility"] in ("preemptible", "non-preemptible")


def test_podgroup_spec_wins_over_owner_and_pod_labels():
    objs = BASE + [
        owner("Deployment", "web", "u-dep", labels={LABEL: "preemptible"}),
        podgroup("pg", priority_class="train", preemptibility="non-preemptible"),
        owned_pod(
            "web-a", ("Deployment", "web", "u-dep"), group="pg", labels={LABEL: "preemptible"}
        ),
    ]
    g = groups(objs)["default/pg"]
    assert g["preemptibility"] == "non-preemptible"


def test_podgroup_owner_reference_leads_to_the_top_owner():
    pg = podgroup("pg", priority_class="inference")
    pg["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u-dep"}
    ]
    objs = BASE + [
        owner("Deployment", "web", "u-dep", labels={LABEL: "semi-preemptible"}),
        pg,
        pod("web-a", group="pg"),
    ]
    assert groups(objs)["default/pg"]["preemptibility"] == "semi-preemptible"


def test_invalid_value_warns_and_uses_priority_rule_not_the_next_source():
    objs = BASE + [
        podgroup("bad", priority_class="train", preemptibility="sometimes"),
        pod("bad-0", group="bad", labels={LABEL: "non-preemptible"}),
        podgroup("bad-hi", priority_class="inference", preemptibility="Preemptible"),
        pod("bad-hi-0", group="bad-hi"),
    ]
    out = run(objs, ["allocate"])
    bad = out["podGroups"]["default/bad"]
    assert bad["preemptibility"] == "preemptible"  # priority 50
    assert "sometimes" in bad["warnings"][0] and "spec.preemptibility" in bad["warnings"][0]
    hi = out["podGroups"]["default/bad-hi"]
    assert hi["preemptibility"] == "non-preemptible"  # values are case-sensitive; 125
    assert "Preemptible" in hi["warnings"][0]
    # A warning, not an error: the groups are still scheduled.
    assert bad["scheduled"] and hi["scheduled"]


def test_invalid_owner_label_warning_names_the_owner():
    objs = BASE + [
        owner("Deployment", "web", "u-dep", labels={LABEL: "never"}),
        owned_pod("web-a", ("Deployment", "web", "u-dep"), queue="q", priority=10),
    ]
    g = groups(objs)["default/web-a"]
    assert g["preemptibility"] == "preemptible"
    assert "Deployment default/web" in g["warnings"][0]


def test_resolver_unit_sources():
    def lookup(ns, ref):
        return None

    r = resolve_preemptibility(None, [], 150, lookup)
    assert (r.value, r.source, r.warning) == ("non-preemptible", "priority", None)
    r = resolve_preemptibility(None, [], 20, lookup)
    assert (r.value, r.preemptible) == ("preemptible", True)


# ------------------------------------------------------------- semi-preemptible
def semi_objects(running: int, min_member: int, pending: int = 0):
    objs = BASE + [
        podgroup(
            "semi",
            priority_class="inference",
            preemptibility="semi-preemptible",
            min_member=min_member,
        ),
    ]
    for i in range(running):
        created = f"2026-11-22T10:0{i}:00Z"
        objs.append(pod(f"semi-{i}", group="semi", gpus=1, node="n1", created=created))
    for i in range(pending):
        objs.append(pod(f"semi-p{i}", group="semi", gpus=1))
    return objs


def test_semi_preemptible_core_is_the_first_min_member_pods():
    job = state_of(semi_objects(4, 2)).jobs["default/semi"]
    assert job.preemptible  # some of it may be a victim
    assert {t.name for t in job.core_tasks()} == {"semi-0", "semi-1"}
    assert [t.name for t in evictable_tasks(job)] == ["semi-2", "semi-3"]
    assert not job.is_task_preemptible(job.tasks[0])
    assert job.is_task_preemptible(job.tasks[3])
    assert can_be_victim(job)
    assert published_status(job) == {
        "preemptibility": "semi-preemptible",
        "corePods": ["semi-0", "semi-1"],
    }


def test_semi_preemptible_at_min_member_has_nothing_to_evict():
    job = state_of(semi_objects(2, 2)).jobs["default/semi"]
    assert evictable_tasks(job) == []
    assert not can_be_victim(job)


def test_semi_preemptible_with_min_member_zero_is_fully_preemptible():
    job = state_of(semi_objects(3, 0)).jobs["default/semi"]
    assert len(evictable_tasks(job)) == 3


def test_semi_core_prefers_running_pods_over_pods_placed_in_the_session():
    from kai.api.model import TaskStatus

    job = state_of(semi_objects(2, 2, pending=1)).jobs["default/semi"]
    newcomer = next(t for t in job.tasks if t.name == "semi-p0")
    newcomer.status = TaskStatus.ALLOCATED  # older creation time, but placed now
    newcomer.creation_timestamp = job.tasks[0].creation_timestamp.replace(hour=1)
    assert {t.name for t in job.core_tasks()} == {"semi-0", "semi-1"}
    assert [t.name for t in evictable_tasks(job)] == ["semi-p0"]
    assert all(t.status in ACTIVE_ALLOCATED for t in evictable_tasks(job))


def test_non_preemptible_and_preemptible_evictable_tasks():
    objs = BASE + [
        podgroup("np", priority_class="train", preemptibility="non-preemptible"),
        pod("np-0", group="np", node="n1"),
        podgroup("p", priority_class="inference", preemptibility="preemptible"),
        pod("p-0", group="p", node="n1"),
    ]
    jobs = state_of(objs).jobs
    assert evictable_tasks(jobs["default/np"]) == [] and not can_be_victim(jobs["default/np"])
    assert len(evictable_tasks(jobs["default/p"])) == 1 and can_be_victim(jobs["default/p"])


# ----------------------------------------------------------------- end to end
def _preempt_scene(victim_group: dict, victim_pods: list[dict], preemptor_prio="top"):
    return [
        node("n1", gpus=4),
        queue("q"),
        priority_class("train", 50),
        priority_class("inference", 125),
        priority_class("top", 1000),
        victim_group,
        *victim_pods,
        podgroup("hi", priority_class=preemptor_prio, min_member=1),
        pod("hi-0", group="hi", gpus=2, created="2026-11-22T11:00:00Z"),
    ]


def _running(name, n, gpus=1):
    return [
        pod(f"{name}-{i}", group=name, gpus=gpus, node="n1", created=f"2026-11-22T10:0{i}:00Z")
        for i in range(n)
    ]


def _preempt(objs):
    pytest.importorskip("kai.actions.preempt")
    return run(objs, ["preempt"], now=NOW)


def test_e2e_high_priority_preemptible_victim_is_preempted():
    objs = _preempt_scene(
        podgroup("v", priority_class="inference", preemptibility="preemptible", min_member=4),
        _running("v", 4),
    )
    out = _preempt(objs)
    evicted = {d["pod"] for d in out["decisions"] if d["type"] == "evict"}
    assert evicted == {f"default/v-{i}" for i in range(4)}
    assert statuses(out)["default/hi-0"][0] in ("Pipelined", "Binding")


def test_e2e_low_priority_non_preemptible_victim_is_kept():
    objs = _preempt_scene(
        podgroup("v", priority_class="train", preemptibility="non-preemptible", min_member=4),
        _running("v", 4),
    )
    out = _preempt(objs)
    assert [d for d in out["decisions"] if d["type"] == "evict"] == []
    assert statuses(out)["default/hi-0"] == ("Pending", None)


def test_e2e_invalid_value_uses_priority_rule():
    # "sometimes" is invalid; priority 50 makes it preemptible.
    objs = _preempt_scene(
        podgroup("v", priority_class="train", preemptibility="sometimes", min_member=4),
        _running("v", 4),
    )
    out = _preempt(objs)
    assert out["podGroups"]["default/v"]["warnings"]
    assert {d["pod"] for d in out["decisions"] if d["type"] == "evict"}


def test_e2e_owner_label_makes_high_priority_job_preemptible():
    objs = _preempt_scene(
        podgroup("v", priority_class="inference", min_member=4),
        [
            {
                **p,
                "metadata": {
                    **p["metadata"],
                    "ownerReferences": [
                        {
                            "apiVersion": "apps/v1",
                            "kind": "ReplicaSet",
                            "name": "v-rs",
                            "uid": "u-rs",
                            "controller": True,
                        }
                    ],
                },
            }
            for p in _running("v", 4)
        ],
    )
    objs += [
        owner("Deployment", "v-dep", "u-dep", labels={LABEL: "preemptible"}),
        owner("ReplicaSet", "v-rs", "u-rs", owned_by=("Deployment", "v-dep", "u-dep")),
    ]
    out = _preempt(objs)
    assert out["podGroups"]["default/v"]["preemptibility"] == "preemptible"
    assert {d["pod"] for d in out["decisions"] if d["type"] == "evict"}


def test_e2e_semi_preemptible_victim_loses_only_pods_above_min_member():
    objs = _preempt_scene(
        podgroup("v", priority_class="train", preemptibility="semi-preemptible", min_member=2),
        _running("v", 4),
    )
    out = _preempt(objs)
    evicted = {d["pod"] for d in out["decisions"] if d["type"] == "evict"}
    assert evicted == {"default/v-2", "default/v-3"}
    assert statuses(out)["default/v-0"] == ("Running", "n1")


def test_e2e_semi_preemptible_victim_at_min_member_is_kept():
    objs = _preempt_scene(
        podgroup("v", priority_class="train", preemptibility="semi-preemptible", min_member=4),
        _running("v", 4),
    )
    out = _preempt(objs)
    assert [d for d in out["decisions"] if d["type"] == "evict"] == []


# ------------------------------------------------------- semi-preemptible quota
def _quota_scene(quota: int, preemptibility: str, running: int = 0, pending: int = 4):
    objs = [
        node("n1", gpus=8),
        queue("q", gpu=(quota, -1, 1)),
        priority_class("inference", 125),
        podgroup("s", priority_class="inference", preemptibility=preemptibility, min_member=2),
    ]
    objs += [pod(f"s-r{i}", group="s", gpus=1, node="n1") for i in range(running)]
    objs += [pod(f"s-p{i}", group="s", gpus=1) for i in range(pending)]
    return objs


def test_semi_preemptible_core_must_fit_in_quota_but_surplus_may_exceed_it():
    out = run(_quota_scene(2, "semi-preemptible"), ["allocate"])
    assert out["podGroups"]["default/s"]["scheduled"] is True
    bound = [k for k, v in statuses(out).items() if v[0] == "Binding"]
    assert len(bound) == 4  # 2 in quota (core) + 2 over quota (elastic)
    out = run(_quota_scene(1, "semi-preemptible"), ["allocate"])
    assert out["podGroups"]["default/s"]["scheduled"] is False
    assert "NonPreemptibleOverQuota" in out["podGroups"]["default/s"]["reason"]
    # The same job non-preemptible may not go over its quota of 2 at all.
    out = run(_quota_scene(2, "non-preemptible"), ["allocate"])
    bound = [k for k, v in statuses(out).items() if v[0] == "Binding"]
    assert len(bound) == 2


def test_semi_preemptible_accounts_only_the_core_as_non_preemptible():
    from kai.config import SchedulerConfig
    from kai.framework.session import Session

    snap = kai.Snapshot.from_objects(_quota_scene(2, "semi-preemptible", running=4, pending=1))
    config = SchedulerConfig.from_object(None)
    ssn = Session(snap.state(), config, now=snap_now())
    ssn.open(config.build_plugins())
    share = ssn.cache["proportion"].shares["q"]
    assert share.allocated[2] == 4 and share.allocated_non_preemptible[2] == 2
    job = ssn.jobs["default/s"]
    stmt = ssn.statement()
    for task in sorted(evictable_tasks(job), key=lambda t: t.name, reverse=True):
        stmt.evict(task, "test")
    assert share.allocated[2] == 2 and share.allocated_non_preemptible[2] == 2
    stmt.discard()
    assert share.allocated[2] == 4 and share.allocated_non_preemptible[2] == 2


def snap_now():
    from kai.engine import parse_now

    return parse_now(NOW)
