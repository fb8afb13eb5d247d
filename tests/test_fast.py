"""The compiled paths of kai._fast give exactly what the pure-Python code gives.

Randomized clusters (fixed seeds), with their manifests perturbed into the less usual
shapes the compiled code hands back to Python (pods without a group, of another
scheduler, being deleted, on an unknown node, with owners, tolerations, init
containers, shared GPUs, ...), are loaded, built into session state and scheduled
with the compiled modules and without them: the parsed objects, the state and the
whole result must be equal. Input errors must read the same.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import random
from typing import Any

import numpy as np
import pytest

from kai import _fast
from kai.api import model
from kai.api.errors import InputError
from kai.api.model import ClusterState, TaskStatus
from kai.api.preemptibility import SEMI_PREEMPTIBLE
from kai.bench_clusters import NOW, cluster_fill, kai_reclaim_large_jobs, random_cluster, storm
from kai.config import SchedulerConfig
from kai.engine import Snapshot, run_session
from kai.framework.session import Session
from kai.output import dumps_json
from kai.plugins.proportion import ProportionPlugin
from kai.snapshot import loader
from kai.snapshot.builder import build_state
from kai.snapshot.loader import load_objects, load_text

COMPILED = _fast.available()
needs_compiled = pytest.mark.skipif(
    len(COMPILED) < len(_fast.NAMES), reason="kai._fast is not built (pure Python only)"
)
SEEDS = range(10)


def test_ci_builds_every_compiled_module() -> None:
    # The parity tests below, and the native backend's tests (tests/test_backends.py),
    # skip where kai._fast or kai._native is not built; CI must not skip them.
    if os.environ.get("CI", "").lower() != "true":
        pytest.skip("only CI must have every module built")
    assert len(COMPILED) == len(_fast.NAMES), f"kai._fast built: {sorted(COMPILED)}"
    import kai._native  # noqa: F401 - fails under CI when the C++ core is missing
    from kai.backends import get_backend

    # The node picker's tests (test_fast_allocate_shared, test_alike_picks) skip without it.
    assert get_backend("native").node_picker is not None


FULL = ["allocate", "consolidation", "reclaim", "preempt", "stalegangeviction"]


def _perturb(
    docs: list[dict[str, Any]], rng: random.Random, unknown_node: bool
) -> list[dict[str, Any]]:
    """Give some pods and groups the shapes the compiled paths leave to Python."""
    docs = copy.deepcopy(docs)
    pods = [d for d in docs if d["kind"] == "Pod"]
    groups = [d for d in docs if d["kind"] == "PodGroup"]
    for pod in pods:
        meta, spec = pod["metadata"], pod["spec"]
        roll = rng.random()
        if roll < 0.05:
            meta["annotations"].pop("pod-group-name")  # a single pod: its own job
        elif roll < 0.08:
            meta["annotations"]["pod-group-name"] = "missing"  # names no PodGroup
        elif roll < 0.11:
            spec["schedulerName"] = "default-scheduler"
        elif roll < 0.14:
            meta["deletionTimestamp"] = "2026-01-01T11:59:00Z"
        elif roll < 0.17 and unknown_node:
            spec["nodeName"] = "node-unknown"
            pod["status"]["phase"] = "Running"
        elif roll < 0.20:
            meta["ownerReferences"] = [{"kind": "Job", "name": "owner", "controller": True}]
        elif roll < 0.23:
            meta["labels"] = {"kai.scheduler/preemptibility": "non-preemptible"}
        elif roll < 0.26:
            spec["tolerations"] = [{"key": "k", "operator": "Exists"}]
        elif roll < 0.29:
            spec["initContainers"] = [
                {"name": "init", "resources": {"requests": {"cpu": "3", "memory": "1Gi"}}}
            ]
        elif roll < 0.32:
            spec["priority"] = rng.choice((10, 200))
        elif roll < 0.35:
            meta["annotations"]["gpu-memory"] = "2000"
        elif roll < 0.38:
            spec["containers"][0]["resources"]["limits"] = {"cpu": "4", "nvidia.com/gpu": "1"}
        elif roll < 0.41:
            spec["containers"].append({"name": "side"})
        elif roll < 0.44:
            pod["status"]["phase"] = "Succeeded"
        elif roll < 0.47:
            meta["labels"] = {"kai.scheduler/queue": "q1"}
        elif roll < 0.50:
            spec["schedulingGates"] = [{"name": "wait"}]
        elif roll < 0.55:
            # What the API server returns: admission's default tolerations, conditions.
            spec["tolerations"] = [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {"key": "dedicated", "value": "gpu"},
            ]
            pod["status"]["conditions"] = [
                {
                    "type": "PodScheduled",
                    "status": rng.choice(("True", "False")),
                    "lastProbeTime": None,
                    "lastTransitionTime": "2026-01-01T11:58:00Z",
                },
                {"type": "Ready", "status": "False"},
                {"type": "", "status": "True"},
            ]
        elif roll < 0.58:
            meta["ownerReferences"] = [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "owner",
                    "uid": "u-owner",
                    "controller": rng.choice((True, False)),
                    "blockOwnerDeletion": True,
                }
            ]
        # The containers' requests and limits: a negative zero (which a sum turns into
        # a zero), limits alone, and sums over containers that limit different resources.
        resources = spec["containers"][0].setdefault("resources", {})
        roll = rng.random()
        if roll < 0.05:
            resources.setdefault("requests", {})["memory"] = -0.0
        elif roll < 0.10:
            resources["limits"] = {"memory": -0.0, "nvidia.com/gpu": "1"}
        elif roll < 0.15:
            resources["limits"] = dict(resources.pop("requests", {}))
        elif roll < 0.20:
            resources["limits"] = {"cpu": "500m"}
            spec["containers"].append(
                {
                    "name": "side",
                    "resources": {
                        "requests": {"cpu": "250m", "memory": "64Mi"},
                        "limits": {"memory": "128Mi"},
                    },
                }
            )
    for node in (d for d in docs if d["kind"] == "Node"):
        spec, status = node.setdefault("spec", {}), node.setdefault("status", {})
        roll = rng.random()
        if roll < 0.1:
            spec["taints"] = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
        elif roll < 0.2:
            spec["unschedulable"] = rng.choice((True, "true", "False"))
        elif roll < 0.3:
            status["capacity"] = status.pop("allocatable", {})
        elif roll < 0.45:
            status["conditions"] = [
                {"type": "Ready", "status": rng.choice(("True", "False", "Unknown"))},
                {"type": "DiskPressure", "status": "True", "lastTransitionTime": "never"},
                {"type": "", "status": "True"},
            ]
        elif roll < 0.5:
            status["conditions"] = [{"type": "", "status": False}]
        elif roll < 0.55:
            node["metadata"]["labels"] = {"rack": 7, "zone": None}
        elif roll < 0.6:
            node["metadata"]["namespace"] = "ignored"
    for group in groups:
        roll = rng.random()
        if roll < 0.05:
            group["spec"]["preemptibility"] = "semi-preemptible"
        elif roll < 0.10:
            group["spec"]["queue"] = ""
        elif roll < 0.15:
            group["spec"]["minMember"] = 0
        elif roll < 0.20:
            group["spec"]["stalenessGracePeriod"] = "5m"
        elif roll < 0.25:
            group["metadata"]["ownerReferences"] = [{"kind": "Job", "name": "owner"}]
        elif roll < 0.35:
            # Timestamps beside the API server's plain UTC form.
            group["metadata"]["creationTimestamp"] = rng.choice(
                (
                    "2026-01-01T13:00:00+01:00",
                    "2026-01-01T11:59:59.25Z",
                    "2026-01-01t12:00:00z",
                    " 2026-01-01T12:00:00Z",
                    "2026-01-01 12:00:00Z",
                )
            )
    docs.append(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "owner",
                "namespace": "default",
                "labels": {"kai.scheduler/preemptibility": "preemptible"},
            },
        }
    )
    rng.shuffle(docs)
    return docs


def _docs(seed: int, *, unknown_node: bool = True) -> list[dict[str, Any]]:
    builder = random_cluster(seed, nodes=10 + seed % 5, jobs=40 + 3 * seed)
    return _perturb(builder.dicts(), random.Random(seed), unknown_node)


def _both(fn, *args):  # type: ignore[no-untyped-def]
    compiled = fn(*args)
    with _fast.pure_python():
        reference = fn(*args)
    return compiled, reference


class _SubJob(model.Job):
    __slots__ = ()


class _SubTask(model.Task):
    __slots__ = ()


def _as_subclasses(jobs: Any) -> None:
    """Make ``jobs`` and their tasks objects of subclasses of Job and Task: the compiled
    code then reads them as attributes, not at the classes' offsets."""
    for job in jobs:
        job.__class__ = _SubJob
        for task in job.tasks:
            task.__class__ = _SubTask


