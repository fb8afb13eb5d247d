"""A simulation's re-placement in the compiled core.

:func:`kai.actions.solvers.simulate.simulate` evicts a scenario's victims, then
re-places the victims' jobs and the preemptor in queue order.  On a busy cluster most
simulations fail where the preemptor's turn comes: the victims' queues, below their
fair share once their pods are evicted, come first and take their places back.  The
compiled core (``kai/simulation.hpp``) runs that re-placement on copies of the node
matrices and queue allocations, with the same queue order, node choice, statement
arithmetic and skips, and says whether the preemptor is placed whole.  When it is not,
the simulation has failed and no statement is made.  When it is, the core follows the
re-placement to its end and records its steps (:class:`Verdict`), which the statement
replays instead of the Python loop: the validators read the state the loop would have
left, bit for bit.  For consolidation, whose validator refuses a scenario that leaves a
victim without a place, the core refuses those scenarios itself.

:class:`ReplacementCheck` lays the simulation queue out in arrays for it, for what the
compiled re-placement takes: the session's compiled node picker and proportion's queue
order alone, no pre-predicate, and participants whose pods ask for whole GPUs (or none),
of jobs that are not semi-preemptible; pods placed earlier in the session only as
victims that the simulation evicts back to pending (bound in the session, or pipelined
in it, moved there or not, with at most one older vacated place).  Anything else is
simulated in Python, as before.
"""

from __future__ import annotations

import os
from bisect import bisect_left
from collections.abc import Callable, Container, Iterator
from contextlib import contextmanager
from dataclasses import field
from typing import Any, NamedTuple

import numpy as np

from kai import _fast
from kai._dataclasses import dataclass
from kai.actions.common import link_leaf
from kai.actions.fast_allocate import GROUP_NODES_FROM, NodePicker
from kai.actions.solvers.batches import VictimBatch
from kai.actions.solvers.pending import PendingPool, action_pool, partial_view
from kai.actions.solvers.scenario import (
    COUNT_SLACK,
    Scenario,
    StateStamp,
    same_state,
    state_stamp,
)
from kai.api.model import Job, NodeTable, Task, TaskStatus
from kai.api.preemptibility import SEMI_PREEMPTIBLE, non_preemptible_part
from kai.api.resources import GPU
from kai.framework.session import Session, tasks_to_allocate
from kai.framework.statement import Statement
from kai.plugins.proportion import QUEUE_COLUMNS, ProportionPlugin, QueueKernel

#: The victims the core evicts: pods running or bound before the session.
_BOUND_BEFORE = (TaskStatus.RUNNING, TaskStatus.BOUND)

#: The request columns of a queue vector, as the layouts take them.
_COLUMNS = tuple(int(c) for c in QUEUE_COLUMNS)

#: kai/simulation.hpp's ``Replaced`` outcomes that are not a refusal.
_PLACED, _VICTIM_LEFT, _UNDECIDED = 1, 2, 3

#: kai/simulation.hpp's ``Step`` kinds.
_CHECKPOINT, _PLACE, _ROLLBACK, _RETAKE = 0, 1, 2, 3

#: Where a session keeps its check (``ssn.cache``).
CHECK_KEY = "solver.replacement_check"

#: Set to 1 to run the Python loop after the compiled one too and compare (tests).
VERIFY_ENV = "KAI_VERIFY_REPLACEMENT"


#: The check pays where simulations fail: it refuses most of them itself, and a search
#: that keeps failing lays out scenarios that share their parts and would run the loop
#: again and again.  Where simulations are accepted (each one ends its job's search, and
#: the next job's is laid out afresh) laying a small queue out, or thousands of victims'
#: jobs the loop passes over, can cost more than the loop that replaying the steps saves.
#: A session keeps a credit: each simulation that fails (the check refused it, or the
#: loop or a validator did) adds ``CREDIT_GAIN`` (up to ``CREDIT_MAX``), each accepted
#: one takes one; with none left the check is asked only once per ``PROBE_EVERY``
#: simulations.  (The simulation's outcome is the same either way: this changes speed.)
CREDIT_START = 2
CREDIT_GAIN = 4
CREDIT_MAX = 32
PROBE_EVERY = 256


@dataclass(eq=False)  # arrays: compared by identity
class ReplacementArrays:
    """The arrays of kai/simulation.hpp's ``Replacement``, by the same names."""

    idle: np.ndarray  # [N, R], before the evictions
    releasing: np.ndarray
    within: np.ndarray  # [N] bool
    masks: np.ndarray  # [K, P, N] bool: predicate masks per constraint set
    predicates: int  # P
    count_slack: float
    alike_from: int  # GROUP_NODES_FROM
    q_alloc: np.ndarray  # [Q, 3], before the evictions
    q_alloc_np: np.ndarray
    q_deserved: np.ndarray
    q_limit: np.ndarray
    q_fair: np.ndarray
    q_allocatable: np.ndarray
    q_priority: np.ndarray  # [Q]
    q_rank: np.ndarray
    total: np.ndarray  # [3]
    q_path_start: np.ndarray  # [Q + 1]
    q_path: np.ndarray
    kid_start: np.ndarray  # [Q + 2]: the children of queue q (of the root at q = Q)
    kids: np.ndarray
    base_start: np.ndarray  # [Q + 1]: the stand-ins of each leaf, in job order
    base_request: np.ndarray  # [B, 3]
    base_skipped: np.ndarray  # [B] bool: the participants' own entries
    preemptor: int
    own_start: np.ndarray  # [Q + 1]: the participants of each leaf, in order
    own: np.ndarray
    p_before: np.ndarray  # [M]: the stand-in it comes before
    p_request: np.ndarray  # [M, 3]
    p_leaf: np.ndarray
    p_task_start: np.ndarray  # [M + 1]
    p_np_count: np.ndarray
    p_np_charge: np.ndarray  # [M] bool
    p_gpu_need: np.ndarray
    t_req: np.ndarray  # [T, R]
    t_qvec: np.ndarray  # [T, 3]
    t_mask: np.ndarray  # [T]
    t_nominated: np.ndarray
    t_evicted_from: np.ndarray
    t_vacated_at: np.ndarray  # [T]: a victim placed in the session: the place it left
    t_pipelined_back: np.ndarray  # [T] bool: placed back, it is pipelined (not bound) again
    t_held_at: np.ndarray  # [T]: the place a moved one holds again when placed back (-1)
    t_also: np.ndarray  # [T]: an older vacated place of it, where it is placed back too (-1)
    v_req: np.ndarray | None = None  # [V, R]: the victims, evicted in this order
    v_qvec: np.ndarray | None = None  # [V, 3]
    v_node: np.ndarray | None = None
    v_leaf: np.ndarray | None = None
    v_np: np.ndarray | None = None  # [V] bool: the victim's job is non-preemptible
    v_pipelined: np.ndarray | None = None  # [V] bool: pipelined in the session
    v_held: np.ndarray | None = None  # [V]: the place a moved one holds where it runs (-1)
    every_victim: bool = False  # also tell whether every victim is placed again
    with_rows: bool = False  # also give the node rows it ends on (a check: VERIFY_ENV)
    parts: list[_Participant] = field(default_factory=list)
    order: list[int] = field(default_factory=list)  # [M]: each participant's index in parts


