"""Exact simulation of one scenario through a statement (the by-pod solver).

Evict every victim, then run the allocation loop over the victims' jobs and the
pending job (the part being probed), in the normal queue-tree order among every job
with a pending task (:mod:`kai.actions.solvers.pending`), on the feasible nodes plus the
victims' nodes; every placement is a pipeline (a victim put back where it was is simply
un-evicted).  The pending job must be placed whole; victims that found no place stay
Releasing.  The scenario must then pass the validator.  Anything else rolls back.

Where the compiled re-placement takes a simulation (kai.actions.solvers.replacement) it
decides it instead of the loop: a refusal ends the simulation at once, and for one that
places the preemptor its recorded steps make the loop's statement, which the validator
then reads.  A validator that reads only the pods (:class:`PodStatusValidator`) first
judges the steps' outcome on the pods alone: a simulation it refuses needs no statement,
nor does one it accepts when the caller only wants to know which victims it used (a
search's probe short of the whole job, whose statement would be discarded at once).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kai._dataclasses import dataclass
from kai.actions.common import allocate_job, allocate_task
from kai.actions.fast_allocate import AlikePicks
from kai.actions.solvers.pending import action_pool, partial_view, simulation_queue
from kai.actions.solvers.replacement import ReplacementCheck
from kai.actions.solvers.scenario import COUNT_SLACK, Scenario
from kai.api.model import Job, Task, TaskStatus
from kai.api.resources import GPU
from kai.framework.session import Session, tasks_to_allocate
from kai.framework.statement import Statement


@dataclass
class Simulation:
    """The outcome of simulating one scenario."""

    solved: bool
    statement: Statement | None = None
    preempted: list[Task] | None = None  # victims still evicted (see simulate)
    moved: list[Task] | None = None  # victims pipelined elsewhere


Validator = Callable[[Scenario, list[Task], list[Task]], bool]


@dataclass(frozen=True)
class PodStatusValidator:
    """A validator that reads nothing a simulation changes but its pods' statuses, nodes
    and eviction marks (every validator it calls was registered ``reads_pods_only``).
    A simulation the compiled re-placement decided is then judged on its pods set as
    its statement would leave them (:func:`judge_placements`), and one it refuses
    needs no statement at all."""

    fn: Validator

    def __call__(self, scenario: Scenario, preempted: list[Task], moved: list[Task]) -> bool:
        return self.fn(scenario, preempted, moved)


def eviction_reason(action: str, preemptor: Job) -> str:
    verb = {"reclaim": "reclaimed", "preempt": "preempted", "consolidation": "consolidated"}
    return f"{verb.get(action, 'evicted')} for pod group {preemptor.key} by {action}"


def place_tasks(
    ssn: Session, stmt: Statement, job: Job, tasks: list[Task], within: np.ndarray
) -> bool:
    """Pipeline ``tasks`` of ``job`` all together, or nothing."""
    if ssn.is_job_over_capacity(job, tasks):
        return False
    checkpoint = stmt.checkpoint()
    alike = AlikePicks.for_run(ssn, within, len(tasks))
    ops = stmt.ops
    for task in tasks:
        start, version = len(ops), ssn.nodes.version
        if (
            allocate_task(ssn, stmt, task, job, pipeline_only=True, within=within, alike=alike)
            is not None
        ):
            stmt.rollback(checkpoint)
            return False
        if alike is not None:
            alike.placed(_nodes_of(ops[start:]), since=version)
    return True


def _nodes_of(ops: list) -> set[int]:
    """The nodes whose rows statement operations ``ops`` changed (a node of -1 aside)."""
    return {n for op in ops for n in (op.prev_node, op.task.node)}


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
        tasks = tasks_to_allocate(self.ssn, job)
        need = max((float(t.request[GPU]) for t in tasks if not t.is_shared_gpu), default=0.0)
        return need <= 0 or self.fits(need)


def _least_gpu_need(ssn: Session, jobs: list[Job]) -> float:
    """A lower bound of what :meth:`_GpuRoom.may_place` compares for any of ``jobs``
    (0 when some job may need no whole GPU): the smallest GPU request of their tasks.
    Each job's is kept for the session (its pods and their requests do not change)."""
    known: dict[Job, float] = ssn.cache.setdefault("solver.least_gpu_need", {})
    least = float("inf")
    for job in jobs:
        own = known.get(job)
        if own is None:
            own = known[job] = _least_of(job)
        if own <= 0:
            return 0.0
        if own < least:
            least = own
    return least


