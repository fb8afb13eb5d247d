"""reclaim: scenarios after KAI-Scheduler's reclaim integration tests."""

from __future__ import annotations

import kai
from tests._kai_cluster import J, T, build, decisions, queue, run, statuses


def test_reclaim_between_two_queues_with_deserved_quota() -> None:
    snap = build(
        {"n0": 2},
        [queue("q0", 1), queue("q1", 1)],
        [
            J("a", "q0", [T("Running", "n0")]),
            J("b", "q0", [T("Running", "n0")]),
            J("c", "q1", [T()]),
        ],
    )
    result = run(snap, ["reclaim"])
    st = statuses(result)
    # the newest job of the over-served queue goes
    assert st["b-0"] == ("Releasing", "n0")
    assert st["a-0"] == ("Running", "n0")
    assert st["c-0"] == ("Pipelined", "n0")
    assert decisions(result) == [("evict", "b-0", "n0"), ("pipeline", "c-0", "n0")]
    assert all(d.action == "reclaim" for d in result.decisions)


def test_no_reclaim_when_victim_queue_within_fair_share() -> None:
    # q0 deserves both GPUs and uses exactly them: it is not over its share.
    snap = build(
        {"n0": 2},
        [queue("q0", 2), queue("q1", 1)],
        [
            J("a", "q0", [T("Running", "n0")]),
            J("b", "q0", [T("Running", "n0")]),
            J("c", "q1", [T()]),
        ],
    )
    result = run(snap, ["reclaim"])
    assert decisions(result) == []
    assert statuses(result)["c-0"] == ("Pending", None)


def test_no_reclaim_when_reclaimer_would_exceed_fair_share() -> None:
    snap = build(
        {"n0": 2},
        [queue("q0", 1), queue("q1", 1)],
        [
            J("a", "q0", [T("Running", "n0")]),
            J("b", "q1", [T("Running", "n0")]),
            J("c", "q1", [T()]),
        ],
    )
    result = run(snap, ["reclaim"])
    assert decisions(result) == []


def test_non_preemptible_jobs_are_never_victims() -> None:
    snap = build(
        {"n0": 2},
        [queue("q0", 1), queue("q1", 1)],
        [
            J("a", "q0", [T("Running", "n0")], priority=125),
            J("b", "q0", [T("Running", "n0")], priority=125),
            J("c", "q1", [T()]),
        ],
    )
    result = run(snap, ["reclaim"])
    assert decisions(result) == []


def test_explicit_preemptibility_overrides_priority() -> None:
    snap = build(
        {"n0": 2},
        [queue("q0", 1), queue("q1", 1)],
        [
            J("a", "q0", [T("Running", "n0")], priority=125, preemptibility="preemptible"),
            J("b", "q0", [T("Running", "n0")], priority=10, preemptibility="non-preemptible"),
            J("c", "q1", [T()]),
        ],
    )
    result = run(snap, ["reclaim"])
    assert ("evict", "a-0", "n0") in decisions(result)
    assert statuses(result)["b-0"] == ("Running", "n0")


def test_gang_victim_is_evicted_whole() -> None:
    snap = build(
        {"n0": 2},
        [queue("q0", 1), queue("q1", 1)],
        [J("g", "q0", [T("Running", "n0"), T("Running", "n0")]), J("c", "q1", [T()])],
    )
    result = run(snap, ["reclaim"])
    st = statuses(result)
    assert st["g-0"][0] == st["g-1"][0] == "Releasing"
    assert st["c-0"] == ("Pipelined", "n0")


def test_elastic_victim_is_peeled_down_to_min_member() -> None:
    snap = build(
        {"n0": 4},
        [queue("q0", 2), queue("q1", 2)],
        [
            J("e", "q0", [T("Running", "n0") for _ in range(4)], min_member=2),
            J("p", "q1", [T(), T()]),
        ],
    )
    result = run(snap, ["reclaim"])
    st = statuses(result)
    assert [st[f"e-{i}"][0] for i in range(4)] == ["Running", "Running", "Releasing", "Releasing"]
    assert st["p-0"][0] == st["p-1"][0] == "Pipelined"


