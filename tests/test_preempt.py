"""preempt: priority preemption inside one queue (after KAI's preempt tests)."""

from __future__ import annotations

from tests._kai_cluster import J, T, build, decisions, queue, run, statuses


def test_higher_priority_preempts_lower_in_same_queue() -> None:
    snap = build(
        {"n0": 1},
        [queue("q0", 1)],
        [J("low", "q0", [T("Running", "n0")], priority=40), J("high", "q0", [T()], priority=80)],
    )
    result = run(snap, ["preempt"])
    assert decisions(result) == [("evict", "low-0", "n0"), ("pipeline", "high-0", "n0")]
    assert {d.action for d in result.decisions} == {"preempt"}
    st = statuses(result)
    assert st["low-0"] == ("Releasing", "n0") and st["high-0"] == ("Pipelined", "n0")


def test_no_preempt_of_non_preemptible() -> None:
    snap = build(
        {"n0": 1},
        [queue("q0", 1)],
        [
            J("build", "q0", [T("Running", "n0")], priority=100),
            J("high", "q0", [T()], priority=150),
        ],
    )
    assert decisions(run(snap, ["preempt"])) == []


def test_equal_priority_does_not_preempt() -> None:
    snap = build(
        {"n0": 1},
        [queue("q0", 1)],
        [J("a", "q0", [T("Running", "n0")], priority=50), J("b", "q0", [T()], priority=50)],
    )
    assert decisions(run(snap, ["preempt"])) == []


def test_other_queues_are_not_preempted() -> None:
    snap = build(
        {"n0": 1},
        [queue("q0", 1), queue("q1", 0)],
        [J("low", "q1", [T("Running", "n0")], priority=10), J("high", "q0", [T()], priority=80)],
    )
    assert decisions(run(snap, ["preempt"])) == []


def test_non_preemptible_preemptor_must_fit_quota() -> None:
    snap = build(
        {"n0": 2},
        [queue("q0", 1)],
        [
            J("low", "q0", [T("Running", "n0"), T("Running", "n0")], priority=40),
            J("inf", "q0", [T(), T()], priority=125),
        ],
    )
    result = run(snap, ["preempt"])
    assert decisions(result) == []
    assert any("NonPreemptibleOverQuota" in e for e in result.pod_groups["ns/inf"].explain)


def test_preempts_only_as_many_as_needed_lowest_first() -> None:
    snap = build(
        {"n0": 3},
        [queue("q0", 3)],
        [
            J("p30", "q0", [T("Running", "n0")], priority=30),
            J("p10", "q0", [T("Running", "n0")], priority=10),
            J("p20", "q0", [T("Running", "n0")], priority=20),
            J("high", "q0", [T()], priority=90),
        ],
    )
    result = run(snap, ["preempt"])
    assert decisions(result, "evict") == [("evict", "p10-0", "n0")]


def test_gang_preemptor_pipelined_whole() -> None:
    snap = build(
        {"n0": 2, "n1": 2},
        [queue("q0", 4)],
        [
            J("l1", "q0", [T("Running", "n0"), T("Running", "n0")], priority=10),
            J("l2", "q0", [T("Running", "n1"), T("Running", "n1")], priority=20),
            J("g", "q0", [T(), T(), T()], priority=90),
        ],
    )
    result = run(snap, ["preempt"])
    st = statuses(result)
    assert all(st[f"g-{i}"][0] == "Pipelined" for i in range(3))
    assert all(st[f"l{j}-{i}"][0] == "Releasing" for j in (1, 2) for i in range(2))


def test_preempt_reads_only_leaves_holding_a_lower_priority_job(monkeypatch) -> None:
    """A preemptor takes victims from its own leaf only, and only from jobs of lower
    priority: a leaf whose jobs all have the preemptor's priority (or more) is never
    keyed or read, and the leaf holding a lower-priority job still yields it."""
    from kai.actions.solvers.victims import VictimPool

    read: list[str] = []
    original = VictimPool.leaf

    def counted(self, name):
        if name not in self.leaves:
            read.append(name)
        return original(self, name)

    monkeypatch.setattr(VictimPool, "leaf", counted)
    snap = build(
        {"n0": 2, "n1": 2},
        [queue("same", 1), queue("mixed", 1)],
        [
            J("s1", "same", [T("Running", "n0")], priority=50),
            J("s2", "same", [T("Running", "n0")], priority=60),
            J("s-pending", "same", [T()], priority=50),
            J("m-low", "mixed", [T("Running", "n1")], priority=20),
            J("m-mid", "mixed", [T("Running", "n1")], priority=50),
            J("m-high", "mixed", [T()], priority=50),
        ],
    )
    result = run(snap, ["preempt"])
    assert decisions(result) == [("evict", "m-low-0", "n1"), ("pipeline", "m-high-0", "n1")]
    assert read == ["mixed"]
