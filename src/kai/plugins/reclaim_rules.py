"""Reclaim rules of the proportion plugin: who may reclaim, from whom, and which
victim sets are acceptable.

* ``can_reclaim``: the reclaimer's queue stays within its fair share with the job (and,
  for a non-preemptible job, its non-preemptible usage within quota).
* Leveled queues: reclaimer and reclaimee are compared at the level where their paths
  from the root part (siblings under their lowest common ancestor).
* ``filter_victim`` (pre-filter of candidate jobs) and the strategies: a victim chunk
  may be taken if the reclaimee stays over its fair share (*maintain fair share*), or
  the reclaimer stays within its quota while the reclaimee stays over its quota
  (*guarantee deserved quota*).
* ``reclaimable`` (scenario validator), on the queue state cloned when the solution
  search of the job starts: every chunk of every victim is checked against what the
  reclaimee queue would still hold, then subtracted up the tree; finally the reclaimer
  must not end up more saturated (allocated / fair share, times the multiplier) than a
  sibling it took from.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from kai.api.model import QUEUE_RESOURCES, Job, Task, queue_path
from kai.plugins.proportion import within_bound

if TYPE_CHECKING:
    from kai.framework import Session
    from kai.plugins.proportion import ProportionPlugin, QueueShare

UNLIMITED = -1.0
EPS = 1e-9


def _le(value: np.ndarray, bound: np.ndarray) -> bool:
    """value <= bound in every resource, -1 bounds being unlimited."""
    return within_bound(bound.tolist(), value.tolist())


def _le_with(held: np.ndarray, request: list[float], bound: np.ndarray) -> bool:
    """:func:`_le` of ``held + request``, added in Python floats (the same additions as
    on the arrays, without numpy's cost per call on three values)."""
    return within_bound(bound.tolist(), [h + r for h, r in zip(held.tolist(), request)])


def _le_rows(values: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """:func:`_le` of each row of ``values``."""
    return np.all((bound == UNLIMITED) | (values <= bound + EPS), axis=1)


def fits_maintain_fair_share(reclaimee: QueueShare, remaining: np.ndarray) -> bool:
    """The reclaimee would still hold more than its allocatable share somewhere."""
    return not _le(remaining, reclaimee.allocatable_share())


def reclaimer_fits_deserved(reclaimer: QueueShare, request: np.ndarray) -> bool:
    return _le(reclaimer.allocated + request, reclaimer.deserved)


def reclaimee_exceeds_deserved(reclaimee: QueueShare, remaining: np.ndarray) -> bool:
    return not _le(remaining, reclaimee.deserved)


def fits_strategy(
    request: np.ndarray, reclaimer: QueueShare, reclaimee: QueueShare, remaining: np.ndarray
) -> bool:
    if fits_maintain_fair_share(reclaimee, remaining):
        return True
    return reclaimer_fits_deserved(reclaimer, request) and reclaimee_exceeds_deserved(
        reclaimee, remaining
    )


def saturation(allocated: float, fair_share: float) -> float:
    if fair_share == 0:
        return float("inf") if allocated > 0 else 0.0
    if fair_share == UNLIMITED:
        return 0.0
    return allocated / fair_share


def _involved(vectors: list[np.ndarray] | np.ndarray) -> set[int]:
    """The resources some vector of ``vectors`` (or row of a matrix) is positive in."""
    if not len(vectors):
        return set()
    if len(vectors) == 1:
        return {int(r) for r in np.flatnonzero(vectors[0] > 0)}
    matrix = vectors if isinstance(vectors, np.ndarray) else np.vstack(vectors)
    return {int(r) for r in np.flatnonzero((matrix > 0).any(axis=0))}


class _FrozenRows(NamedTuple):
    """The rows of proportion's shares that a session changes (``_ShareRows``), copied:
    every share's arrays are rows of those matrices, changed only in place."""

    fair_share: np.ndarray
    allocated: np.ndarray
    allocated_non_preemptible: np.ndarray
    request: np.ndarray

    @classmethod
    def of(cls, plugin: ProportionPlugin) -> _FrozenRows:
        rows = plugin.share_rows
        return cls(
            rows.fair_share.copy(),
            rows.allocated.copy(),
            rows.allocated_non_preemptible.copy(),
            rows.request.copy(),
        )

    def shares(self, live: dict[str, QueueShare]) -> dict[str, QueueShare]:
        """Each of ``live``'s shares as these rows left it (``QueueShare.clone`` of it
        then)."""
        return {
            name: share.clone_with(
                self.fair_share[share.rank],
                self.allocated[share.rank],
                self.allocated_non_preemptible[share.rank],
                self.request[share.rank],
            )
            for name, share in live.items()
        }


class ReclaimRules:
    def __init__(self, plugin: ProportionPlugin, ssn: Session) -> None:
        self.plugin = plugin
        self.ssn = ssn
        self.multiplier = plugin.saturation_multiplier
        # Queue state as it was when the current job's solution search started: the
        # shares' rows copied then (_FrozenRows), made into shares when first read.
        self._frozen: dict[str, QueueShare] | None = None
        self._frozen_rows: _FrozenRows | None = None
        self._request_memo: tuple[Job, tuple[int, int], np.ndarray] | None = None
        self._leveled: dict[tuple[str, str], tuple[str | None, str | None]] = {}
        self._victim_memo: dict[tuple[Job, str, str], tuple[tuple[int, ...], bool]] = {}
        # reclaimable's answers in the current search (see :meth:`reclaimable`).
        self._answers: dict[tuple[Job, tuple[Task, ...], bytes], bool] = {}

    # ----------------------------------------------------------------- helpers
    @property
    def frozen(self) -> dict[str, QueueShare] | None:
        """The queues as they were when the current job's solution search started (None
        outside a search).  Copies of the shares' rows are taken at the start, and made
        into shares the first time a search reads them: most searches of preempt and
        consolidation never do, and each starts with a copy of four small matrices
        rather than a clone of every share."""
        rows = self._frozen_rows
        if rows is not None:
            self._frozen_rows = None
            self._frozen = rows.shares(self.plugin.shares)
        return self._frozen

    def _shares(self) -> dict[str, QueueShare]:
        return self.frozen if self.frozen is not None else self.plugin.shares

    def request(self, job: Job) -> np.ndarray:
        """The job's next chunk (cached per job state by the proportion plugin).

        Also remembered per (job, version of its queue, decisions so far): a status change
        of one of the job's tasks fires an event that bumps the version, and a commit
        (which clears eviction marks without events) adds decisions.
        """
        ssn = self.ssn
        if job.queue not in ssn.queues:
            return self.plugin.job_request(job)
        version = (ssn.queue_versions[job.queue], len(ssn.decisions))
        memo = self._request_memo
        if memo is not None and memo[0] is job and memo[1] == version:
            return memo[2]
        request = self.plugin.job_request(job)
        self._request_memo = (job, version, request)
        return request

    def path(self, shares: dict[str, QueueShare], queue: str) -> list[str]:
        return queue_path(shares, queue)

    def leveled(
        self, shares: dict[str, QueueShare], reclaimer: str, reclaimee: str
    ) -> tuple[str | None, str | None]:
        a, b = self.path(shares, reclaimer), self.path(shares, reclaimee)
        left = right = None
        for x, y in zip(a, b):
            left, right = x, y
            if x != y:
                break
        return left, right

    # ------------------------------------------------------- extension points
    def on_job_solution_start(self) -> None:
        self._frozen = None
        self._frozen_rows = _FrozenRows.of(self.plugin)
        self._answers = {}

    def can_reclaim(self, job: Job) -> bool:
        share = self.plugin.shares.get(job.queue or "")
        if share is None:
            return False
        # Asked of every pending job each reclaim: the request as Python floats.
        request = self.plugin.job_request_values(job)
        if not _le_with(share.allocated, request, share.fair_share):
            return False
        if job.preemptible:
            return True
        return _le_with(share.allocated_non_preemptible, request, share.deserved)

    def filter_victim(self, reclaimer: Job, victim: Job) -> bool:
        """Whether ``victim`` may be reclaimed from: :meth:`filter_victim_queue` of its
        queue."""
        return self.filter_victim_queue(reclaimer, victim.queue)

    def filter_victim_queue(self, reclaimer: Job, queue: str | None) -> bool:
        """Whether victims in ``queue`` may be reclaimed from (which only depends on the
        two queues compared and the reclaimer's request).

        Remembered per (reclaimer, compared queues) while neither queue's version (bumped
        by every allocate or deallocate event below it, so also by any change of the
        reclaimer's tasks) nor the number of decisions changed.
        """
        shares = self.plugin.shares
        if reclaimer.queue not in shares or queue not in shares:
            return True
        pair = (reclaimer.queue, queue)
        leveled = self._leveled.get(pair)
        if leveled is None:
            leveled = self._leveled[pair] = self.leveled(shares, *pair)
        lr, lv = leveled
        if lr is None or lv is None:
            return True
        versions = self.ssn.queue_versions
        stamp = (versions[lr], versions[lv], versions[pair[0]], len(self.ssn.decisions))
        key = (reclaimer, lr, lv)
        memo = self._victim_memo.get(key)
        if memo is not None and memo[0] == stamp:
            return memo[1]
        ok = self._filter_victim(reclaimer, shares[lr], shares[lv])
        self._victim_memo[key] = (stamp, ok)
        return ok

    def _filter_victim(self, reclaimer: Job, r_share: QueueShare, v_share: QueueShare) -> bool:
        request = self.request(reclaimer)
        if not reclaimer_fits_deserved(r_share, request):
            return fits_maintain_fair_share(v_share, v_share.allocated)
        under = False
        for r in range(len(QUEUE_RESOURCES)):
            if request[r] <= 0 or v_share.deserved[r] == UNLIMITED:
                continue
            if v_share.allocated[r] > v_share.deserved[r] + EPS:
                return True
            if v_share.allocated[r] < v_share.deserved[r] - EPS:
                under = True
        return not under

    def chunks(self, job: Job, tasks: list[Task]) -> list[np.ndarray]:
        """Victim pods beyond minMember one chunk each (newest first), the core one chunk."""
        from kai.plugins.proportion import queue_vector

        if len(tasks) == 1 and job.min_member >= 0:
            # what the general case gives for one task, without sorting
            vec = queue_vector(self.ssn, tasks[0])
            return [np.zeros(3) + vec] if job.min_member else [vec]
        ordered = self.ssn.sorted_tasks(tasks)
        core = min(job.min_member, len(ordered))
        out = [queue_vector(self.ssn, t) for t in reversed(ordered[core:])]
        if core:
            out.append(sum((queue_vector(self.ssn, t) for t in ordered[:core]), np.zeros(3)))
        return out

    def reclaimable(self, pending: Job, victim_jobs: list[Job], victim_tasks: list[Task]) -> bool:
        """Whether reclaiming ``victim_tasks`` for ``pending`` keeps the queues fair.

        In a search (the queues frozen at its start) the answer reads nothing else but
        the reclaimer's request and what the victims charge their queues: it is kept by
        those, since many simulations of a search leave the same victims evicted.
        """
        shares = self._shares()
        if pending.queue not in shares:
            return False
        request = self.request(pending)
        if self.frozen is None:
            return self._reclaimable(shares, pending, request, victim_tasks)
        key = (pending, tuple(victim_tasks), request.tobytes())
        answer = self._answers.get(key)
        if answer is None:
            answer = self._answers[key] = self._reclaimable(shares, pending, request, victim_tasks)
        return answer

    def _queue_chunks(
        self, shares: dict[str, QueueShare], victim_tasks: list[Task]
    ) -> dict[str, _QueueChunks]:
        """The victims' chunks (:meth:`chunks`) per queue of ``shares``, each queue's
        jobs in key order."""
        by_queue: dict[str, list[tuple[Job, list[Task]]]] = {}
        for pair in _by_job_in_key_order(victim_tasks):
            queue = pair[0].queue
            if queue in shares:
                pairs = by_queue.get(queue)
                if pairs is None:
                    by_queue[queue] = [pair]
                else:
                    pairs.append(pair)
        out: dict[str, _QueueChunks] = {}
        for queue, pairs in by_queue.items():
            out[queue] = chunks = _QueueChunks()
            chunks.extend(self, pairs)
        return out

    def _reclaimable(
        self,
        shares: dict[str, QueueShare],
        pending: Job,
        request: np.ndarray,
        victim_tasks: list[Task],
    ) -> bool:
        own = pending.queue
        assert own is not None  # a queue of ``shares`` (reclaimable checked)
        by_queue = self._queue_chunks(shares, victim_tasks)
        remaining: dict[str, np.ndarray] = {}
        involved: dict[str, set[int]] = {}
        for vq in sorted(by_queue):
            lr, lv = self.leveled(shares, own, vq)
            if lr is None or lv is None:
                continue
            chunks = by_queue[vq].chunks()
            mine = involved[vq] = _involved(chunks)
            if lv not in remaining:
                remaining[lv] = shares[lv].allocated.copy()
            if not len(chunks):
                continue
            reclaimer, reclaimee = shares[lr], shares[lv]
            up = list(reversed(self.path(shares, vq)))
            for name in up:
                if name not in remaining:
                    remaining[name] = shares[name].allocated.copy()
                involved.setdefault(name, set()).update(mine)
            rows = [remaining[name] for name in up]
            held = remaining[lv]  # one of ``rows``
            # fits_strategy per chunk, on what the reclaimee holds before it; the rows
            # lose the chunks one by one.  The reclaimer's side does not depend on the
            # chunk.
            if isinstance(chunks, list):
                for chunk in chunks:
                    if not fits_strategy(request, reclaimer, reclaimee, held):
                        return False
                    for row in rows:
                        row -= chunk
                continue
            # fits_strategy for all chunks at once (``subtract.accumulate`` subtracts in
            # order).
            steps = np.subtract.accumulate(np.vstack([held, chunks]), axis=0)
            before = steps[:-1]
            maintained = ~_le_rows(before, reclaimee.allocatable_share())
            if not maintained.all():
                if not reclaimer_fits_deserved(reclaimer, request):
                    return False
                if not (~_le_rows(before[~maintained], reclaimee.deserved)).all():
                    return False
            for row in rows:
                if row is held:
                    row[...] = steps[-1]
                else:
                    row[...] = np.subtract.accumulate(np.vstack([row, chunks]), axis=0)[-1]
        requested = _involved([request])
        for name in reversed(self.path(shares, own)):
            share = shares[name]
            mine = remaining.get(name, share.allocated) + request
            for sib_name, sib_remaining in remaining.items():
                sib = shares[sib_name]
                if sib.parent != share.parent or sib_name == name:
                    continue
                for r in involved.get(sib_name, set()) | requested:
                    mf, sf = share.fair_share[r], sib.fair_share[r]
                    if mf == UNLIMITED and sf == UNLIMITED:
                        continue
                    ratio = saturation(mine[r], mf)
                    if (
                        ratio > 1
                        and sf > 0
                        and ratio * self.multiplier >= saturation(sib_remaining[r], sf)
                    ):
                        return False
            if not pending.preemptible and not _le(
                share.allocated_non_preemptible + request, share.deserved
            ):
                return False
        return True


#: Chunks of one victim queue checked one by one (more: as one matrix).
_FEW_CHUNKS = 8


class _QueueChunks:
    """The chunks of one victim queue's jobs (:meth:`ReclaimRules.chunks`), in order: as
    a list when there are few, else as one matrix, the chunks of one-pod jobs (the pod's
    queue vector) gathered for all of them at once."""

    __slots__ = ("items", "single")

    def __init__(self) -> None:
        # Chunks, or (pod, whether it is a core chunk) for a one-pod job's chunk.
        self.items: list[np.ndarray | tuple[Task, bool]] = []
        self.single = 0  # how many items are pods

    def add(self, rules: ReclaimRules, job: Job, tasks: list[Task]) -> None:
        self.extend(rules, [(job, tasks)])

    def extend(self, rules: ReclaimRules, pairs: list[tuple[Job, list[Task]]]) -> None:
        """The chunks of each job's ``tasks``, in order."""
        items, single = self.items, 0
        for job, tasks in pairs:
            if len(tasks) == 1 and job.min_member >= 0 and not tasks[0].is_shared_gpu:
                items.append((tasks[0], job.min_member > 0))
                single += 1
            else:
                items.extend(rules.chunks(job, tasks))
        self.single += single

    def chunks(self) -> list[np.ndarray] | np.ndarray:
        from kai.plugins.proportion import QUEUE_COLUMNS

        if len(self.items) <= _FEW_CHUNKS:
            out = []
            for item in self.items:
                if isinstance(item, tuple):
                    # queue_vector of a whole-GPU pod; a core chunk is a sum from zeros
                    vec = item[0].request[QUEUE_COLUMNS]
                    out.append(np.zeros(3) + vec if item[1] else vec)
                else:
                    out.append(item)
            return out
        if self.single == len(self.items):  # one-pod jobs only (most scenarios)
            items = self.items
            matrix = np.array([item[0].request for item in items])[:, QUEUE_COLUMNS]
            matrix[np.fromiter((item[1] for item in items), bool, len(items))] += 0.0
            return matrix
        matrix = np.empty((len(self.items), 3))
        if self.single:
            rows = [i for i, item in enumerate(self.items) if isinstance(item, tuple)]
            pods = [self.items[i][0].request for i in rows]
            matrix[rows] = np.array(pods)[:, QUEUE_COLUMNS]
            core = [i for i in rows if self.items[i][1]]
            matrix[core] += 0.0
        if self.single < len(self.items):
            for i, item in enumerate(self.items):
                if not isinstance(item, tuple):
                    matrix[i] = item
        return matrix


def _by_job_in_key_order(tasks: list[Task]) -> list[tuple[Job, list[Task]]]:
    """``tasks`` grouped by job (each group in the tasks' order), the jobs in key order."""
    jobs = [task.job for task in tasks]
    if len(set(jobs)) == len(jobs):  # one pod per job (the usual scenario): no grouping
        keys = [job.key for job in jobs]
        return [(jobs[i], [tasks[i]]) for i in sorted(range(len(jobs)), key=keys.__getitem__)]
    by_job: dict[Job, list[Task]] = defaultdict(list)
    for task in tasks:
        by_job[task.job].append(task)
    return [(job, by_job[job]) for job in sorted(by_job, key=lambda j: j.key)]


def register_reclaim_rules(plugin: ProportionPlugin, ssn: Session) -> None:
    # The session holds the rules through these functions; the plugin does not (that
    # would make a reference cycle with ``rules.plugin``).
    rules = ReclaimRules(plugin, ssn)
    ssn.add_can_reclaim_resources_fn(rules.can_reclaim)
    ssn.add_reclaim_victim_filter_fn(rules.filter_victim, by_queue=rules.filter_victim_queue)
    # The validator reads the queues as they were when the job's search started (frozen),
    # and of the pods only their statuses (the reclaimer's next request, kept by its
    # queue's version): a simulation may be judged without its statement.
    ssn.add_reclaim_scenario_validator_fn(rules.reclaimable, reads_pods_only=True)
    ssn.add_on_job_solution_start_fn(rules.on_job_solution_start)