def test_reclaim_respects_the_queue_tree() -> None:
    # Two departments of 2 GPUs each; d1's project holds all 4 GPUs.
    departments = [queue("d1", 2, parent=None), queue("d2", 2, parent=None)]
    snap = build(
        {"n0": 4},
        [queue("a", 2, parent="d1"), queue("b", 2, parent="d2")],
        [J(f"r{i}", "a", [T("Running", "n0")]) for i in range(4)] + [J("p", "b", [T(), T()])],
        departments=departments,
    )
    result = run(snap, ["reclaim"])
    st = statuses(result)
    evicted = [k for k, v in st.items() if v[0] == "Releasing"]
    assert len(evicted) == 2
    assert st["p-0"][0] == st["p-1"][0] == "Pipelined"


def test_reclaim_uses_idle_capacity_elsewhere_first() -> None:
    # Only one victim is needed: the other GPU is free already.
    snap = build(
        {"n0": 2, "n1": 1},
        [queue("q0", 1), queue("q1", 2)],
        [
            J("a", "q0", [T("Running", "n0")]),
            J("b", "q0", [T("Running", "n0")]),
            J("c", "q1", [T(), T()]),
        ],
    )
    result = run(snap, ["reclaim"])
    evicts = decisions(result, "evict")
    assert len(evicts) == 1
    assert {d[2] for d in decisions(result, "pipeline")} == {"n0", "n1"}


def test_preemption_delay_skips_job() -> None:
    snap = build(
        {"n0": 2},
        [queue("q0", 1), queue("q1", 1)],
        [
            J("a", "q0", [T("Running", "n0")]),
            J("b", "q0", [T("Running", "n0")]),
            J("c", "q1", [T()], pg_spec={"preemptionDelay": "1h"}),
        ],
    )
    result = run(snap, ["reclaim"])
    assert decisions(result) == []
    assert "PreemptionDelayNotElapsed" in result.pod_groups["ns/c"].explain


def test_preempt_takes_over_reclaims_pools_unless_a_pod_moved(monkeypatch) -> None:
    """The eviction actions of a session share one victim pool and one pending pool
    while nothing changes a pod between them; an action that does (allocate) makes the
    next one build its own.  The decisions are those of pools built per action, on
    generated clusters too."""
    import kai.actions._eviction as eviction
    from kai.actions.solvers.pending import PendingPool
    from kai.actions.solvers.victims import VictimPool
    from kai.bench_clusters import random_cluster
    from tests._kai_cluster import NOW

    built: list[str] = []
    for kind in (VictimPool, PendingPool):
        original = kind.__init__

        def counted(self, *args, _original=original, **kwargs) -> None:
            built.append(type(self).__name__)
            _original(self, *args, **kwargs)

        monkeypatch.setattr(kind, "__init__", counted)
    snap = build(
        {"n0": 2, "n1": 1},
        [queue("q0", 1), queue("q1", 2)],
        [
            J("a", "q0", [T("Running", "n0")]),
            J("b", "q0", [T("Running", "n0")]),
            J("low", "q1", [T("Running", "n1")], priority=10),
            J("c", "q1", [T()]),
            J("high", "q1", [T()], priority=100),
        ],
    )
    run(snap, ["reclaim", "preempt"])
    assert sorted(built) == ["PendingPool", "VictimPool"]
    built.clear()
    run(snap, ["reclaim", "allocate", "preempt"])
    assert sorted(built) == ["PendingPool", "PendingPool", "VictimPool", "VictimPool"]

    def fresh(ssn, key, kind):
        return kind.for_session(ssn)

    for seed in range(8):
        cluster = kai.Snapshot.from_objects(random_cluster(seed, nodes=8, jobs=60).dicts())
        shared = kai.run_session(cluster, now=NOW).to_json()
        with monkeypatch.context() as patch:
            patch.setattr(eviction, "_kept_pool", fresh)
            assert kai.run_session(cluster, now=NOW).to_json() == shared, seed


