"""The re-allocation queue of a scenario simulation skips runs of alike jobs at once.

A simulation's queue pops every job with a pending task in queue order and returns only
the participants.  While it skips the others nothing changes, so a job the queue order
cannot tell from the one just skipped (the same request, for proportion) would win the
same comparisons and be skipped too: the queue skips such runs without comparing.
These tests check, on random clusters, that the participants come out exactly as they
do when every skipped job is compared.
"""

from __future__ import annotations

import random
from datetime import timedelta

from kai.actions.solvers.pending import PendingPool, SimulationQueue, _Leaf
from kai.engine import parse_now
from kai.framework.session import Session
from tests._kai_cluster import NOW, J, T, build, queue
from tests.factory import counted_queue_comparisons


def _random_cluster(seed: int):
    rng = random.Random(seed)
    nodes = {f"n{i}": rng.choice([4, 8]) for i in range(rng.randint(2, 6))}
    departments = rng.random() < 0.5
    queues = []
    if departments:
        queues += [
            queue(f"d{k}", rng.choice([0, 4, 8]), parent=None, created=NOW + timedelta(minutes=k))
            for k in range(2)
        ]
    leaves = [f"q{k}" for k in range(rng.randint(2, 5))]
    for k, name in enumerate(leaves):
        parent = f"d{k % 2}" if departments else "default"
        queues.append(
            queue(name, rng.choice([0, 1, 2, 4]), parent=parent, created=NOW + timedelta(minutes=k))
        )
    free = {n: g for n, g in nodes.items()}
    jobs = []
    for j in range(rng.randint(8, 30)):
        gpus = rng.choice([1, 1, 2])  # few shapes: runs of alike jobs
        size = rng.choice([1, 1, 2])
        tasks = []
        for _ in range(size):
            room = [n for n, g in free.items() if g >= gpus]
            if room and rng.random() < 0.3:
                node = rng.choice(room)
                free[node] -= gpus
                tasks.append(T("Running", node))
            else:
                tasks.append(T("Pending"))
        jobs.append(J(f"j{j:02d}", rng.choice(leaves), tasks, gpus=gpus, priority=50))
    return build(nodes, queues, jobs), rng


def _open(snapshot) -> Session:
    config = snapshot.scheduler_config(["reclaim"])
    ssn = Session(snapshot.state(), config, now=parse_now(NOW))
    ssn.open(config.build_plugins())
    return ssn


def _pop_all(ssn: Session, participants: list, replaces: set) -> tuple[list[str], int]:
    """The participants in the order the simulation queue returns them, and how many
    queue comparisons that took."""
    with counted_queue_comparisons(ssn) as calls:
        pool = PendingPool.for_session(ssn)
        assert pool is not None
        queue = SimulationQueue(ssn, pool, participants, replaces)
        order = []
        while (job := queue.pop()) is not None:
            order.append(job.name)
    return order, calls[0]


def _orders(seed: int) -> tuple[list[str], list[str], int, int]:
    """The participants' order with and without skipping, and the comparisons each took."""
    snapshot, rng = _random_cluster(seed)
    ssn = _open(snapshot)
    jobs = sorted(ssn.jobs.values(), key=lambda job: job.name)
    participants = rng.sample(jobs, k=min(len(jobs), rng.randint(2, 6)))
    skipping, skipping_calls = _pop_all(ssn, participants, set(participants))

    ssn_all = _open(snapshot)
    ssn_all.queue_order_job_key = lambda job: None  # type: ignore[method-assign]
    by_name = {job.name: job for job in ssn_all.jobs.values()}
    same = [by_name[job.name] for job in participants]
    comparing, comparing_calls = _pop_all(ssn_all, same, set(same))
    assert sorted(skipping) == sorted(job.name for job in participants)
    return skipping, comparing, skipping_calls, comparing_calls


def test_skipping_alike_jobs_keeps_the_participants_order() -> None:
    saved = total = 0
    for seed in range(80):
        skipping, comparing, skipping_calls, comparing_calls = _orders(seed)
        assert skipping == comparing, f"seed {seed}"
        assert skipping_calls <= comparing_calls, f"seed {seed}"
        saved += comparing_calls - skipping_calls
        total += comparing_calls
    assert saved > total // 10  # the clusters do have runs of alike jobs to skip


