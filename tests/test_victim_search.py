"""The victim search of preempt and reclaim on gangs that need victims on several nodes
(after KAI's action tests: the cluster, the action, the end status of every pod)."""

from __future__ import annotations

import pytest

from tests._kai_cluster import J, T, build, queue, run, statuses


def _gang_case(nodes: dict[str, float], victims: list[tuple[str, float]], size: int, gpus: float):
    """One queue: 1-pod low-priority victims (node, GPUs) and a pending gang ``g``."""
    jobs = [
        J(f"v{i:02d}", "q0", [T("Running", node)], gpus=g, priority=10)
        for i, (node, g) in enumerate(victims)
    ]
    jobs.append(J("g", "q0", [T() for _ in range(size)], gpus=gpus, priority=50))
    return build(nodes, [queue("q0", 0)], jobs)


def _outcome(result) -> tuple[list[str], list[str], dict[str, str | None]]:
    """(evicted victims, victims still running, gang pod -> node if pipelined)."""
    st = statuses(result)
    evicted = sorted(k for k, (s, _) in st.items() if k.startswith("v") and s == "Releasing")
    running = sorted(k for k, (s, _) in st.items() if k.startswith("v") and s == "Running")
    gang = {k: (n if s == "Pipelined" else None) for k, (s, n) in st.items() if k.startswith("g")}
    return evicted, running, gang


def test_gang_over_five_single_gpu_nodes() -> None:
    # Five 1-GPU nodes, each running one preemptible 1-GPU job; a 5-pod gang of higher
    # priority evicts all five and lands one pod per node.
    nodes = {f"n{i}": 1 for i in range(5)}
    snap = _gang_case(nodes, [(f"n{i}", 1) for i in range(5)], 5, 1)
    evicted, running, gang = _outcome(run(snap, ["preempt"]))
    assert len(evicted) == 5 and running == []
    assert sorted(n for n in gang.values() if n) == sorted(nodes)


def test_eleven_pod_gang_on_packed_four_gpu_nodes() -> None:
    # Eleven fully packed 4-GPU nodes (one 4-GPU victim each): the 11-pod gang of 4-GPU
    # pods evicts every victim.
    nodes = {f"n{i:02d}": 4 for i in range(11)}
    snap = _gang_case(nodes, [(n, 4) for n in nodes], 11, 4)
    evicted, running, gang = _outcome(run(snap, ["preempt"]))
    assert len(evicted) == 11
    assert sorted(n for n in gang.values() if n) == sorted(nodes)


def test_eleven_pod_gang_over_two_victims_per_node() -> None:
    # The same with two 2-GPU victims per node: 22 victims, each node holds one pod.
    nodes = {f"n{i:02d}": 4 for i in range(11)}
    snap = _gang_case(nodes, [(n, 2) for n in nodes for _ in range(2)], 11, 4)
    evicted, running, gang = _outcome(run(snap, ["preempt"]))
    assert len(evicted) == 22
    assert sorted(n for n in gang.values() if n) == sorted(nodes)


@pytest.mark.parametrize("size", [2, 3, 4, 5, 6, 7, 8])
def test_gang_of_any_size_on_two_gpu_nodes(size: int) -> None:
    # Four 2-GPU nodes, eight 1-GPU victims: a gang of ``size`` 1-GPU pods evicts
    # exactly ``size`` victims, and the rest keep running.
    nodes = {f"n{i}": 2 for i in range(4)}
    snap = _gang_case(nodes, [(f"n{i // 2}", 1) for i in range(8)], size, 1)
    evicted, running, gang = _outcome(run(snap, ["preempt"]))
    assert all(gang.values()), gang
    assert len(evicted) == size and len(running) == 8 - size


@pytest.mark.parametrize("size", [2, 3, 4, 5])
def test_gang_over_single_gpu_nodes_evicts_no_extra_victim(size: int) -> None:
    # Six 1-GPU nodes with one victim each: a gang of ``size`` evicts ``size`` victims.
    nodes = {f"n{i}": 1 for i in range(6)}
    snap = _gang_case(nodes, [(f"n{i}", 1) for i in range(6)], size, 1)
    evicted, running, gang = _outcome(run(snap, ["preempt"]))
    assert all(gang.values()), gang
    assert len(evicted) == size and len(running) == 6 - size


