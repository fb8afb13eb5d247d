"""The re-allocation queue of a scenario simulation.

A simulation re-places the victims' jobs and the preemptor in queue order, and that
order is decided among *every* job with a pending task, as a scheduling pass would see
them: the other pending jobs are skipped when popped, but until then each one stands
for its leaf queue whenever queues are compared (its request decides whether the queue
is starved, its dominant share with the job, ...).  The preemptor stands there as the
part being probed (its allocated pods and the probe's pending tasks).

Scanning every job of the session per simulation would cost more than the simulation,
so the jobs with pending tasks are kept per leaf queue, sorted by job order key, for a
whole action (:class:`PendingPool`, re-keyed after each commit), and a simulation's
queue (:class:`SimulationQueue`) reads those lists with the participants laid over
them.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Iterable
from heapq import heappop
from itertools import count
from typing import Any

from kai.actions.common import PENDING_AT_START, JobQueue
from kai.actions.solvers.order import LeafPool
from kai.api.model import ACTIVE_ALLOCATED, Job, Task
from kai.framework.session import Session

#: Where an eviction action keeps its pool for the simulations (``ssn.cache``).
POOL_KEY = "solver.pending_pool"


class PendingPool(LeafPool):
    """Jobs with a pending task per leaf queue, ascending by order key."""

    def __init__(self, ssn: Session, key: Callable[[Job], Any]) -> None:
        # No task becomes pending in a session: the jobs that had a pending task when
        # the session's first action looked are all there can be (kai.actions.common).
        jobs = ssn.cache.get(PENDING_AT_START)
        super().__init__(ssn, key, ssn.jobs.values() if jobs is None else jobs)
        self._queue_keys: dict[Job, tuple | None] = {}
        self.version = 0  # counts the updates: what is derived from the pool keeps it

    def member(self, job: Job) -> bool:
        return job.queue in self.ssn.queues and job.has_pending()

    def queue_key(self, job: Job) -> tuple | None:
        """``ssn.queue_order_job_key(job)``, kept until :meth:`update` re-keys the job.

        Only for jobs no simulation touches (not its participants): their tasks change
        status only when a statement commits, and the action re-keys those jobs then."""
        keys = self._queue_keys
        if job in keys:
            return keys[job]
        key = keys[job] = self.ssn.queue_order_job_key(job)
        return key

    def update(self, jobs: Iterable[Job]) -> None:
        """Re-key ``jobs`` (their tasks changed status): leave, move or join the pool."""
        self.version += 1
        for job in dict.fromkeys(jobs):
            self._queue_keys.pop(job, None)
            leaf = job.queue or ""
            old = self.entries.pop(job, None)
            if old is not None:
                entries = self.leaves[leaf]
                del entries[bisect_left(entries, old)]
            if self.member(job):
                insort(self.leaves.setdefault(leaf, []), self._enter(job))


class _Leaf:
    """One leaf of a simulation queue: the pool's sorted jobs (read from ``pos``, the
    participants' real jobs left out) merged with the participants' entries, a heap (a
    simulation may have tens of thousands of participants in one leaf, and most of
    them are never popped: it ends once the preemptor is placed and nothing else
    fits)."""

    __slots__ = ("base", "pos", "own", "left", "skip")

    def __init__(self, base: list[tuple[Any, int, Job]], skip: set[Job]) -> None:
        self.base = base
        self.pos = 0
        self.own: list[tuple[Any, int, Job]] = []  # a heap
        self.left = 0  # participants not yet popped
        self.skip = skip

    def _base_head(self) -> tuple[Any, int, Job] | None:
        base, skip = self.base, self.skip
        while self.pos < len(base):
            entry = base[self.pos]
            if entry[2] not in skip:
                return entry
            self.pos += 1
        return None

    def head(self) -> Job | None:
        base = self._base_head()
        own = self.own[0] if self.own else None
        if base is None:
            return None if own is None else own[2]
        if own is None or base[:2] < own[:2]:
            return base[2]
        return own[2]

    def pop(self) -> Job:
        base = self._base_head()
        if self.own and (base is None or self.own[0][:2] <= base[:2]):
            self.left -= 1
            return heappop(self.own)[2]
        assert base is not None
        self.pos += 1
        return base[2]

    def skip_alike(self, key: tuple, pool: PendingPool, participants: set[Job]) -> None:
        """Pop the pool's jobs off the head while each comes before every participant
        left here, is no participant and has queue key ``key`` (what popping them one
        by one through :meth:`head` and :meth:`pop` does, in one loop: the run of alike
        jobs skipped after a pass over can be long)."""
        base, skip, own = self.base, self.skip, self.own
        # An entry (key, seq, job) is below a participant's (key, seq) exactly when its
        # first two items are: equal pairs compare the shorter tuple lower.
        limit = own[0][:2] if own else None
        known = pool._queue_keys
        pos, end = self.pos, len(base)
        while pos < end:
            entry = base[pos]
            job = entry[2]
            if job not in skip:
                if limit is not None and not entry < limit:
                    break
                if job in participants:
                    break
                job_key = known[job] if job in known else pool.queue_key(job)
                if job_key != key:
                    break
            pos += 1
        self.pos = pos


class SimulationQueue(JobQueue):
    """The jobs with a pending task (``pool``) and the ``participants`` (the victims' jobs
    and the preemptor's view, standing in for ``replaces``: the real jobs they are), in
    normal queue order.  :meth:`pop` returns participants only: the other jobs are
    popped and skipped as the order reaches them.
    """

    def __init__(
        self, ssn: Session, pool: PendingPool, participants: list[Job], replaces: set[Job]
    ) -> None:
        super().__init__(ssn, [])
        self.leaves: dict[str, _Leaf] = {}
        for name, base in pool.leaves.items():
            if base:
                self.leaves[name] = _Leaf(base, replaces)
                self._link(name)
        leaves = self.leaves
        # Numbered before the pool's entries, which an equal key then follows.
        entries = zip(map(pool.key, participants), count(-len(participants)), participants)
        for entry in entries:
            name = entry[2].queue or ""
            leaf = leaves.get(name)
            if leaf is None:
                leaf = leaves[name] = _Leaf([], replaces)
                self._link(name)
            leaf.own.append(entry)
        for leaf in leaves.values():
            leaf.left = len(leaf.own)
            if leaf.left > 1:
                # A sorted list is a heap.  The participants come in victim order (the
                # reverse of the job order, mostly), which the sort takes as one run.
                leaf.own.sort()
        self.remaining = len(participants)
        self.participants = set(participants)
        self.pool = pool

    def _leaf_head(self, name: str) -> Job | None:
        leaf = self.leaves.get(name)
        return leaf.head() if leaf is not None else None

    def pop(self) -> Job | None:
        while self.remaining:
            live = [leaf for leaf in self.leaves.values() if leaf.left]
            if len(live) == 1:
                # No other leaf has a participant left: skipping jobs of other leaves
                # changes nothing, so this leaf's participants come in its own order.
                leaf = live[0]
                leaf.left -= 1
                self.remaining -= 1
                return heappop(leaf.own)[2]
            best = self._best_among(self.children.get(None, []), {})
            if best is None:
                return None
            leaf = self.leaves[best[0]]
            job = leaf.pop()
            if job in self.participants:
                self.remaining -= 1
                return job
            self._skip_alike(leaf, job)
        return None

    def _skip_alike(self, leaf: _Leaf, skipped: Job) -> None:
        """Skip the non-participants after ``skipped`` in ``leaf`` that the queue order
        cannot tell from it: with nothing else changed, each would win the same
        comparisons and be skipped in turn."""
        # Non-participants: the simulation leaves them be, so the pool's keys hold.
        key = self.pool.queue_key(skipped)
        if key is not None:
            leaf.skip_alike(key, self.pool, self.participants)

    def empty(self) -> bool:
        return not self.remaining

    def __len__(self) -> int:
        return self.remaining


def action_pool(ssn: Session) -> PendingPool | None:
    """The running eviction action's pool (None outside one, or when some job order has
    no sort key).  The action leaves a function that makes it under ``POOL_KEY``: the
    first simulation that reads the pool makes it."""
    found = ssn.cache.get(POOL_KEY)
    if callable(found):
        found = ssn.cache[POOL_KEY] = found()
    return found


def simulation_queue(ssn: Session, participants: list[Job], replaces: set[Job]) -> JobQueue:
    """The re-allocation queue of one simulation (see the module docstring)."""
    pool = action_pool(ssn)
    if pool is None:
        pool = PendingPool.for_session(ssn)
    if pool is not None:
        return SimulationQueue(ssn, pool, participants, replaces)
    # Some job order has no sort key: the pending jobs by pairwise comparison.
    others = [
        job
        for job in ssn.jobs.values()
        if job not in replaces and job.queue in ssn.queues and job.has_pending()
    ]
    return _FilteredQueue(JobQueue(ssn, [*others, *participants]), set(participants))


class _FilteredQueue(JobQueue):
    """A job queue that pops only the participants (the others are skipped)."""

    def __init__(self, inner: JobQueue, participants: set[Job]) -> None:
        super().__init__(inner.ssn, [])
        self.inner = inner
        self.participants = participants

    def pop(self) -> Job | None:
        while True:
            job = self.inner.pop()
            if job is None or job in self.participants:
                return job


def partial_view(job: Job, pending: list[Task]) -> Job:
    """The part of ``job`` a probe places: its allocated pods and the probe's pending
    tasks, its gang minimum capped at their number."""
    tasks = [t for t in job.tasks if t.status in ACTIVE_ALLOCATED]
    tasks.extend(pending)
    view = job.with_tasks(tasks)
    view.min_member = min(job.min_member, len(tasks))
    return view


__all__ = [
    "POOL_KEY",
    "PendingPool",
    "SimulationQueue",
    "action_pool",
    "partial_view",
    "simulation_queue",
]