def _state_view(state: ClusterState) -> dict[str, Any]:
    """Everything a session reads of a state, with objects named instead of compared."""
    tasks = [
        (
            t.uid,
            t.key,
            t.job.key if t.job is not None else None,
            t.request.tolist(),
            t.status,
            t.pod,
            t.node,
            t.gpu_fraction,
            t.gpu_memory_mib,
            t.gpu_group,
            t.creation_timestamp,
            t.virtually_evicted,
        )
        for t in state.all_tasks()
    ]
    jobs = {}
    for key, job in state.jobs.items():
        fields = {
            name: getattr(job, name)
            for name in job.__slots__  # type: ignore[attr-defined]
            if name not in ("tasks", "pod_group")
        }
        fields["tasks"] = [t.key for t in job.tasks]
        fields["pod_group"] = job.pod_group
        jobs[key] = fields
    nodes = state.nodes
    return {
        "tasks": tasks,
        "jobs": jobs,
        "job_order": list(state.jobs),
        "allocatable": nodes.allocatable.tolist(),
        "used": nodes.used.tolist(),
        "idle": nodes.idle.tolist(),
        "releasing": nodes.releasing.tolist(),
        "node_tasks": [sorted(t.key for t in ts) for ts in nodes.tasks],
        "groups": [{k: (g.used, g.releasing) for k, g in gs.items()} for gs in nodes.gpu_groups],
        "warnings": state.warnings,
        "foreign": [t.key for t in state.foreign_tasks],
        "passive": [t.key for t in state.passive_tasks],
    }


@needs_compiled
def test_compiled_modules_write_objects_directly() -> None:
    # A change of Task, Job, PodObject or a result class turns the slot-by-slot path
    # off (correct, slower): this says so.
    for name in _fast.NAMES:
        module = _fast.module(name)
        assert module is not None, name
        if name not in ("bounds", "layout", "ledger"):  # the modules that make no objects
            assert module.direct(), name


@needs_compiled
def test_an_unset_field_read_at_its_offset_raises() -> None:
    # A job whose slots were never set (made without __init__) is read at the offsets,
    # as a Job: the read raises AttributeError naming the class, not a crash.
    loop = _fast.module("loop")
    assert loop is not None
    empty = model.Job.__new__(model.Job)
    with pytest.raises(AttributeError, match="Job object has an unset field"):
        loop.job_columns([empty], {}, [], frozenset(), True)


@needs_compiled
@pytest.mark.parametrize("seed", SEEDS)
def test_loading_identical(seed: int) -> None:
    docs = _docs(seed)
    compiled, reference = _both(load_objects, docs)
    assert compiled == reference
    text = json.dumps({"apiVersion": "v1", "kind": "List", "items": docs})
    compiled, reference = _both(load_text, text, "cluster.json")
    assert compiled == reference
    # Equal aware datetimes may differ in zone: every parsed time is in UTC alike.
    assert repr(compiled) == repr(reference)
    assert len(compiled.pods) == sum(1 for d in docs if d["kind"] == "Pod")


@needs_compiled
@pytest.mark.parametrize("seed", SEEDS[:4])
def test_objects_from_the_api_identical(seed: int, monkeypatch) -> None:
    """The live cache converts one object at a time (convert_object) and keeps what it
    parsed between calls, in a cache it starts again when large: every object comes out
    as the pure-Python loader makes it, one by one."""
    monkeypatch.setattr(loader, "LIVE_CACHE_ENTRIES", 20)  # restart it now and then
    for doc in _docs(seed):
        compiled, reference = _both(loader.convert_object, doc, "Pod from the API")
        assert compiled == reference
        assert repr(compiled) == repr(reference)


@needs_compiled
@pytest.mark.parametrize("seed", SEEDS)
def test_state_identical(seed: int) -> None:
    with _fast.pure_python():
        objects = load_objects(_docs(seed))
    compiled, reference = _both(build_state, objects)
    assert _state_view(compiled) == _state_view(reference)

    # Parsed pods and pod groups of subclasses are read as attributes, not at the
    # offsets: here the subclasses' properties shadow two fields.
    from kai.api.objects import PodGroupObject, PodObject

    class SubPod(PodObject):
        __slots__ = ()

        @property  # type: ignore[override]
        def priority(self) -> int:
            return 7

    class SubGroup(PodGroupObject):
        __slots__ = ()

        @property  # type: ignore[override]
        def priority_class_name(self) -> None:
            return None

    for pod in objects.pods:
        pod.__class__ = SubPod
    for group in objects.pod_groups:
        group.__class__ = SubGroup
    compiled, shadowed = _both(build_state, objects)
    assert _state_view(compiled) == _state_view(shadowed)
    assert {job.priority for job in compiled.jobs.values()} != {
        job.priority for job in reference.jobs.values()
    }


