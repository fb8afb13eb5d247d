"""``kai simulate --output table``: what a person reads, on small clusters."""

from __future__ import annotations

import pytest

import kai
from kai.backends import available_backends
from kai.output import render_table
from tests._kai_cluster import J, T, build, queue, run
from tests.factory import NOW, node, pod
from tests.factory import queue as fqueue


def section(table: str, title: str) -> list[str]:
    """The lines of one section of the table, without its title."""
    lines = table.splitlines()
    start = lines.index(title) + 1
    end = next((i for i in range(start, len(lines)) if not lines[i]), len(lines))
    return lines[start:end]


def row(lines: list[str], first: str) -> list[str]:
    """The cells (split on runs of spaces) of the row whose first cell is ``first``."""
    for line in lines:
        cells = line.split()
        if cells and cells[0] == first:
            return cells
    raise AssertionError(f"no row {first!r} in {lines}")


# ------------------------------------------------------------------ queues
def test_queues_are_drawn_as_a_tree_with_gpu_cpu_and_memory_in_gib() -> None:
    snap = build(
        {"n0": 8},
        [queue("train", 4, parent="research"), queue("infer", 2, parent="research")],
        [J("a", "train", [T(), T()], cpu="2")],
        departments=[queue("research", -1, parent=None), queue("ops", -1, parent=None)],
    )
    lines = section(render_table(run(snap, ["allocate"])), "QUEUES")
    assert "GPU" in lines[0] and "CPU (cores)" in lines[0] and "MEMORY (GiB)" in lines[0]
    assert lines[1].split() == ["QUEUE"] + ["ALLOC", "FAIR", "REQ"] * 3
    names = [line.split("  ")[0].rstrip() for line in lines[2:]]
    # Parents before their children, each level by name.
    assert names == ["ops", "research", "├─ infer", "└─ train"]
    train = lines[2:][names.index("└─ train")].split()
    # 2 pods of 1 GPU, 2 cores and 1G (10^9 bytes) each.
    assert train[2:5] == ["2", "2", "2"]  # GPU alloc, fair, requested
    assert train[5] == "4" and train[7] == "4"  # cores allocated, requested
    assert train[8] == "1.86" and train[10] == "1.86"  # 2e9 bytes in GiB


# ------------------------------------------------------------------ GPU groups
def test_fractional_binds_show_their_gpu_group() -> None:
    snap = build({"n0": 1}, [queue("q", 1)], [J("half", "q", [T()], gpus=0.5)])
    result = run(snap, ["allocate"])
    (decision,) = result.decisions
    assert decision.gpu_groups  # the device the fraction shares
    table = render_table(result)
    decisions = section(table, "DECISIONS")
    assert "GPU GROUP" in decisions[0]
    assert decision.gpu_groups[0] in row(decisions, "allocate")
    assert decision.gpu_groups[0] in row(section(table, "PODS"), "ns/half-0")


def test_whole_gpu_decisions_have_no_gpu_group_column() -> None:
    snap = build({"n0": 1}, [queue("q", 1)], [J("whole", "q", [T()])])
    assert "GPU GROUP" not in render_table(run(snap, ["allocate"]))


# ------------------------------------------------------------------ elastic
def test_elastic_group_says_how_many_extra_pods_wait() -> None:
    snap = build(
        {"n0": 2},
        [queue("q", 2)],
        [J("el", "q", [T("Running", "n0"), T(), T(), T()], min_member=1)],
    )
    result = run(snap, ["allocate"])
    table = render_table(result, explain=True)
    note = "elastic: 2 of 3 extra pods wait for resources"
    groups = section(table, "POD GROUPS")
    assert row(groups, "ns/el")[2] == "yes" and note in " ".join(row(groups, "ns/el"))
    why = section(table, "WHY PENDING")
    assert why[0] == f"ns/el ({note}):"
    assert "pod ns/el-" in why[1]
    assert why[2] == "      1 node: insufficient nvidia.com/gpu (needs 1, at most 0 free)"


# ------------------------------------------------------------------ evictions
def test_preempted_group_says_it_was_evicted_not_that_it_has_no_pods() -> None:
    snap = build(
        {"n0": 1},
        [queue("q0", 1)],
        [J("low", "q0", [T("Running", "n0")], priority=40), J("high", "q0", [T()], priority=80)],
    )
    table = render_table(run(snap, ["preempt"]), explain=True)
    assert "no pods to schedule" not in table
    why = section(table, "WHY PENDING")
    assert why[why.index("ns/low:") + 1] == (
        "  - evicted by preempt for pod group ns/high: low-0 on n0"
    )
    reason = " ".join(row(section(table, "POD GROUPS"), "ns/low")[4:])
    assert reason == "evicted by preempt for pod group ns/high (1 pod)"
    assert row(section(table, "DECISIONS"), "preempt")[1] == "evict"