def test_a_pod_larger_than_every_node_is_not_reclaimed_for() -> None:
    # A 3-GPU pod cannot fit any 2-GPU node, whatever is evicted: reclaim says so for
    # its job and evicts nothing for it; a one-GPU job still reclaims.
    snap = build(
        {"n0": 2, "n1": 2},
        [queue("q0", 1), queue("q1", 3)],
        [
            J("a", "q0", [T("Running", "n0"), T("Running", "n0")]),
            J("b", "q0", [T("Running", "n1"), T("Running", "n1")]),
            J("big", "q1", [T()], gpus=3),
            J("c", "q1", [T()]),
        ],
    )
    result = run(snap, ["reclaim"])
    reason = result.pod_groups["ns/big"].reason or ""
    too_large = "MaxNodePoolResources: pod ns/big-0 requests more nvidia.com/gpu than any node has"
    assert too_large in reason
    assert statuses(result)["big-0"] == ("Pending", None)
    assert [d for d in decisions(result) if d[0] == "pipeline"] == [("pipeline", "c-0", "n1")]


def test_victim_queues_refused_whole_decide_as_asking_about_each_job(monkeypatch) -> None:
    """Reclaim leaves out the victim queues its queue-level filters refuse (proportion's
    rule reads a victim only through its queue) instead of asking about each job, and
    asks those filters once per queue of the others: the same decisions as asking about
    each job, on generated contested clusters and a reclaim storm."""
    import kai.bench as bench
    from kai.bench_clusters import NOW, random_cluster
    from kai.engine import Snapshot, run_session
    from kai.framework.session import Session

    refused: list[bool] = []
    original = Session.reclaim_victim_queue_refused

    def counted(self, reclaimer, queue):
        answer = original(self, reclaimer, queue)
        refused.append(answer)
        return answer

    storm = bench.SCENARIOS["reclaim-storm"]

    def sessions() -> list[dict]:
        out = []
        for seed in range(24):
            cluster = random_cluster(seed, nodes=6 + seed % 5, jobs=30 + seed)
            snap = Snapshot.from_objects(cluster.dicts())
            out.append(run_session(snap, now=NOW).to_json(explain=True))
        snap = Snapshot(storm.build(storm.sizes["small"]).objects())
        config = bench.scenario_config(storm)
        out.append(run_session(snap, now=NOW, config=config, actions=storm.actions).to_json())
        return out

    monkeypatch.setattr(Session, "reclaim_victim_queue_refused", counted)
    by_queue = sessions()
    assert any(refused) and not all(refused), refused.count(True)
    monkeypatch.setattr(Session, "reclaim_victim_queue_refused", lambda *args: False)
    assert sessions() == by_queue
    monkeypatch.setattr(
        Session,
        "reclaim_victim_filter_in",
        lambda self, reclaimer, queue: lambda job: self.reclaim_victim_filter(reclaimer, job),
    )
    assert sessions() == by_queue


def test_reclaim_fairness_answers_kept_in_a_search_equal_fresh_ones(monkeypatch) -> None:
    """Proportion's reclaim validator keeps its answers for one job's search (the queues
    frozen at its start) by the reclaimer's request and the victims left evicted; every
    kept answer equals one computed afresh, and kept answers do get used."""
    from kai.bench_clusters import kai_reclaim_many_single_gpu, random_cluster
    from kai.plugins.reclaim_rules import ReclaimRules
    from tests._kai_cluster import NOW

    calls = {"asked": 0, "computed": 0}
    computed = ReclaimRules._reclaimable

    def counted(self, *args):
        calls["computed"] += 1
        return computed(self, *args)

    monkeypatch.setattr(ReclaimRules, "_reclaimable", counted)
    kept = ReclaimRules.reclaimable

    def checked(self, pending, victim_jobs, victim_tasks):
        calls["asked"] += 1
        answer = kept(self, pending, victim_jobs, victim_tasks)
        shares = self._shares()
        if pending.queue in shares:
            fresh = computed(self, shares, pending, self.request(pending), list(victim_tasks))
            assert answer == fresh
        return answer

    monkeypatch.setattr(ReclaimRules, "reclaimable", checked)
    clusters = [kai_reclaim_many_single_gpu(40), *(random_cluster(s, nodes=10) for s in range(8))]
    for builder in clusters:
        kai.run_session(kai.Snapshot(builder.objects()), actions=["reclaim"], now=NOW)
    assert calls["asked"] > calls["computed"] > 0