@needs_compiled
@pytest.mark.parametrize("seed", SEEDS)
def test_session_result_identical(seed: int) -> None:
    docs = _docs(seed)

    def result(docs: list[dict[str, Any]]) -> tuple[Any, ...]:
        res = run_session(Snapshot.from_objects(docs), actions=FULL, now=NOW)
        extra = {
            k: (g.extra_pods, g.extra_pods_waiting, len(g.evictions))
            for k, g in res.pod_groups.items()
        }
        return res.to_json(explain=True), extra, res.warnings

    compiled, reference = _both(result, docs)
    assert compiled == reference
    assert any(d["type"] == "bind" for d in compiled[0]["decisions"])


@needs_compiled
@pytest.mark.parametrize(
    "make",
    [
        lambda: kai_reclaim_large_jobs(60),
        lambda: storm(40, 60, kind="reclaim"),
        lambda: storm(40, 60, kind="preempt"),
    ],
    ids=["reclaim-large-jobs", "reclaim-storm", "preempt-storm"],
)
def test_eviction_heavy_sessions_identical(make: Any) -> None:
    """Sessions whose simulations evict and restore hundreds of pods at a time (the
    statement's eviction runs, the node table's status runs, the victim leaves' columns)
    decide the same compiled and in pure Python."""
    snap = Snapshot(make().objects())

    def result() -> Any:
        res = run_session(snap, actions=["allocate", "reclaim", "preempt"], now=NOW)
        return res.to_json(explain=True)

    compiled, reference = _both(result)
    assert compiled == reference
    assert sum(d["type"] == "evict" for d in compiled["decisions"]) >= 60


