"""stalegangeviction: gangs below minMember past their grace period."""

from __future__ import annotations

from datetime import timedelta

from tests._kai_cluster import NOW, J, T, build, decisions, queue, run, statuses, ts

STALE = "kai.scheduler/stale-podgroup-timestamp"


def _gang(**kw) -> J:
    return J("g", "q0", [T("Running", "n0"), T()], min_member=2, **kw)


def test_stale_past_grace_is_evicted_whole() -> None:
    snap = build(
        {"n0": 4}, [queue("q0", 4)], [_gang(annotations={STALE: ts(NOW - timedelta(seconds=120))})]
    )
    result = run(snap, ["stalegangeviction"])
    assert decisions(result) == [("evict", "g-0", "n0")]
    assert result.decisions[0].action == "stalegangeviction"
    assert statuses(result)["g-0"] == ("Releasing", "n0")


def test_stale_within_grace_is_kept() -> None:
    snap = build(
        {"n0": 4}, [queue("q0", 4)], [_gang(annotations={STALE: ts(NOW - timedelta(seconds=30))})]
    )
    assert decisions(run(snap, ["stalegangeviction"])) == []


def test_first_sighting_sets_timestamp() -> None:
    snap = build({"n0": 4}, [queue("q0", 4)], [_gang()])
    result = run(snap, ["stalegangeviction"])
    assert decisions(result) == []
    assert result.pod_groups["ns/g"].annotations[STALE] == ts(NOW)


def test_per_job_grace_period_and_negative_disables() -> None:
    old = {STALE: ts(NOW - timedelta(hours=5))}
    snap = build(
        {"n0": 4},
        [queue("q0", 4)],
        [_gang(annotations=old, pg_spec={"stalenessGracePeriod": "-1s"})],
    )
    assert decisions(run(snap, ["stalegangeviction"])) == []
    snap = build(
        {"n0": 4},
        [queue("q0", 4)],
        [
            _gang(
                annotations={STALE: ts(NOW - timedelta(seconds=20))},
                pg_spec={"stalenessGracePeriod": "10s"},
            )
        ],
    )
    assert len(decisions(run(snap, ["stalegangeviction"]))) == 1


def test_not_stale_when_gang_satisfied_or_succeeded() -> None:
    jobs = [
        J(
            "ok",
            "q0",
            [T("Running", "n0"), T("Running", "n0")],
            min_member=2,
            annotations={STALE: ts(NOW - timedelta(hours=1))},
        ),
        J("done", "q0", [T("Running", "n0"), T("Succeeded")], min_member=2),
    ]
    result = run(build({"n0": 4}, [queue("q0", 4)], jobs), ["stalegangeviction"])
    assert decisions(result) == []
    assert STALE not in result.pod_groups["ns/ok"].annotations
