"""Shared driver of the eviction actions (reclaim, preempt, consolidation)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TypeVar

import numpy as np

from kai.actions.common import JobQueue, schedulable_jobs
from kai.actions.signatures import FailedRepresentatives
from kai.actions.solvers import ActionBudget, JobSolver, SearchLimits
from kai.actions.solvers.job_solver import STOP_REASONS
from kai.actions.solvers.pending import POOL_KEY, PendingPool
from kai.actions.solvers.simulate import Validator
from kai.actions.solvers.victims import VictimPool, potential_victim
from kai.api.model import Job, Task
from kai.framework.session import Session, tasks_to_allocate


def victim_invariant_problem(ssn: Session, job: Job, tasks: list[Task]) -> str | None:
    """A task larger than the largest node can never be placed, whatever is evicted."""
    alloc = ssn.nodes.allocatable
    if not len(alloc):
        return "no nodes"
    cached = ssn.cache.get("eviction.largest_node")
    if cached is None or cached[0] is not alloc:
        seen_requests: dict[int, tuple[np.ndarray, int]] = {}
        cached = ssn.cache["eviction.largest_node"] = (
            alloc,
            alloc.max(axis=0) + 1e-9,
            seen_requests,
        )
    _, limit, seen = cached
    names = ssn.state.resources.names
    for task in tasks:
        # Checked once per request vector (a workload's pods share theirs): every
        # passed-over check of every action asks again.
        request = task.request
        known = seen.get(id(request))
        if known is None or known[0] is not request:
            over = np.flatnonzero(request > limit)
            known = seen[id(request)] = (request, int(over[0]) if over.size else -1)
        if known[1] >= 0:
            return (
                f"MaxNodePoolResources: pod {task.key} requests more {names[known[1]]} "
                "than any node has"
            )
    return None


#: The last eviction action's victim pool and pending pool, each with the node table's
#: version when the action ended.
VICTIM_POOL_KEY = "eviction.victim_pool"
PENDING_POOL_KEY = "eviction.pending_pool"

_Kept = TypeVar("_Kept", VictimPool, PendingPool)


def _kept_pool(ssn: Session, key: str, kind: type[_Kept]) -> _Kept | None:
    """The pool of ``kind`` the last eviction action kept, while no pod has changed
    status since (every status change moves a pod on the node table, whose version it
    bumps), else a new one.  Membership and order keys read each job's own state only,
    and each action re-keys the jobs its commits touch."""
    kept = ssn.cache.pop(key, None)
    if kept is not None and kept[1] == ssn.nodes.version:
        return kept[0]
    return kind.for_session(ssn)


def run_eviction_action(
    ssn: Session,
    action: str,
    *,
    preemptible_only: bool,
    accept: Callable[[Job, Job], bool],
    validator: Callable[[Job], Validator],
    refuse: Callable[[Job], str | None] | None = None,
    precheck: Callable[[Job], bool] | None = None,
    candidates: Callable[[Job], list[Job]] | None = None,
    accept_leaf: Callable[[Job, str, VictimPool], bool] | None = None,
    accept_in: Callable[[Job, str], Callable[[Job], bool]] | None = None,
    signatures_per_queue: bool = True,
) -> None:
    """Pop pending jobs in queue order and search victims for each (see kai.actions.solvers).

    Victims of a preemptor are the potential victims (:func:`potential_victim`) that
    ``accept(preemptor, job)``.  They are read from a :class:`VictimPool` made on the
    first search and kept for the whole action (and the next one, while no pod has
    changed since: :func:`_kept_pool`), unless ``candidates`` gives the list itself
    or some job-order function has no sort key (then the list is built per job).
    ``accept_leaf(preemptor, queue, pool)``, if given, is False only for leaf queues
    none of whose jobs ``accept`` takes (``pool`` tells what the leaf holds).
    ``accept_in(preemptor, queue)``, if given, is ``accept(preemptor, ·)`` for the jobs
    of leaf queue ``queue``, made once per leaf and search.

    ``refuse(job)``, if given, is asked first: a job it gives a reason for (recorded as
    the job's fit error) is not tried and does not count as failed.  ``precheck(job)``,
    if given, is the attempt's first step (after the signature and victim-invariant
    checks): a job it turns away has failed.

    A job no easier to place than one whose search already failed in this execution is
    not tried (:mod:`kai.actions.signatures`); failed jobs are kept per leaf queue and
    signature, or per signature alone if not ``signatures_per_queue``.
    """
    jobs = schedulable_jobs(ssn, preemptible_only=preemptible_only, check_preemption_delay=True)
    if not jobs:
        return  # nothing to place: skip the job queue and the victim pool
    queue = JobQueue(
        ssn,
        jobs,
        max_depth=ssn.config.queue_depth_per_action.get(action),
        reuse_comparisons=True,
    )
    budget = ActionBudget(action, SearchLimits.for_session(ssn))
    # The pool is made on the first search: many executions pass every job over.
    pool: VictimPool | None = None
    pool_made = candidates is not None  # a caller that lists the victims needs none
    failed = (
        FailedRepresentatives(ssn, per_queue=signatures_per_queue)
        if ssn.config.use_scheduling_signatures
        else None
    )

    def victims_of(preemptor: Job):
        nonlocal pool, pool_made
        if candidates is not None:
            return candidates(preemptor)
        if not pool_made:
            pool, pool_made = _kept_pool(ssn, VICTIM_POOL_KEY, VictimPool), True
        if pool is not None:
            made = pool  # not None, and the one the lambda below reads
            return made.candidates(
                lambda job: job is not preemptor and accept(preemptor, job),
                None if accept_leaf is None else lambda queue: accept_leaf(preemptor, queue, made),
                None
                if accept_in is None
                else lambda queue: _but(preemptor, queue, accept_in(preemptor, queue)),
            )
        return [
            job
            for job in ssn.jobs.values()
            if job is not preemptor and potential_victim(ssn, job) and accept(preemptor, job)
        ]

    # The jobs with pending tasks, which order every simulation's re-allocation queue:
    # made when the first simulation reads it (action_pool), as many executions try
    # none (every job passed over, or refused before a simulation).
    def pending_pool() -> PendingPool | None:
        return _kept_pool(ssn, PENDING_POOL_KEY, PendingPool)

    def passed_over(job: Job) -> tuple[bool, str | None]:
        """Whether the loop passes ``job`` over without trying it, and the fit error it
        then records.  Decided from the job, the cluster and the failed representatives
        alone: nothing that trying another job would not change."""
        if refuse is not None:
            reason = refuse(job)
            if reason is not None:
                return True, reason
        tasks = tasks_to_allocate(ssn, job)
        if not tasks:
            return True, None
        equivalent = failed.equivalent_failed(job) if failed is not None else None
        if equivalent is not None:
            message = (
                f"{action.capitalize()}: skipped, equivalent to already failed job {equivalent.key}"
            )
            return True, message
        problem = victim_invariant_problem(ssn, job, tasks)
        if problem:
            return True, problem
        return False, None

    # What passed_over said of each job since the loop last tried one.  Passing jobs
    # over changes nothing; only trying one does (a commit, or a new representative).
    verdicts: dict[Job, tuple[bool, str | None]] = {}

    def passed_over_now(job: Job) -> tuple[bool, str | None]:
        found = verdicts.get(job)
        if found is None:
            found = verdicts[job] = passed_over(job)
        return found

    def record_passed_over(job: Job) -> None:
        """Record the fit error of a job the loop passes over, if its check gave one."""
        reason = passed_over_now(job)[1]
        if reason is not None:
            ssn.record_fit_error(job, reason)

    # A job the loop would try, found by the last check of the jobs left (see below).
    tried_next: Job | None = None

    def rest_passed_over() -> list[Job] | None:
        """When the loop would pass over every job left in the queue: those jobs.
        Passing a job over changes nothing, so the order in which the queue would pop
        them does not matter, and they need no queue comparisons."""
        nonlocal tried_next
        left = queue.jobs()
        if tried_next in left and not passed_over_now(tried_next)[0]:
            return None  # usually still to be tried: nothing more needs checking
        for job in left:
            if not passed_over_now(job)[0]:
                tried_next = job
                return None
        return left

    def solve_in_order() -> None:
        check_rest = True  # at first, and after each failure (see rest_passed_over)
        last: Job | None = None  # the job just passed over
        # Leaves not to be taken whole (see below) until the loop tries a job.
        partly_alike: set[str] = set()
        while True:
            if check_rest:
                check_rest = False
                rest = rest_passed_over()
                if rest is not None:
                    for left in rest:
                        record_passed_over(left)
                    return
            if last is not None and (leaf := last.queue or "") not in partly_alike:
                # The loop would pop and pass over every job left in this leaf, one
                # by one (each a heap pop): they go at once.
                taken = queue.take_alike_leaf(last, lambda other: passed_over_now(other)[0])
                if taken is None:
                    partly_alike.add(leaf)
                else:
                    for left in taken:
                        record_passed_over(left)
                    last = None
            # After a job passed over nothing changed: the next job of its leaf that
            # the queue order cannot tell from it comes next, with no comparisons.
            job = (queue.pop_alike(last) if last is not None else None) or queue.pop()
            last = None
            if job is None:
                return
            if passed_over_now(job)[0]:
                record_passed_over(job)
                last = job
                continue
            # The job is tried: what passed_over says of the others may change.
            verdicts.clear()
            partly_alike.clear()
            if precheck is not None and not precheck(job):
                if failed is not None:
                    failed.failed(job)
                    check_rest = True
                continue
            ssn.on_job_solution_start()
            solver = JobSolver(ssn, budget, validator(job), action, partial(victims_of, job))
            result = solver.solve(job)
            if result.solved and result.statement is not None:
                touched = {op.task.job for op in result.statement.ops}
                result.statement.commit()
                if pool is not None:
                    pool.update(touched)
                pending = ssn.cache.get(POOL_KEY)
                if isinstance(pending, PendingPool):
                    pending.update(touched)
                continue
            if result.reason in STOP_REASONS:
                return  # out of time, or nothing can ever be solved (no generator)
            if not result.solved:
                ssn.record_fit_error(
                    job,
                    f"{action.capitalize()}: no set of victims the plugins accept makes room "
                    f"for the job ({str(result.reason).replace('_', ' ')})",
                )
                if failed is not None:
                    failed.failed(job)
                    check_rest = True

    ssn.cache[POOL_KEY] = pending_pool
    try:
        solve_in_order()
    finally:
        pending = ssn.cache.pop(POOL_KEY, None)
    if pool is not None:
        # Up to date once its pending updates are read: the next eviction action takes
        # it over while nothing has changed a node since (see _kept_pool).
        ssn.cache[VICTIM_POOL_KEY] = (pool, ssn.nodes.version)
    if isinstance(pending, PendingPool):
        ssn.cache[PENDING_POOL_KEY] = (pending, ssn.nodes.version)


def _but(preemptor: Job, queue: str, accept: Callable[[Job], bool]) -> Callable[[Job], bool]:
    """``accept`` of every job of leaf ``queue`` but ``preemptor`` (only the preemptor's
    own leaf can hold it)."""
    if queue != (preemptor.queue or ""):
        return accept
    return lambda job: job is not preemptor and accept(job)