@dataclass(slots=True, eq=False)  # arrays: compared by identity
class Verdict:
    """The compiled re-placement's verdict on a simulation: whether it passes
    (:meth:`ReplacementCheck.verdict`; None: not decided), and for one that
    passes, its steps, to be replayed on the statement."""

    placed: bool | None
    steps: np.ndarray | None = None  # [K, 3] (kind, a, b): kai/simulation.hpp's Step
    pods: list[Task] | None = None  # the simulation's pods, by the steps' pod index
    # The node rows (idle, releasing) the re-placement ends on, when asked for.
    rows: tuple[np.ndarray, np.ndarray] | None = None

    def replay(self, stmt: Statement) -> None:
        """Make on ``stmt`` (the victims evicted, in order) what the simulation's loop
        makes: the same pipelines in the same order, and the gangs that found no place
        placed and rolled back, so that the state is the loop's to the last bit."""
        assert self.steps is not None and self.pods is not None
        pods = self.pods
        checkpoint = 0
        for kind, a, b in self.steps.tolist():
            if kind == _PLACE or kind == _RETAKE:  # the statement tells the two apart itself
                stmt.pipeline(pods[a], b)
            elif kind == _CHECKPOINT:
                checkpoint = stmt.checkpoint()
            else:
                stmt.rollback(checkpoint)

    def placements(self) -> dict[Task, tuple[int, bool]]:
        """Where the steps place each pod (a gang rolled back places none), and whether a
        pod placed in the session is pipelined onto its vacated place there instead of
        getting its placement back (kai/simulation.hpp's ``kRetake``)."""
        assert self.steps is not None and self.pods is not None
        pods = self.pods
        placed: dict[Task, tuple[int, bool]] = {}
        since: list[Task] = []  # placed since the last checkpoint
        for kind, a, b in self.steps.tolist():
            if kind == _PLACE or kind == _RETAKE:
                placed[pods[a]] = (b, kind == _RETAKE)
                since.append(pods[a])
            elif kind == _CHECKPOINT:
                since = []
            else:
                for task in since:
                    del placed[task]
                since = []
        return placed


_NOT_DECIDED = Verdict(None)
_REFUSED_VERDICT = Verdict(False)


class _Unsupported(Exception):
    """A participant the compiled re-placement does not take."""


@dataclass(eq=False)  # arrays: compared by identity
class _Base:
    """The pool's stand-ins as arrays, and the queue tree they link, for one version
    of the pool."""

    pool: PendingPool
    version: int
    start: np.ndarray
    request: np.ndarray
    index: dict[Job, int]
    children: dict[str | None, list[str]]
    tree: tuple[np.ndarray, np.ndarray]  # (kid_start, kids)
    bare: frozenset[int]  # the leaves without stand-ins (a simulation links them itself)


#: The rows of :attr:`_Participant.ints`.
POD_INTS = 6
_NOMINATED, _EVICTED_FROM, _VACATED_AT, _HELD_AT, _ALSO, _MASK = range(POD_INTS)
_NO_PODS_F = np.zeros((0, 0), dtype=np.float64)
_NO_PODS_I = np.zeros((POD_INTS, 0), dtype=np.int64)
_NO_PODS_B = np.zeros(0, dtype=np.bool_)


@dataclass(slots=True, eq=False)  # arrays: compared by identity
class _Participant:
    """A participant of a simulation as its evictions leave it: its leaf queue, its
    job-order key, what the queue order reads of it, and its pods to place."""

    leaf: int
    key: Any
    before: int  # the pool entry it comes before: the first of a key not below its own
    request: np.ndarray
    np_count: int
    np_charge: bool
    gpu_need: float = 0.0
    rank: _Rank | None = None  # its (leaf, key) among the pool's participants
    # Its pods to place, in order, and their arrays as a simulation's take them (made
    # once: lay_out copies them into each simulation's).
    tasks: list[Task] = field(default_factory=list)
    block: np.ndarray = field(default_factory=lambda: _NO_PODS_F)  # [pods, R]: requests
    #: [POD_INTS, pods]: per pod its nominated node, the node it is evicted from (-1:
    #: pending), its vacated place, held place and older vacated place (-1: none), and
    #: its mask slot (the check's, :meth:`ReplacementCheck._mask_slot`).
    ints: np.ndarray = field(default_factory=lambda: _NO_PODS_I)
    piped: np.ndarray = field(default_factory=lambda: _NO_PODS_B)  # [pods]: pipelined_back


class _Rank:
    """Where a (leaf, job-order key) pair stands among those of the participants laid
    out for one version of the pool: ranks compare as the pairs do, and the participants
    of equal pairs share one (:meth:`ReplacementCheck._rank`), so that a simulation's
    participants are ordered by numbers (kai._fast.layout) instead of by their keys."""

    __slots__ = ("value",)

    def __init__(self, value: float) -> None:
        self.value = value


@dataclass(slots=True, eq=False)  # arrays: compared by identity
class _Slot:
    """One job's victims in the scenarios of a probe (its recorded victims, or one victim
    batch), laid out once: the job as a participant with them evicted, and the victims'
    arrays (:meth:`ReplacementCheck._victims`) packed (:func:`pack_victims`).

    Both read the job's pods alone, so a batch's slot holds while its job's queue keeps
    the version it was laid out at (``queue``, ``version``); ``refused`` when the
    compiled re-placement does not take it."""

    job: Job
    part: _Participant | None
    packed: np.ndarray
    base_at: int  # the job's stand-in in the pool (-1: none)
    queue: str
    version: int
    refused: bool = False
    batch: VictimBatch | None = None  # kept alive: the probe finds slots by its id


#: A slot's victims before they are laid out.
_NO_VICTIMS = np.zeros((0, 0))

#: A batch the probe's layout does not take: the scenario is laid out whole.
_WHOLE = object()
#: A scenario the compiled re-placement does not take at all.
_REFUSED = object()


