"""Exact simulation of one scenario through a statement (the by-pod solver).

Evict every victim, then run the allocation loop restricted to the victims' jobs and
the pending job, in the normal queue-tree order, on the feasible nodes plus the
victims' nodes; every placement is a pipeline (a victim put back where it was is simply
un-evicted).  The pending job must be placed whole; victims that found no place stay
Releasing.  The scenario must then pass the validator.  Anything else rolls back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kai.api.model import Job, Task, TaskStatus
from kai.framework.session import Session
from kai.framework.statement import Statement
from kai.solvers.scenario import Scenario


@dataclass
class Simulation:
    solved: bool
    statement: Statement | None = None
    preempted: list[Task] | None = None  # victims still Releasing
    moved: list[Task] | None = None  # victims pipelined elsewhere


Validator = Callable[[Scenario, list[Task], list[Task]], bool]


def eviction_reason(action: str, preemptor: Job) -> str:
    verb = {"reclaim": "reclaimed", "preempt": "preempted", "consolidation": "consolidated"}
    return f"{verb.get(action, 'evicted')} for pod group {preemptor.key} by {action}"


def place_tasks(
    ssn: Session, stmt: Statement, job: Job, tasks: list[Task], within: np.ndarray
) -> bool:
    """Pipeline ``tasks`` of ``job`` all together, or nothing."""
    from kai.actions.common import allocate_task

    if ssn.is_job_over_capacity(job, tasks):
        return False
    checkpoint = stmt.checkpoint()
    for task in tasks:
        if allocate_task(ssn, stmt, task, job, pipeline_only=True, within=within) is not None:
            stmt.rollback(checkpoint)
            return False
    return True


def simulate(
    ssn: Session,
    scenario: Scenario,
    feasible: np.ndarray,
    validator: Validator,
    action: str,
) -> Simulation:
    from kai.actions.common import JobQueue, allocate_job

    victims = scenario.victim_tasks()
    if not victims:
        return Simulation(False)
    preemptor = scenario.preemptor
    stmt = ssn.statement()
    reason = eviction_reason(action, preemptor)
    within = feasible.copy()
    for task in victims:
        within[task.node] = True
        stmt.evict(task, reason)
    victim_jobs: list[Job] = []
    for task in victims:
        if task.job not in victim_jobs:
            victim_jobs.append(task.job)
    queue = JobQueue(ssn, [*victim_jobs, preemptor])
    placed = False
    while True:
        job = queue.pop()
        if job is None:
            break
        if job is preemptor:
            if not place_tasks(ssn, stmt, job, scenario.pending, within):
                stmt.discard()
                return Simulation(False)
            placed = True
        else:
            allocate_job(ssn, stmt, job, pipeline_only=True, within=within, record_errors=False)
    if not placed:
        stmt.discard()
        return Simulation(False)
    preempted = [t for t in victims if t.status is TaskStatus.RELEASING]
    moved = [t for t in victims if t.status is TaskStatus.PIPELINED]
    if not validator(scenario, preempted, moved):
        stmt.discard()
        return Simulation(False)
    return Simulation(True, stmt, preempted, moved)
