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