def test_reclaim_gang_across_nodes() -> None:
    # Reclaim: q1 (deserving 6 GPUs) takes back a 5-pod gang from q0's single-GPU jobs
    # spread over five 2-GPU nodes where each node keeps one q0 job idle-free.
    nodes = {f"n{i}": 2 for i in range(5)}
    jobs = [J(f"v{i:02d}", "q0", [T("Running", f"n{i // 2}")]) for i in range(10)]
    jobs.append(J("g", "q1", [T() for _ in range(5)]))
    snap = build(nodes, [queue("q0", 4), queue("q1", 6)], jobs)
    evicted, running, gang = _outcome(run(snap, ["reclaim"]))
    assert all(gang.values()), gang
    assert len(evicted) == 5 and len(running) == 5


def _shared_snapshot(rng):
    """2-5 nodes of 1-4 devices, each device idle, held by a 1-GPU job, or shared by
    1-3 fractional jobs (one gpu-group per device); a pending job of whole-GPU pods."""
    nodes = {f"n{i}": int(rng.choice([1, 2, 4])) for i in range(int(rng.integers(2, 6)))}
    jobs: list[J] = []
    groups: dict[str, str] = {}  # pod name -> gpu-group
    for node, count in nodes.items():
        for d in range(count):
            kind = int(rng.integers(0, 4))
            if kind == 1:
                jobs.append(J(f"w{len(jobs):02d}", "q0", [T("Running", node)], priority=10))
            elif kind >= 2:
                shares = [[0.5], [0.5, 0.5], [0.25, 0.5], [0.25, 0.25, 0.25]][int(rng.integers(4))]
                for share in shares:
                    name = f"s{len(jobs):02d}"
                    jobs.append(J(name, "q0", [T("Running", node)], gpus=share, priority=10))
                    groups[f"{name}-0"] = f"{node}-d{d}"
    size = int(rng.integers(1, 4))
    gpus = float(rng.choice([1, 2]))
    jobs.append(J("p", "q0", [T() for _ in range(size)], gpus=gpus, priority=50))
    return build(nodes, [queue("q0", 0)], jobs, devices=groups)


@pytest.mark.parametrize("seed", range(12))
def test_prechecks_never_reject_what_the_simulation_places(seed: int) -> None:
    """The placement pre-check and the accumulated filters, for random victim sets on
    clusters with shared devices, accept every scenario the exact simulation solves."""
    import numpy as np

    from kai.actions.solvers.batches import VictimBatch
    from kai.actions.solvers.job_solver import _PlacementBound, feasible_nodes
    from kai.actions.solvers.scenario import AccumulatedState, Scenario
    from kai.actions.solvers.simulate import simulate
    from kai.api.model import ACTIVE_ALLOCATED
    from kai.framework.session import tasks_to_allocate
    from tests.test_solver import _session

    rng = np.random.default_rng(seed)
    solved = shared = 0
    for _ in range(6):
        ssn = _session(_shared_snapshot(rng))
        running = [t for t in ssn.state.tasks if t.status in ACTIVE_ALLOCATED]
        job = ssn.jobs["ns/p"]
        tasks = tasks_to_allocate(ssn, job)
        for _ in range(15):
            size = int(rng.integers(1, len(running) + 1)) if running else 0
            picked = rng.choice(len(running), size=size, replace=False) if size else []
            victims = [running[i] for i in sorted(picked)]
            pending = tasks[: int(rng.integers(1, len(tasks) + 1))]
            within = feasible_nodes(ssn, pending)
            for t in victims:
                within[t.node] = True
            half = len(victims) // 2
            recorded = victims[:half]
            batches = [VictimBatch(t.job, [t], frozenset((t.node,))) for t in victims[half:]]
            scenario = Scenario(job, pending, recorded, batches)
            sim = simulate(ssn, scenario, within, lambda *_: True, "preempt")
            if not sim.solved:
                continue
            assert sim.statement is not None
            sim.statement.discard()
            solved += 1
            shared += any(t.is_shared_gpu for t in victims)
            miss = f"seed {seed}: victims {[t.name for t in victims]}"
            assert _PlacementBound(ssn, pending, within, recorded).may_fit(scenario), miss
            assert _PlacementBound(ssn, pending, within, victims).may_fit(
                Scenario(job, pending, victims)
            ), miss
            assert AccumulatedState(ssn, pending, victims).passes_filters(), miss
    assert solved and shared