def _least_of(job: Job) -> float:
    """The smallest GPU request of ``job``'s tasks; 0 when one may need no whole GPU."""
    least = float("inf")
    for task in job.tasks:
        gpus = float(task.request[GPU])
        if gpus <= 0 or task.is_shared_gpu:
            return 0.0
        if gpus < least:
            least = gpus
    return least


def every_victim_placed(scenario: Scenario, preempted: list[Task], moved: list[Task]) -> bool:
    """The validator of a scenario that may lose no pod (consolidation's): every victim
    placed again.  :func:`simulate` lets the compiled re-placement check it too."""
    return not preempted


def _verify(compiled: bool | None, passed: bool, scenario: Scenario) -> None:
    """Under ``KAI_VERIFY_REPLACEMENT=1``: that the compiled re-placement found what the
    loop found (the preemptor placed, and every victim with :func:`every_victim_placed`)."""
    if compiled is not None and compiled != passed:
        raise AssertionError(
            f"compiled re-placement said the scenario {'passes' if compiled else 'fails'}, "
            f"the simulation that it {'passes' if passed else 'fails'}: {scenario!r}"
        )


def _statement_state(check: ReplacementCheck, stmt: Statement, tasks: list[Task]) -> tuple:
    """What a simulation's statement made, to the bit: its operations, ``tasks``'
    statuses and nodes, the node table and the queues' allocations."""
    ops = [(op.kind, op.task.uid, op.prev_node, op.undone) for op in stmt.ops]
    pods = [(t.uid, t.status, t.node, t.virtually_evicted) for t in tasks]
    nodes = check.ssn.nodes
    rows = (nodes.idle.tobytes(), nodes.releasing.tobytes(), nodes.used.tobytes())
    queues = [(s.allocated.tobytes(), s.allocated_non_preemptible.tobytes()) for s in check.shares]
    return ops, pods, rows, queues


#: A victim's status once a simulation evicted it and did not place it again.
_EVICTED = (TaskStatus.RELEASING, TaskStatus.PENDING)


