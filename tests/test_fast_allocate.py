"""The allocate fast path (one kernel call for the whole loop) decides exactly as the
Python slow path.

Randomized clusters (fixed seeds) mix what allocate has to get right: a 2-3 level
queue tree with quotas, limits, over-quota weights and priorities; gangs, elastic jobs,
semi-preemptible and non-preemptible jobs of several priorities; running and releasing
pods (pipelining); node selectors, taints and tolerations, unschedulable nodes;
CPU-only tasks and nodes; task-order labels; nominated nodes; binpack and spread; a
queue depth limit.  The whole session result (decisions, pod states, pod-group
reasons, queue shares) of the fast path must equal the slow path's
(``KAI_FAST_ALLOCATE=0``), for each kernel backend that has a fast path.
"""

from __future__ import annotations

import itertools
import random
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

import kai
from kai import _fast
from kai.actions import fast_allocate
from kai.api.model import Job, Task, TaskStatus
from kai.backends import available_backends, get_backend
from kai.config import SchedulerConfig
from kai.framework.session import Session, default_order_key
from tests._fast_path import record_fast_path, session_json
from tests.factory import NOW, node, pod, podgroup, priority_class, queue


def _has_kernel(backend: str) -> bool:
    return backend in available_backends() and get_backend(backend).allocate_loop is not None


FAST_BACKENDS = [b for b in ("native", "numba") if _has_kernel(b)]
SEEDS = range(40)