@needs_compiled
@pytest.mark.parametrize("seed", SEEDS[:5])
def test_scanned_jobs_identical(seed: int) -> None:
    """The compiled scan of the jobs an action may try keeps the reference's jobs, in
    order, collects the same jobs with a pending pod and records the same fit errors,
    under every filter, with a last check, and for jobs and tasks of subclasses."""
    from kai.actions.common import scan_jobs
    from kai.plugins import register_builtins

    loop = _fast.module("loop")
    assert loop is not None
    register_builtins()
    snapshot = Snapshot.from_objects(_docs(seed))
    ssn = Session(snapshot.state(), snapshot.scheduler_config(FULL), now=NOW)
    ssn.open(snapshot.scheduler_config(FULL).build_plugins())
    jobs = list(ssn.jobs.values())
    rng = random.Random(seed)
    for job in rng.sample(jobs, len(jobs) // 4):  # gangs short of pods, for some
        job.min_member = rng.randint(1, 4)

    def refuse_some(job: model.Job) -> str | None:
        return "refused" if job.name.endswith(("1", "5")) else None

    def scan(fn: Any, pending_only: bool, preemptible_only: bool, check: Any) -> Any:
        for job in jobs:
            job.fit_errors = []
        with_pending: list[model.Job] = []
        out = fn(ssn, jobs, with_pending, pending_only, preemptible_only, check)
        errors = {job.key: list(job.fit_errors) for job in jobs}
        return [j.key for j in out], [j.key for j in with_pending], errors

    cases = [
        (pending, preemptible, check)
        for pending in (True, False)
        for preemptible in (False, True)
        for check in (None, refuse_some)
    ]
    expected = [scan(scan_jobs, *case) for case in cases]
    recorded = {m for _, _, errors in expected for ms in errors.values() for m in ms}
    assert "refused" in recorded and any(m.startswith("PodGroup has") for m in recorded)
    assert [scan(loop.scan_jobs, *case) for case in cases] == expected

    _as_subclasses(jobs)
    assert [scan(loop.scan_jobs, *case) for case in cases] == expected


@needs_compiled
@pytest.mark.parametrize("seed", SEEDS[:5])
def test_pod_and_group_results_identical(seed: int) -> None:
    """The compiled per-pod and per-group results of a scheduled session are the
    reference's, for jobs and tasks read at their offsets and for ones of subclasses
    (read as attributes), with groups whose start annotations alternate."""
    from kai.engine import _Annotations, _collect
    from kai.framework.session import Decision
    from kai.plugins import register_builtins

    collect = _fast.module("collect")
    assert collect is not None
    register_builtins()
    snapshot = Snapshot.from_objects(_docs(seed))
    config = snapshot.scheduler_config(FULL)
    ssn = Session(snapshot.state(), config, now=NOW)
    ssn.open(config.build_plugins())
    from kai.engine import get_action, register_builtin_actions

    register_builtin_actions()
    for name in FULL:
        ssn.current_action = name
        get_action(name)(ssn)
    starts = [job.new_start_timestamp for _, job in sorted(ssn.jobs.items())]
    assert len(set(starts)) > 1  # started and not: the annotations change from group to group
    assert any(d.type == "bind" for d in ssn.decisions)

    class SubDecision(Decision):
        __slots__ = ()

    def finished(decisions: list[Decision], finish: Any) -> tuple[Any, list[Decision]]:
        return finish(decisions, _Annotations()), decisions

    kept = [copy.copy(d) for d in ssn.decisions]
    subclassed = [copy.copy(d) for d in ssn.decisions]
    for d in subclassed:
        d.__class__ = SubDecision
    reference_decisions = finished([copy.copy(d) for d in kept], _collect.finish_decisions)
    assert finished(kept, collect.finish_decisions) == reference_decisions
    evictions, decisions = finished(subclassed, collect.finish_decisions)

    def fields(records: list[Decision]) -> list[tuple[Any, ...]]:
        return [dataclasses.astuple(d) for d in records]

    assert {k: fields(v) for k, v in evictions.items()} == {
        k: fields(v) for k, v in reference_decisions[0].items()
    }
    assert fields(decisions) == fields(reference_decisions[1])
    evictions = reference_decisions[0]
    tasks, names = ssn.state.all_tasks(), ssn.nodes.names

    def results() -> tuple[Any, Any]:
        return (
            collect.group_results(ssn.jobs, _Annotations(), evictions),
            collect.pod_results(tasks, names),
        )

    reference = (
        _collect.group_results(ssn.jobs, _Annotations(), evictions),
        _collect.pod_results(tasks, names),
    )
    assert results() == reference
    # Jobs in key order (as a state adds them, mostly) and not: the same results, in
    # key order.
    in_order = dict(sorted(ssn.jobs.items()))
    shuffled = dict(random.Random(seed).sample(sorted(ssn.jobs.items()), len(ssn.jobs)))
    for jobs in (in_order, shuffled):
        got = collect.group_results(jobs, _Annotations(), evictions)
        assert got == reference[0] and list(got) == list(reference[0])

    # Tasks out of key order: the same pods, in key order.
    shuffled_tasks = random.Random(seed).sample(tasks, len(tasks))
    got = collect.pod_results(shuffled_tasks, names)
    assert got == reference[1] and list(got) == list(reference[1]) == sorted(reference[1])

    _as_subclasses(ssn.jobs.values())
    assert results() == reference


@needs_compiled
@pytest.mark.parametrize("seed", SEEDS)
def test_result_document_identical(seed: int) -> None:
    """The compiled JSON document of a result is the reference's, key order included,
    with and without explanations, and for results made of other classes."""
    from kai.engine import PodGroupResult, PodResult
    from kai.framework.session import Decision

    res = run_session(Snapshot.from_objects(_docs(seed)), actions=FULL, now=NOW)
    assert any(d.type == "bind" for d in res.decisions)
    for i, group in enumerate(res.pod_groups.values()):
        if i % 3 == 0:
            group.warnings = [f"warning {i}"]

    class OtherPod(PodResult):
        pass

    class OtherGroup(PodGroupResult):
        pass

    class OtherDecision(Decision):
        pass

    def subclassed(value: Any, cls: type) -> Any:
        other = cls.__new__(cls)
        for f in dataclasses.fields(value):
            setattr(other, f.name, getattr(value, f.name))
        return other

    def every_other(items: Any, cls: type) -> Any:
        return [(k, subclassed(v, cls) if i % 2 else v) for i, (k, v) in enumerate(items)]

    # Every other object of the result through its attributes, not its slots.
    mixed = dataclasses.replace(
        res,
        decisions=[d for _, d in every_other(enumerate(res.decisions), OtherDecision)],
        pods=dict(every_other(res.pods.items(), OtherPod)),
        pod_groups=dict(every_other(res.pod_groups.items(), OtherGroup)),
    )

    def document(result: Any, explain: bool) -> Any:
        return result.to_json(explain=explain)

    for result in (res, mixed):
        for explain in (False, True):
            compiled, reference = _both(document, result, explain)
            assert json.dumps(compiled) == json.dumps(reference)
            assert dumps_json(compiled) == json.dumps(reference, indent=2)


@needs_compiled
def test_large_fill_identical() -> None:
    builder = cluster_fill(40, pods=600, gang_fraction=0.3)
    snap = Snapshot(builder.objects())
    compiled, reference = _both(
        lambda: run_session(snap, actions=["allocate"], now=NOW).to_json(explain=True)
    )
    assert compiled == reference


BAD_PODS = [
    ("metadata", "creationTimestamp", "yesterday"),
    ("spec", "priority", True),
    ("spec", "nodeName", ["a"]),
    ("spec", "containers", {"name": "x"}),
    ("spec", "schedulingGates", ""),
    ("status", "conditions", {}),
    ("status", "phase", {"a": 1}),
    ("metadata", "labels", {"a": {"b": 1}}),
    ("metadata", "uid", {"x": 1}),
    ("spec", "tolerations", [{"key": "k", "operator": ["Exists"]}]),
    ("spec", "tolerations", {"key": "k"}),
    ("status", "conditions", [{"type": "Ready", "lastTransitionTime": "never"}]),
    ("status", "startTime", "2026-13-01T00:00:00Z"),
    ("status", "startTime", "2026-02-30T00:00:00Z"),
    ("metadata", "creationTimestamp", "2026-01-01T24:00:00Z"),
    ("status", "conditions", ["Ready"]),
    ("metadata", "ownerReferences", [{"kind": "Job"}]),
    ("metadata", "ownerReferences", [{"kind": "Job", "name": "j", "controller": "maybe"}]),
]


BAD_NODES = [
    ("spec", "taints", [{"value": "gpu"}]),
    ("spec", "taints", {"key": "k"}),
    ("spec", "unschedulable", "maybe"),
    ("status", "allocatable", {"cpu": "-2"}),
    ("status", "allocatable", ["cpu"]),
    ("status", "conditions", [{"type": "Ready", "status": ["True"]}]),
    ("metadata", "annotations", {"a": ["b"]}),
]


@needs_compiled
@pytest.mark.parametrize(
    ("kind", "section", "field", "value"),
    [("Pod", *bad) for bad in BAD_PODS] + [("Node", *bad) for bad in BAD_NODES],
)
def test_input_errors_identical(kind: str, section: str, field: str, value: Any) -> None:
    docs = random_cluster(1).dicts()
    obj = next(d for d in docs if d["kind"] == kind)
    obj.setdefault(section, {})[field] = value
    messages = []
    for pure in (False, True):
        with _fast.pure_python(pure), pytest.raises(InputError) as err:
            load_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}), "c.json")
        messages.append(str(err.value))
    assert messages[0] == messages[1]
    assert "c.json" in messages[0] and f"{kind} " in messages[0]
    assert obj["metadata"]["name"] in messages[0]


@needs_compiled
def test_bad_quantity_and_duplicate_reported_alike() -> None:
    docs = random_cluster(2).dicts()
    pods = [d for d in docs if d["kind"] == "Pod"]
    pods[0]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "-1"
    dup = [*docs, copy.deepcopy(pods[1])]
    node = next(d for d in docs if d["kind"] == "Node")
    dup_node = [d for d in docs if d is not pods[0]] + [copy.deepcopy(node)]
    for case in (docs, dup, dup_node):
        messages = []
        for pure in (False, True):
            with _fast.pure_python(pure), pytest.raises(InputError) as err:
                load_objects(case, "objs")
            messages.append(str(err.value))
        assert messages[0] == messages[1]


JSON_DOCS: list[Any] = [
    {"a": 1.5, "b": [1, 2.25, None, True], "c": {"d": "x", "e": {}}, "f": []},
    {"tiny": 1e-05, "big": 1e16, "n": -0.0},
    {"nan": float("nan")},
    {"inf": float("inf")},
    {"text": "caf\u00e9"},
    {"text": "a\x7fb", "ctrl": "a\nb\tc\x00"},
    {"big": 2**70},
    {"tuple": (1, 2)},
    {1: "int key"},
]


@pytest.mark.parametrize("doc", JSON_DOCS)
def test_dumps_json_is_json_dumps(doc: Any) -> None:
    assert dumps_json(doc) == json.dumps(doc, indent=2)
    with _fast.pure_python():
        assert dumps_json(doc) == json.dumps(doc, indent=2)