def simulate(
    ssn: Session,
    scenario: Scenario,
    feasible: np.ndarray,
    validator: Validator,
    action: str,
    *,
    need_statement: bool = True,
) -> Simulation:
    """Simulate ``scenario``: a solved simulation holds its statement, to commit or
    discard.  Without ``need_statement`` (a caller that would only discard it), a
    simulation the compiled re-placement placed and the validator judged valid on its
    pods alone is solved without one: its preempted and moved victims are the
    judgement's."""
    if not scenario.recorded and not any(batch.tasks for batch in scenario.batches):
        return Simulation(False)  # no victims
    # The action's pending pool is made by its first simulation: from the session as it
    # stands, before this one's evictions.
    action_pool(ssn)
    # Most simulations fail at the preemptor's turn: the compiled core tells them apart
    # without the statement, and gives the others' steps instead of the loop below
    # (kai.actions.solvers.replacement).
    check = ReplacementCheck.for_session(ssn)
    verifying = check is not None and check.verify  # KAI_VERIFY_REPLACEMENT
    verdict = None
    every_victim = validator is every_victim_placed
    if check is not None:
        verdict = check.verdict(scenario, feasible, every_victim=every_victim)
        if verdict.placed is False and not verifying:
            return Simulation(False)
    compiled = verdict.placed if verdict is not None else None
    victims, within, victim_jobs = scenario.victims_within(feasible)
    judged = None
    outcome: list[tuple[list[Task], list[Task]]] = []  # the judgement's, as the validator's
    if verdict is not None and verdict.placed and isinstance(validator, PodStatusValidator):
        # Most placed simulations of a contended cluster fail their validator: judged on
        # the pods alone, those need no statement.
        judged = judge_placements(
            ssn, verdict.placements(), victims, scenario, validator, outcome=outcome
        )
        if judged is False and not verifying:
            return _failed(check)
        if judged and not need_statement and not verifying:
            assert check is not None  # a verdict is the check's
            check.account(True)
            return Simulation(True, None, *outcome[0])
    reason = eviction_reason(action, scenario.preemptor)
    stmt = _evict(ssn, victims, reason)
    if check is not None and verdict is not None and verdict.placed:
        if verifying:
            # The loop, then the steps from the same state: the same statement.
            placed = _re_place(ssn, stmt, scenario, victim_jobs, within)
            _verify(compiled, placed and not (every_victim and _left(victims)), scenario)
            pods = [*scenario.pending, *(t for job in victim_jobs for t in job.tasks)]
            made = _statement_state(check, stmt, pods)
            stmt.discard()
            stmt = _evict(ssn, victims, reason)
            verdict.replay(stmt)
            if _statement_state(check, stmt, pods) != made:
                raise AssertionError(f"replayed steps differ from the loop's: {scenario!r}")
            nodes = ssn.nodes
            if verdict.rows is not None and (
                verdict.rows[0].tobytes() != nodes.idle.tobytes()
                or verdict.rows[1].tobytes() != nodes.releasing.tobytes()
            ):
                raise AssertionError(f"the core's node rows differ from the loop's: {scenario!r}")
        else:
            verdict.replay(stmt)
    elif not _re_place(ssn, stmt, scenario, victim_jobs, within):
        _verify(compiled, False, scenario)
        stmt.discard()
        return _failed(check)
    # Victims still releasing, and victims this session had placed whose placement the
    # eviction withdrew (pending again): KAI-Scheduler has those releasing too, and its
    # validators and recorded victims count them.
    preempted, moved = _outcome(victims)
    _verify(compiled, not (every_victim and preempted), scenario)
    valid = validator(scenario, preempted, moved)
    if verifying and judged is not None:
        if judged != valid:
            raise AssertionError(
                f"the validator judged the placements {'valid' if judged else 'invalid'}, "
                f"the simulation's statement {'valid' if valid else 'invalid'}: {scenario!r}"
            )
        if judged and outcome[0] != (preempted, moved):
            raise AssertionError(
                "the judgement's preempted and moved victims differ from the statement's: "
                f"{scenario!r}"
            )
    if not valid:
        stmt.discard()
        return _failed(check)
    if check is not None:
        check.account(True)
    return Simulation(True, stmt, preempted, moved)