class _ProbeLayout:
    """What the scenarios of one probe share: the preemptor's view and the recorded
    victims, laid out once (:meth:`ReplacementCheck._probe_arrays`).

    A probe's scenarios are simulated on one session state (each simulation is undone
    before the next), so what is laid out holds while that state's ``stamp`` and the
    pool's stand-ins stay the same.  The batches are laid out apart, for every probe
    (:class:`_Slot`).
    """

    __slots__ = (
        "preemptor",
        "pending",
        "recorded",
        "feasible",
        "base",
        "stamp",
        "refused",
        "view",
        "view_at",
        "recorded_slots",
        "recorded_jobs",
        "recorded_packed",
    )

    def __init__(
        self,
        scenario: Scenario,
        feasible: np.ndarray,
        base: _Base,
        stamp: StateStamp,
    ) -> None:
        self.preemptor = scenario.preemptor
        self.pending = scenario.pending
        self.recorded = scenario.recorded
        self.feasible = feasible
        self.base = base
        self.stamp = stamp
        self.refused = False  # the recorded victims or the view are not taken
        self.view: _Participant | None = None
        self.view_at = base.index.get(scenario.preemptor, -1)  # its stand-in
        self.recorded_slots: list[_Slot] = []
        self.recorded_jobs: set[Job] = set()
        self.recorded_packed: np.ndarray | None = None  # the recorded victims (pack_victims)

    def serves(
        self, scenario: Scenario, feasible: np.ndarray, base: _Base, stamp: StateStamp
    ) -> bool:
        return (
            scenario.preemptor is self.preemptor
            and scenario.pending is self.pending
            and scenario.recorded is self.recorded
            and feasible is self.feasible
            and base is self.base
            and same_state(stamp, self.stamp)
        )