def test_dumps_json_of_a_result() -> None:
    res = run_session(Snapshot.from_objects(_docs(3, unknown_node=False)), actions=FULL, now=NOW)
    doc = res.to_json(explain=True)
    assert dumps_json(doc) == json.dumps(doc, indent=2)


def test_pure_python_switch() -> None:
    with _fast.pure_python():
        assert all(_fast.module(name) is None for name in _fast.NAMES)
    assert [name for name in _fast.NAMES if _fast.module(name) is not None] == COMPILED
    np.testing.assert_equal(len(COMPILED) <= len(_fast.NAMES), True)


@needs_compiled
@pytest.mark.parametrize("seed", SEEDS[:3])
def test_row_arithmetic_identical(seed: int) -> None:
    """The statement's node and queue accounting charge the same bits either way, long
    sequences of charges and uncharges included (where rounding would show)."""
    ledger = _fast.module("ledger")
    assert ledger is not None
    rng = np.random.default_rng(seed)
    n, r = 9, 6
    compiled = [rng.random((n, r)) * 1e3 for _ in range(3)]
    reference = [m.copy() for m in compiled]
    vec_c = rng.random(3)
    vec_r = vec_c.copy()
    path_c = rng.random((2, 3))  # a queue path's vectors, charged together
    path_r = path_c.copy()
    requests = [np.round(rng.random(r) * 10, 1) for _ in range(5)]  # 0.1s: inexact
    for _ in range(3000):
        i, kind, add = int(rng.integers(n)), int(rng.integers(3)), bool(rng.integers(2))
        request = requests[int(rng.integers(len(requests)))]
        model.charge_rows(*reference, i, request, kind, add)
        ledger.charge_rows(*compiled, i, request, kind, add)
        if add:  # a status change on the node, as an eviction or its undo makes
            new_kind = int(rng.integers(3))
            model.recharge_rows(*reference, i, request, kind, new_kind)
            ledger.recharge_rows(*compiled, i, request, kind, new_kind)
        model.add_vector(vec_r, request[:3], add)
        ledger.add_vector(vec_c, request[:3], add)
        model.add_vector_to_each((path_r[0], path_r[1]), request[3:], add)
        ledger.add_vector_to_each((path_c[0], path_c[1]), request[3:], add)
    for c, ref in zip(compiled, reference):
        assert c.tobytes() == ref.tobytes()
    assert vec_c.tobytes() == vec_r.tobytes()
    assert path_c.tobytes() == path_r.tobytes()


@needs_compiled
@pytest.mark.parametrize("seed", SEEDS[:3])
def test_batched_row_arithmetic_identical(seed: int) -> None:
    """Charging many pods at once (a statement evicting, or putting back, many pods)
    gives the same bits compiled or not, and as charging them one at a time: the
    same target several times in a batch, a queue path's vectors shared by batches."""
    ledger = _fast.module("ledger")
    assert ledger is not None
    rng = np.random.default_rng(seed)
    n, r = 7, 5
    compiled = [rng.random((n, r)) * 1e3 for _ in range(3)]
    reference = [m.copy() for m in compiled]
    one_by_one = [m.copy() for m in compiled]
    shares_c = [rng.random(3) * 100 for _ in range(4)]
    shares_r = [v.copy() for v in shares_c]
    shares_1 = [v.copy() for v in shares_c]
    requests = [np.round(rng.random(r) * 10, 1) for _ in range(4)]  # 0.1s: inexact
    for _ in range(200):
        size = int(rng.integers(0, 12))
        rows = [int(i) for i in rng.integers(n, size=size)]
        picked = [requests[int(k)] for k in rng.integers(len(requests), size=size)]
        old = [int(k) for k in rng.integers(3, size=size)]
        new = [int(k) for k in rng.integers(3, size=size)]
        model.recharge_all(*reference, rows, picked, old, new)
        for i, request, a, b in zip(rows, picked, old, new):
            ledger.recharge_rows(*compiled, i, request, a, b)
            model.recharge_rows(*one_by_one, i, request, a, b)
        # Each pod's queue path (indices of the shares), repeats and overlaps included.
        index = [
            tuple(int(j) for j in rng.choice(4, size=int(rng.integers(1, 4)))) for _ in range(size)
        ]
        vectors = [request[:3] for request in picked]
        add = bool(rng.integers(2))
        ledger.add_vectors_to_each(
            [tuple(shares_c[j] for j in each) for each in index], vectors, add
        )
        model.add_vectors_to_each(
            [tuple(shares_r[j] for j in each) for each in index], vectors, add
        )
        for each, vector in zip(index, vectors):
            ledger.add_vector_to_each(tuple(shares_1[j] for j in each), vector, add)
    for c, ref, one in zip(compiled, reference, one_by_one):
        assert c.tobytes() == ref.tobytes() == one.tobytes()
    for c, ref, one in zip(shares_c, shares_r, shares_1):
        assert c.tobytes() == ref.tobytes() == one.tobytes()


@needs_compiled
@pytest.mark.parametrize("seed", SEEDS[:3])
def test_add_at_identical(seed: int) -> None:
    """The compiled ``np.add.at`` adds the same bits to vectors and matrices, an index
    repeating nodes included, and refuses an index out of range with nothing added."""
    ledger = _fast.module("ledger")
    assert ledger is not None
    rng = np.random.default_rng(seed)
    for shape in ((50,), (50, 6)):
        target = rng.random(shape) * 1e3
        for _ in range(20):
            index = rng.integers(50, size=int(rng.integers(0, 200)))
            values = np.round(rng.random((len(index), *shape[1:])) * 10, 1)
            reference = target.copy()
            np.add.at(reference, index, values)
            ledger.add_at(target, index, values)
            assert target.tobytes() == reference.tobytes()
        before = target.tobytes()
        with pytest.raises(IndexError):
            ledger.add_at(target, np.array([3, 50]), np.ones((2, *shape[1:])))
        assert target.tobytes() == before


@needs_compiled
@pytest.mark.parametrize("seed", SEEDS[:4])
def test_node_rows_identical(seed: int) -> None:
    """The nodes' allocatable matrix is the same compiled or not: resources the table
    has no column for left out, declared and default pod capacities, maps that are not
    dicts; a column out of the matrix is refused."""
    from types import MappingProxyType

    from kai.api.objects import NodeObject

    build = _fast.module("build")
    assert build is not None
    rng = random.Random(seed)
    names = ["cpu", "memory", "nvidia.com/gpu", "pods", "example.com/fpga", "unknown"]
    column_of = {name: i for i, name in enumerate(names[:-1])}
    nodes = []
    for i in range(40):
        declared = rng.sample(names, rng.randint(0, len(names)))
        alloc: Any = {name: round(rng.random() * 1e4, rng.randint(0, 3)) for name in declared}
        if i % 5 == 0:
            alloc = MappingProxyType(alloc)
        nodes.append(NodeObject(name=f"node-{i}", allocatable=alloc))
    width = len(column_of) + 1  # a column no resource takes stays 0
    reference = model.node_rows(nodes, column_of, width, column_of["pods"], 110.0)
    compiled = build.node_rows(nodes, column_of, width, column_of["pods"], 110.0)
    assert compiled.dtype == reference.dtype and compiled.shape == reference.shape
    assert compiled.tobytes() == reference.tobytes()
    assert not build.node_rows([], column_of, width, 3, 110.0).size
    with pytest.raises(IndexError):
        build.node_rows(nodes, {**column_of, "unknown": width}, width, 3, 110.0)


