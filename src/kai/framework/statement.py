"""Statements: transactional simulated operations.

Every allocate, pipeline and evict of a session goes through a statement.  Operations
are applied to the session state at once (node capacity, task status, plugin event
handlers) so later decisions see them, and each carries what is needed to undo it.
``checkpoint``/``rollback`` undo back to a point, ``discard`` undoes everything, and
``commit`` turns the operations into decisions that leave the session.

Only a pod bound in the cluster is ever evicted.  Evicting a task that this session
placed (allocated, pipelined or binding) undoes that placement and withdraws its bind
or pipeline decision: a pod the cluster has not bound returns to pending, and a moved
victim (bound, evicted and pipelined elsewhere earlier in the session) returns to
releasing on its own node, evicted once.  No second eviction leaves the session.  The
place the undone placement held stays releasing for the rest of the session, as
KAI-Scheduler keeps it: one pod's worth may be pipelined onto it, nothing bound.  If
the same pod is placed on that node again, it takes its place back.  Within one
statement, a pod evicted again and put back where it was placed (or, for a moved
victim, on the node it runs on) is un-evicted as KAI-Scheduler does: its earlier
placement stands, unless that node can no longer hold it.

A moved victim's old place stays releasing for the rest of the session (its pod runs
there until it terminates): pods may be pipelined onto it, never bound.  (Whole-GPU
pods; a fractional pod's device share is freed at once.)
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from kai import _fast
from kai._dataclasses import dataclass
from kai.api.model import ON_NODE as _ON_NODE
from kai.api.model import Task, TaskStatus, VacatedPlace
from kai.backends import EPS
from kai.framework.session import Decision
from kai.snapshot.builder import gpu_group_of

if TYPE_CHECKING:
    from kai.framework.session import Session

log = logging.getLogger(__name__)

#: The attribute of the debug records that mark where kai decides differently from
#: KAI-Scheduler on purpose (docs/kai-differences.md): ``extra={DIFFERS: what}``.
DIFFERS = "kai_differs"


# Statuses only a session gives: the snapshot has none of them.
_PLACED_BY_SESSION = frozenset({TaskStatus.ALLOCATED, TaskStatus.PIPELINED, TaskStatus.BINDING})
_BOUND_BY_SESSION = frozenset({TaskStatus.ALLOCATED, TaskStatus.BINDING})


@dataclass(slots=True)
class _Op:
    """One operation of a statement, with what undoing it restores."""

    kind: str  # allocate | pipeline | evict | unplace | unevict
    task: Task
    prev_status: TaskStatus
    prev_node: int
    prev_group: str | None
    prev_virtual: bool
    reason: str | None = None
    # An evict op undone by a later "unevict" op (which refers to it by ``ref``).
    undone: bool = False
    ref: _Op | None = None
    # The node where this op made (place) or dropped (unplace) a moved victim's hold.
    held: int = -1
    # unplace: the place it vacated (kept releasing, in NodeTable.vacated).
    vacated: VacatedPlace | None = None
    # allocate/pipeline: the task's vacated place it took back, and its index there.
    retaken: tuple[int, VacatedPlace] | None = None


class Statement:
    def __init__(self, ssn: Session) -> None:
        self.ssn = ssn
        self.ops: list[_Op] = []
        # Each task's standing evictions (evict ops not undone), in the order of ``ops``:
        # what _eviction_of finds without scanning the operations.
        self._standing: dict[Task, list[_Op]] = {}

    # ----------------------------------------------------------------- helpers
    def _detach(self, task: Task) -> None:
        if task.node >= 0 and task.status in _ON_NODE:
            self.ssn.nodes.remove_task(task)

    def _attach(self, task: Task) -> None:
        if task.node >= 0 and task.status in _ON_NODE:
            self.ssn.nodes.add_task(task)

    def _record(self, kind: str, task: Task, reason: str | None = None) -> _Op:
        op = _Op(kind, task, task.status, task.node, task.gpu_group, task.virtually_evicted, reason)
        self.ops.append(op)
        return op

    # -------------------------------------------------------------- operations
    def allocate(self, task: Task, node: int, gpu_group: str | None = None) -> None:
        """Place a task on idle capacity."""
        self._place(task, node, gpu_group, TaskStatus.ALLOCATED, "allocate")

    def pipeline(self, task: Task, node: int, gpu_group: str | None = None) -> None:
        """Place a task on capacity being released (it binds in a later cycle)."""
        if (
            task.virtually_evicted
            and task.status is TaskStatus.RELEASING
            and task.node == node
            and self._own_device(task, gpu_group)
            and self._eviction_of(task) is not None
        ):
            self.unevict(task)
            return
        if task in self.ssn.nodes.vacated and self._restore_unplaced(task, node):
            return  # (only a task whose placement was undone has vacated places)
        self._place(task, node, gpu_group, TaskStatus.PIPELINED, "pipeline")

    def _restore_unplaced(self, task: Task, node: int) -> bool:
        """Un-evict, as KAI-Scheduler does, a pod placed earlier in the session that this
        statement evicted again and now puts back where KAI-Scheduler still has a record
        of it (the node it was placed on, a place an earlier placement of it left, or, for
        a moved victim, the node it runs on): the eviction is undone and the earlier
        placement stands (binding stays binding).  Not when that node can no longer hold
        it (KAI-Scheduler over-commits it then; kai places the pod anew).  Recorded as an
        ``unevict`` op so that a rollback past it evicts the pod again."""
        ops = (o for o in reversed(self.ops) if o.task is task and o.kind == "unplace")
        op = next((o for o in ops if not o.undone), None)
        if op is None or op.prev_node < 0:
            return False
        records = {op.prev_node, *(place.node for place in self.ssn.nodes.vacated.get(task, ()))}
        if task.status is TaskStatus.RELEASING and op.prev_status is TaskStatus.PIPELINED:
            records.add(task.node)  # a moved victim: where it runs
        if node not in records:
            return False
        self._undo(op)
        nodes, back = self.ssn.nodes, op.prev_node
        over = nodes.idle[back] + nodes.releasing[back] < -EPS
        if task.status in _BOUND_BY_SESSION:
            over |= nodes.idle[back] < -EPS  # a binding pod holds idle capacity
        if np.any(over):
            self._apply_unplace(op)
            log.debug(
                "%s is not returned to %s, which can no longer hold it",
                task.key,
                nodes.names[back],
                extra={DIFFERS: "overcommit"},  # KAI over-commits the node
            )
            return False
        self._mark_unevicted(op)
        return True

    def _own_device(self, task: Task, gpu_group: str | None) -> bool:
        """Whether placing ``task`` on ``gpu_group`` of its node puts it back on its own
        device.  A fractional task offered a whole free device (None) goes back to its
        own only when every tenant of that device is being released (whole GPUs are
        interchangeable); other pods may have taken the room it left on a shared one.
        """
        if gpu_group == task.gpu_group or not task.is_shared_gpu:
            return True
        if gpu_group is not None or task.gpu_group is None:
            return False
        group = self.ssn.nodes.gpu_groups[task.node].get(task.gpu_group)
        return group is not None and group.state() == "releasing"

    def _place(
        self, task: Task, node: int, gpu_group: str | None, status: TaskStatus, kind: str
    ) -> None:
        op = self._record(kind, task)
        was_evicted = task.virtually_evicted
        old = task.node
        moved = (
            was_evicted
            and task.status is TaskStatus.RELEASING
            and 0 <= old != node
            and not task.is_shared_gpu
        )
        self._detach(task)
        nodes = self.ssn.nodes
        if moved:
            # Its pod still runs there: the old place stays releasing until it goes.
            nodes.hold(task, old)
            op.held = old
        # Back where an undone placement of it was, it takes that place back.
        op.retaken = nodes.retake(task, node)
        task.status = status
        task.node = node
        if task.is_shared_gpu:
            task.gpu_group = gpu_group or self.ssn.nodes.new_group_id(node, task.uid)
        self._attach(task)
        if was_evicted:
            # A moved victim stays a victim on its old node until it really goes.
            task.virtually_evicted = True
        self.ssn.fire_allocate(task)

    def evict(self, task: Task, reason: str) -> None:
        if task.status in _PLACED_BY_SESSION:
            self._unplace(task, reason)
            return
        op = self._record("evict", task, reason)
        self._standing.setdefault(task, []).append(op)
        if task.node >= 0 and task.status in _ON_NODE and not task.is_shared_gpu:
            self._released_in_place(task)
            return
        self._detach(task)
        task.status = TaskStatus.RELEASING
        self._attach(task)
        task.virtually_evicted = True
        self.ssn.fire_deallocate(task)

    def _released_in_place(self, task: Task) -> None:
        """A recorded eviction of a pod on its node on whole GPUs: releasing there."""
        self.ssn.nodes.restatus(task, TaskStatus.RELEASING)
        task.virtually_evicted = True
        self.ssn.fire_deallocate(task)

    def evict_all(self, tasks: Iterable[Task], reason: str) -> None:
        """:meth:`evict` each of ``tasks``, in order, with the same operations and
        state.  Where every event handler takes a batch, the evictions of pods on their
        nodes on whole GPUs (most victims) change their rows together
        (:meth:`NodeTable.restatus_all`) and fire their events together
        (:meth:`Session.fire_deallocate_all`)."""
        ssn = self.ssn
        if not ssn.batches_events():
            for task in tasks:
                self.evict(task, reason)
            return
        tasks = tasks if isinstance(tasks, list) else list(tasks)
        compiled = _fast.module("statement")
        record = record_plain_evictions if compiled is None else compiled.record_plain_evictions
        ops, standing = self.ops, self._standing
        run: list[Task] = []
        in_run: set[Task] = set()
        i, n = 0, len(tasks)
        while True:
            i = record(tasks, i, reason, ops, standing, run, in_run)
            if i == n:
                break
            task = tasks[i]
            if run:
                # A pod evicted again (restatus_all takes each pod once: the next run
                # takes it), or one evicted otherwise: the run ends here.
                self._evicted_together(run)
                run, in_run = [], set()
                if _plainly_evicted(task):
                    continue
            self.evict(task, reason)  # (any eviction: what a run makes, one at a time)
            i += 1
        self._evicted_together(run)

    def _evicted_together(self, tasks: list[Task]) -> None:
        """The rows, marks and events of the evictions of ``tasks`` (recorded)."""
        ssn = self.ssn
        if len(tasks) < _BATCHED_FROM:
            for task in tasks:
                self._released_in_place(task)
            return
        ssn.nodes.restatus_all(tasks, [TaskStatus.RELEASING] * len(tasks))
        for task in tasks:
            task.virtually_evicted = True
        ssn.fire_deallocate_all(tasks)

    def _unplace(self, task: Task, reason: str) -> None:
        """Undo this session's placement of a task instead of evicting it."""
        self._apply_unplace(self._record("unplace", task, reason))

    def _apply_unplace(self, op: _Op) -> None:
        task = op.task
        self._detach(task)
        nodes = self.ssn.nodes
        if task.node >= 0 and not task.is_shared_gpu:
            op.vacated = nodes.vacate(task, task.node)
        if task in nodes.held:
            op.held = nodes.unhold(task)  # releasing on its own node again, as itself
        if task.pod.node_name:
            # A moved victim: back to releasing where it runs, on its own device (on no
            # node of this session's when it runs on an unknown node or another pool's).
            task.node = nodes.index.get(task.pod.node_name, -1)
            task.status = TaskStatus.RELEASING
            task.virtually_evicted = True
            if task.is_shared_gpu:
                task.gpu_group = gpu_group_of(task.pod, task.node)
        else:
            task.node = -1
            task.status = TaskStatus.PENDING
            task.virtually_evicted = False
            if task.is_shared_gpu:
                task.gpu_group = None
        self._attach(task)
        self.ssn.fire_deallocate(task)

    def unevict(self, task: Task) -> None:
        """Put back a task this statement evicted (same node, same device).

        Recorded as an ``unevict`` op so that a rollback past it evicts the task again.
        """
        op = self._eviction_of(task)
        if op is None:
            raise ValueError(f"{task.key} was not evicted by this statement")
        self._undo(op)
        self._mark_unevicted(op)

    def _mark_unevicted(self, op: _Op) -> None:
        """Record that ``op`` (an eviction, just undone) is undone by an ``unevict`` op."""
        task = op.task
        op.undone = True
        if op.kind == "evict":
            self._standing[task].pop()  # the latest standing one: _eviction_of's
        self.ops.append(
            _Op(
                "unevict",
                task,
                task.status,
                task.node,
                task.gpu_group,
                task.virtually_evicted,
                ref=op,
            )
        )

    def _eviction_of(self, task: Task) -> _Op | None:
        """This statement's latest standing eviction of ``task``, if any."""
        standing = self._standing.get(task)
        return standing[-1] if standing else None

    # ------------------------------------------------------------ transactions
    def checkpoint(self) -> int:
        return len(self.ops)

    def rollback(self, checkpoint: int) -> None:
        ops = self.ops
        batches = self.ssn.batches_events()
        while len(ops) > checkpoint:
            if (
                batches
                and ops[-1].kind == "evict"
                and _undone_in_place(ops[-1])
                and self._undo_evictions(checkpoint)
            ):
                continue
            op = ops.pop()
            if op.kind == "evict" and not op.undone:
                self._standing[op.task].pop()  # the last op: the latest standing one
            self._undo(op)

    def _undo_evictions(self, checkpoint: int) -> bool:
        """Undo the last operations down to ``checkpoint`` while they are evictions
        that :meth:`_undo` puts back in place, as it does, their events fired together
        (:meth:`Session.fire_allocate_all`); whether there was any."""
        run: list[_Op] = []
        compiled = _fast.module("statement")
        pop = pop_plain_undos if compiled is None else compiled.pop_plain_undos
        pop(self.ops, checkpoint, self._standing, run, set())
        if len(run) < _BATCHED_FROM:
            for op in run:
                self._undo(op)
            return bool(run)
        tasks = [op.task for op in run]
        self.ssn.nodes.restatus_all(tasks, [op.prev_status for op in run])
        for op in run:
            op.task.virtually_evicted = op.prev_virtual
        self.ssn.fire_allocate_all(tasks)
        return True

    def discard(self) -> None:
        self.rollback(0)

    def _undo(self, op: _Op) -> None:
        task = op.task
        if op.kind == "unevict":
            assert op.ref is not None
            op.ref.undone = False
            if op.ref.kind == "evict":
                # Standing again, and the latest: the ops after this one are undone.
                self._standing[task].append(op.ref)
            if op.ref.kind == "unplace":
                self._apply_unplace(op.ref)
                return
            self._detach(task)
            task.status = TaskStatus.RELEASING
            task.virtually_evicted = True
            self._attach(task)
            self.ssn.fire_deallocate(task)
            return
        nodes = self.ssn.nodes
        if op.kind == "evict" and _in_place(op):
            # An eviction's own undo: the same pod back to its status on its node (an
            # evicted pod is releasing there, on its node's rows).
            nodes.restatus(task, op.prev_status)
            task.virtually_evicted = op.prev_virtual
            self.ssn.fire_allocate(task)
            return
        self._detach(task)
        if op.vacated is not None:
            nodes.unvacate(task, op.vacated)
        if op.retaken is not None:
            nodes.give_back(task, op.retaken)
        if op.held >= 0:
            if op.kind == "unplace":
                self.ssn.nodes.hold(task, op.held)
            else:
                self.ssn.nodes.unhold(task)
        task.status = op.prev_status
        task.node = op.prev_node
        task.gpu_group = op.prev_group
        task.virtually_evicted = op.prev_virtual
        self._attach(task)
        if op.kind in ("evict", "unplace"):
            self.ssn.fire_allocate(task)
        else:
            self.ssn.fire_deallocate(task)

    def convert_allocated_to_pipelined(self, job_tasks: set[Task]) -> None:
        """A gang binds together or is pipelined together."""
        for op in self.ops:
            if op.kind == "allocate" and op.task in job_tasks:
                task = op.task
                self.ssn.nodes.remove_task(task)
                task.status = TaskStatus.PIPELINED
                op.kind = "pipeline"
                self.ssn.nodes.add_task(task)

    def has_pipelined(self, tasks: set[Task]) -> bool:
        return any(op.kind == "pipeline" and op.task in tasks for op in self.ops)

    def evicted_tasks(self) -> list[Task]:
        return [op.task for op in self.ops if op.kind == "evict" and not op.undone]

    def commit(self) -> list[Decision]:
        """Make the operations final and return the decisions they produce."""
        ssn = self.ssn
        out: list[Decision] = []
        nodes = ssn.nodes
        # Pods the cluster had not bound whose placement an earlier statement's eviction
        # withdrew: KAI-Scheduler has them releasing for the rest of the session.
        withdrawn: set[Task] = ssn.cache.setdefault(_WITHDRAWN, set())
        withdrawing: list[Task] = []
        for op in self.ops:
            task = op.task
            if op.kind == "unevict" or (op.kind in ("evict", "unplace") and op.undone):
                continue
            if op.kind == "unplace":
                # Withdraw the placement this session made; no eviction reaches the cluster.
                out = [d for d in out if not _places(d, task)]
                ssn.decisions[:] = [d for d in ssn.decisions if not _places(d, task)]
                if not task.pod.node_name:
                    withdrawing.append(task)
                continue
            if op.kind == "evict":
                node = nodes.names[op.prev_node] if op.prev_node >= 0 else None
                out.append(Decision(ssn.current_action, "evict", task, node, reason=op.reason))
                continue
            groups = [task.gpu_group] if task.is_shared_gpu and task.gpu_group else []
            node = nodes.names[task.node] if task.node >= 0 else None
            if task in withdrawn:
                log.debug(
                    "%s, whose placement an eviction withdrew, is placed again on %s",
                    task.key,
                    node,
                    extra={DIFFERS: "withdrawn"},  # KAI never places it again
                )
            if op.kind == "allocate":
                # Allocated -> Binding: both hold idle capacity, no re-accounting needed.
                task.status = TaskStatus.BINDING
                out.append(Decision(ssn.current_action, "bind", task, node, groups))
            else:
                out.append(Decision(ssn.current_action, "pipeline", task, node, groups))
        for op in self.ops:
            op.task.virtually_evicted = False
        withdrawn.update(withdrawing)
        ssn.decisions.extend(out)
        self.ops = []
        self._standing = {}
        return out