class ReplacementCheck:
    """The compiled re-placement for one session's simulations."""

    def __init__(
        self, ssn: Session, picker: NodePicker, proportion: ProportionPlugin, queues: QueueKernel
    ) -> None:
        self.ssn = ssn
        self.picker = picker
        self.proportion = proportion
        self.names: list[str] = queues.names
        self.index = {name: q for q, name in enumerate(self.names)}
        self.queues = queues
        self.shares = [proportion.shares[name] for name in self.names]
        self._base: _Base | None = None
        # Per pod, what the session does not change: its constraint set's mask slot, its
        # nominated node and its GPU request.
        self._pods: dict[Task, tuple[int, int, float]] = {}
        # The constraint sets' masks met, each given a slot (by id: the list keeps
        # them alive), and the masks stacked in slot order while no new one is met.
        self._mask_slots: dict[int, int] = {}
        self._masks: list[np.ndarray] = []
        self._stacked: np.ndarray | None = None
        # Per victim pod, what no simulation changes (_victim_kind).
        self._victim_kinds: dict[Task, tuple[int, bool] | tuple[()]] = {}
        # The victims' jobs laid out, by (job, its evicted pods, its pods' state: see
        # _layout_key), for one version of the pool.
        self._layouts: dict[tuple[Job, tuple[Task, ...], tuple], _Participant] = {}
        # The evicted pods' arrays packed, by the same keys.
        self._packs: dict[tuple[Job, tuple[Task, ...], tuple], np.ndarray] = {}
        # The preemptors' views laid out, by (job, its pending pods, its queue's version).
        self._views: dict[tuple[Job, tuple[Task, ...], int], _Participant] = {}
        # The participants' (leaf, key) pairs laid out for the pool, ascending, and
        # their ranks (_rank).
        self._ranked: list[tuple[int, Any]] = []
        self._ranks: list[_Rank] = []
        # The queues' allocations, for one version of the node table.
        self._allocations: tuple[Any, int, np.ndarray, np.ndarray] | None = None
        # The probe whose scenarios are being simulated, laid out (_probe_arrays), and
        # the batches laid out for every probe (by id: each slot keeps its batch
        # alive), for the pool's stand-ins of ``_slots_base``.
        self._probe: _ProbeLayout | None = None
        self._slots: dict[int, object] = {}
        self._slots_base: _Base | None = None
        self.verify = os.environ.get(VERIFY_ENV) == "1"
        self._credit = CREDIT_START
        self._passed = 0

    @classmethod
    def for_session(cls, ssn: Session) -> ReplacementCheck | None:
        found = ssn.cache.get(CHECK_KEY)
        if found is None:
            # False: the session was looked at and the compiled re-placement is out.
            found = ssn.cache[CHECK_KEY] = cls._make(ssn) or False
        return found if isinstance(found, ReplacementCheck) else None

    @classmethod
    def _make(cls, ssn: Session) -> ReplacementCheck | None:
        picker = NodePicker.for_session(ssn)
        if picker is None or ssn.registered("pre_predicate"):
            return None
        orders = ssn.registered("queue_order")
        capacity = ssn.registered("job_over_capacity")
        if len(orders) != 1 or orders[0].plugin != "proportion":
            return None
        if not capacity or capacity[0].plugin != "proportion":
            return None
        proportion = next((p for p in ssn.plugins if isinstance(p, ProportionPlugin)), None)
        queues = proportion.kernel_form(ssn) if proportion is not None else None
        if proportion is None or queues is None:
            return None
        return cls(ssn, picker, proportion, queues)

    # ------------------------------------------------------------------ the check
    def verdict(
        self, scenario: Scenario, feasible: np.ndarray, *, every_victim: bool = False
    ) -> Verdict:
        """Whether the simulation of ``scenario``, on the nodes ``feasible`` and its
        victims' nodes, places the preemptor's pending pods whole in their turn (and,
        with ``every_victim``, every victim again by its end), and if it does, the steps
        of its re-placement; not decided (``placed`` None) when the compiled
        re-placement does not take it (or sits it out: see ``CREDIT_START``).  The
        session is only read.

        The scenarios of one probe share the preemptor's view and the recorded victims,
        and most are made of batches that earlier ones had: each is laid out once per
        probe (:class:`_ProbeLayout`) and a scenario is only put together from them.  A
        scenario with two victim groups of one job, or with the preemptor's own pods
        among its victims, is laid out whole (:meth:`_whole_arrays`).
        """
        if self._skipped():
            return _NOT_DECIDED
        pool = action_pool(self.ssn)
        if not isinstance(pool, PendingPool):
            return _NOT_DECIDED
        try:
            base = self._base_of(pool)
            arrays = self._probe_arrays(scenario, feasible, base)
            if arrays is None:
                arrays = self._whole_arrays(scenario, feasible, base)
        except _Unsupported:
            return _NOT_DECIDED
        return self._decide(arrays, every_victim)

    def _skipped(self) -> bool:
        """Whether the check sits this simulation out (see ``CREDIT_START``)."""
        if self._credit <= 0 and not self.verify:
            self._passed += 1
            return bool(self._passed % PROBE_EVERY)
        return False

    def _whole_arrays(
        self, scenario: Scenario, feasible: np.ndarray, base: _Base
    ) -> ReplacementArrays:
        """The arrays of ``scenario``'s simulation laid out whole: its victims
        (:meth:`_victims`) and their jobs and the preemptor as they leave them
        (:meth:`_as_evicted`)."""
        victims, within, victim_jobs = scenario.victims_within(feasible)
        evicted = self._victims(victims)
        arrays = self._as_evicted(
            victims, victim_jobs, scenario.preemptor, scenario.pending, within, base
        )
        _set_victims(arrays, evicted)
        return arrays

    def _decide(self, arrays: ReplacementArrays, every_victim: bool) -> Verdict:
        """The compiled re-placement's verdict on ``arrays`` (``every_victim``: see
        :meth:`verdict`); a refusal is told to the credit."""
        arrays.every_victim = every_victim
        arrays.with_rows = self.verify
        outcome, steps, *rows = self.picker.native.replace_victims(arrays)
        if outcome == _UNDECIDED:
            return _NOT_DECIDED
        if outcome == _PLACED or (outcome == _VICTIM_LEFT and not every_victim):
            parts = arrays.parts
            pods = [task for i in arrays.order for task in parts[i].tasks]
            return Verdict(True, steps, pods, (rows[0], rows[1]) if rows else None)
        self.account(False)
        return _REFUSED_VERDICT

    def _probe_arrays(
        self, scenario: Scenario, feasible: np.ndarray, base: _Base
    ) -> ReplacementArrays | None:
        """The arrays of ``scenario``'s simulation from its probe's layout; None for a
        scenario to lay out whole.  The same arrays as :meth:`_as_evicted` and
        :meth:`_victims` give: the recorded victims' jobs, then each batch's job in the
        scenario's order, then the preemptor's view; the victims in the same order."""
        ssn = self.ssn
        stamp = state_stamp(ssn)
        probe = self._probe
        if probe is None or not probe.serves(scenario, feasible, base, stamp):
            probe = self._probe = self._lay_out_probe(scenario, feasible, base, stamp)
            if self._slots_base is not base:
                self._slots = {}
                self._slots_base = base
        if probe.refused:
            raise _Unsupported
        if probe.view is None:
            return None
        fast = _fast.module("layout")
        got: Any = (fast.gather if fast is not None else gather)(
            scenario.batches,
            self._slots,
            lambda batch: self._batch_slot(base, batch),
            ssn.queue_versions,
            probe.preemptor,
            probe.recorded_jobs,
            probe.recorded_slots,
            probe.recorded_packed,
            probe.view,
            probe.view_at,
            feasible,
            ssn.nodes.idle.shape[1],
            _WHOLE,
            _REFUSED,
        )
        if got is _REFUSED:
            raise _Unsupported
        if got is None:
            return None
        parts, skipped, *evicted, within = got
        arrays = self._arrays(parts, skipped, within, base)
        _set_victims(arrays, evicted)
        return arrays

    def _lay_out_probe(
        self, scenario: Scenario, feasible: np.ndarray, base: _Base, stamp: StateStamp
    ) -> _ProbeLayout:
        """The probe of ``scenario``: its preemptor's view and its recorded victims."""
        probe = _ProbeLayout(scenario, feasible, base, stamp)
        preemptor = scenario.preemptor
        per_job: dict[Job, list[Task]] = {}
        for task in scenario.recorded:
            per_job.setdefault(task.job, []).append(task)
        if preemptor in per_job:
            return probe  # no view: every scenario is laid out whole
        try:
            if per_job:
                probe.recorded_packed = self._packed(list(scenario.recorded))
                probe.recorded_slots = [self._slot(base, job, ts) for job, ts in per_job.items()]
                probe.recorded_jobs = set(per_job)
            probe.view = self._view(base, preemptor, scenario.pending)
        except _Unsupported:
            probe.refused = True
        return probe

    def _batch_slot(self, base: _Base, batch: VictimBatch) -> object:
        """``batch`` laid out: a :class:`_Slot` (refused or not), or ``_WHOLE`` for
        pods of several jobs."""
        tasks = list(batch.tasks)
        job = tasks[0].job
        if any(task.job is not job for task in tasks):
            return _WHOLE
        try:
            slot = self._slot(base, job, tasks, pack=True)
        except _Unsupported:
            queue = job.queue or ""
            slot = _Slot(job, None, _NO_VICTIMS, -1, queue, self.ssn.queue_versions[queue], True)
        slot.batch = batch
        return slot

    def _packed(self, victims: list[Task]) -> np.ndarray:
        """The victims' arrays (:meth:`_victims`), packed (:func:`pack_victims`)."""
        fast = _fast.module("layout")
        return (fast.pack_victims if fast is not None else pack_victims)(self._victims(victims))

    def _layout_key(self, job: Job, evicted: tuple[Task, ...]) -> tuple:
        """What ``job``'s layout with ``evicted`` evicted is kept by: the job, those
        pods, and its pods' statuses, nodes and held or vacated places, which are all a
        simulation changes of it (and puts back when it is undone: the job's queue's
        version, which it bumps, would not come back)."""
        nodes = self.ssn.nodes
        held, vacated = nodes.held, nodes.vacated
        state = tuple(
            (
                t.status,
                t.node,
                t.virtually_evicted,
                held.get(t, -1),
                tuple(p.node for p in vacated[t]) if t in vacated else (),
            )
            for t in job.tasks
        )
        return job, evicted, state

    def _slot(self, base: _Base, job: Job, evicted: list[Task], *, pack: bool = False) -> _Slot:
        """``job`` as a participant with its pods ``evicted`` evicted (laid out once per
        set of evicted pods and state of its pods, as :meth:`_as_evicted`), with
        ``pack`` those pods' arrays packed too (:meth:`_packed`, which reads nothing
        else of them that a simulation changes: kept alike)."""
        queue = job.queue or ""
        version = self.ssn.queue_versions[queue]
        key = self._layout_key(job, tuple(evicted))
        part = self._layouts.get(key)
        if part is None:
            with _evicted(evicted, self.ssn.nodes) as vacated_at:
                part = self._participant(
                    base, job, tasks_to_allocate(self.ssn, job), evicted, vacated_at
                )
            self._layouts[key] = part
        packed = self._packs.get(key) if pack else _NO_VICTIMS
        if packed is None:
            packed = self._packs[key] = self._packed(evicted)
        return _Slot(job, part, packed, base.index.get(job, -1), queue, version)

    def _view(self, base: _Base, preemptor: Job, pending: list[Task]) -> _Participant:
        """The preemptor's view, the same for every scenario of a probe."""
        view_key = (preemptor, tuple(pending), self.ssn.queue_versions[preemptor.queue or ""])
        part = self._views.get(view_key)
        if part is None:
            view = partial_view(preemptor, pending)
            part = self._views[view_key] = self._participant(base, view, pending, None, {})
        return part

    def account(self, accepted: bool) -> None:
        """A simulation was accepted or failed (see ``CREDIT_START``): told by
        :meth:`verdict` for the ones it refuses, and by the simulation for the others."""
        if accepted:
            self._credit -= 1
        else:
            self._credit = min(max(self._credit, 0) + CREDIT_GAIN, CREDIT_MAX)

    def _victims(self, victims: list[Task]) -> tuple[np.ndarray, ...]:
        """The victims' arrays (:func:`victim_arrays`)."""
        nodes = self.ssn.nodes
        fast = _fast.module("layout")
        arrays = (fast.victims if fast is not None else victim_arrays)(
            victims,
            self._victim_kinds,
            self._victim_kind,
            nodes.held,
            nodes.vacated,
            _BOUND_BEFORE,
            TaskStatus.BINDING,
            TaskStatus.PIPELINED,
            nodes.idle.shape[1],
            _COLUMNS,
        )
        if arrays is None:
            raise _Unsupported
        return arrays

    def _victim_kind(self, task: Task) -> tuple[int, bool] | tuple[()]:
        """What :meth:`_victims` reads of a victim that no simulation changes: its leaf
        queue's index and whether its job is non-preemptible; empty for a victim the
        core does not take (a GPU fraction or GPU memory, a semi-preemptible job, a
        queue outside the tree)."""
        job = task.job
        leaf = self._leaf_of(job)
        if leaf is None or task.gpu_fraction > 0 or task.gpu_memory_mib > 0:
            return ()
        return leaf, not job.preemptible

    def _leaf_of(self, job: Job) -> int | None:
        """The index of ``job``'s leaf queue, if the core takes the job: not a
        semi-preemptible one, nor one of a queue outside the tree."""
        if job.queue is None or job.preemptibility == SEMI_PREEMPTIBLE:
            return None
        return self.index.get(job.queue)

    def _as_evicted(
        self,
        victims: list[Task],
        victim_jobs: list[Job],
        preemptor: Job,
        pending: list[Task],
        within: np.ndarray,
        base: _Base,
    ) -> ReplacementArrays:
        """The simulation's queue and participants as the evictions make them.

        The participants are the victims' jobs and the preemptor's view, each standing
        where kai.actions.solvers.pending.SimulationQueue puts it.  A victim's job is laid
        out with the victims' statuses set as an eviction sets them, then put back (the
        node rows and queue allocations are evicted in the core); the layout is kept
        while none of the job's pods changes status (:meth:`_layout_key`), so a job that
        is a victim in many scenarios is laid out once per set of its evicted pods.
        """
        ssn = self.ssn
        own_victims: dict[Job, list[Task]] = {}
        for task in victims:
            own_victims.setdefault(task.job, []).append(task)
        keys = [self._layout_key(job, tuple(own_victims.get(job, ()))) for job in victim_jobs]
        layouts = self._layouts
        found = [layouts.get(key) for key in keys]
        view_part: _Participant | None = None
        if preemptor in own_victims or None in found:
            with _evicted(victims, ssn.nodes) as vacated_at:
                for i, job in enumerate(victim_jobs):
                    if found[i] is None:
                        part = self._participant(
                            base, job, tasks_to_allocate(ssn, job), own_victims.get(job), vacated_at
                        )
                        found[i] = layouts[keys[i]] = part
                if preemptor in own_victims:
                    view = partial_view(preemptor, pending)
                    view_part = self._participant(
                        base, view, pending, own_victims[preemptor], vacated_at
                    )
        if view_part is None:
            view_part = self._view(base, preemptor, pending)
        parts: list[_Participant] = [*found, view_part]  # type: ignore[list-item]
        index = base.index
        skipped = [index[job] for job in {*victim_jobs, preemptor} if job in index]
        return self._arrays(parts, skipped, within, base)

    def _base_of(self, pool: PendingPool) -> _Base:
        """The pool's stand-ins and the requests the queue order reads of them (the
        pool's queue-order keys: proportion's is the request's bytes), kept while the
        pool is.  Made before a simulation sets any status: the keys the pool keeps are
        those of the session as it is."""
        base = self._base
        if base is not None and base.pool is pool and base.version == pool.version:
            return base
        self._base = None
        self._layouts.clear()  # a commit changed pods' statuses
        self._packs.clear()
        self._views.clear()
        self._ranked, self._ranks = [], []
        if any(name not in self.index for name, entries in pool.leaves.items() if entries):
            raise _Unsupported
        start = [0]
        keys: list[bytes] = []
        index: dict[Job, int] = {}
        queue_key = pool.queue_key
        for name in self.names:
            for _key, _seq, job in pool.leaves.get(name, ()):
                index[job] = len(keys)
                key = queue_key(job)
                if key is None or len(key) != 1 or len(key[0]) != 24:
                    raise _Unsupported
                keys.append(key[0])
            start.append(len(keys))
        request = np.frombuffer(b"".join(keys), dtype=np.float64).reshape(len(keys), 3)
        start_at = np.array(start, dtype=np.int64)
        # The queue tree as a simulation queue links it: the leaves with stand-ins first.
        children: dict[str | None, list[str]] = {}
        for name, entries in pool.leaves.items():
            if entries:
                link_leaf(children, self.ssn.queue_path(name))
        tree = self._tree(children)
        bare = frozenset(q for q, name in enumerate(self.names) if not pool.leaves.get(name))
        base = self._base = _Base(
            pool, pool.version, start_at, request, index, children, tree, bare
        )
        return base

    def _tree(self, children: dict[str | None, list[str]]) -> tuple[np.ndarray, np.ndarray]:
        """The queue tree ``children``: each queue's children (then the root's), in the
        order they were linked, as offsets and queue indices."""
        kid_start, kids = [0], []
        for parent in [*self.names, None]:
            for name in children.get(parent, ()):
                q = self.index.get(name)
                if q is None:
                    raise _Unsupported
                kids.append(q)
            kid_start.append(len(kids))
        return np.array(kid_start, dtype=np.int64), np.array(kids, dtype=np.int64)

    def _pod(self, task: Task, job: Job) -> tuple[int, int, float]:
        """What :meth:`_participant` reads of ``task`` that the session does not change,
        kept per pod; _Unsupported for a pod the core does not take (a GPU fraction or
        GPU memory, or a predicate that gives reasons per node)."""
        if task.gpu_fraction > 0 or task.gpu_memory_mib > 0:
            raise _Unsupported
        mask = self.picker.constraint_masks(task, job)
        if mask is None:
            raise _Unsupported
        nominated = task.pod.nominated_node_name
        at = self.ssn.nodes.index.get(nominated, -1) if nominated else -1
        found = self._pods[task] = (self._mask_slot(mask), at, float(task.request[GPU]))
        return found

    def _mask_slot(self, mask: np.ndarray) -> int:
        """The slot of a constraint set's masks among those :meth:`_stacked_masks`
        gives (the simulations' ``masks``)."""
        slot = self._mask_slots.get(id(mask))
        if slot is None:
            slot = self._mask_slots[id(mask)] = len(self._masks)
            self._masks.append(mask)
            self._stacked = None
        return slot

    def _stacked_masks(self) -> np.ndarray:
        """The masks of every slot (:meth:`_mask_slot`), stacked: [K, P, N] (three
        dimensions even when there are no slots or no predicates)."""
        if self._stacked is None:
            shape = (len(self._masks), len(self.picker.predicates), len(self.ssn.nodes))
            self._stacked = np.array(self._masks, dtype=np.bool_).reshape(shape)
        return self._stacked

    def _participant(
        self,
        base: _Base,
        job: Job,
        tasks: list[Task],
        evicted: list[Task] | None,
        vacated_at: dict[Task, _Vacated],
    ) -> _Participant:
        """``job`` as a participant whose pods to place are ``tasks``, its pods
        ``evicted`` evicted by the simulation, in the session's current state."""
        leaf = self._leaf_of(job)
        if leaf is None:
            raise _Unsupported
        nodes, pods = self.ssn.nodes, self._pods
        pool = base.pool
        evicted_set = set(evicted) if evicted else ()
        key = pool.key(job)
        # A participant comes before the pool's entries of an equal key (SimulationQueue
        # numbers participants below every pool entry).
        stand_ins = pool.leaves.get(self.names[leaf], [])
        part = _Participant(
            leaf,
            key,
            int(base.start[leaf]) + bisect_left(stand_ins, (key,)),
            self.proportion.job_request(job),
            len(non_preemptible_part(job, tasks)),
            not job.preemptible,
        )
        need = 0.0
        ints: list[tuple[int, ...]] = []
        piped: list[bool] = []
        for task in tasks:
            pod = pods.get(task) or self._pod(task, job)
            vacated = vacated_at.get(task, _NOT_VACATED)
            if (task in nodes.vacated or task in nodes.held) and not (
                vacated.pipelined and vacated.also >= -1
            ):
                raise _Unsupported  # (a pipelined victim's places are laid out below)
            if task.status is TaskStatus.PENDING:
                evicted_from = -1
            elif (
                task.status is TaskStatus.RELEASING
                and task.virtually_evicted
                and task in evicted_set
            ):
                evicted_from = task.node
            else:
                raise _Unsupported
            slot, nominated, gpus = pod
            # In the order of the rows of _Participant.ints.
            ints.append((nominated, evicted_from, vacated.at, vacated.held, vacated.also, slot))
            piped.append(vacated.pipelined)
            if gpus > need:
                need = gpus
        part.gpu_need = need
        part.tasks = list(tasks)
        part.rank = self._rank(leaf, key)
        width = self.ssn.nodes.idle.shape[1]
        part.block = np.array([task.request for task in tasks], dtype=np.float64).reshape(
            len(tasks), width
        )
        part.ints = np.array(ints, dtype=np.int64).reshape(len(tasks), POD_INTS).T.copy()
        part.piped = np.array(piped, dtype=np.bool_)
        return part

    def _rank(self, leaf: int, key: Any) -> _Rank:
        """The rank of ``(leaf, key)`` (see :class:`_Rank`): its pair's, if one equal to it
        is ranked already; else one between its neighbours' (the ranks around it spread
        out again when no float is left between them: :meth:`_spread`).  Pairs below or
        above all the others are ranked a step beyond them."""
        pair = (leaf, key)
        ranked, ranks = self._ranked, self._ranks
        i = bisect_left(ranked, pair)
        if i < len(ranked) and not pair < ranked[i]:
            return ranks[i]  # equal: neither is below the other
        if not ranks:
            low, high = 0.0, 2.0
        elif i == 0:
            high = ranks[0].value
            low = high - 2.0
        else:
            low = ranks[i - 1].value
            high = ranks[i].value if i < len(ranks) else low + 2.0
        rank = _Rank((low + high) / 2)
        ranked.insert(i, pair)
        ranks.insert(i, rank)
        if not low < rank.value < high:
            _spread(ranks, i)
        return rank

    def _arrays(
        self,
        parts: list[_Participant],
        skipped_at: list[int],
        within: np.ndarray,
        base: _Base,
    ) -> ReplacementArrays:
        """The arrays of one simulation: ``parts`` (the victims' jobs, then the
        preemptor's view) in a simulation queue's order, standing in for the pool's
        entries ``skipped_at`` (their jobs')."""
        # The leaves a simulation queue links after the pool's (in the parts' order).
        extra: list[str] = []
        bare = base.bare
        for part in parts:
            if part.leaf in bare:
                name = self.names[part.leaf]
                if name not in extra:
                    extra.append(name)
        if extra:
            children = {parent: list(kids) for parent, kids in base.children.items()}
            for name in extra:
                link_leaf(children, self.ssn.queue_path(name))
            kid_start, kids = self._tree(children)
        else:
            kid_start, kids = base.tree
        nodes = self.ssn.nodes
        fast = _fast.module("layout")
        (
            preemptor_at,
            own_start,
            own,
            before,
            p_request,
            p_leaf,
            task_start,
            np_count,
            np_charge,
            gpu_need,
            t_req,
            t_qvec,
            t_mask,
            t_nominated,
            t_evicted,
            t_vacated,
            t_piped,
            t_held,
            t_also,
            order,
        ) = (fast.lay_out if fast is not None else lay_out)(
            parts, len(self.names), nodes.idle.shape[1], _COLUMNS
        )
        skipped = np.zeros(len(base.request), dtype=np.bool_)
        skipped[skipped_at] = True
        q_alloc, q_alloc_np = self._queue_allocations()
        kernel = self.queues
        return ReplacementArrays(
            parts=parts,
            order=order,
            idle=nodes.idle,
            releasing=nodes.releasing,
            within=within,
            masks=self._stacked_masks(),
            predicates=len(self.picker.predicates),
            count_slack=COUNT_SLACK,
            alike_from=GROUP_NODES_FROM,
            q_alloc=q_alloc,
            q_alloc_np=q_alloc_np,
            q_deserved=kernel.deserved,
            q_limit=kernel.limit,
            q_fair=kernel.fair_share,
            q_allocatable=kernel.allocatable,
            q_priority=kernel.priority,
            q_rank=kernel.rank,
            total=kernel.total,
            q_path_start=kernel.path_start,
            q_path=kernel.path,
            kid_start=kid_start,
            kids=kids,
            base_start=base.start,
            base_request=base.request,
            base_skipped=skipped,
            preemptor=preemptor_at,
            own_start=own_start,
            own=own,
            p_before=before,
            p_request=p_request,
            p_leaf=p_leaf,
            p_task_start=task_start,
            p_np_count=np_count,
            p_np_charge=np_charge,
            p_gpu_need=gpu_need,
            t_req=t_req,
            t_qvec=t_qvec,
            t_mask=t_mask,
            t_nominated=t_nominated,
            t_evicted_from=t_evicted,
            t_vacated_at=t_vacated,
            t_pipelined_back=t_piped,
            t_held_at=t_held,
            t_also=t_also,
        )

    def _queue_allocations(self) -> tuple[np.ndarray, np.ndarray]:
        """The queues' allocations (all, and non-preemptible), kept while no pod changes
        status: a change moves a pod on the node table, whose version it bumps, and is
        the only thing that charges a queue."""
        nodes = self.ssn.nodes
        kept = self._allocations
        if kept is not None and kept[0] is nodes and kept[1] == nodes.version:
            return kept[2], kept[3]
        shares = self.shares
        q_alloc = np.array([s.allocated for s in shares], dtype=np.float64)
        q_alloc_np = np.array([s.allocated_non_preemptible for s in shares], dtype=np.float64)
        self._allocations = (nodes, nodes.version, q_alloc, q_alloc_np)
        return q_alloc, q_alloc_np