@needs_compiled
@pytest.mark.parametrize("seed", SEEDS[:4])
def test_requested_resources_identical(seed: int) -> None:
    """The resource names the pods request are the same compiled or not: maps shared by
    many pods (read once), maps alike but apart, an occupant's, pods of a subclass."""
    from kai.api.objects import PodObject
    from kai.snapshot.builder import requested_resources

    build = _fast.module("build")
    assert build is not None
    rng = random.Random(seed)
    names = ["cpu", "memory", "nvidia.com/gpu", "example.com/fpga", "hugepages-2Mi"]
    shared = [{n: 1.0 for n in rng.sample(names, rng.randint(0, 3))} for _ in range(3)]

    class SubPod(PodObject):
        __slots__ = ()

    pods = []
    for i in range(60):
        requests = rng.choice(shared) if rng.random() < 0.7 else dict(rng.choice(shared))
        cls = SubPod if i % 7 == 0 else PodObject
        pods.append(cls(name=f"p{i}", namespace="ns", requests=requests))
    occupants = [PodObject(name="o", namespace="ns", requests={"example.com/nic": 1.0})]
    for case in ((pods, occupants), (pods, []), ([], occupants), ([], [])):
        assert build.requested_resources(*case) == requested_resources(*case)
    assert "example.com/nic" in build.requested_resources(pods, occupants)


@needs_compiled
@pytest.mark.parametrize("seed", SEEDS[:4])
def test_placed_pods_charged_identically(seed: int) -> None:
    """The pods on nodes when a state is built are charged to their nodes' rows with
    the same bits compiled or not (requests shared by neighbours and not, rows
    repeating), and a pod on a row the table lacks is refused with nothing written."""
    from kai.snapshot.builder import _charge_placed

    rng = np.random.default_rng(seed)
    with _fast.pure_python():
        state = build_state(load_objects(random_cluster(seed, nodes=12, jobs=60).dicts()))
    nodes = state.nodes
    n, width = nodes.used.shape
    # Pods on whole devices, neither releasing nor pipelined: the ones charged in bulk.
    plain = [
        t
        for t in state.tasks
        if t.gpu_fraction == 0
        and t.gpu_memory_mib == 0
        and t.status not in (TaskStatus.RELEASING, TaskStatus.PIPELINED)
    ]
    placed = []
    shared = np.round(rng.random(width) * 100, 3)
    for i in range(300):
        task = plain[i % len(plain)]
        request = shared if rng.random() < 0.5 else np.round(rng.random(width) * 100, 3)
        placed.append(dataclasses.replace(task, node=int(rng.integers(n)), request=request))

    def charged() -> tuple[bytes, bytes, list[set[Any]], int]:
        nodes.used[:] = rng_start
        nodes.idle[:] = -rng_start
        nodes.tasks = [set() for _ in range(n)]
        version = nodes.version
        _charge_placed(nodes, placed)
        return nodes.used.tobytes(), nodes.idle.tobytes(), nodes.tasks, nodes.version - version

    rng_start = rng.random((n, width)) * 1e3
    compiled, reference = _both(charged)
    assert compiled[0] == reference[0] and compiled[1] == reference[1]
    assert [{id(t) for t in ts} for ts in compiled[2]] == [
        {id(t) for t in ts} for ts in reference[2]
    ]
    assert compiled[3] == reference[3] == len(placed)

    ledger = _fast.module("ledger")
    assert ledger is not None
    before = nodes.used.tobytes(), nodes.idle.tobytes()
    stray = dataclasses.replace(placed[0], node=n)
    with pytest.raises(IndexError):
        ledger.charge_placed(nodes.used, nodes.idle, nodes.tasks, [*placed, stray], ())
    assert (nodes.used.tobytes(), nodes.idle.tobytes()) == before
    # A releasing pod, or one on a shared GPU, is charged by add_task: nothing in bulk.
    not_idle = (TaskStatus.RELEASING, TaskStatus.PIPELINED)
    releasing = dataclasses.replace(placed[0], status=TaskStatus.RELEASING)
    fraction = dataclasses.replace(placed[0], gpu_fraction=0.5)
    for odd in (releasing, fraction):
        assert not ledger.charge_placed(
            nodes.used, nodes.idle, nodes.tasks, [*placed, odd], not_idle
        )
        assert (nodes.used.tobytes(), nodes.idle.tobytes()) == before


@needs_compiled
@pytest.mark.parametrize("seed", SEEDS)
def test_queue_sums_identical(seed: int) -> None:
    """Proportion's per-queue request, allocated and non-preemptible sums are the same
    bits compiled or not, over every pod status, shared GPUs on and off nodes,
    semi-preemptible cores, invalid jobs and jobs of unknown queues."""
    rng = random.Random(seed)
    ssn = Session(Snapshot.from_objects(_docs(seed)).state(), SchedulerConfig.default(), now=NOW)
    ssn.open(SchedulerConfig.default().build_plugins())
    proportion = next(p for p in ssn.plugins if isinstance(p, ProportionPlugin))
    statuses = list(TaskStatus)
    on_nodes = [i for i in range(len(ssn.nodes)) if ssn.nodes.gpu_memory_mib[i] > 0]
    for job in ssn.jobs.values():
        roll = rng.random()
        if roll < 0.15:
            job.preemptibility, job.min_member = SEMI_PREEMPTIBLE, rng.randint(0, 3)
        elif roll < 0.2:
            job.invalid_reason = "unschedulable"
        elif roll < 0.25:
            job.queue = rng.choice([None, "no-such-queue"])
        for task in job.tasks:
            task.status = rng.choice(statuses)
            kind = rng.random()
            if kind < 0.1:
                task.gpu_fraction = rng.choice((0.25, 0.5, 0.3))
                if kind < 0.03:  # both: the fraction is what it charges
                    task.gpu_memory_mib = 2000.0
            elif kind < 0.2 and on_nodes:
                task.gpu_memory_mib, task.node = 2000.0, rng.choice([-1, *on_nodes])
            else:  # a fresh request vector now and then: the compiled reading caches one
                task.request = task.request.copy() if kind < 0.3 else task.request

    def sums() -> list[bytes]:
        out = np.zeros((3, len(proportion.shares), len(model.QUEUE_RESOURCES)))
        proportion._accumulate(ssn, out[0], out[1], out[2])
        return [m.tobytes() for m in out]

    compiled, reference = _both(sums)
    assert compiled == reference
    assert any(np.frombuffer(compiled[1]))  # something was charged

    # Jobs and tasks of subclasses: read as attributes, not at the classes' offsets.
    _as_subclasses(ssn.jobs.values())
    assert sums() == reference


