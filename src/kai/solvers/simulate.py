"""Exact simulation of one scenario through a statement (the by-pod solver).

Evict every victim, then run the allocation loop over the victims' jobs and the
pending job (the part being probed), in the normal queue-tree order among every job
with a pending task (:mod:`kai.solvers.pending`), on the feasible nodes plus the
victims' nodes; every placement is a pipeline (a victim put back where it was is simply
un-evicted).  Once the pending job is placed, a victim that still fits where it ran (its
resources there, its own device) is put back there rather than moved, and at the end
so is every victim moved earlier whose old place is still free (KAI-Scheduler places
victims again by node order, which may move one that could have stayed).  The pending
job must be placed whole; victims that found no place stay Releasing.  The scenario
must then pass the validator.  Anything else rolls back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kai.api.model import Job, NodeTable, Task, TaskStatus
from kai.api.resources import GPU
from kai.framework.session import Session
from kai.framework.statement import Statement
from kai.solvers.scenario import COUNT_SLACK, Scenario


@dataclass
class Simulation:
    solved: bool
    statement: Statement | None = None
    preempted: list[Task] | None = None  # victims still Releasing
    moved: list[Task] | None = None  # victims pipelined elsewhere
    put_back: int = 0  # victims un-evicted where they were


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


class _GpuRoom:
    """The most idle + releasing GPUs of one node of ``within``: a victim job with a
    whole-GPU task asking for more cannot be re-placed, and ``allocate_job`` (which has
    no side effect when it fails) need not be called.

    The per-node room is kept across placements: after one, only the nodes its
    operations touched are read again (the same sums as a full recomputation).
    """

    def __init__(self, ssn: Session, within: np.ndarray) -> None:
        self.ssn = ssn
        self.within = within
        self.version = -1
        self.free = np.empty(0)
        self.most = 0.0

    def refresh(self) -> None:
        nodes = self.ssn.nodes
        if nodes.version == self.version:
            return
        free = nodes.idle[:, GPU] + nodes.releasing[:, GPU]
        free[~self.within] = -np.inf
        self.free = free
        self.most = float(free.max()) if free.size else float("-inf")
        self.version = nodes.version

    def touched(self, nodes_changed: set[int]) -> None:
        """Read the room of ``nodes_changed`` again (the only nodes changed since the
        last read)."""
        nodes = self.ssn.nodes
        free, within = self.free, self.within
        idle, releasing = nodes.idle, nodes.releasing
        for i in nodes_changed:
            if i >= 0 and within[i]:
                free[i] = idle[i, GPU] + releasing[i, GPU]
        self.most = float(free.max())
        self.version = nodes.version

    def fits(self, need: float) -> bool:
        self.refresh()
        return need <= self.most + COUNT_SLACK

    def may_place(self, job: Job) -> bool:
        from kai.actions.common import tasks_to_allocate

        tasks = tasks_to_allocate(self.ssn, job)
        need = max((float(t.request[GPU]) for t in tasks if not t.is_shared_gpu), default=0.0)
        return need <= 0 or self.fits(need)


def keep_in_place(ssn: Session, stmt: Statement, job: Job) -> None:
    """Put back the tasks of victim ``job`` that ``stmt`` evicted or moved and that still
    fit where they ran (the resources they held on their node, and for a fractional
    task room on its own device): evicting or moving them was not needed.  All or none
    of the evicted ones if the job would otherwise keep fewer than minMember pods.
    """
    nodes = ssn.nodes
    start = stmt.checkpoint()
    ours = [t for t in job.tasks if t.virtually_evicted]
    for task in ssn.sorted_tasks(ours) if len(ours) > 1 else ours:
        mark = stmt.checkpoint()
        if task.status is TaskStatus.PIPELINED:
            stmt.evict(task, "")  # withdraws the move: releasing on its own node again
        if task.status is not TaskStatus.RELEASING or not _fits_in_place(nodes, task):
            stmt.rollback(mark)
            continue
        stmt.pipeline(task, task.node, task.gpu_group)  # un-evicts it
        if task.virtually_evicted:
            stmt.rollback(mark)  # evicted before this statement: not ours to put back
    if 0 < job.active_allocated_count() < job.min_member:
        stmt.rollback(start)


def _fits_in_place(nodes: NodeTable, task: Task) -> bool:
    node = task.node
    if node < 0 or np.any(task.request > nodes.idle[node] + nodes.releasing[node] + COUNT_SLACK):
        return False
    return not task.is_shared_gpu or _device_has_room(nodes, task)


def _device_has_room(nodes: NodeTable, task: Task) -> bool:
    """Whether fractional ``task`` fits back on its own device: room on it counting what
    is released, or, when every tenant of the device is being released, a whole GPU of
    its node still free (the device counts as one)."""
    node = task.node
    if task.gpu_group in nodes.shared_fit(node, nodes.portion_on(task, node), idle_only=False):
        return True
    group = nodes.gpu_groups[node].get(task.gpu_group or "")
    return (
        group is not None
        and group.state() == "releasing"
        and nodes.idle[node, GPU] + nodes.releasing[node, GPU] >= 1.0 - COUNT_SLACK
    )


def _least_gpu_need(jobs: list[Job]) -> float:
    """A lower bound of what :meth:`_GpuRoom.may_place` compares for any of ``jobs``
    (0 when some job may need no whole GPU): the smallest GPU request of their tasks."""
    least = float("inf")
    for job in jobs:
        for task in job.tasks:
            gpus = float(task.request[GPU])
            if gpus <= 0 or task.is_shared_gpu:
                return 0.0
            if gpus < least:
                least = gpus
    return least


def simulate(
    ssn: Session,
    scenario: Scenario,
    feasible: np.ndarray,
    validator: Validator,
    action: str,
) -> Simulation:
    from kai.actions.common import allocate_job
    from kai.solvers.pending import partial_view, simulation_queue

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
    victim_jobs: list[Job] = list(dict.fromkeys(task.job for task in victims))
    view = partial_view(preemptor, scenario.pending)
    queue = simulation_queue(ssn, [*victim_jobs, view], {*victim_jobs, preemptor})
    placed = False
    kept: set[Job] = set()  # victim jobs put back where possible once the preemptor was placed
    room = _GpuRoom(ssn, within)
    least = _least_gpu_need(victim_jobs)
    ops = stmt.ops
    while True:
        if placed and least > 0 and not room.fits(least):
            # Every job left would be skipped by may_place, and skipping changes nothing.
            break
        job = queue.pop()
        if job is None:
            break
        if job is view:
            if not place_tasks(ssn, stmt, job, scenario.pending, within):
                stmt.discard()
                return Simulation(False)
            placed = True
        else:
            start = stmt.checkpoint()
            version = ssn.nodes.version
            # Once the preemptor is placed, a victim whose place it did not need keeps
            # running there rather than being moved to another node.
            if placed:
                keep_in_place(ssn, stmt, job)
                kept.add(job)
            if room.may_place(job):
                allocate_job(ssn, stmt, job, pipeline_only=True, within=within, record_errors=False)
            if len(ops) > start and room.version == version:
                room.touched({n for op in ops[start:] for n in (op.prev_node, op.task.node)})
    if not placed:
        stmt.discard()
        return Simulation(False)
    if least <= 0 or room.fits(least):  # else no victim fits anywhere, nor in place
        for job in victim_jobs:
            if job not in kept:
                # Placed before the preemptor, or never popped: their places may be free.
                keep_in_place(ssn, stmt, job)
    preempted = [t for t in victims if t.status is TaskStatus.RELEASING]
    moved = [t for t in victims if t.status is TaskStatus.PIPELINED]
    if not validator(scenario, preempted, moved):
        stmt.discard()
        return Simulation(False)
    return Simulation(True, stmt, preempted, moved, len(victims) - len(preempted) - len(moved))