#: The fewest evictions a statement makes, or undoes, together (a single one costs less
#: alone than as a batch).
_BATCHED_FROM = 2


def record_plain_evictions(
    tasks: list[Task],
    start: int,
    reason: str,
    ops: list[_Op],
    standing: dict[Task, list[_Op]],
    run: list[Task],
    in_run: set[Task],
) -> int:
    """Record the evictions of ``tasks[start:]`` as :meth:`Statement.evict` would, while
    each is plain (:func:`_plainly_evicted`) and its pod not yet in ``run``: each
    operation appended to ``ops`` and to its pod's standing ones, the pod to ``run`` and
    ``in_run`` (the rows and events are :meth:`Statement._evicted_together`'s).  Returns
    the index of the first task not recorded (``len(tasks)`` when none is left).

    The reference of ``kai._fast.statement.record_plain_evictions``."""
    for i in range(start, len(tasks)):
        task = tasks[i]
        if task in in_run or not _plainly_evicted(task):
            return i
        op = _Op(
            "evict", task, task.status, task.node, task.gpu_group, task.virtually_evicted, reason
        )
        ops.append(op)
        held = standing.get(task)
        if held is None:
            standing[task] = [op]
        else:
            held.append(op)
        run.append(task)
        in_run.add(task)
    return len(tasks)