def _cluster(seed: int) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    rng = random.Random(seed)
    objs: list[dict[str, Any]] = [
        priority_class("low", 50),
        priority_class("mid", 75),
        priority_class("high", 125),
    ]
    n_nodes = rng.randint(4, 14)
    node_names = []
    for i in range(n_nodes):
        gpus = rng.choice((0, 2, 4, 8, 8))
        labels = {"pool": rng.choice(("a", "b", "c"))}
        if gpus and rng.random() < 0.3:
            labels["nvidia.com/gpu.count"] = str(rng.choice((gpus, max(gpus // 2, 1))))
        taints = None
        if rng.random() < 0.15:
            taints = [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]
        name = f"n{i:02d}"
        node_names.append(name)
        objs.append(
            node(
                name,
                gpus=gpus,
                cpu=str(rng.choice((8, 16, 32))),
                memory=f"{rng.choice((32, 64, 128))}Gi",
                pods=rng.choice((110, 110, 6)),
                labels=labels,
                taints=taints,
                unschedulable=rng.random() < 0.07,
            )
        )
    # queue tree: 1-2 roots, departments, leaves
    leaves = []
    levels = rng.choice((2, 3))
    roots = [f"r{k}" for k in range(rng.choice((1, 2)))]

    def quota() -> tuple:
        q = rng.choice((-1, 0, 2, 4, 8, 16))
        lim = rng.choice((-1, -1, -1, 8, 12, 24))
        if lim != -1 and q != -1 and lim < q:
            lim = q
        return (q, lim, rng.choice((0, 1, 1, 2, 3)))

    created = ["2026-11-20T00:00:00Z", "2026-11-21T00:00:00Z", "2026-11-22T00:00:00Z"]
    for r in roots:
        objs.append(queue(r, gpu=quota(), priority=rng.choice((None, 100, 200))))
        parents = [r]
        if levels == 3:
            parents = []
            for d in range(rng.randint(1, 2)):
                dep = f"{r}-d{d}"
                objs.append(queue(dep, parent=r, gpu=quota(), created=rng.choice(created)))
                parents.append(dep)
        for p in parents:
            for k in range(rng.randint(1, 3)):
                leaf = f"{p}-l{k}"
                cpu = (-1, -1, 1) if rng.random() < 0.7 else (rng.choice((4, 16)), -1, 1)
                objs.append(
                    queue(
                        leaf,
                        parent=p,
                        gpu=quota(),
                        cpu=cpu,
                        priority=rng.choice((None, None, 50, 150)),
                        created=rng.choice(created),
                    )
                )
                leaves.append(leaf)
    # jobs
    for j in range(rng.randint(8, 30)):
        size = rng.choice((1, 1, 1, 2, 3, 4))
        gpus = rng.choice((0, 1, 1, 1, 2, 4))
        min_member = rng.choice((size, size, 1, max(size - 1, 1)))
        q = rng.choice(leaves)
        created_at = f"2026-11-22T{rng.randint(0, 11):02d}:{rng.randint(0, 59):02d}:00Z"
        objs.append(
            podgroup(
                f"job{j}",
                queue=q,
                min_member=min_member,
                priority_class=rng.choice((None, "low", "mid", "high")),
                preemptibility=rng.choice((None, None, "semi-preemptible", "non-preemptible")),
                created=created_at,
            )
        )
        running = rng.random() < 0.35
        releasing = running and rng.random() < 0.4
        alike = rng.random() < 0.5  # a workload of identical pods
        cpu, memory = rng.choice((1, 2, 4)), rng.choice((1, 2, 8))
        for t in range(size):
            if not alike:
                cpu, memory = rng.choice((1, 2, 4)), rng.choice((1, 2, 8))
            kw: dict[str, Any] = {}
            if rng.random() < 0.2:
                kw["node_selector"] = {"pool": rng.choice(("a", "b"))}
            if rng.random() < 0.2:
                kw["tolerations"] = [
                    {"key": "dedicated", "operator": "Equal", "value": "x", "effect": "NoSchedule"}
                ]
            labels = {}
            if rng.random() < 0.2:
                labels["kai.scheduler/task-priority"] = str(rng.randint(0, 3))
            if rng.random() < 0.1:
                labels["training.kubeflow.org/job-role"] = "master"
            p = pod(
                f"job{j}-{t}",
                gpus=gpus,
                cpu=str(cpu),
                memory=f"{memory}Gi",
                group=f"job{j}",
                queue=q,
                node=rng.choice(node_names) if running else None,
                deleting=releasing,
                labels=labels,
                created=f"2026-11-22T10:{rng.randint(0, 59):02d}:00Z",
                **kw,
            )
            if not running and rng.random() < 0.1:
                p["status"]["nominatedNodeName"] = rng.choice(node_names)
            objs.append(p)
    config = None
    if rng.random() < 0.5:
        plugins = [
            {"name": "predicates"},
            {"name": "proportion"},
            {"name": "priority"},
            {"name": "elastic"},
            {"name": "kubeflow"},
            {"name": "ray"},
            {"name": "nodeavailability"},
            {"name": "gpusharingorder"},
            {"name": "resourcetype"},
            {"name": "taskorder"},
            {"name": "nominatednode"},
            {
                "name": "nodeplacement",
                "arguments": {
                    "gpu": rng.choice(("binpack", "spread")),
                    "cpu": rng.choice(("binpack", "spread")),
                },
            },
        ]
        if rng.random() < 0.25:  # no placement score: every node scores alike
            plugins = [p for p in plugins if p["name"] != "nodeplacement"]
        if rng.random() < 0.3:
            rng.shuffle(plugins)
        config = {"tiers": [{"plugins": plugins}]}
        if rng.random() < 0.3:
            config["queueDepthPerAction"] = {"allocate": rng.choice((1, 2, 5))}
    return objs, config


def _run(objs, config, actions, backend, fast, monkeypatch) -> dict[str, Any]:
    monkeypatch.setenv(fast_allocate.ENV_VAR, "1" if fast else "0")
    docs = list(objs)
    if config is not None:
        docs.append({"apiVersion": "kai.scheduler/v1", "kind": "SchedulerConfiguration", **config})
    snapshot = kai.Snapshot.from_objects(docs)
    result = kai.run_session(snapshot, actions=actions, now=NOW, backend=backend)
    return result.to_json(explain=True)


@pytest.mark.skipif(not FAST_BACKENDS, reason="no backend with an allocate kernel")
@pytest.mark.parametrize("seed", SEEDS)
def test_fast_path_matches_slow_path(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    objs, config = _cluster(seed)
    used = record_fast_path(monkeypatch)
    for actions in (["allocate"], None):
        slow = _run(objs, config, actions, "python", False, monkeypatch)
        for backend in FAST_BACKENDS:
            used.clear()
            fast = _run(objs, config, actions, backend, True, monkeypatch)
            assert used and all(used), f"seed {seed}: the fast path was not taken"
            assert fast == slow, f"seed {seed}, backend {backend}, actions {actions}"


@pytest.mark.parametrize("backend", ["python", *FAST_BACKENDS])
def test_without_a_placement_plugin_nodes_tie_in_name_order(backend, monkeypatch) -> None:
    """No nodeplacement plugin: every node scores the same, and the first by name is
    taken, not the fullest (binpack is a placement strategy, not the default)."""
    objs = [
        queue("q"),
        node("n1", gpus=8),
        node("n2", gpus=2),
        podgroup("g", queue="q", min_member=2),
        pod("g-0", gpus=1, group="g", queue="q"),
        pod("g-1", gpus=1, group="g", queue="q"),
    ]
    config = {"tiers": [{"plugins": [{"name": "predicates"}, {"name": "proportion"}]}]}
    out = _run(objs, config, ["allocate"], backend, True, monkeypatch)
    assert {k: p["node"] for k, p in out["pods"].items()} == {
        "default/g-0": "n1",
        "default/g-1": "n1",
    }


def test_fast_path_is_nontrivial(monkeypatch: pytest.MonkeyPatch) -> None:
    """The random clusters exercise placements, gang failures and pipelining."""
    kinds = set()
    reasons = set()
    for seed in SEEDS:
        objs, config = _cluster(seed)
        out = _run(objs, config, ["allocate"], "python", False, monkeypatch)
        kinds.update(d["type"] for d in out["decisions"])
        for g in out["podGroups"].values():
            if g["reason"]:
                reasons.add(g["reason"].split(" ")[0])
    assert {"bind", "pipeline"} <= kinds
    assert "Resources" in reasons


def test_switch_forces_the_slow_path(monkeypatch: pytest.MonkeyPatch) -> None:
    objs, config = _cluster(0)
    monkeypatch.setenv(fast_allocate.ENV_VAR, "0")
    assert not fast_allocate.enabled()
    monkeypatch.setenv(fast_allocate.ENV_VAR, "1")
    assert fast_allocate.enabled()


def test_user_plugin_takes_the_slow_path(monkeypatch: pytest.MonkeyPatch) -> None:
    from kai.config import SchedulerConfig
    from kai.framework.session import Session

    objs, _ = _cluster(1)
    snapshot = kai.Snapshot.from_objects(objs)
    config = SchedulerConfig.default()
    ssn = Session(snapshot.state(), config, now=kai.engine.parse_now(NOW), backend="python")
    ssn.open(config.build_plugins())
    ssn.add_node_order_fn(lambda task, info: 0.0)
    reason = fast_allocate._prepare(ssn, list(ssn.jobs.values()))
    assert reason == "plugin (unnamed) registers a node_order function"


def test_the_general_path_says_why_once(monkeypatch, caplog) -> None:
    """A plugin without a kernel form sends allocate down the general path, and the
    debug log says which plugin, once however many sessions run."""
    import kai.plugins.examples  # noqa: F401  (registers the example plugins)

    objs, _ = _cluster(2)
    plugins = ["predicates", "proportion", "nodeplacement", "spot-instance-manager"]
    config = {
        "apiVersion": "kai.scheduler/v1",
        "kind": "SchedulerConfiguration",
        "tiers": [{"plugins": [{"name": name} for name in plugins]}],
    }
    monkeypatch.setattr(fast_allocate, "_said", set())
    caplog.set_level("DEBUG", logger="kai.actions.fast_allocate")
    for _ in range(3):
        snapshot = kai.Snapshot.from_objects([*objs, config])
        kai.run_session(snapshot, actions=["allocate"], now=NOW)
    said = [r.getMessage() for r in caplog.records if r.name == "kai.actions.fast_allocate"]
    assert said == [
        "allocate takes the general path: plugin spot-instance-manager declares no kernel form"
    ]


def test_each_backend_says_whether_it_has_the_fused_loop() -> None:
    # The allocate action asks the backend, not its name, for the fused loop.
    assert get_backend("python").allocate_loop is None
    for name in FAST_BACKENDS:
        assert callable(get_backend(name).allocate_loop)


def _jobs_to_rank(
    rng: random.Random, n: int, times: list[Any], uids: list[str], *, distinct: bool
) -> list[Job]:
    """``n`` jobs of random creation times and uids (each uid made distinct by a suffix
    with ``distinct``)."""
    return [
        Job(
            rng.choice(uids) + (f"/{i}" if distinct else ""),
            f"job-{i}",
            "default",
            "q",
            0,
            1,
            True,
            "preemptible",
            rng.choice(times),
        )
        for i in range(n)
    ]


@pytest.mark.skipif(_fast.module("loop") is None, reason="kai._fast.loop is not built")
@pytest.mark.parametrize("seed", range(6))
def test_default_order_ranks_match_the_reference(seed: int) -> None:
    """The compiled loop ranks jobs in the default order (oldest first, none last, then
    by uid) as the reference's sort does: UTC times sorted as microseconds (a radix
    sort) and uids as UTF-8 bytes where it can, the tuples otherwise (other zones,
    naive times, a uid with a lone surrogate); equal keys keep their order."""
    rng = random.Random(seed)
    utc = [
        datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc),
        datetime(1970, 1, 1, tzinfo=timezone.utc),
        datetime(2000, 2, 29, 12, 0, 0, 1, tzinfo=timezone.utc),
        datetime(2026, 1, 1, 3, 41, tzinfo=timezone.utc),
        datetime(2026, 1, 1, 3, 41, 0, 1, tzinfo=timezone.utc),
        datetime(1, 1, 1, tzinfo=timezone.utc),
        datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc),
        None,
    ]
    uids = ["a", "b", "ab", "é", "z", "ä", "\u4e2d", "job-10", "job-9", ""]
    loop = _fast.module("loop")
    cases = [(utc, uids)]
    cases.append((utc + [datetime(2026, 1, 1, 5, 41, tzinfo=timezone(timedelta(hours=2)))], uids))
    cases.append(([datetime(2026, 1, d) for d in range(1, 4)] + [None], uids))
    cases.append((utc, [*uids, "\udc80"]))
    # times apart in every byte of their microseconds, and a few alike
    base = datetime(2026, 1, 1, tzinfo=timezone.utc)
    spread = [base + timedelta(microseconds=rng.randrange(-(10**13), 10**13)) for _ in range(300)]
    cases.append((spread + spread[:20] + [None], [f"job-{i}" for i in range(40)]))
    ties = 0
    for times, names in cases:
        for n, distinct in itertools.product((0, 1, 2, 7, 60, 3000), (True, False)):
            jobs = _jobs_to_rank(rng, n, times, names, distinct=distinct)
            reference = fast_allocate.job_columns(jobs, {"q": 0}, [], frozenset(), True)
            compiled = loop.job_columns(jobs, {"q": 0}, [], frozenset(), True)
            assert reference is not None and compiled is not None
            keys = {default_order_key(job) for job in jobs}
            if len(keys) < n:  # two jobs the default order cannot tell apart: no ranks
                assert reference[-1] is None and compiled[-1] is None
                ties += 1
                continue
            assert compiled[-1] is not None and reference[-1] is not None
            assert list(compiled[-1]) == list(reference[-1])
            assert sorted(reference[-1]) == list(range(n))
    assert ties  # some cases have jobs of equal keys


@pytest.mark.skipif(not FAST_BACKENDS, reason="no backend with an allocate kernel")
@pytest.mark.skipif(_fast.module("loop") is None, reason="kai._fast.loop is not built")
@pytest.mark.parametrize("seed", range(0, 40, 3))
def test_compiled_columns_match_the_reference(seed: int) -> None:
    """kai._fast.loop reads jobs and tasks into the loop's columns, and writes the
    placements back, exactly as fast_allocate's Python functions do."""
    objs, config = _cluster(seed)
    snapshot = kai.Snapshot.from_objects(objs)
    ssn = Session(snapshot.state(), SchedulerConfig.default(), now=kai.engine.parse_now(NOW))
    ssn.open(SchedulerConfig.default().build_plugins())
    jobs = list(ssn.jobs.values())
    qidx = {name: i for i, name in enumerate(ssn.queues)}
    task_order = fast_allocate._task_key_fns(ssn)
    assert task_order is not None
    task_keys, key_labels = task_order
    loop = _fast.module("loop")
    reference = fast_allocate.job_columns(jobs, qidx, task_keys, key_labels, True)
    compiled = loop.job_columns(jobs, qidx, task_keys, key_labels, True)
    assert reference is not None and compiled is not None
    # Integer columns come as array('q') from the compiled module: the same values.
    assert [list(column) for column in compiled] == [list(column) for column in reference]
    tasks = reference[0]
    index = ssn.nodes.index
    ref_sources, *ref_rest = fast_allocate.task_columns(tasks, index)
    sources, *rest = loop.task_columns(tasks, index)
    assert [list(column) for column in rest] == [list(column) for column in ref_rest]
    assert [id(v) for v in sources] == [id(v) for v in ref_sources]

    # Jobs and tasks of subclasses are read as attributes, not at the classes' offsets.
    class SubJob(Job):
        __slots__ = ()

    class SubTask(Task):
        __slots__ = ()

    classes = [(job, job.__class__, [(t, t.__class__) for t in job.tasks]) for job in jobs]
    for job in jobs:
        job.__class__ = SubJob
        for t in job.tasks:
            t.__class__ = SubTask
    read = loop.job_columns(jobs, qidx, task_keys, key_labels, True)
    assert read is not None
    assert [list(column) for column in read] == [list(column) for column in reference]
    assert [list(column) for column in loop.task_columns(tasks, index)[1:]] == [
        list(column) for column in ref_rest
    ]
    for job, job_class, task_classes in classes:
        job.__class__ = job_class
        for t, task_class in task_classes:
            t.__class__ = task_class
    # placements: every other task on some node, alternately pipelined
    n_nodes = len(ssn.nodes)
    pl_task = list(range(0, len(tasks), 2))
    pl_node = [i % n_nodes for i in pl_task]
    pl_pipe = [i % 4 == 0 for i in pl_task]
    states = []
    # The compiled placements of tasks written at their offsets, then as attributes.
    placings = (fast_allocate.place_decisions, loop.place_decisions, loop.place_decisions)
    for round_, place in enumerate(placings):
        for t in tasks:
            t.node, t.status = -1, TaskStatus.PENDING
            if round_ == 2:
                t.__class__ = SubTask
        node_tasks: list[set] = [set() for _ in range(n_nodes)]
        decisions: list = []
        devices = [f"gpu-{i}" if i % 3 == 0 else None for i in pl_task]
        names = ssn.nodes.names
        place(tasks, pl_task, pl_node, pl_pipe, devices, names, node_tasks, decisions, "allocate")
        states.append(([(t.node, t.status) for t in tasks], node_tasks, decisions))
    assert states[0] == states[1] == states[2]


@pytest.mark.skipif(_fast.module("loop") is None, reason="kai._fast.loop is not built")
@pytest.mark.parametrize("seed", range(0, 40, 5))
def test_compiled_fit_messages_match_the_reference(seed: int) -> None:
    """kai._fast.loop records the failed attempts' messages (gang and single-pod ones,
    capacity refusals, one explanation per key) exactly as fast_allocate's reference
    does, for jobs and tasks read at their offsets and as attributes."""
    objs, _ = _cluster(seed)
    state = kai.Snapshot.from_objects(objs).state()
    jobs = list(state.jobs.values())
    tasks = [t for job in jobs for t in job.tasks]
    rng = random.Random(seed)
    n = 300
    capacity = [rng.random() < 0.2 for _ in range(n)]
    att_job = [rng.randrange(len(jobs)) for _ in range(n)]
    placed = [rng.randint(0, 3) for _ in range(n)]
    chunks = [rng.choice((1, 1, 2, 4)) for _ in range(n)]
    info = [rng.randrange(len(tasks)) for _ in range(n)]
    active = [rng.randint(0, 2) for _ in range(n)]
    keys = [b"" if refused else bytes([rng.randrange(4)]) for refused in capacity]

    def run(record_fit_messages) -> tuple[list, list]:
        asked: list[int] = []
        recorded: list[tuple[str, str]] = []

        def problem_of(row: int) -> str:
            asked.append(row)
            return f"problem {keys[row].hex()} first seen at {row}"

        record_fit_messages(
            jobs, tasks, capacity, att_job, placed, chunks, info, active, keys,
            problem_of, lambda row: f"over capacity at {row}",
            lambda job, message: recorded.append((job.key, message)),
        )  # fmt: skip
        return asked, recorded

    reference = run(fast_allocate.record_fit_messages)
    assert len(reference[1]) == n and len(reference[0]) <= 4
    assert any("gang scheduling" in m for _, m in reference[1])
    assert any("Resources were not found for pod" in m for _, m in reference[1])
    loop = _fast.module("loop")
    assert run(loop.record_fit_messages) == reference

    class SubJob(Job):
        __slots__ = ()

    class SubTask(Task):
        __slots__ = ()

    for job in jobs:
        job.__class__ = SubJob
        for t in job.tasks:
            t.__class__ = SubTask
    assert run(loop.record_fit_messages) == reference


@pytest.mark.skipif(not FAST_BACKENDS, reason="no backend with an allocate kernel")
def test_jobs_sharing_a_uid_take_the_general_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """PodGroups of one name in two namespaces are two jobs of one uid: the loop, whose
    order needs a unique last key, leaves them to the general path, which decides."""
    objs: list[dict] = [node("n1", gpus=1), queue("q", gpu=(1, 1, 1))]
    for namespace in ("team-b", "team-a"):
        objs.append(podgroup("train", namespace=namespace))
        objs.append(pod("train-0", namespace=namespace, gpus=1, group="train", queue="q"))
    used = record_fast_path(monkeypatch)
    slow = session_json(objs, ["allocate"], "python", False, monkeypatch)
    for backend in FAST_BACKENDS:
        used.clear()
        fast = session_json(objs, ["allocate"], backend, True, monkeypatch)
        assert used == [False]
        assert fast == slow
    bound = [d for d in slow["decisions"] if d["type"] == "bind"]
    assert len(bound) == 1
