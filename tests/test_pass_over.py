"""The eviction actions pass over a whole leaf queue of alike jobs at once.

After a job is passed over (equivalent to one that failed), the next job of its leaf
that the queue order cannot tell from it comes next, one heap pop at a time.  When every
job left in the leaf would come that way and be passed over too, the order they would
come in changes nothing: they are taken out at once.  Sessions must decide, and explain,
exactly as when each is popped in turn.
"""

from __future__ import annotations

from collections import Counter

import pytest

from kai.actions.common import JobQueue
from kai.bench_clusters import NOW, cluster_fill, random_cluster
from kai.engine import Snapshot, run_session

ACTIONS = ["allocate", "consolidation", "reclaim", "preempt"]


def _snapshots() -> list[Snapshot]:
    # Many alike pending jobs left after allocate, and generated contested clusters.
    snapshots = [Snapshot(cluster_fill(20, pods=300, gang_fraction=g).objects()) for g in (0, 0.3)]
    for seed in range(12):
        builder = random_cluster(seed, nodes=4 + seed % 3, jobs=30 + 2 * seed)
        snapshots.append(Snapshot.from_objects(builder.dicts()))
    return snapshots


def _decide(snapshot: Snapshot) -> dict:
    return run_session(snapshot, now=NOW, actions=ACTIONS).to_json(explain=True)


def test_taking_a_leaf_at_once_decides_as_popping_its_jobs(monkeypatch: pytest.MonkeyPatch):
    taken: Counter = Counter()
    original = JobQueue.take_alike_leaf

    def counted(self, job, accept):
        jobs = original(self, job, accept)
        taken["jobs"] += len(jobs or ())
        return jobs

    monkeypatch.setattr(JobQueue, "take_alike_leaf", counted)
    at_once = [_decide(snapshot) for snapshot in _snapshots()]
    assert taken["jobs"] > 100  # the clusters do have leaves to take whole

    monkeypatch.setattr(JobQueue, "take_alike_leaf", lambda self, job, accept: None)
    one_by_one = [_decide(snapshot) for snapshot in _snapshots()]
    for index, (a, b) in enumerate(zip(at_once, one_by_one, strict=True)):
        assert a == b, f"snapshot {index}"