def _spread(ranks: list[_Rank], i: int) -> None:
    """Give the ranks around ``ranks[i]`` evenly spaced values again, keeping their order:
    the fewest neighbours (doubling) whose span leaves each a gap of at least 2**-20 of
    its magnitude, so that many pairs ranked into one gap renumber a few ranks at a time,
    not all of them each time."""
    n = len(ranks)
    width = 1
    while True:
        lo, hi = max(0, i - width), min(n - 1, i + width)
        low = ranks[lo - 1].value if lo > 0 else ranks[lo].value - 2.0 * width
        high = ranks[hi + 1].value if hi + 1 < n else ranks[hi].value + 2.0 * width
        step = (high - low) / (hi - lo + 2)
        if step >= 2.0**-20 * max(1.0, abs(low), abs(high)) or (lo == 0 and hi == n - 1):
            for k in range(lo, hi + 1):
                ranks[k].value = low + step * (k - lo + 1)
            return
        width *= 2


#: The columns of a packed victim row beyond its request: queue vector (3), node, leaf,
#: non-preemptible, pipelined, held.
PACKED_EXTRA = 8


def pack_victims(arrays: tuple[np.ndarray, ...]) -> np.ndarray:
    """The victims' arrays of :meth:`ReplacementCheck._victims` (``v_req``, ``v_qvec``,
    ``v_node``, ``v_leaf``, ``v_np``, ``v_pipelined``, ``v_held``) side by side in one
    float64 block, a row per victim (node and leaf indices and flags are exact as
    floats)."""
    req, qvec, node, leaf, flags, pipelined, held = arrays
    columns = [node, leaf, flags, pipelined, held]
    return np.hstack([req, qvec, *(c[:, None] for c in columns)]).astype(np.float64)


