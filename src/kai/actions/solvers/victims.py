"""The potential victims of one eviction action, kept in victim order across jobs.

Building a victim queue per pending job (filter every running job, then order them all
by pairwise job-order comparisons) costs O(J log J) Python comparisons per job, which
dominates reclaim/preempt storms.  A :class:`VictimPool` is built once per action
execution instead:

* every job that may ever be a victim in this action (valid, preemptible, in a known
  queue, with active allocated tasks) is kept per leaf queue in a list sorted by a
  precomputed *order key* (:func:`kai.actions.solvers.order.job_order_key`, equivalent to the
  session's job order), so victim order (reverse job order) is the list read backwards;
* after each committed statement only the jobs the statement touched are re-keyed
  (:meth:`VictimPool.update`);
* the per-preemptor victim filter is applied lazily, when a victim queue reaches a job
  (:class:`VictimCandidates`), and memoised for the job's whole search.

The queue a solver pops from (:class:`PoolVictimQueue`) reads the same jobs in the same
order as a victim-mode :class:`~kai.actions.common.JobQueue` built over the filtered
candidate list: leaf heads are the first accepted jobs, so the queue-order comparisons
between leaves see the same jobs too.
"""

from __future__ import annotations

import heapq
import weakref
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable
from itertools import count
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from kai import _fast
from kai.actions.common import JobQueue
from kai.actions.solvers.batches import job_view, whole_job_eviction
from kai.actions.solvers.order import LeafPool
from kai.api.model import ACTIVE_ALLOCATED, Job, Task
from kai.framework.session import Session

if TYPE_CHECKING:
    from kai.actions.solvers.batches import Eviction, VictimBatch
    from kai.actions.solvers.scenario import AccumulatedState

_T = TypeVar("_T")


def potential_victim(ssn: Session, job: Job) -> bool:
    """What every eviction action asks of a victim job, whoever the preemptor is."""
    if job.invalid_reason or not job.preemptible or job.queue not in ssn.queues:
        return False
    for t in job.tasks:  # a loop: cheaper than any() over a generator on a pod or two
        if t.status in ACTIVE_ALLOCATED:
            return True
    return False


