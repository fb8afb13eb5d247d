"""Sort keys equivalent to the session's job order.

A job-order function may carry an ``order_key`` attribute: a function of one job whose
values sort like the comparison (``fn(a, b) < 0`` exactly when ``key(a) < key(b)``,
``0`` when equal).  When every registered job-order function has one, the session's
whole job order (the chain, then creation time and uid) is the tuple of those keys
followed by :func:`default_order_key`, and jobs can be sorted by key instead of by
pairwise comparisons.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from kai.actions.common import JobQueue
from kai.api.model import Job
from kai.framework.session import Session


def default_order_key(job: Job) -> tuple:
    """The session's tie-break: older first (no timestamp last), then by uid."""
    ts = job.creation_timestamp
    return (0, ts, job.uid) if ts is not None else (1, job.uid)


def job_order_key(ssn: Session) -> Callable[[Job], Any] | None:
    """A key function for ``ssn.job_order``, or None if some function has no key."""
    keys = []
    for reg in ssn.registered("job_order"):
        key = getattr(reg.fn, "order_key", None)
        if key is None:
            return None
        keys.append(key)
    if not keys:
        return default_order_key
    if len(keys) == 1:
        (only,) = keys
        return lambda job: (only(job), default_order_key(job))
    if len(keys) == 2:
        first, second = keys
        return lambda job: (first(job), second(job), default_order_key(job))
    return lambda job: (*(k(job) for k in keys), default_order_key(job))


class _KeyedEntry:
    __slots__ = ("key", "seq", "job")

    def __init__(self, key: Any, seq: int, job: Job) -> None:
        self.key = key
        self.seq = seq
        self.job = job

    def __lt__(self, other: _KeyedEntry) -> bool:
        return (self.key, self.seq) < (other.key, other.seq)


class KeyedJobQueue(JobQueue):
    """A normal-mode job queue whose leaf heaps compare precomputed order keys.

    Only for callers that change a job's state after popping it, never while it waits in
    the queue (its key is computed once, when it is pushed).
    """

    def __init__(self, ssn: Session, jobs: list[Job], key: Callable[[Job], Any]) -> None:
        self._key = key
        self._seq = 0
        super().__init__(ssn, jobs)

    def push(self, job: Job) -> None:
        leaf = job.queue or ""
        heap = self.heaps.get(leaf)
        if heap is None:
            heap = self.heaps[leaf] = []
            self._link(leaf)
        self._seq += 1
        heapq.heappush(heap, _KeyedEntry(self._key(job), self._seq, job))  # type: ignore[misc]


def job_queue(ssn: Session, jobs: list[Job]) -> JobQueue:
    """A normal-mode job queue over ``jobs``, keyed when the job order has keys."""
    key = job_order_key(ssn)
    return JobQueue(ssn, jobs) if key is None else KeyedJobQueue(ssn, jobs, key)