def test_runs_of_alike_jobs_are_skipped_without_comparing() -> None:
    # Two leaf queues, each with twenty alike pending jobs; the participants are the
    # last job of each.  Comparing every skipped job costs a comparison per job.
    nodes = {"n0": 8}
    queues = [queue("q0", 2, created=NOW), queue("q1", 2, created=NOW + timedelta(minutes=1))]
    jobs = [J(f"a{i:02d}", "q0", [T("Pending")]) for i in range(20)]
    jobs += [J(f"b{i:02d}", "q1", [T("Pending")]) for i in range(20)]
    snapshot = build(nodes, queues, jobs)

    ssn = _open(snapshot)
    last = [job for job in ssn.jobs.values() if job.name in ("a19", "b19")]
    order, calls = _pop_all(ssn, last, set(last))
    assert sorted(order) == ["a19", "b19"]
    assert calls <= 3

    ssn_all = _open(snapshot)
    ssn_all.queue_order_job_key = lambda job: None  # type: ignore[method-assign]
    last = [job for job in ssn_all.jobs.values() if job.name in ("a19", "b19")]
    order_all, calls_all = _pop_all(ssn_all, last, set(last))
    assert order_all == order
    assert calls_all >= 19


def test_pool_keys_follow_committed_changes() -> None:
    # The pool keeps each skipped job's queue-order key between simulations; a commit
    # that changes a job's tasks re-keys it, so the next simulation reads the new key.
    nodes = {"n0": 8}
    queues = [queue("q0", 2, created=NOW)]
    jobs = [J("a", "q0", [T("Pending"), T("Pending")], gpus=2), J("b", "q0", [T("Pending")])]
    ssn = _open(build(nodes, queues, jobs))
    pool = PendingPool.for_session(ssn)
    assert pool is not None
    job = next(job for job in ssn.jobs.values() if job.name == "a")
    before = pool.queue_key(job)
    assert before == ssn.queue_order_job_key(job)

    stmt = ssn.statement()
    stmt.allocate(job.tasks[0], 0)
    stmt.commit()
    assert ssn.queue_order_job_key(job) != before  # its next chunk is now one pod
    assert pool.queue_key(job) == before  # kept: nothing re-keyed it yet
    pool.update([job])
    assert pool.queue_key(job) == ssn.queue_order_job_key(job)


class _Keys:
    """The part of a pending pool a leaf's skip reads: the queue keys known so far, and
    the lookup of the others."""

    def __init__(self, keys: dict[str, str], known: int) -> None:
        self.keys = keys
        self._queue_keys = dict(list(keys.items())[:known])

    def queue_key(self, job: str) -> str:
        self._queue_keys[job] = self.keys[job]
        return self.keys[job]


def test_a_leaf_skips_in_one_loop_what_popping_one_job_at_a_time_does() -> None:
    rng = random.Random(11)
    for case in range(400):
        jobs = [f"j{i}" for i in range(rng.randint(0, 25))]
        # Pool entries ascend by (order key, sequence); participants come before pool
        # entries of an equal order key (negative sequence numbers), from a heap (here
        # sorted ascending, which is one).
        base = sorted((rng.randint(0, 5), i, job) for i, job in enumerate(jobs))
        own = sorted((rng.randint(0, 5), -k - 1, f"p{k}") for k in range(rng.randint(0, 3)))
        replaced = set(rng.sample(jobs, k=rng.randint(0, min(3, len(jobs)))))
        keys = {job: rng.choice(["a", "a", "a", "b"]) for job in jobs}
        participants = {entry[2] for entry in own}
        start = rng.randint(0, len(jobs))

        at_once, one_by_one = _Leaf(base, replaced), _Leaf(base, replaced)
        for made in (at_once, one_by_one):
            made.pos, made.own, made.left = start, list(own), len(own)
        at_once.skip_alike("a", _Keys(keys, rng.randint(0, len(jobs))), participants)  # type: ignore[arg-type]
        while (job := one_by_one.head()) is not None:
            if job in participants or keys[job] != "a":
                break
            one_by_one.pop()
        assert at_once.pos == one_by_one.pos, f"case {case}"
        assert at_once.own == one_by_one.own and at_once.head() == one_by_one.head()