class VictimPool(LeafPool):
    """Potential victims per leaf queue, ascending by order key (victim order = reversed).

    A leaf's jobs are keyed and sorted when it is first read (:meth:`leaf`): an action
    may read few of them (preempt reads only its preemptors' own leaves, and only those
    holding a job of lower priority: :meth:`lowest_priority`).  Keying a leaf later
    gives the order keying it at once would: a job's key reads the job's own state,
    which changes only when a statement commits, and the action updates those jobs.
    """

    def __init__(self, ssn: Session, key: Callable[[Job], Any]) -> None:
        # Not LeafPool's: the jobs are only grouped, with the insertion number each
        # would have had (so that a leaf sorts as if keyed now).
        self.ssn = ssn
        self.key = key
        self._seq = count()
        self.leaves: dict[str, list[tuple[Any, int, Job]]] = {}  # the leaves read
        self.entries: dict[Job, tuple[Any, int, Job]] = {}  # the jobs of those leaves
        # Per leaf not read yet, its jobs and their insertion numbers.
        self._unread: dict[str, dict[Job, int]] = {}
        # Every leaf ever holding a job, in the order it first did (read or not).
        self._names: dict[str, None] = {}
        # Per leaf, how many of its jobs have each priority (its lowest is the least key).
        self._priorities: dict[str, dict[int, int]] = {}
        # Per leaf, what searches derived from its jobs, by key (leaf_derived).
        self._derived: dict[str, dict[str, Any]] = {}
        self._stale: list[Iterable[Job]] = []  # jobs to re-key before the next read
        for job in ssn.jobs.values():
            if self.member(job):
                self._join_unread(job.queue or "", job)

    def member(self, job: Job) -> bool:
        return potential_victim(self.ssn, job)

    def _join_unread(self, leaf: str, job: Job) -> None:
        unread = self._unread.get(leaf)
        if unread is None:
            unread = self._unread[leaf] = {}
            self._names[leaf] = None
        unread[job] = next(self._seq)
        self._count(leaf, job, 1)

    def _count(self, leaf: str, job: Job, change: int) -> None:
        """``job`` joins (``change`` 1) or leaves (-1) leaf ``leaf``'s priority counts."""
        counts = self._priorities.setdefault(leaf, {})
        left = counts.get(job.priority, 0) + change
        if left:
            counts[job.priority] = left
        else:
            del counts[job.priority]

    def leaf(self, name: str) -> list[tuple[Any, int, Job]]:
        """The sorted entries of leaf ``name`` (keyed on its first read)."""
        entries = self.leaves.get(name)
        if entries is None:
            unread = self._unread.pop(name, {})
            jobs = list(unread)
            entries = list(zip(map(self.key, jobs), unread.values(), jobs))
            self.entries.update(zip(jobs, entries))
            entries.sort()
            self.leaves[name] = entries
            self._names[name] = None
        return entries

    def leaf_jobs(self, name: str) -> list[Job]:
        """The jobs of leaf ``name`` (read or not), in no particular order."""
        entries = self.leaves.get(name)
        if entries is not None:
            return [job for _, _, job in entries]
        return list(self._unread.get(name, ()))

    def leaf_derived(self, name: str, key: str, make: Callable[[], _T]) -> _T:
        """``make()``, derived from the jobs of leaf ``name`` and their pods alone: kept
        until a job of the leaf changes (:meth:`update`)."""
        derived = self._derived.setdefault(name, {})
        found = derived.get(key)
        if found is None:
            found = derived[key] = make()
        return found

    def leaf_names(self) -> list[str]:
        """The leaves holding a job, in the order they first did."""
        leaves, unread = self.leaves, self._unread
        return [name for name in self._names if leaves.get(name) or unread.get(name)]

    def lowest_priority(self, name: str) -> int | None:
        """The lowest priority of leaf ``name``'s jobs; None when it has none."""
        counts = self._priorities.get(name)
        return min(counts) if counts else None

    def update(self, jobs: Iterable[Job]) -> None:
        """Re-key ``jobs`` (their tasks changed status): leave, move or join the pool.

        Done when the pool is read next (:meth:`candidates`), on the jobs' state then:
        an action commits a statement, updates the pool with the jobs it touched, and
        reads it for its next job; no job changes in between without being updated.
        """
        self._stale.append(jobs)

    def _refresh(self) -> None:
        if not self._stale:
            return
        stale = dict.fromkeys(job for jobs in self._stale for job in jobs)
        self._stale = []
        gone: dict[str, list[tuple[Any, int, Job]]] = {}
        new: dict[str, list[tuple[Any, int, Job]]] = {}
        for job in stale:
            leaf = job.queue or ""
            self._derived.pop(leaf, None)
            unread = self._unread.get(leaf)
            if unread is not None:  # a leaf not read yet: its jobs wait unkeyed
                if unread.pop(job, None) is not None:
                    self._count(leaf, job, -1)
                if self.member(job):
                    self._join_unread(leaf, job)
                continue
            old = self.entries.pop(job, None)
            if old is not None:
                gone.setdefault(leaf, []).append(old)
                self._count(leaf, job, -1)
            if self.member(job):
                new.setdefault(leaf, []).append(self._enter(job))
                self._count(leaf, job, 1)
        for leaf in gone.keys() | new.keys():
            self._names[leaf] = None
            entries = self.leaves.setdefault(leaf, [])
            removed, added = gone.get(leaf, []), new.get(leaf, [])
            if len(removed) + len(added) <= _FEW_CHANGES:
                for old in removed:
                    i = bisect_left(entries, old)
                    assert entries[i] is old
                    del entries[i]
                for entry in added:
                    insort(entries, entry)
            else:  # one pass instead of moving the list's tail per change
                dropped = {id(old) for old in removed}
                kept = [e for e in entries if id(e) not in dropped]
                kept.extend(added)
                kept.sort()
                entries[:] = kept

    def candidates(
        self,
        accept: Callable[[Job], bool],
        leaf_ok: Callable[[str], bool] | None = None,
        accept_in: Callable[[str], Callable[[Job], bool]] | None = None,
    ) -> VictimCandidates:
        self._refresh()
        return VictimCandidates(self, accept, leaf_ok, accept_in)

    def __len__(self) -> int:
        self._refresh()
        return len(self.entries) + sum(len(jobs) for jobs in self._unread.values())


#: Pool changes of one leaf applied one by one (more: the leaf is rebuilt).
_FEW_CHANGES = 32