def test_a_victim_placed_again_in_the_same_session_reads_as_a_move() -> None:
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
    (evict,) = [d for d in result.decisions if d.type == "evict"]
    (placed,) = [d for d in result.decisions if d.pod == evict.pod and d.type != "evict"]
    table = render_table(result, explain=True)
    decisions = section(table, "DECISIONS")
    moves = [line for line in decisions if evict.pod in line]
    assert len(moves) == 1  # one row for the eviction and the placement
    cells = moves[0].split()
    assert cells[1] == "move" and cells[3:6] == [evict.node, "->", placed.node]
    assert not any(line.split()[1] == "evict" for line in decisions[1:])
    victim = evict.pod.rsplit("-", 1)[0]
    why = section(table, "WHY PENDING")
    name = evict.pod.split("/")[1]
    assert (
        f"  - moved by consolidation for pod group ns/big: {name} {evict.node} -> {placed.node}"
        in why[why.index(f"{victim}:") :]
    )


# ------------------------------------------------------------------ fit errors
def pending_why(objects: list[dict], backend: str | None = None) -> tuple[str, list[str]]:
    """(the JSON reason, the WHY PENDING lines) of the pod group ``default/p``."""
    result = kai.run_session(
        kai.Snapshot.from_objects(objects), actions=["allocate"], now=NOW, backend=backend
    )
    reason = result.pod_groups["default/p"].reason
    assert reason is not None
    return reason, section(render_table(result, explain=True), "WHY PENDING")


def gpu_cluster() -> list[dict]:
    taint = {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}
    return [
        node("n0", gpus=2),
        node("n1", gpus=1),
        node("tainted", gpus=8, taints=[taint]),
        fqueue("q"),
        pod("p", gpus=4, queue="q"),
    ]


@pytest.mark.parametrize("fast", ["1", "0"])
@pytest.mark.parametrize("backend", available_backends())
def test_fit_error_says_which_resource_the_nodes_lack(monkeypatch, backend, fast) -> None:
    monkeypatch.setenv("KAI_FAST_ALLOCATE", fast)  # the allocate kernel and the slow path
    reason, why = pending_why(gpu_cluster(), backend)
    # The JSON reason keeps its counts and adds the detail after them.
    assert reason.endswith(
        "0/3 nodes are available: 2 insufficient resources (nvidia.com/gpu on 2 nodes: "
        "needs 4, at most 2 free), 1 node(s) had untolerated taint(s)"
    )
    assert why[1].endswith("0/3 nodes are available:")
    assert why[2:4] == [
        "      2 nodes: insufficient nvidia.com/gpu (needs 4, at most 2 free)",
        "      1 node: had untolerated taint(s)",
    ]


def test_fit_error_counts_each_resource_and_shows_cores_and_memory_units() -> None:
    objects = [
        node("small", gpus=0, cpu="4", memory="16Gi"),
        node("wide", gpus=0, cpu="64", memory="8Gi"),
        node("big", gpus=0, cpu="64", memory="512Gi", pods=0),
        fqueue("q"),
        pod("p", cpu="8", memory="10Gi", queue="q"),
    ]
    _, why = pending_why(objects)
    assert why[2:] == [
        "      1 node: insufficient cpu (needs 8, at most 4 free)",
        "      1 node: insufficient memory (needs 10Gi, at most 8Gi free)",
        "      1 node: insufficient pods (needs 1, at most 0 free)",
    ]


def test_fit_error_of_a_gpu_fraction_counts_the_room_on_one_device() -> None:
    objects = [
        node("n0", gpus=1),
        fqueue("q"),
        pod("a", fraction=0.5, queue="q", node="n0", annotations={"runai-gpu-group": "g0"}),
        pod("p", fraction=0.75, queue="q"),
    ]
    reason, why = pending_why(objects)
    assert "1 insufficient resources (nvidia.com/gpu on 1 node: " in reason
    assert (
        why[2]
        == "      1 node: insufficient nvidia.com/gpu (needs 0.75 of a device, at most 0.5 free)"
    )


def test_pod_results_read_as_a_mapping() -> None:
    """A result's pods read like a dict of PodResult in key order, whichever way."""
    from kai.engine import PodResult, PodResults

    pods = PodResults(
        ["a/p0", "a/p1", "b/p0"], ["Running", "Pending", "Pipelined"], ["n1", None, "n2"]
    )
    assert len(pods) == 3 and list(pods) == ["a/p0", "a/p1", "b/p0"]
    assert pods["b/p0"] == PodResult("Pipelined", "n2")
    assert pods.get("a/p1") == PodResult("Pending", None)
    assert "a/p0" in pods and "a/p9" not in pods and 3 not in pods
    assert pods.get("a/p9") is None
    with pytest.raises(KeyError):
        pods["a/p9"]
    as_dict = {
        "a/p0": PodResult("Running", "n1"),
        "a/p1": PodResult("Pending", None),
        "b/p0": PodResult("Pipelined", "n2"),
    }
    assert pods == as_dict and dict(pods) == as_dict
    assert list(pods.items()) == list(as_dict.items())
    assert list(pods.values()) == list(as_dict.values())
    assert pods != {**as_dict, "a/p0": PodResult("Releasing", "n1")}
