"""Sort keys equivalent to the session's job order.

A job-order function may carry an ``order_key`` attribute: a function of one job whose
values sort like the comparison (``fn(a, b) < 0`` exactly when ``key(a) < key(b)``,
``0`` when equal).  When every registered job-order function has one, the session's
whole job order (the chain, then creation time and uid) is the tuple of those keys
followed by :func:`~kai.framework.session.default_order_key`, and jobs can be sorted by
key instead of by pairwise comparisons.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from bisect import insort
from collections.abc import Callable, Iterable
from itertools import count
from typing import Any, TypeVar

from kai.actions.common import JobQueue
from kai.api.model import Job
from kai.framework.session import Session, chained_order_key

Entry = tuple[Any, int, Job]  # (order key, insertion number, job): sorts by job order
_Pool = TypeVar("_Pool", bound="LeafPool")


class LeafPool(ABC):
    """The jobs :meth:`member` accepts, per leaf queue, ascending by order key; kept
    for a whole action and re-keyed by the subclasses as jobs change."""

    def __init__(self, ssn: Session, key: Callable[[Job], Any], jobs: Iterable[Job]) -> None:
        self.ssn = ssn
        self.key = key
        self._seq = count()
        self.leaves: dict[str, list[Entry]] = {}
        self.entries: dict[Job, Entry] = {}
        for job in jobs:
            if self.member(job):
                self.leaves.setdefault(job.queue or "", []).append(self._enter(job))
        for entries in self.leaves.values():
            entries.sort()

    @classmethod
    def for_session(cls: type[_Pool], ssn: Session) -> _Pool | None:
        """A pool, or None when some job-order function has no order key."""
        key = job_order_key(ssn)
        return None if key is None else cls(ssn, key)  # type: ignore[call-arg]

    @abstractmethod
    def member(self, job: Job) -> bool:
        """Whether ``job`` belongs in the pool."""

    def _enter(self, job: Job) -> Entry:
        """A new entry for ``job``, recorded in :attr:`entries`."""
        entry = (self.key(job), next(self._seq), job)
        self.entries[job] = entry
        return entry


def job_order_key(ssn: Session) -> Callable[[Job], Any] | None:
    """A key function for ``ssn.job_order``, or None if some function has no key."""
    keys = ssn.order_keys("job_order")
    return None if keys is None else chained_order_key(keys)


class SortedJobQueue(JobQueue):
    """A normal-mode job queue whose leaves are lists sorted by precomputed order keys
    (then push number), read from the front.

    Only for callers that change a job's state after popping it, never while it waits in
    the queue (its key is computed once, when it is pushed).
    """

    def __init__(self, ssn: Session, jobs: list[Job], key: Callable[[Job], Any]) -> None:
        super().__init__(ssn, [])
        self._key = key
        self._seq = 0
        self.leaves: dict[str, list[tuple[Any, int, Job]]] = {}
        self.heads: dict[str, int] = {}  # per leaf, the index of its next job
        for job in jobs:
            self._seq += 1
            self._entries(job.queue or "").append((key(job), self._seq, job))
        for entries in self.leaves.values():
            entries.sort()
        # Leaves with jobs left: with one, popping needs no queue comparison.
        self.live = {leaf for leaf, entries in self.leaves.items() if entries}

    def _entries(self, leaf: str) -> list[tuple[Any, int, Job]]:
        """The leaf's sorted entries, made (and linked into the tree) on first use."""
        entries = self.leaves.get(leaf)
        if entries is None:
            entries = self.leaves[leaf] = []
            self.heads[leaf] = 0
            self._link(leaf)
        return entries

    def push(self, job: Job) -> None:
        leaf = job.queue or ""
        entries = self._entries(leaf)
        self._seq += 1
        insort(entries, (self._key(job), self._seq, job), lo=self.heads[leaf])
        self.live.add(leaf)

    def empty(self) -> bool:
        return all(self.heads[leaf] >= len(e) for leaf, e in self.leaves.items())

    def __len__(self) -> int:
        return sum(len(e) - self.heads[leaf] for leaf, e in self.leaves.items())

    def _best(self, name: str, memo: dict) -> tuple[str, Job] | None:
        if name in memo:
            return memo[name]
        entries = self.leaves.get(name)
        if entries is not None and self.heads[name] < len(entries):
            result: tuple[str, Job] | None = (name, entries[self.heads[name]][2])
        else:
            result = self._best_among(self.children.get(name, []), memo)
        memo[name] = result
        return result

    def pop(self) -> Job | None:
        if len(self.live) == 1:
            # the only candidate at every level of the tree: no comparison is made
            (leaf,) = self.live
            job = self.leaves[leaf][self.heads[leaf]][2]
        else:
            best = self._best_among(self.children.get(None, []), {})
            if best is None:
                return None
            leaf, job = best
        self.heads[leaf] += 1
        if self.heads[leaf] == len(self.leaves[leaf]):
            self.live.discard(leaf)
        return job


def job_queue(ssn: Session, jobs: list[Job]) -> JobQueue:
    """A normal-mode job queue over ``jobs``, keyed when the job order has keys."""
    key = job_order_key(ssn)
    return JobQueue(ssn, jobs) if key is None else SortedJobQueue(ssn, jobs, key)