class VictimCandidates:
    """The pool's jobs that ``accept`` (evaluated lazily, once per job) for one preemptor.

    ``accept_in(leaf)``, where given, is ``accept`` for the jobs of one leaf queue
    (made on the leaf's first job: what a filter answers per queue is asked once).

    Iterating it evaluates the filter on every pool job: generators that need the whole
    candidate list may do so, the victim queue does not.
    """

    def __init__(
        self,
        pool: VictimPool,
        accept: Callable[[Job], bool],
        leaf_ok: Callable[[str], bool] | None = None,
        accept_in: Callable[[str], Callable[[Job], bool]] | None = None,
    ) -> None:
        self.pool = pool
        self._accept = accept
        self._accept_in = accept_in
        self._leaf_accepts: dict[str, Callable[[Job], bool]] = {}
        self.memo: dict[Job, bool] = {}
        # tasks_to_evict of whole jobs: the session state is the same whenever a victim
        # queue of this search is read (simulations are undone before it goes on).
        # With the batch (and its prepared additions) when the whole job is evicted.
        self.evictions: dict[Job, Eviction] = {}
        # Per leaf, its accepted jobs as read so far (see :class:`_LeafSteps`).
        self.steps: dict[str, _LeafSteps] = {}
        # Per leaf (by its entries' list), where its accepted jobs are (see _Accepted).
        self.accepted: dict[int, _Accepted] = {}
        # Leaf queues that may hold accepted jobs (``leaf_ok`` False: accept rejects all).
        self.leaves = [name for name in pool.leaf_names() if leaf_ok is None or leaf_ok(name)]

    def accepted_in(self, entries: list[tuple[Any, int, Job]]) -> _Accepted:
        """Where the accepted jobs of the leaf with ``entries`` are, as read so far."""
        accepted = self.accepted.get(id(entries))
        if accepted is None:
            accepted = self.accepted[id(entries)] = _Accepted(entries)
        return accepted

    def accepts(self, job: Job) -> bool:
        ok = self.memo.get(job)
        if ok is None:
            if self._accept_in is None:
                ok = self.memo[job] = bool(self._accept(job))
            else:
                leaf = job.queue or ""
                accept = self._leaf_accepts.get(leaf)
                if accept is None:
                    accept = self._leaf_accepts[leaf] = self._accept_in(leaf)
                ok = self.memo[job] = bool(accept(job))
        return ok

    def __iter__(self):
        for name in self.leaves:
            for _, _, job in reversed(self.pool.leaf(name)):
                if self.accepts(job):
                    yield job

    def queue(self, ssn: Session) -> PoolVictimQueue:
        return PoolVictimQueue(ssn, self)


class _LeafSteps:
    """The accepted jobs of one leaf in victim order (positions descending) with their
    evictions, read once per search: every probe's victim queue reads the same leaf.

    Steps that evict a one-pod job whole (one task on a node, whole GPUs freed) are
    *simple*: their node, GPUs freed and resource row are also kept, as arrays once
    long runs of them are added at once (:meth:`AccumulatedState.add_steps`), and
    their pod is indexed to its step.
    """

    __slots__ = (
        "entries",
        "_cands",
        "_accepted",
        "positions",
        "neg",
        "gots",
        "batches",
        "simple_at",
        "_simple",
        "_arrays",
    )

    def __init__(
        self, entries: list[tuple[Any, int, Job]], cands: VictimCandidates, width: int
    ) -> None:
        self.entries = entries
        # Weakly: the candidates keep their leaves' steps (a strong reference back would
        # be a cycle, left to the garbage collector after the session).
        self._cands = weakref.ref(cands)
        self._accepted = cands.accepted_in(entries)  # shared with the queues' leaves
        self.positions: list[int] = []  # descending
        self.neg: list[int] = []  # the same, negated (ascending, for bisect)
        self.gots: list[Eviction] = []
        self.batches: list[VictimBatch | None] = []  # per step, its batch (gots' third)
        self.simple_at: dict[Task, int] = {}  # a simple step's pod -> the step
        self._simple: list[bool] = []  # per step, whether it is simple
        # Per step: simple, and the node, GPUs freed and resource row of a simple one.
        self._arrays = _StepArrays(width)

    def at_or_below(self, pos: int) -> int:
        """Index of the first accepted position <= ``pos`` (len(positions) if unread)."""
        return bisect_left(self.neg, -pos)

    def arrays(self) -> _StepArrays:
        """The per-step columns of every step read so far, as arrays."""
        arrays = self._arrays
        if arrays.size < len(self.positions):
            arrays.extend(self._simple, self.gots)
        return arrays

    def extend(self, ssn: Session) -> bool:
        """Read down to the next accepted job; False when the leaf has no more."""
        return self.read(ssn, 1) > 0

    def read(self, ssn: Session, count: int) -> int:
        """Read up to ``count`` more accepted jobs; how many there were (compiled:
        :mod:`kai._fast.leaf`)."""
        compiled = _fast.module("leaf")
        if compiled is not None:
            return compiled.read(self, ssn, count)
        cands = self._cands()
        assert cands is not None  # they outlive their steps
        accepted, accepts, memo = self._accepted, cands.accepts, cands.evictions
        entries, positions, gots = self.entries, self.positions, self.gots
        below = (positions[-1] if positions else len(entries)) - 1
        for done in range(count):
            pos = accepted.at_or_below(below, accepts)
            if pos < 0:
                return done
            job = entries[pos][2]
            got = memo.get(job)
            if got is None:
                got = memo[job] = whole_job_eviction(ssn, job)
            positions.append(pos)
            self.neg.append(-pos)
            gots.append(got)
            self.batches.append(got[2])
            simple = simple_step(job, got)
            self._simple.append(simple)
            if simple:
                self.simple_at[got[0][0]] = len(gots) - 1
            below = pos - 1
        return count