def test_victim_chunks_of_one_pod_jobs_equal_the_general_grouping(monkeypatch) -> None:
    """Proportion's reclaim validator groups a scenario's victim pods by job, jobs in key
    order, per queue; one pod per job skips the grouping. On generated clusters (gangs,
    elastic jobs, a large job reclaiming from a hundred one-pod jobs) every scenario's
    chunks equal the general grouping's, and both kinds of scenario occur."""
    from collections import defaultdict

    import numpy as np

    from kai.bench_clusters import kai_reclaim_large_jobs, random_cluster
    from kai.plugins.reclaim_rules import ReclaimRules, _QueueChunks
    from tests._kai_cluster import NOW

    def general(rules, shares, tasks) -> dict:
        by_job = defaultdict(list)
        for task in tasks:
            by_job[task.job].append(task)
        out: dict = {}
        for job in sorted(by_job, key=lambda j: j.key):
            if job.queue in shares:
                out.setdefault(job.queue, _QueueChunks()).add(rules, job, by_job[job])
        return out

    def _item(item) -> object:
        """A chunk as given: a pod (the very task) and whether it is a core, or a vector."""
        return (id(item[0]), item[1]) if isinstance(item, tuple) else item.tolist()

    kinds = {"one pod per job": 0, "several": 0}
    grouped = ReclaimRules._queue_chunks

    def checked(self, shares, tasks):
        got = grouped(self, shares, tasks)
        expected = general(self, shares, tasks)
        assert list(got) == list(expected)
        for name, chunks in got.items():
            assert [_item(i) for i in chunks.items] == [_item(i) for i in expected[name].items]
            mine, theirs = chunks.chunks(), expected[name].chunks()
            assert len(mine) == len(theirs)
            assert all(np.array_equal(a, b) for a, b in zip(mine, theirs))
        jobs = [task.job for task in tasks]
        kinds["one pod per job" if len(set(jobs)) == len(jobs) else "several"] += 1
        return got

    monkeypatch.setattr(ReclaimRules, "_queue_chunks", checked)
    clusters = [kai_reclaim_large_jobs(24), *(random_cluster(s, nodes=10) for s in range(12))]
    for builder in clusters:
        kai.run_session(kai.Snapshot(builder.objects()), actions=["reclaim"], now=NOW)
    assert all(kinds.values()), kinds


def test_one_pod_chunks_as_one_matrix_equal_the_mixed_layout() -> None:
    """A queue's chunks of one-pod jobs only are one matrix built at once: bit for bit
    the rows the layout of a mix of pods and chunk vectors gives them (a core pod's
    zeros turned positive, as a sum from zeros makes them)."""
    import numpy as np

    from kai.bench_clusters import kai_reclaim_many_single_gpu
    from kai.plugins.proportion import QUEUE_COLUMNS
    from kai.plugins.reclaim_rules import _QueueChunks

    for nodes in (2, 5, 12):
        state = kai.Snapshot(kai_reclaim_many_single_gpu(nodes).objects()).state()
        pods = [t for t in state.tasks if t.node >= 0 and len(t.job.tasks) == 1]
        for task in pods[::3]:
            task.job.min_member = 0  # not a core chunk
        for task in pods[::2]:  # a zero's sign is what a core chunk changes
            request = task.request.copy()
            request[QUEUE_COLUMNS] = np.where(
                request[QUEUE_COLUMNS] == 0, -0.0, request[QUEUE_COLUMNS]
            )
            request[QUEUE_COLUMNS[0]] = -0.0
            task.request = request
        pairs = [(task.job, [task]) for task in pods]
        assert len(pairs) > 8 and {p[0].min_member > 0 for p in pairs} == {True, False}
        alone, mixed = _QueueChunks(), _QueueChunks()
        alone.extend(None, pairs)  # type: ignore[arg-type]  # no job of several pods
        mixed.extend(None, pairs)  # type: ignore[arg-type]
        mixed.items.append(np.array([1.0, 2.0, 3.0]))
        got, expected = alone.chunks(), mixed.chunks()[:-1]
        assert got.shape == expected.shape and got.tobytes() == expected.tobytes()