def judge_placements(
    ssn: Session,
    placed: dict[Task, tuple[int, bool]],
    victims: list[Task],
    scenario: Scenario,
    validator: PodStatusValidator,
    *,
    outcome: list[tuple[list[Task], list[Task]]] | None = None,
) -> bool:
    """The validator's answer on the simulation whose re-placement leaves ``placed`` (pod
    to node, and whether it retook a vacated place: :meth:`Verdict.placements`), with
    its pods set as the statement would leave them, then set back.

    The victims are those the core took (``victim_arrays`` in
    kai.actions.solvers.replacement: every placed verdict's were laid out by it).  A
    victim running or bound before the session is evicted (releasing, marked); put
    back on its node it is un-evicted, placed elsewhere it is pipelined there (still
    marked: it runs where it was).  A victim bound in the session goes back to pending;
    put back on its node its binding is restored (or, retaking its vacated place, it
    is pipelined there), placed elsewhere it is pipelined.  So does a victim pipelined
    in the session, whose placement is restored where it was when it is put back on a
    node of its vacated places.  A pending pod placed is pipelined.  While the validator
    runs, the changed pods' queues carry versions never used before, so nothing kept by
    them is read across the change; set back, the pods are exactly as they were, and so
    are their queues' versions (:meth:`Session.set_back_queue_versions`): what the search
    kept before the judgement (its probes' layouts, its accumulations) holds again.
    ``outcome``, if given, receives what the validator was given (the victims left
    evicted, those moved), as the statement would give them.
    """
    vacated = ssn.nodes.vacated
    evicted = set(victims)
    changed: list[tuple[Task, TaskStatus, int, bool]] = []
    queues: dict[str | None, Task] = {}  # a changed pod of each queue, for its versions
    try:
        for task in victims:
            changed.append((task, task.status, task.node, task.virtually_evicted))
            node, retook = placed.get(task, (-1, False))
            if not retook and (
                node == task.node
                or (
                    task.status is TaskStatus.PIPELINED
                    and node >= 0
                    and any(place.node == node for place in vacated.get(task, ()))
                )
            ):
                continue  # un-evicted, or its placement restored: as it was
            if task.status in _PLACED_IN_SESSION:
                task.status = TaskStatus.PENDING if node < 0 else TaskStatus.PIPELINED
                task.node = node
            else:
                task.status = TaskStatus.RELEASING if node < 0 else TaskStatus.PIPELINED
                task.node = task.node if node < 0 else node
                task.virtually_evicted = True
            queues.setdefault(task.job.queue, task)
        for task, (node, _) in placed.items():
            if task in evicted:
                continue
            changed.append((task, task.status, task.node, task.virtually_evicted))
            task.status = TaskStatus.PIPELINED
            task.node = node
            queues.setdefault(task.job.queue, task)
        left = _outcome(victims)
        if outcome is not None:
            outcome.append(left)
        with ssn.set_back_queue_versions(queues.values()):
            return validator(scenario, *left)
    finally:
        for task, status, node, marked in changed:
            task.status = status
            task.node = node
            task.virtually_evicted = marked


#: Victims placed in the session (not on a node yet): their eviction takes them back to
#: pending.
_PLACED_IN_SESSION = (TaskStatus.BINDING, TaskStatus.PIPELINED)


def _failed(check: ReplacementCheck | None) -> Simulation:
    """A simulation that failed after the statement was made, told to the check."""
    if check is not None:
        check.account(False)
    return Simulation(False)


def _evict(ssn: Session, victims: list[Task], reason: str) -> Statement:
    """A statement that evicts ``victims``, in order (a simulation's first step)."""
    stmt = ssn.statement()
    stmt.evict_all(victims, reason)
    return stmt


def _left(victims: list[Task]) -> list[Task]:
    """The victims a simulation's re-placement left evicted."""
    return [t for t in victims if t.status in _EVICTED]


def _outcome(victims: list[Task]) -> tuple[list[Task], list[Task]]:
    """What a validator is given of a simulation: the victims its re-placement left
    evicted (:func:`_left`), and those it pipelined elsewhere (moved)."""
    return _left(victims), [t for t in victims if t.status is TaskStatus.PIPELINED]


def _re_place(
    ssn: Session, stmt: Statement, scenario: Scenario, victim_jobs: list[Job], within: np.ndarray
) -> bool:
    """The simulation's loop, after the evictions: whether the preemptor is placed (if
    not, the loop stops at its turn)."""
    preemptor = scenario.preemptor
    view = partial_view(preemptor, scenario.pending)
    queue = simulation_queue(ssn, [*victim_jobs, view], {*victim_jobs, preemptor})
    placed = False
    room = _GpuRoom(ssn, within)
    least = _least_gpu_need(ssn, victim_jobs)
    ops = stmt.ops
    while True:
        if placed and least > 0 and not room.fits(least):
            # Every job left would be skipped by may_place, and skipping changes nothing.
            break
        job = queue.pop()
        if job is None:
            break
        if job is view:
            placed = place_tasks(ssn, stmt, job, scenario.pending, within)
            if not placed:
                return False
        elif room.may_place(job):
            start = stmt.checkpoint()
            version = ssn.nodes.version
            if (
                allocate_job(ssn, stmt, job, pipeline_only=True, within=within, record_errors=False)
                and room.version == version
            ):
                room.touched(_nodes_of(ops[start:]))
    return placed