def pop_plain_undos(
    ops: list[_Op],
    checkpoint: int,
    standing: dict[Task, list[_Op]],
    run: list[_Op],
    in_run: set[Task],
) -> None:
    """Take the last operations off ``ops``, down to ``checkpoint``, while each is an
    eviction that :meth:`Statement.rollback` undoes in place (:func:`_undone_in_place`)
    of a pod not yet in ``in_run`` (NodeTable.restatus_all takes each pod once), each
    off its pod's standing ones too (the last: the latest standing one), into ``run``
    and ``in_run``.

    The reference of ``kai._fast.statement.pop_plain_undos``."""
    while len(ops) > checkpoint and _undone_in_place(ops[-1]) and ops[-1].task not in in_run:
        op = ops.pop()
        standing[op.task].pop()
        run.append(op)
        in_run.add(op.task)


def _plainly_evicted(task: Task) -> bool:
    """Whether :meth:`Statement.evict` only turns ``task`` releasing on its node: a pod
    the cluster runs (not placed by the session) on whole GPUs."""
    status = task.status
    return (
        status not in _PLACED_BY_SESSION
        and task.node >= 0
        and status in _ON_NODE
        and not task.is_shared_gpu
    )


def _in_place(op: _Op) -> bool:
    """Whether undoing eviction ``op`` puts its pod back to its status on the node it is
    releasing on (nothing held or vacated)."""
    task = op.task
    return (
        op.held < 0
        and task.node == op.prev_node >= 0
        and op.prev_status in _ON_NODE
        and not task.is_shared_gpu
    )


def _undone_in_place(op: _Op) -> bool:
    """Whether :meth:`Statement.rollback` undoes ``op`` in place (:func:`_in_place`): an
    eviction standing (not undone by a later operation)."""
    return op.kind == "evict" and not op.undone and _in_place(op)


#: ``Session.cache`` key of the tasks whose placement a committed eviction withdrew.
_WITHDRAWN = "statement.withdrawn"


def _places(decision: Decision, task: Task) -> bool:
    return decision.task is task and decision.type != "evict"