def simple_step(job: Job, eviction: Eviction) -> bool:
    """Whether ``eviction`` of ``job`` is a simple step of a victim leaf: the job's one
    pod, on a node, evicted whole, freeing a whole number of GPUs."""
    _, more, _, prepared = eviction
    return (
        prepared is not None
        and not more
        and len(prepared.items) == 1
        and len(job.tasks) == 1
        and prepared.sums[0][2]  # whole GPUs
    )


class _StepArrays:
    """:class:`_LeafSteps` columns as arrays, valid for the first ``size`` steps (their
    capacity doubled as needed)."""

    __slots__ = ("size", "simple", "node", "freed", "rows")

    def __init__(self, width: int) -> None:
        self.size = 0
        self.simple = np.zeros(0, dtype=np.bool_)
        self.node = np.zeros(0, dtype=np.intp)
        self.freed = np.zeros(0, dtype=np.float64)
        self.rows = np.zeros((0, width), dtype=np.float64)  # one row per resource

    def extend(self, simple: list[bool], gots: list[Eviction]) -> None:
        """Take in the steps from ``size`` on (``simple`` and ``gots`` of the leaf;
        compiled: :mod:`kai._fast.leaf`)."""
        compiled = _fast.module("leaf")
        if compiled is not None:
            compiled.extend_arrays(self, simple, gots)
            return
        start, end = self.size, len(simple)
        self.grow(end)
        self.simple[start:end] = simple[start:end]
        for i in range(start, end):
            if simple[i]:
                node, freed, row = gots[i][3].items[0]  # type: ignore[union-attr]
                self.node[i] = node
                self.freed[i] = freed
                self.rows[i] = row
        self.size = end

    def grow(self, end: int) -> None:
        """Room for ``end`` steps (the first ``size`` kept, the rest zeros)."""
        if end <= len(self.simple):
            return
        start, capacity = self.size, max(64, 2 * len(self.simple), end)

        def grown(old: np.ndarray) -> np.ndarray:
            out = np.zeros((capacity, *old.shape[1:]), dtype=old.dtype)
            out[:start] = old[:start]
            return out

        self.simple = grown(self.simple)
        self.node = grown(self.node)
        self.freed = grown(self.freed)
        self.rows = grown(self.rows)


class _Pushed:
    """A job view pushed back into a leaf (the rest of a peeled elastic job)."""

    __slots__ = ("key", "seq", "job")

    def __init__(self, key: Any, seq: int, job: Job) -> None:
        self.key = key
        self.seq = seq
        self.job = job

    def __lt__(self, other: _Pushed) -> bool:  # a heap of the largest key first
        return (other.key, other.seq) < (self.key, self.seq)


class _Accepted:
    """The positions of one leaf's accepted jobs, descending, as far as read: every victim
    queue of a search, and its steps (:class:`_LeafSteps`), read the leaf from the top
    through the same filter, and find the next accepted job without asking the filter
    about the rejected ones again."""

    __slots__ = ("entries", "neg", "low")

    def __init__(self, entries: list[tuple[Any, int, Job]]) -> None:
        self.entries = entries  # held: its id keys this in VictimCandidates.accepted
        self.neg: list[int] = []  # the positions negated (ascending, for bisect)
        self.low = len(entries)  # every position >= low has been read

    def at_or_below(self, pos: int, accepts: Callable[[Job], bool]) -> int:
        """The highest accepted position <= ``pos``; -1 when there is none."""
        if pos < 0:
            return -1
        entries, neg = self.entries, self.neg
        if pos >= self.low:  # (below ``low`` nothing is read yet)
            i = bisect_left(neg, -pos)
            if i < len(neg):
                return -neg[i]
        while self.low > 0:
            self.low -= 1
            p = self.low
            if accepts(entries[p][2]):
                neg.append(-p)
                if p <= pos:
                    return p
        return -1