def test_queues_frozen_at_a_search_start_read_later_are_as_they_were(monkeypatch) -> None:
    """A search's frozen queues are the queues as its job's search started, however late
    it first reads them: made then, from the rows copied at the start, they equal
    clones taken at the start, array for array, after the search's simulations and
    commits changed the live shares.  On generated clusters, under reclaim, preempt and
    consolidation (whose searches mostly never read them)."""
    from kai.bench_clusters import kai_reclaim_many_single_gpu, random_cluster
    from kai.plugins.reclaim_rules import ReclaimRules
    from tests._kai_cluster import NOW

    fields = ("fair_share", "allocated", "allocated_non_preemptible", "request")
    started, made_frozen = ReclaimRules.on_job_solution_start, ReclaimRules.frozen.fget
    at_start: dict[int, dict] = {}
    reads = {"read": 0, "live changed": 0}

    def start(self) -> None:
        started(self)
        at_start[id(self)] = {n: s.clone() for n, s in self.plugin.shares.items()}

    def frozen(self):
        made = self._frozen_rows is not None
        shares = made_frozen(self)
        if made:
            clones = at_start[id(self)]
            assert list(shares) == list(clones)
            for name, share in shares.items():
                for f in fields:
                    assert getattr(share, f).tobytes() == getattr(clones[name], f).tobytes()
                assert share.priority == clones[name].priority
                live = self.plugin.shares[name]
                if any(getattr(live, f).tobytes() != getattr(share, f).tobytes() for f in fields):
                    reads["live changed"] += 1
            reads["read"] += 1
        return shares

    monkeypatch.setattr(ReclaimRules, "on_job_solution_start", start)
    monkeypatch.setattr(ReclaimRules, "frozen", property(frozen))
    clusters = [kai_reclaim_many_single_gpu(40), *(random_cluster(s, nodes=10) for s in range(8))]
    for builder in clusters:
        snap = kai.Snapshot(builder.objects())
        kai.run_session(snap, actions=["consolidation", "reclaim", "preempt"], now=NOW)
    assert reads["read"] > 0
    assert reads["live changed"] > 0  # read after the live queues had moved on


def test_a_victim_on_an_unknown_node_moved_and_evicted_again() -> None:
    # g-1 runs on a node the snapshot does not have.  Reclaim for p evicts it and places
    # it again on n3 (it moves); preempt for r evicts it once more, which sends a moved
    # victim back to releasing where it runs: on no node of the session's.
    snap = build(
        {"n3": 8},
        [queue("q1", 6), queue("q2", 12)],
        [
            J("g", "q2", [T("Running", "n3"), T("Running", "gone")], gpus=2, min_member=4),
            J("p", "q1", [T()], gpus=0, priority=100),
            J("r", "q2", [T()], gpus=0, priority=125),
        ],
    )
    result = run(snap, ["reclaim", "preempt"])
    assert result.warnings == ["pod ns/g-1 is on unknown node 'gone'"]
    assert statuses(result) == {
        "g-0": ("Running", "n3"),
        "g-1": ("Pipelined", "n3"),
        "p-0": ("Pipelined", "n3"),
        "r-0": ("Pipelined", "n3"),
    }