@needs_compiled
def test_queue_sums_of_a_tree_deeper_than_the_compiled_sums_take() -> None:
    """A queue tree deeper than the compiled sums take is summed by the reference."""
    from kai.bench_clusters import ClusterBuilder, JobSpec, NodeSpec, QueueSpec, TaskSpec

    ledger = _fast.module("ledger")
    assert ledger is not None
    depth = ledger.QUEUE_DEPTH_LIMIT + 6
    builder = ClusterBuilder("deep")
    builder.nodes.append(NodeSpec("node-0", gpus=8))
    builder.queues.extend(
        QueueSpec(f"q{i}", parent=f"q{i - 1}" if i else None, gpu_quota=8) for i in range(depth)
    )
    leaf = f"q{depth - 1}"
    builder.jobs.append(JobSpec("running", leaf, [TaskSpec(gpus=2, node="node-0")]))
    builder.jobs.append(JobSpec("waiting", leaf, [TaskSpec(gpus=4)]))
    snapshot = Snapshot.from_objects(builder.dicts())
    compiled, reference = _both(lambda: run_session(snapshot, now=NOW).to_json(explain=True))
    assert compiled == reference
    assert compiled["queues"]["q0"]["allocated"]["gpu"] == 6.0  # both pods, at the root


@needs_compiled
def test_row_arithmetic_refuses_what_numpy_would_not_write() -> None:
    ledger = _fast.module("ledger")
    assert ledger is not None
    rows = [np.zeros((2, 3)) for _ in range(3)]
    with pytest.raises(IndexError):
        ledger.charge_rows(*rows, 2, np.ones(3), 0, True)
    with pytest.raises(IndexError):
        ledger.charge_rows(*rows, 0, np.ones(4), 0, True)
    with pytest.raises(TypeError):
        ledger.charge_rows(*rows, 0, np.ones(3, dtype=np.float32), 0, True)
    with pytest.raises(IndexError):
        ledger.recharge_rows(*rows, -1, np.ones(3), 0, 1)
    with pytest.raises(TypeError):
        ledger.recharge_rows(
            rows[0], rows[1], np.zeros((2, 3), dtype=np.int64), 0, np.ones(3), 0, 1
        )
    read_only = np.zeros(3)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        ledger.add_vector(read_only, np.ones(3), True)
    with pytest.raises(ValueError):
        ledger.add_vector(np.zeros(3), np.ones(2), True)
    with pytest.raises(ValueError, match="read-only"):
        ledger.add_vector_to_each((np.zeros(3), read_only), np.ones(3), True)
    assert all(not m.any() for m in rows)  # nothing written by a refused call


def vars_of(columns: Any) -> list[np.ndarray]:
    """A victim leaf's step columns (_StepArrays), in a fixed order."""
    return [columns.simple, columns.node, columns.freed, columns.rows]


def _leaf_read_view(seed: int) -> list[Any]:
    """Every victim leaf of a mixed cluster read through a filter that refuses some jobs
    (in random chunks, after a queue read part of the leaf ahead): the steps, the filter's
    and the evictions' memos and the accepted positions, as values."""
    from kai import bench_clusters as gen
    from kai.actions.solvers.victims import VictimPool, _LeafSteps
    from kai.api.model import ACTIVE_ALLOCATED

    rng = random.Random(seed)
    builder = (
        gen.kai_reclaim_large_jobs(8 + seed)
        if seed % 2
        else gen.random_cluster(seed, nodes=10, jobs=60)
    )
    state = Snapshot(builder.objects()).state()
    config = SchedulerConfig.default()
    ssn = Session(state, config, now=NOW)
    ssn.open(config.build_plugins())
    pool = VictimPool.for_session(ssn)
    assert pool is not None
    refused = {job.uid for job in ssn.jobs.values() if rng.random() < 0.2}
    cands = pool.candidates(lambda job: job.uid not in refused)
    width = len(state.resources)

    def batch_view(batch: Any) -> Any:
        if batch is None:
            return None
        return (batch.job.uid, [t.uid for t in batch.tasks], sorted(batch.nodes), batch._uids)

    def prepared_view(prepared: Any) -> Any:
        if prepared is None:
            return None
        items = [(n, f, r.tolist()) for n, f, r in prepared.items]
        return (items, prepared.nodes, prepared.sums)

    out: list[Any] = []
    for name in cands.leaves:
        entries = pool.leaf(name)
        ahead = cands.accepted_in(entries)
        ahead.at_or_below(rng.randrange(-1, len(entries) + 1), cands.accepts)  # a queue read
        steps = _LeafSteps(entries, cands, width)
        while (got := steps.read(ssn, rng.randint(1, 9))) > 0:
            out.append(got)
            if rng.random() < 0.3:  # the columns as read so far, taken in part by part
                columns = steps.arrays()
                out.append([a[: columns.size].tolist() for a in vars_of(columns)])
        out.append(
            (
                name,
                steps.positions,
                steps.neg,
                steps._simple,
                {t.uid: i for t, i in steps.simple_at.items()},
                [
                    ([t.uid for t in tasks], more, batch_view(batch), prepared_view(prepared))
                    for tasks, more, batch, prepared in steps.gots
                ],
                [batch_view(b) for b in steps.batches],
                ahead.neg,
                ahead.low,
                [a[: steps.arrays().size].tolist() for a in vars_of(steps.arrays())],
            )
        )
    out.append(sorted((job.uid, ok) for job, ok in cands.memo.items()))
    out.append(sorted((job.uid, len(got[0]), got[1]) for job, got in cands.evictions.items()))
    assert any(t.status in ACTIVE_ALLOCATED for t in state.tasks)
    ssn.close()
    return out


@needs_compiled
@pytest.mark.parametrize("seed", range(8))
def test_leaf_read_identical(seed: int) -> None:
    """kai._fast.leaf reads a victim leaf as _LeafSteps.read does, step for step."""
    compiled, reference = _both(_leaf_read_view, seed)
    assert compiled == reference
    assert any(isinstance(item, tuple) and item[1] for item in compiled)  # steps were read


