"""Shared driver of the eviction actions (reclaim, preempt, consolidation)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from kai.actions.common import JobQueue, schedulable_jobs, tasks_to_allocate
from kai.api.model import ACTIVE_ALLOCATED, Job, Task
from kai.framework.session import Session
from kai.solvers import ActionBudget, JobSolver, SearchLimits
from kai.solvers.job_solver import STOP_REASONS
from kai.solvers.simulate import Validator


def has_active_allocated(job: Job) -> bool:
    return any(t.status in ACTIVE_ALLOCATED for t in job.tasks)


def victim_invariant_problem(ssn: Session, job: Job, tasks: list[Task]) -> str | None:
    """A task larger than the largest node can never be placed, whatever is evicted."""
    alloc = ssn.nodes.allocatable
    if not len(alloc):
        return "no nodes"
    largest = alloc.max(axis=0)
    names = ssn.state.resources.names
    for task in tasks:
        over = np.flatnonzero(task.request > largest + 1e-9)
        if over.size:
            return (
                f"MaxNodePoolResources: pod {task.key} requests more {names[int(over[0])]} "
                "than any node has"
            )
    return None


def run_eviction_action(
    ssn: Session,
    action: str,
    *,
    preemptible_only: bool,
    admit: Callable[[Job], bool],
    candidates: Callable[[Job], list[Job]],
    validator: Callable[[Job], Validator],
) -> None:
    """Pop pending jobs in queue order and search victims for each (see kai.solvers)."""
    jobs = schedulable_jobs(ssn, preemptible_only=preemptible_only, check_preemption_delay=True)
    queue = JobQueue(ssn, jobs, max_depth=ssn.config.queue_depth_per_action.get(action))
    budget = ActionBudget(action, SearchLimits.for_session(ssn))
    while True:
        job = queue.pop()
        if job is None:
            return
        if not admit(job):
            continue
        tasks = tasks_to_allocate(ssn, job)
        if not tasks:
            continue
        problem = victim_invariant_problem(ssn, job, tasks)
        if problem:
            ssn.record_fit_error(job, problem)
            continue
        ssn.on_job_solution_start()
        solver = JobSolver(ssn, budget, validator(job), action, partial(candidates, job))
        result = solver.solve(job)
        if result.solved and result.statement is not None:
            result.statement.commit()
            continue
        if result.reason in STOP_REASONS:
            return  # out of time, or nothing can ever be solved (no generator)