def _set_victims(arrays: ReplacementArrays, evicted: tuple[np.ndarray, ...]) -> None:
    """Set the victims' arrays (:func:`victim_arrays`'s, in order) on ``arrays``."""
    (
        arrays.v_req,
        arrays.v_qvec,
        arrays.v_node,
        arrays.v_leaf,
        arrays.v_np,
        arrays.v_pipelined,
        arrays.v_held,
    ) = evicted


def gather(
    batches: list[VictimBatch],
    slots: dict[int, object],
    make_slot: Callable[[VictimBatch], object],
    versions: dict[str, int],
    preemptor: Job,
    recorded_jobs: set[Job],
    recorded_slots: list[_Slot],
    recorded_packed: np.ndarray | None,
    view: _Participant,
    view_at: int,
    feasible: np.ndarray,
    n_resources: int,
    whole: object,
    refused: object,
) -> tuple | object | None:
    """A scenario of a probe put together from its slots (the batches' ones found in
    ``slots`` by id while their queues keep their ``versions``, or made there by
    ``make_slot``): the participants (the recorded
    victims' jobs, the batches' jobs, the preemptor's ``view``), the pool entries they
    stand in for, the victims' arrays (the recorded ones, then the batches'), and the
    nodes the simulation may use (``feasible`` and the victims').  None when it is to
    be laid out whole (a batch ``whole``, the preemptor's pods, or a job's two groups of
    victims); ``refused`` when a batch is.  The reference of ``kai._fast.layout.gather``,
    which gives identical values."""
    chosen: list[_Slot] = []
    for batch in batches:
        slot: Any = slots.get(id(batch))
        if slot is None or (slot is not whole and versions.get(slot.queue, 0) != slot.version):
            slot = slots[id(batch)] = make_slot(batch)
        if slot is whole:
            return None
        if slot.refused:
            return refused
        if slot.job is preemptor:
            return None
        chosen.append(slot)
    jobs = {slot.job for slot in chosen}
    if len(jobs) != len(chosen) or (recorded_jobs and not recorded_jobs.isdisjoint(jobs)):
        return None
    blocks = [slot.packed for slot in chosen]
    if recorded_packed is not None:
        blocks.insert(0, recorded_packed)
    block = np.concatenate(blocks).reshape(-1, n_resources + PACKED_EXTRA)
    r = n_resources
    within = feasible.copy()
    node = block[:, r + 3].astype(np.int64)
    within[node] = True
    parts = [*(s.part for s in recorded_slots), *(s.part for s in chosen), view]
    skipped = [s.base_at for s in recorded_slots if s.base_at >= 0]
    skipped += [s.base_at for s in chosen if s.base_at >= 0]
    if view_at >= 0:
        skipped.append(view_at)
    return (
        parts,
        skipped,
        np.ascontiguousarray(block[:, :r]),
        np.ascontiguousarray(block[:, r : r + 3]),
        node,
        block[:, r + 4].astype(np.int64),
        block[:, r + 5].astype(np.bool_),
        block[:, r + 6].astype(np.bool_),
        block[:, r + 7].astype(np.int64),
        within,
    )