def test_whole_gpu_gang_takes_devices_freed_from_fractional_tenants() -> None:
    # Two 1-GPU nodes, each device shared by two 0.5-GPU jobs: a 2-pod gang of whole-GPU
    # pods evicts all four tenants and lands one pod per node.
    nodes = {"n0": 1, "n1": 1}
    jobs = [J(f"s{i}", "q0", [T("Running", f"n{i // 2}")], gpus=0.5, priority=10) for i in range(4)]
    jobs.append(J("g", "q0", [T(), T()], priority=50))
    devices = {f"s{i}-0": f"n{i // 2}-d0" for i in range(4)}
    st = statuses(run(build(nodes, [queue("q0", 0)], jobs, devices=devices), ["preempt"]))
    assert {st[f"s{i}-0"][0] for i in range(4)} == {"Releasing"}
    assert sorted(st[f"g-{i}"] for i in range(2)) == [("Pipelined", "n0"), ("Pipelined", "n1")]


def test_probes_start_from_the_victims_the_last_success_used(monkeypatch) -> None:
    # Ten preemptible victims on four nodes; the 2-pod probe's simulation puts back a
    # victim the 1-pod probe evicted (v09) and evicts another (v08): every probe starts
    # from exactly the victims the last successful probe evicted or moved.  The 10-pod
    # gang then takes n0, n1 and n3; v06 (on n2, where no pod goes) keeps running.
    from kai.actions.solvers.job_solver import JobSolver

    probes: list[tuple[int, list[str], list[str] | None]] = []
    plain = JobSolver._probe

    def spy(self, job, pending, recorded, *args, **kw):
        got = plain(self, job, pending, recorded, *args, **kw)
        # Single-pod victims: each victim group is one task, so a probe records exactly
        # the victims it evicted or moved.
        sim = got.sim
        used = None
        if sim is not None:
            used = [t.job.name for t in [*(sim.preempted or []), *(sim.moved or [])]]
        probes.append((len(pending), sorted(t.job.name for t in recorded), used))
        return got

    monkeypatch.setattr(JobSolver, "_probe", spy)
    nodes = {"n0": 2, "n1": 4, "n2": 2, "n3": 4}
    layout = [("n0", 1, 10), ("n0", 1, 10), ("n1", 1, 10), ("n1", 1, 5), ("n1", 1, 20)]
    layout += [("n1", 1, 5), ("n2", 2, 20), ("n3", 1, 5), ("n3", 2, 5), ("n3", 1, 5)]
    jobs = [
        J(f"v{i:02d}", "q0", [T("Running", node)], gpus=g, priority=p)
        for i, (node, g, p) in enumerate(layout)
    ]
    jobs.append(J("g", "q0", [T() for _ in range(10)], priority=50))
    st = statuses(run(build(nodes, [queue("q0", 0)], jobs), ["preempt"]))
    last_used: list[str] = []
    for _, recorded, used in probes:
        assert recorded == sorted(last_used), probes
        if used is not None:
            last_used = used
    # some probe put back a victim it started from
    assert any(used is not None and not set(recorded) <= set(used) for _, recorded, used in probes)
    assert st["v06-0"] == ("Running", "n2")
    assert {st[f"v{i:02d}-0"][0] for i in range(10) if i != 6} == {"Releasing"}
    assert sorted(st[f"g-{i}"][1] for i in range(10)) == ["n0"] * 2 + ["n1"] * 4 + ["n3"] * 4
