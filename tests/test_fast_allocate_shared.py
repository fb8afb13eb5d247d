"""Fractional GPUs on the allocate fast path decide exactly as the slow path.

Randomized clusters (fixed seeds) with shared devices already in use (several tenants,
tenants being released, devices wholly released), whole-GPU pods running and being
released beside them, and pending pods asking for fractions of a device (alone, in
gangs, in elastic jobs, beside whole-GPU pods), under quotas and limits, with the GPU
order plugins (gpupack, gpuspread) and both placement strategies.  The whole session
result (decisions with their devices, pod states, reasons) of the fast path must equal
the slow path's (``KAI_FAST_ALLOCATE=0``), and the shared devices it leaves must be the
same, device by device.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

import kai
from kai.actions import fast_allocate, get_action, register_builtins
from kai.backends import available_backends, get_backend
from kai.config import SchedulerConfig
from kai.engine import parse_now
from kai.framework.session import Session
from tests._fast_path import record_fast_path, session_json
from tests.factory import NOW, node, pod, podgroup, queue

SHARED_BACKENDS = [
    b
    for b in ("native", "numba")
    if b in available_backends() and "shared-gpu" in get_backend(b).allocate_loop_features
]
SEEDS = range(60)
FRACTIONS = (0.1, 0.2, 0.25, 0.3, 0.5, 0.5, 0.7)


def _cluster(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    objs: list[dict[str, Any]] = []
    leaves = []
    for q in range(rng.randint(1, 3)):
        gpu = (rng.choice((-1, 2, 4, 8)), rng.choice((-1, -1, 6, 12)), 1)
        if gpu[1] != -1 and gpu[0] != -1 and gpu[1] < gpu[0]:
            gpu = (gpu[0], gpu[0], 1)
        objs.append(queue(f"q{q}", gpu=gpu, priority=rng.choice((None, 100))))
        leaves.append(f"q{q}")
    names = []
    for i in range(rng.randint(2, 10)):
        name = f"n{i:02d}"
        names.append(name)
        objs.append(node(name, gpus=rng.choice((0, 2, 4, 4, 8)), cpu="32", memory="128Gi"))
    gpu_nodes = [
        n
        for n, o in zip(names, objs[len(leaves) :])
        if "nvidia.com/gpu" in o["status"]["allocatable"]
    ]
    # devices shared by running pods
    for d in range(rng.randint(0, 6) if gpu_nodes else 0):
        where = rng.choice(gpu_nodes)
        group = f"{where}-dev{d}"
        for k in range(rng.randint(1, 3)):
            name = f"shared{d}-{k}"
            objs.append(podgroup(name, queue=rng.choice(leaves)))
            p = pod(
                name,
                group=name,
                queue=rng.choice(leaves),
                node=where,
                fraction=rng.choice((0.2, 0.25, 0.3, 0.5)),
                deleting=rng.random() < 0.3,
                labels={"runai-gpu-group": group},
            )
            objs.append(p)
    # whole-GPU pods running, some being released
    for k in range(rng.randint(0, 5) if gpu_nodes else 0):
        name = f"whole{k}"
        objs.append(podgroup(name, queue=rng.choice(leaves)))
        objs.append(
            pod(
                name,
                group=name,
                queue=rng.choice(leaves),
                node=rng.choice(gpu_nodes),
                gpus=1,
                deleting=rng.random() < 0.4,
            )
        )
    # pending jobs
    for j in range(rng.randint(5, 30)):
        size = rng.choice((1, 1, 1, 2, 3, 4))
        group = f"job{j}"
        q = rng.choice(leaves)
        objs.append(
            podgroup(
                group,
                queue=q,
                min_member=rng.choice((size, size, 1)),
                created=f"2026-11-22T{rng.randint(0, 11):02d}:00:00Z",
            )
        )
        whole = rng.random() < 0.2
        fraction = rng.choice(FRACTIONS)
        for t in range(size):
            if whole:
                objs.append(pod(f"{group}-{t}", group=group, queue=q, gpus=rng.choice((1, 2))))
            else:
                objs.append(pod(f"{group}-{t}", group=group, queue=q, fraction=fraction))
    plugins = [
        {"name": "predicates"},
        {"name": "proportion"},
        {"name": "priority"},
        {"name": "elastic"},
        {"name": "nodeavailability"},
        {"name": "gpusharingorder"},
        {"name": "resourcetype"},
        {"name": "taskorder"},
        {"name": "nodeplacement", "arguments": {"gpu": rng.choice(("binpack", "spread"))}},
    ]
    order = rng.choice(((), ("gpupack",), ("gpuspread",), ("gpupack", "gpuspread")))
    plugins.extend({"name": name} for name in order)
    objs.append(
        {
            "apiVersion": "kai.scheduler/v1",
            "kind": "SchedulerConfiguration",
            "tiers": [{"plugins": plugins}],
        }
    )
    return objs


def _devices_after_allocate(objs, backend, fast, monkeypatch) -> list:
    """Per node, after allocate: its shared devices in order (id, state, tenants), the
    room they leave, and its capacity."""
    monkeypatch.setenv(fast_allocate.ENV_VAR, "1" if fast else "0")
    snapshot = kai.Snapshot.from_objects(objs)
    config = SchedulerConfig.from_object(snapshot.config)
    ssn = Session(snapshot.state(), config, now=parse_now(NOW), backend=backend)
    ssn.open(config.build_plugins())
    register_builtins()
    ssn.current_action = "allocate"
    get_action("allocate")(ssn)
    nodes = ssn.nodes
    return [
        (
            [
                (gid, g.used, g.releasing, g.pipelined, g.from_releasing)
                + (sorted(t.uid for t in g.tasks),)
                for gid, g in groups.items()
            ],
            nodes.shared_free_idle[i],
            nodes.shared_free_any[i],
            nodes.idle[i].tolist(),
            nodes.releasing[i].tolist(),
            nodes.used[i].tolist(),
        )
        for i, groups in enumerate(nodes.gpu_groups)
    ]


@pytest.mark.skipif(not SHARED_BACKENDS, reason="no fused loop takes fractional GPUs")
@pytest.mark.parametrize("seed", SEEDS)
def test_shared_gpu_fast_path_matches_slow_path(seed: int, monkeypatch) -> None:
    objs = _cluster(seed)
    for actions in (["allocate"], None):
        slow = session_json(objs, actions, "python", False, monkeypatch)
        for backend in SHARED_BACKENDS:
            fast = session_json(objs, actions, backend, True, monkeypatch)
            assert fast == slow, f"seed {seed}, backend {backend}, actions {actions}"
    slow_devices = _devices_after_allocate(objs, "python", False, monkeypatch)
    for backend in SHARED_BACKENDS:
        fast_devices = _devices_after_allocate(objs, backend, True, monkeypatch)
        assert fast_devices == slow_devices, f"seed {seed}, backend {backend}: devices"


@pytest.mark.skipif(not SHARED_BACKENDS, reason="no fused loop takes fractional GPUs")
def test_shared_gpu_clusters_take_the_fast_path(monkeypatch) -> None:
    """The random clusters run on the fast path, share devices and pipeline onto them,
    and some fractional pods find no device."""
    taken = record_fast_path(monkeypatch)
    shared = pipelined = short = 0
    for seed in SEEDS:
        out = session_json(_cluster(seed), ["allocate"], SHARED_BACKENDS[0], True, monkeypatch)
        for d in out["decisions"]:
            shared += bool(d.get("gpuGroups"))
            pipelined += d["type"] == "pipeline" and bool(d.get("gpuGroups"))
        short += sum("of a device" in (g["reason"] or "") for g in out["podGroups"].values())
    assert sum(taken) >= 0.9 * len(SEEDS)
    assert shared > 100 and pipelined > 5 and short > 5


NO_PICKER = "native" not in available_backends() or get_backend("native").node_picker is None


def _check_picker(seed: int, monkeypatch) -> int:
    """Compare the picker with the session's filter and scorers on cluster ``seed``;
    the number of pods a node was found for."""
    from tests.test_fast_allocate import _cluster as plain_cluster

    rng = random.Random(seed)
    objs = _cluster(seed) if seed % 4 else plain_cluster(seed)[0]
    monkeypatch.setenv(fast_allocate.ENV_VAR, "1")
    snapshot = kai.Snapshot.from_objects(objs)
    config = SchedulerConfig.from_object(snapshot.config)
    ssn = Session(snapshot.state(), config, now=parse_now(NOW), backend="native")
    ssn.open(config.build_plugins())
    picker = fast_allocate.NodePicker.for_session(ssn)
    assert picker is not None
    n = len(ssn.nodes)
    stmt = ssn.statement()
    running = [t for t in ssn.state.tasks if t.node >= 0 and t.status.value == "Running"]
    found = 0
    for round_ in range(3):
        for task in [t for t in ssn.state.tasks if t.status.value == "Pending"]:
            if task.gpu_memory_mib > 0:
                continue
            within = None
            if round_ and rng.random() < 0.5:
                within = np.array([rng.random() < 0.5 for _ in range(n)])
            picked = picker.pick(task, task.job, within)
            assert picked is not None
            result = ssn.filter_nodes(task, task.job, within=within)
            if not result.mask.any():
                assert picked[0] == -1, task.key
                continue
            node = ssn.best_node(task, task.job, result.mask)
            assert picked == (node, bool(result.fits_idle[node])), task.key
            found += 1
        for victim in rng.sample(running, min(3, len(running))):  # evict some pods
            if victim.status.value == "Running":
                stmt.evict(victim, "test")
    return found


@pytest.mark.skipif(NO_PICKER, reason="no compiled node picker")
@pytest.mark.parametrize("seed", range(0, 60, 2))
def test_node_picker_chooses_as_the_general_path(seed: int, monkeypatch) -> None:
    """The compiled node picker gives the node (and whether it fits on idle capacity)
    the session's filter and scorers give, for every pending pod of a random cluster
    with shared devices, on all nodes and on random subsets, as pods are evicted."""
    _check_picker(seed, monkeypatch)


@pytest.mark.skipif(NO_PICKER, reason="no compiled node picker")
def test_node_picker_checks_find_nodes(monkeypatch) -> None:
    assert sum(_check_picker(seed, monkeypatch) for seed in range(0, 60, 2)) > 300


@pytest.mark.skipif(NO_PICKER, reason="no compiled node picker")
def test_node_picker_rejects_what_it_cannot_score() -> None:
    from kai import _native

    alloc = np.ones((3, 4))
    cap = np.ones(3)
    with pytest.raises(ValueError, match="load-aware"):
        _native.NodePicker(alloc, cap, np.array([6]), np.array([1.0]), 2, 0, True, True)
    picker = _native.NodePicker(alloc, cap, np.array([1]), np.array([1.0]), 2, 0, True, True)
    with pytest.raises(ValueError, match="idle"):
        picker.pick(np.ones((2, 4)), alloc, np.zeros(4), np.ones((0, 3)), -1, 0.0, cap, cap, None)
    node, on_idle = picker.pick(
        alloc, alloc * 0, np.zeros(4), np.ones((1, 3)), -1, 0.0, cap, cap, None
    )
    assert (node, on_idle) == (0, True)  # every node alike: the first