def victim_arrays(
    victims: list[Task],
    kinds: dict[Task, tuple[int, bool] | tuple[()]],
    kind_of: Callable[[Task], tuple[int, bool] | tuple[()]],
    held: dict[Any, int],
    vacated: Container[object],
    bound_before: tuple[TaskStatus, ...],
    binding: TaskStatus,
    pipelined: TaskStatus,
    n_resources: int,
    columns: tuple[int, ...],
) -> tuple[np.ndarray, ...] | None:
    """The victims' arrays of :class:`ReplacementArrays` (``v_req``, ``v_qvec``,
    ``v_node``, ``v_leaf``, ``v_np``, ``v_pipelined``, ``v_held``), or None when the core
    does not take one of them.

    It takes pods running or bound before the session (``bound_before``) or bound in it
    (``binding``, not on a node yet), neither held nor vacated already, and pods
    pipelined in the session (``pipelined``, not on a node yet either), moved there
    (``held``: the node of the place they hold) or not; none evicted already, and each of
    a kind (``kinds``, filled by ``kind_of``: the leaf queue and whether the job is
    non-preemptible) that is not empty.  Evicting one bound in the session or pipelined
    takes it back to pending.  The reference of ``kai._fast.layout.victims``, which
    gives identical arrays.
    """
    leaves, np_flags, at, piped, holds = [], [], [], [], []
    for task in victims:
        kind = kinds.get(task)
        if kind is None:
            kind = kinds[task] = kind_of(task)
        status = task.status
        if not kind or task.virtually_evicted or task.node < 0:
            return None
        if status is pipelined and not task.pod.node_name:
            piped.append(True)
            holds.append(held.get(task, -1))
        elif (status in bound_before or (status is binding and not task.pod.node_name)) and not (
            task in held or task in vacated
        ):
            piped.append(False)
            holds.append(-1)
        else:
            return None
        leaves.append(kind[0])
        np_flags.append(kind[1])
        at.append(task.node)
    req = np.array([t.request for t in victims], dtype=np.float64).reshape(
        len(victims), n_resources
    )
    return (
        req,
        np.ascontiguousarray(req[:, list(columns)]),
        np.array(at, dtype=np.int64),
        np.array(leaves, dtype=np.int64),
        np.array(np_flags, dtype=np.bool_),
        np.array(piped, dtype=np.bool_),
        np.array(holds, dtype=np.int64),
    )