def _statement_view(seed: int, subclasses: bool) -> list[Any]:
    """A statement that pipelines some pending pods, then evicts random runs of pods
    (running ones and the ones it placed, some twice in a run) with
    ``evict_all`` and rolls back to random points: after each step, its operations
    and the session's pods, node rows and queue allocations, as values."""
    rng = random.Random(seed)
    state = Snapshot(random_cluster(seed, nodes=10, jobs=40).objects()).state()
    if subclasses:
        _as_subclasses(state.jobs.values())
    config = SchedulerConfig.default()
    ssn = Session(state, config, now=NOW)
    ssn.open(config.build_plugins())
    stmt = ssn.statement()
    proportion = next(p for p in ssn.plugins if isinstance(p, ProportionPlugin))

    def view() -> Any:
        ops = [
            (op.kind, op.task.uid, op.prev_status, op.prev_node, op.prev_group)
            + (op.prev_virtual, op.reason, op.undone, op.held)
            for op in stmt.ops
        ]
        standing = sorted(
            (t.uid, [stmt.ops.index(op) for op in held]) for t, held in stmt._standing.items()
        )
        pods = [(t.uid, t.status, t.node, t.gpu_group, t.virtually_evicted) for t in state.tasks]
        nodes = ssn.nodes
        rows = (nodes.idle.tobytes(), nodes.releasing.tobytes(), nodes.used.tobytes())
        queues = sorted(
            (name, s.allocated.tobytes(), s.allocated_non_preemptible.tobytes())
            for name, s in proportion.shares.items()
        )
        return ops, standing, pods, rows, queues, dict(ssn.queue_versions)

    out = [view()]
    pending = [t for t in state.tasks if t.status is TaskStatus.PENDING and not t.is_shared_gpu]
    placed = rng.sample(pending, min(4, len(pending)))
    for task in placed:
        stmt.pipeline(task, rng.randrange(len(ssn.nodes.names)))
    live = [t for t in state.tasks if t.node >= 0]
    for _ in range(6):
        run = [rng.choice(live) for _ in range(rng.randint(0, 40))]
        run += placed[: rng.randint(0, len(placed))]  # placed (or placed back) by the statement
        rng.shuffle(run)
        stmt.evict_all(run, f"evicted {len(run)}")
        out.append(view())
        stmt.rollback(rng.randint(0, len(stmt.ops)))
        out.append(view())
    stmt.discard()
    out.append(view())
    ssn.close()
    return out


@needs_compiled
@pytest.mark.parametrize("subclasses", [False, True])
@pytest.mark.parametrize("seed", SEEDS)
def test_statement_eviction_runs_identical(seed: int, subclasses: bool) -> None:
    """kai._fast.statement records and undoes a statement's plain evictions as
    Statement.evict_all and Statement.rollback do in Python, operation for operation."""
    compiled, reference = _both(_statement_view, seed, subclasses)
    assert compiled == reference
    assert compiled[0][2] == compiled[-1][2]  # the discard left every pod as it was
    assert any(len(step[0]) > 20 for step in compiled)  # long runs were evicted
    assert any(op[0] == "unplace" for step in compiled for op in step[0])  # and others


def _restatus_view(seed: int, subclasses: bool) -> list[Any]:
    """Random runs of a state's pods on nodes (each pod once a run) moved to random
    statuses by the node table's ``restatus_all``: after each run, the rows and the
    pods' statuses."""
    rng = random.Random(seed)
    state = Snapshot(random_cluster(seed, nodes=10, jobs=40).objects()).state()
    if subclasses:
        _as_subclasses(state.jobs.values())
    nodes = state.nodes
    live = [t for t in state.tasks if t.node >= 0]
    statuses = [TaskStatus.RUNNING, TaskStatus.RELEASING, TaskStatus.PIPELINED, TaskStatus.BINDING]
    out = []
    for _ in range(20):
        run = rng.sample(live, rng.randint(0, len(live)))
        nodes.restatus_all(run, [rng.choice(statuses) for _ in run])
        out.append((nodes.used.tobytes(), nodes.idle.tobytes(), nodes.releasing.tobytes()))
        out.append([(t.uid, t.status) for t in state.tasks])
    return out


@needs_compiled
@pytest.mark.parametrize("subclasses", [False, True])
@pytest.mark.parametrize("seed", SEEDS[:5])
def test_restatus_all_identical(seed: int, subclasses: bool) -> None:
    """kai._fast.ledger.restatus_all moves pods' requests between their nodes' rows and
    sets their statuses as kai.api.model.restatus_tasks does, bit for bit."""
    compiled, reference = _both(_restatus_view, seed, subclasses)
    assert compiled == reference
    assert len({rows for rows in compiled[::2]}) > 10  # the rows moved


@needs_compiled
@pytest.mark.parametrize("seed", SEEDS)
def test_queue_order_identical(seed: int) -> None:
    """Proportion's queue order gives the same answer compiled (the native core's rule,
    kai._fast.order) as the Python method, for every pair of queues, with and without
    jobs and victims: allocations over and under fair share and deserved quota, ties,
    unlimited and zero allocatable shares, priorities and signed zeros."""
    from kai._fast import order

    rng = random.Random(seed)
    ssn = Session(Snapshot.from_objects(_docs(seed)).state(), SchedulerConfig.default(), now=NOW)
    ssn.open(SchedulerConfig.default().build_plugins())
    proportion = next(p for p in ssn.plugins if isinstance(p, ProportionPlugin))
    shares = list(proportion.shares.values())
    queues = [ssn.queues[s.name] for s in shares]
    jobs = [None, *ssn.jobs.values()]
    victims = [j for j in ssn.jobs.values() if any(t.node >= 0 for t in j.tasks)]
    values = (0.0, -0.0, 1.0, 2.0, 4.0, 8.0, 1e-10, 3.5)
    answers: set[int] = set()
    for _ in range(30):
        # New values for every share, often the same as another's (ties).
        for share in shares:
            for vec in (share.allocated, share.fair_share):
                vec[...] = [rng.choice(values) * rng.choice((1, 1000)) for _ in range(3)]
            if rng.random() < 0.3:
                share.priority = rng.choice((0, 1, 2))
        for _ in range(40):
            left, right = rng.sample(queues, 2)
            left_job, right_job = rng.choice(jobs), rng.choice(jobs)
            lv = rng.sample(victims, min(len(victims), rng.randint(0, 3))) or None
            rv = rng.sample(victims, min(len(victims), rng.randint(0, 3))) or None
            args = (left, right, left_job, right_job, lv, rv)
            expected = proportion.queue_order(*args)
            assert order.queue_order(proportion, *args) == expected, args
            answers.add(expected)
    assert answers >= {-1, 1}  # both orders seen
