"""consolidation: defragment by moving preemptible pods (after KAI's tests)."""

from __future__ import annotations

from tests._kai_cluster import J, T, build, decisions, queue, run, statuses


def test_moves_one_gpu_pod_to_free_a_whole_node() -> None:
    snap = build(
        {"n0": 8, "n1": 8},
        [queue("q0", 16)],
        [
            J("a", "q0", [T("Running", "n0")]),
            J("b", "q0", [T("Running", "n1")]),
            J("big", "q0", [T()], gpus=8),
        ],
    )
    result = run(snap, ["consolidation"])
    st = statuses(result)
    assert st["big-0"][0] == "Pipelined"
    big_node = st["big-0"][1]
    moved = [p for p in ("a-0", "b-0") if st[p][0] == "Pipelined"]
    assert len(moved) == 1 and st[moved[0]][1] != big_node
    kinds = decisions(result)
    assert ("evict", moved[0], big_node) in kinds
    assert sum(1 for k in kinds if k[0] == "evict") == 1


def test_never_evicts_a_pod_it_cannot_place_again() -> None:
    snap = build(
        {"n0": 8, "n1": 8, "n2": 2},
        [queue("q0", 18)],
        [
            J("a", "q0", [T("Running", "n0")], gpus=5),
            J("b", "q0", [T("Running", "n1")], gpus=5),
            J("big", "q0", [T()], gpus=8),
        ],
    )
    result = run(snap, ["consolidation"])
    assert decisions(result) == []


def test_non_preemptible_pods_are_not_moved() -> None:
    snap = build(
        {"n0": 8, "n1": 8},
        [queue("q0", 16)],
        [
            J("a", "q0", [T("Running", "n0")], priority=125),
            J("b", "q0", [T("Running", "n1")], priority=125),
            J("big", "q0", [T()], gpus=8),
        ],
    )
    assert decisions(run(snap, ["consolidation"])) == []


def test_non_preemptible_pending_job_is_not_consolidated_for() -> None:
    snap = build(
        {"n0": 8, "n1": 8},
        [queue("q0", 16)],
        [
            J("a", "q0", [T("Running", "n0")]),
            J("b", "q0", [T("Running", "n1")]),
            J("big", "q0", [T()], gpus=8, priority=125),
        ],
    )
    assert decisions(run(snap, ["consolidation"])) == []


def test_not_enough_gpus_in_cluster_skips() -> None:
    snap = build(
        {"n0": 4, "n1": 4},
        [queue("q0", 8)],
        [J("a", "q0", [T("Running", "n0")]), J("big", "q0", [T()], gpus=8)],
    )
    assert decisions(run(snap, ["consolidation"])) == []
    assert statuses(run(snap, ["consolidation"]))["a-0"] == ("Running", "n0")