def lay_out(
    parts: list[_Participant], n_queues: int, n_resources: int, columns: tuple[int, ...]
) -> tuple:
    """The participants' arrays of :class:`ReplacementArrays`, in a simulation queue's
    order: each leaf's participants (leaves by index) by job-order key, then before the
    pool's entries of an equal key, in the order given (the preemptor's view last).

    Returns the preemptor's place, then ``own_start``, ``own``, ``p_before``,
    ``p_request``, ``p_leaf``, ``p_task_start``, ``p_np_count``, ``p_np_charge``,
    ``p_gpu_need``, ``t_req``, ``t_qvec`` (its ``columns``), ``t_mask``, ``t_nominated``,
    ``t_evicted_from``, ``t_vacated_at``, ``t_pipelined_back``, ``t_held_at``,
    ``t_also``, and the participants' indices in ``parts`` in that order.  The
    reference of ``kai._fast.layout.lay_out``, which gives identical arrays.
    """
    n = len(parts)
    order = sorted((part.leaf, part.key, i - n, i) for i, part in enumerate(parts))
    counts = [0] * (n_queues + 1)
    preemptor_at = -1
    before, leaf, np_count, np_charge, gpu_need = [], [], [], [], []
    request: list[np.ndarray] = []
    task_start = [0]
    blocks = [np.zeros((0, n_resources), dtype=np.float64)]
    ints = [np.zeros((POD_INTS, 0), dtype=np.int64)]
    piped = [np.zeros(0, dtype=np.bool_)]
    for m, (q, _key, _seq, i) in enumerate(order):
        part = parts[i]
        if i == n - 1:
            preemptor_at = m
        counts[q + 1] += 1
        before.append(part.before)
        request.append(part.request)
        leaf.append(q)
        np_count.append(part.np_count)
        np_charge.append(part.np_charge)
        gpu_need.append(part.gpu_need)
        blocks.append(part.block.reshape(-1, n_resources))
        ints.append(part.ints)
        piped.append(part.piped)
        task_start.append(task_start[-1] + part.ints.shape[1])
    own_start = np.cumsum(counts, dtype=np.int64)
    t_req = np.concatenate(blocks)
    per_pod = np.concatenate(ints, axis=1)
    return (
        preemptor_at,
        own_start,
        np.arange(n, dtype=np.int64),
        np.array(before, dtype=np.int64),
        np.array(request, dtype=np.float64).reshape(n, 3),
        np.array(leaf, dtype=np.int64),
        np.array(task_start, dtype=np.int64),
        np.array(np_count, dtype=np.int64),
        np.array(np_charge, dtype=np.bool_),
        np.array(gpu_need, dtype=np.float64),
        t_req,
        np.ascontiguousarray(t_req[:, list(columns)]),
        per_pod[_MASK].copy(),
        per_pod[_NOMINATED].copy(),
        per_pod[_EVICTED_FROM].copy(),
        per_pod[_VACATED_AT].copy(),
        np.concatenate(piped),
        per_pod[_HELD_AT].copy(),
        per_pod[_ALSO].copy(),
        [i for _q, _key, _seq, i in order],
    )


class _Vacated(NamedTuple):
    """What a pod placed in the session leaves when a simulation evicts it back to pending
    (Statement._apply_unplace): the place it leaves (``at``, kept releasing), whether it
    was pipelined there (else bound), the place a moved pod held where it runs
    (``held``, -1: none), and an older vacated place of it (``also``, -1: none; -2: more
    than one, which the core does not take)."""

    at: int
    pipelined: bool = False
    held: int = -1
    also: int = -1


_NOT_VACATED = _Vacated(-1)


@contextmanager
def _evicted(victims: list[Task], nodes: NodeTable) -> Iterator[dict[Task, _Vacated]]:
    """The victims' statuses as an eviction sets them, put back on leaving; yields the
    places the pods placed in the session leave (such a pod goes back to pending)."""
    before = [(t, t.status, t.node, t.virtually_evicted) for t in victims]
    vacated: dict[Task, _Vacated] = {}
    try:
        for task in victims:
            if task.status is TaskStatus.BINDING:
                vacated[task] = _Vacated(task.node)
            elif task.status is TaskStatus.PIPELINED and not task.pod.node_name:
                older = nodes.vacated.get(task, ())
                also = older[0].node if len(older) == 1 else (-1 if not older else -2)
                vacated[task] = _Vacated(task.node, True, nodes.held.get(task, -1), also)
            else:
                task.status = TaskStatus.RELEASING
                task.virtually_evicted = True
                continue
            task.status = TaskStatus.PENDING  # placed in the session: back to pending
            task.node = -1
        yield vacated
    finally:
        for task, status, node, virtual in before:
            task.status = status
            task.node = node
            task.virtually_evicted = virtual