class _Leaf:
    __slots__ = ("entries", "pos", "cands", "pushed", "head")

    def __init__(self, entries: list[tuple[Any, int, Job]], cands: VictimCandidates) -> None:
        self.entries = entries
        self.pos = len(entries) - 1
        self.cands = cands
        self.pushed: list[_Pushed] = []
        self.head: tuple[Any, int, Job] | None = None  # (key, seq, view) of the base head

    def _base_head(self) -> tuple[Any, int, Job] | None:
        if self.head is None and self.pos >= 0:
            cands = self.cands
            self.pos = cands.accepted_in(self.entries).at_or_below(self.pos, cands.accepts)
            if self.pos >= 0:
                key, seq, job = self.entries[self.pos]
                self.head = (key, seq, job_view(job, job.tasks))
        return self.head

    def _pick(self) -> int:
        """0: empty, 1: the base head, 2: the pushed head."""
        base = self._base_head()
        if self.pushed:
            top = self.pushed[0]
            if base is None or (base[0], base[1]) < (top.key, top.seq):
                return 2
        return 1 if base is not None else 0

    def peek(self) -> Job | None:
        which = self._pick()
        if which == 0:
            return None
        if which == 2:
            return self.pushed[0].job
        assert self.head is not None
        return self.head[2]

    def pop(self) -> Job:
        which = self._pick()
        if which == 2:
            return heapq.heappop(self.pushed).job
        assert self.head is not None
        view = self.head[2]
        self.head = None
        self.pos -= 1
        return view


class PoolVictimQueue(JobQueue):
    """A victim-mode job queue reading a :class:`VictimPool` through a candidate filter."""

    def __init__(self, ssn: Session, cands: VictimCandidates) -> None:
        super().__init__(ssn, [], victim_mode=True)
        self.cands = cands
        self.key = cands.pool.key
        self._pushed_seq = count(-1, -1)  # pushed views rank below base jobs on equal keys
        self.leaves: dict[str, _Leaf] = {}
        for leaf in cands.leaves:
            self.leaves[leaf] = _Leaf(cands.pool.leaf(leaf), cands)
            self._link(leaf)

    def push(self, job: Job) -> None:
        leaf_name = job.queue or ""
        leaf = self.leaves.get(leaf_name)
        if leaf is None:
            leaf = self.leaves[leaf_name] = _Leaf([], self.cands)
            self._link(leaf_name)
        heapq.heappush(leaf.pushed, _Pushed(self.key(job), next(self._pushed_seq), job))

    def empty(self) -> bool:
        return all(leaf.peek() is None for leaf in self.leaves.values())

    def fast_forward(
        self, state: AccumulatedState, recorded: set[Task], *, single: bool = False
    ) -> bool:
        """Add whole-job batches to ``state`` straight from a single leaf while its
        counting bound fails (no state would be yielded), or only the next one if
        ``single``; True when it stopped because the bound holds after a batch (or one
        was added), False when the next job needs the full pop logic (partial eviction,
        recorded victims, pushed views, several leaves) or none is left.

        With one leaf no queue-order comparison ever happens, so popping is reading the
        leaf in order, as :meth:`pop` would.
        """
        if len(self.leaves) != 1:
            return False
        ((name, leaf),) = self.leaves.items()
        if leaf.pushed:
            return False
        steps = self.cands.steps.get(name)
        if steps is None or steps.entries is not leaf.entries:
            width = len(self.ssn.state.resources)
            steps = self.cands.steps[name] = _LeafSteps(leaf.entries, self.cands, width)
        leaf.head = None
        done, leaf.pos = state.add_steps(steps, leaf.pos, recorded, single=single)
        return done

    def __len__(self) -> int:
        raise TypeError("the length of a pool victim queue is not known without filtering")

    def _leaf_head(self, name: str) -> Job | None:
        leaf = self.leaves.get(name)
        return leaf.peek() if leaf is not None else None

    def pop(self) -> Job | None:
        best = self._best_among(self.children.get(None, []), {})
        if best is None:
            return None
        leaf_name, _ = best
        job = self.leaves[leaf_name].pop()
        self.popped.setdefault(leaf_name, []).append(job)
        return job
