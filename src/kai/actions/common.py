"""Pieces shared by the actions: the job queue, tasks to allocate, job allocation."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from datetime import timedelta
from operator import itemgetter

import numpy as np

from kai import _fast
from kai.actions.fast_allocate import AlikePicks, NodePicker
from kai.api.model import ACTIVE_ALLOCATED, ALIVE, Job, Task, TaskStatus
from kai.api.resources import INSUFFICIENT_RESOURCES, describe_failures
from kai.framework.session import Session, chained_order_key, tasks_to_allocate
from kai.framework.statement import Statement


# ----------------------------------------------------------------- job selection
def job_unready_reason(job: Job) -> str | None:
    """Why a job cannot be scheduled as it stands (too few pods for its gang)."""
    alive = job.count(ALIVE)
    if alive < job.min_member:
        return (
            f"PodGroup has {alive} alive pod(s) but minMember is {job.min_member}; "
            "waiting for the rest of the gang to be created"
        )
    return None


PENDING_AT_START = "kai.jobs-with-pending-tasks"


def schedulable_jobs(
    ssn: Session,
    *,
    pending_only: bool = True,
    preemptible_only: bool = False,
    check_preemption_delay: bool = False,
) -> list[Job]:
    """Jobs an action may try, in no particular order, with the usual filters.

    No task becomes pending during a session (a rolled-back allocation returns a task
    that was pending at the start), so the jobs with a pending task at the first call
    are kept and later calls (one per action) look only at those; an invalid job's
    reason is recorded by the first call.
    """
    with_pending: list[Job] | None = ssn.cache.get(PENDING_AT_START)
    first = with_pending is None
    if with_pending is None:
        with_pending = ssn.cache[PENDING_AT_START] = []
    jobs = ssn.jobs.values() if first or not pending_only else with_pending
    compiled = _fast.module("loop")
    scan = scan_jobs if compiled is None else compiled.scan_jobs
    return scan(
        ssn,
        jobs,
        with_pending if first else None,
        pending_only,
        preemptible_only,
        _later_checks(ssn, check_preemption_delay),
    )


def scan_jobs(
    ssn: Session,
    jobs: Iterable[Job],
    with_pending: list[Job] | None,
    pending_only: bool,
    preemptible_only: bool,
    check: Callable[[Job], str | None] | None,
) -> list[Job]:
    """The jobs of ``jobs`` that pass :func:`schedulable_jobs`' filters, in order, with
    the fit error of each one that a filter refuses recorded; ``with_pending`` (when
    given) receives every job with a pending task, and ``check`` (when given) is asked
    last.

    The reference of ``kai._fast.loop.scan_jobs``, which does the same.
    """
    out = []
    pending_status = TaskStatus.PENDING
    for job in jobs:
        if job.invalid_reason:
            ssn.record_fit_error(job, job.invalid_reason)
            continue
        tasks = job.tasks
        if len(tasks) == 1:  # most jobs: one status to test
            status = tasks[0].status
            alive = 1 if status in ALIVE else 0
            has_pending = status is pending_status
        else:
            alive = 0
            has_pending = False
            for t in tasks:
                status = t.status
                if status in ALIVE:
                    alive += 1
                    if status is pending_status:
                        has_pending = True
        if with_pending is not None and has_pending:
            with_pending.append(job)
        if pending_only and not has_pending:
            continue
        if alive < job.min_member:
            ssn.record_fit_error(job, job_unready_reason(job))  # type: ignore[arg-type]
            continue
        if preemptible_only and not job.preemptible:
            continue
        if check is not None:
            problem = check(job)
            if problem:
                ssn.record_fit_error(job, problem)
                continue
        out.append(job)
    return out


def _later_checks(ssn: Session, check_preemption_delay: bool) -> Callable[[Job], str | None] | None:
    """The checks :func:`scan_jobs` asks of a job last (its preemption delay, and the
    plugins' job_valid), or None when there are none."""
    check_valid = bool(ssn.registered("job_valid"))
    if not check_valid and not check_preemption_delay:
        return None

    def check(job: Job) -> str | None:
        if check_preemption_delay and job.preemption_delay:
            base = max(
                (t for t in (job.creation_timestamp, job.last_eviction_timestamp) if t),
                default=None,
            )
            if base is not None and ssn.now < base + timedelta(seconds=job.preemption_delay):
                return "PreemptionDelayNotElapsed"
        if check_valid:
            return ssn.job_valid(job)
        return None

    return check


class _Entry:
    __slots__ = ("job", "ssn", "reverse")

    def __init__(self, ssn: Session, job: Job, reverse: bool) -> None:
        self.ssn = ssn
        self.job = job
        self.reverse = reverse

    def __lt__(self, other: _Entry) -> bool:
        result = self.ssn.job_order(self.job, other.job)
        return result > 0 if self.reverse else result < 0


def link_leaf(children: dict[str | None, list[str]], path: list[str]) -> None:
    """Add a leaf queue's root-to-leaf ``path`` to a queue tree held as each queue's
    children (the roots under None), in the order the queues were met."""
    parent: str | None = None
    for name in path:
        kids = children.setdefault(parent, [])
        if name not in kids:
            kids.append(name)
        parent = name


class JobQueue:
    """Jobs ordered through the queue tree.

    Each pop descends from the top: at every level it takes the best child queue
    (the session's queue order, comparing the best job of each subtree), then pops the
    best job of the leaf by job order.  In victim mode both orders are reversed: the
    queue that would be served last, and inside it the worst job, come first.
    """

    def __init__(
        self,
        ssn: Session,
        jobs: Iterable[Job],
        *,
        victim_mode: bool = False,
        max_depth: int | None = None,
        reuse_comparisons: bool = False,
    ) -> None:
        self.ssn = ssn
        self.victim_mode = victim_mode
        self.max_depth = max_depth
        # Reuse a queue comparison while neither queue's subtree saw an allocate or
        # deallocate event and the jobs compared are the same: only when every
        # registered queue order function declares that it reads nothing but the two
        # queues' state (``fn.queue_local = True``) and the caller changes queue state
        # only through events (allocate does).  Decisions are unchanged.
        #
        # In victim mode a comparison also reads the two sides' victims: the jobs popped
        # from each side's best leaf so far and that leaf's next job.  Popped lists only
        # grow, so a leaf and its popped count name the same victims, and a comparison
        # is reused while those, the jobs and both queue versions are unchanged.  Victim
        # queues are always read that way (eviction searches change queue state only
        # through statements, whose events bump the versions).
        self._memo: dict[tuple[str, str], tuple] | None = None
        if reuse_comparisons or victim_mode:
            regs = ssn.registered("queue_order")
            if all(getattr(reg.fn, "queue_local", False) for reg in regs):
                self._memo = {}
        self.heaps: dict[str, list[_Entry]] = {}
        self.children: dict[str | None, list[str]] = {}
        self.popped: dict[str, list[Job]] = {}
        jobs = list(jobs)
        if len(jobs) < 2 or not self._push_sorted(jobs):
            for job in jobs:
                self.push(job)

    def _push_sorted(self, jobs: list[Job]) -> bool:
        """Push ``jobs`` as :meth:`push` would, by sorting each leaf's jobs on the job
        order's keys: a sorted list is a heap, and with no two keys equal every heap of
        the same jobs pops them in the same order.  False, with nothing pushed, when
        some job-order function has no key or two jobs of a leaf have equal keys."""
        keys = self.ssn.order_keys("job_order")
        if keys is None:
            return False
        key_of = chained_order_key(keys)
        leaves: dict[str, list[tuple[tuple, Job]]] = {}
        depth = self.max_depth
        for job in jobs:
            leaf = job.queue or ""
            entries = leaves.get(leaf)
            if entries is None:
                entries = leaves[leaf] = []
            if depth is None or len(entries) < depth:  # push keeps the first ones
                entries.append((key_of(job), job))
        reverse = self.victim_mode
        for entries in leaves.values():
            entries.sort(key=itemgetter(0), reverse=reverse)
            for (key, _), (following, _) in zip(entries, entries[1:]):
                if key == following:
                    return False
        ssn = self.ssn
        for leaf, entries in leaves.items():
            self.heaps[leaf] = [_Entry(ssn, job, reverse) for _, job in entries]
            self._link(leaf)
        return True

    def _link(self, leaf: str) -> None:
        link_leaf(self.children, self.ssn.queue_path(leaf))

    def push(self, job: Job) -> None:
        leaf = job.queue or ""
        heap = self.heaps.get(leaf)
        if heap is None:
            heap = self.heaps[leaf] = []
            self._link(leaf)
        if self.max_depth is not None and len(heap) >= self.max_depth:
            return
        heapq.heappush(heap, _Entry(self.ssn, job, self.victim_mode))

    def empty(self) -> bool:
        return not any(self.heaps.values())

    def __len__(self) -> int:
        return sum(len(h) for h in self.heaps.values())

    def jobs(self) -> list[Job]:
        """The jobs left, in no particular order."""
        return [entry.job for heap in self.heaps.values() for entry in heap]

    def _leaf_head(self, name: str) -> Job | None:
        """The next job of leaf queue ``name``; None when it has none (or is no leaf)."""
        heap = self.heaps.get(name)
        return heap[0].job if heap else None

    def _best(self, name: str, memo: dict) -> tuple[str, Job] | None:
        """The best (leaf, job) under queue ``name``: its own next job if it is a leaf
        with one, else the best among its children's."""
        if name in memo:
            return memo[name]
        job = self._leaf_head(name)
        result: tuple[str, Job] | None
        if job is not None:
            result = (name, job)
        else:
            result = self._best_among(self.children.get(name, []), memo)
        memo[name] = result
        return result

    def _best_among(self, names: list[str], memo: dict) -> tuple[str, Job] | None:
        best: tuple[str, Job] | None = None
        best_name = None
        for name in names:
            cand = self._best(name, memo)
            if cand is None:
                continue
            if best is None or self._better(name, cand, best_name, best):
                best, best_name = cand, name
        return best

    def _better(
        self, lname: str, left: tuple[str, Job], rname: str | None, right: tuple[str, Job]
    ) -> bool:
        """Whether queue ``lname`` (its best leaf and job: ``left``) goes before ``rname``."""
        if not rname:
            return False
        queues = self.ssn.queues
        lq, rq = queues.get(lname), queues.get(rname)
        if lq is None or rq is None:
            return False
        ljob, rjob = left[1], right[1]
        memo = self._memo
        if self.victim_mode:
            # Each side is its best leaf: the victims already taken from that leaf and
            # the leaf's next job, all as victims (no pending job).
            lpopped, rpopped = self.popped.get(left[0], ()), self.popped.get(right[0], ())
            if memo is not None:
                versions = self.ssn.queue_versions
                stamp: tuple = (
                    *left,
                    len(lpopped),
                    *right,
                    len(rpopped),
                    versions[lname],
                    versions[rname],
                )
                hit = memo.get((lname, rname))
                if hit is not None and hit[0] == stamp:
                    return hit[1]
            lvictims = [*lpopped, ljob]
            rvictims = [*rpopped, rjob]
            better = self.ssn.queue_order(lq, rq, None, None, lvictims, rvictims) > 0
        else:
            if memo is not None:
                versions = self.ssn.queue_versions
                stamp = (ljob, rjob, versions[lname], versions[rname])
                hit = memo.get((lname, rname))
                if hit is not None and hit[0] == stamp:
                    return hit[1]
            better = self.ssn.queue_order(lq, rq, ljob, rjob) < 0
        if memo is not None:
            memo[(lname, rname)] = (stamp, better)
        return better

    def pop_alike(self, job: Job) -> Job | None:
        """The job :meth:`pop` returns next when nothing changed since it returned
        ``job``, if that is the next job of ``job``'s leaf and the queue order reads the
        same of both (then every queue comparison repeats itself); else None."""
        if self.victim_mode:
            return None
        heap = self.heaps.get(job.queue or "")
        if not heap:
            return None
        key = self.ssn.queue_order_job_key(job)
        if key is None or self.ssn.queue_order_job_key(heap[0].job) != key:
            return None
        return heapq.heappop(heap).job

    def take_alike_leaf(self, job: Job, accept: Callable[[Job], bool]) -> list[Job] | None:
        """Every job left in ``job``'s leaf, taken out at once, when :meth:`pop_alike`
        after ``job`` would return each of them in turn and the caller would take each
        (``accept``): they all read as ``job`` does to the queue order.  Else None, and
        the queue is unchanged.  The order they would have come in is not worked out:
        for callers to whom it does not matter (it takes comparisons)."""
        if self.victim_mode:
            return None
        heap = self.heaps.get(job.queue or "")
        if not heap:
            return None
        key_of = self.ssn.queue_order_job_key
        key = key_of(job)
        if key is None:
            return None
        jobs = [entry.job for entry in heap]
        for other in jobs:
            if key_of(other) != key or not accept(other):
                return None
        heap.clear()
        return jobs

    def pop(self) -> Job | None:
        best = self._best_among(self.children.get(None, []), {})
        if best is None:
            return None
        leaf, _ = best
        entry = heapq.heappop(self.heaps[leaf])
        if self.victim_mode:
            self.popped.setdefault(leaf, []).append(entry.job)
        return entry.job


# ----------------------------------------------------------------- placement
def allocate_task(
    ssn: Session,
    stmt: Statement,
    task: Task,
    job: Job,
    *,
    pipeline_only: bool = False,
    within: np.ndarray | None = None,
    alike: AlikePicks | None = None,
) -> str | None:
    """Place one task on the best node; return why not, or None on success.  ``alike``:
    the picks of the run this placement is part of (:class:`AlikePicks`)."""
    problem = ssn.pre_predicate(task, job)
    if problem:
        return problem
    picker = NodePicker.for_session(ssn)
    picked = picker.pick(task, job, within, alike) if picker is not None else None
    if picked is not None and picked[0] >= 0:
        node, on_idle = picked  # the compiled choice: the same node as below
    else:
        result = ssn.filter_nodes(task, job, within=within)
        if not result.mask.any():
            failures = result.failures
            shortage = (
                ssn.resource_shortage(task, within=within)
                if INSUFFICIENT_RESOURCES in failures
                else ""
            )
            total = len(ssn.nodes) if within is None else int(np.count_nonzero(within))
            return describe_failures(failures, total, shortage)
        node = ssn.best_node(task, job, result.mask)
        on_idle = bool(result.fits_idle[node])
    if task.is_shared_gpu:
        return _place_shared(ssn, stmt, task, node, on_idle and not pipeline_only, pipeline_only)
    if on_idle and not pipeline_only:
        stmt.allocate(task, node)
    else:
        stmt.pipeline(task, node)
    return None


def _place_shared(
    ssn: Session, stmt: Statement, task: Task, node: int, node_idle: bool, pipeline_only: bool
) -> str | None:
    groups = ssn.ordered_gpu_groups(task, node, pipeline_only=pipeline_only)
    if not groups:
        return f"no GPU device on node {ssn.nodes.names[node]} has room for the fraction"
    chosen = groups[0]
    nodes = ssn.nodes
    portion = nodes.portion_on(task, node)
    if chosen is None:
        gpu = ssn.state.resources.index["nvidia.com/gpu"]
        device_idle = nodes.idle[node, gpu] >= 1.0 - 1e-9
    else:
        device_idle = nodes.gpu_groups[node][chosen].free_idle() + 1e-9 >= portion
    if node_idle and device_idle:
        stmt.allocate(task, node, chosen)
    else:
        stmt.pipeline(task, node, chosen)
    return None


def allocate_job(
    ssn: Session,
    stmt: Statement,
    job: Job,
    *,
    pipeline_only: bool = False,
    within: np.ndarray | None = None,
    record_errors: bool = True,
) -> bool:
    """Place the job's next chunk of tasks; all of them or (after rollback) none."""
    tasks = tasks_to_allocate(ssn, job)
    if not tasks:
        return False
    over = ssn.is_job_over_capacity(job, tasks)
    if over:
        if record_errors:
            ssn.record_fit_error(job, over)
        return False
    checkpoint = stmt.checkpoint()
    placed = 0
    for task in tasks:
        problem = allocate_task(ssn, stmt, task, job, pipeline_only=pipeline_only, within=within)
        if problem is not None:
            if record_errors:
                _record_failure(ssn, job, task, tasks, placed, problem)
            stmt.rollback(checkpoint)
            return False
        placed += 1
    return True


def _record_failure(
    ssn: Session, job: Job, task: Task, tasks: list[Task], placed: int, problem: str
) -> None:
    if len(tasks) > 1 or job.min_member > 1:
        needed = job.min_member - (job.active_allocated_count() - placed)
        ssn.record_fit_error(
            job,
            f"Resources were found for {placed} pods while {max(needed, len(tasks))} are "
            f"required for gang scheduling; pod {task.key}: {problem}",
        )
    else:
        ssn.record_fit_error(job, f"Resources were not found for pod {task.key} due to: {problem}")


def should_pipeline_job(job: Job) -> bool:
    """A gang that has a pipelined task but is not ready without it is pipelined whole."""
    has_pipelined = any(t.status is TaskStatus.PIPELINED for t in job.tasks)
    if not has_pipelined:
        return False
    ready_without = sum(
        1
        for t in job.tasks
        if t.status in ACTIVE_ALLOCATED and t.status is not TaskStatus.PIPELINED
    )
    return ready_without < job.min_member
