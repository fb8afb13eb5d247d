"""The scheduling session: one cycle over a cluster snapshot.

Plugins register functions at extension points when the session opens; actions call
the session, never a plugin directly.  How several registrations combine follows the
batch-scheduling model:

* order functions (job, task, queue): chained, the first non-zero comparison wins;
* predicates, pre-predicates, job-valid: all must pass, the first failure is returned;
* node and GPU order: scores are summed;
* victim filters and scenario validators: AND;
* ``reclaimable``/``preemptable`` (victim selection): intersection inside a tier, and
  the first tier that returns a result decides;
* capacity and quota checks (``can_reclaim_resources``, ``is_job_over_capacity``, ...):
  only the first registration is called.

Every extension point that filters or scores nodes has two forms: the scalar form of
the plugin API (one task and one node at a time, for users' own plugins) and a batch
form that takes one task and all nodes and returns a mask or a score vector (what the
built-in plugins use, backed by the native core).
"""

from __future__ import annotations

import functools
import itertools
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from kai._dataclasses import dataclass
from kai.api.model import ClusterState, Job, QueueInfo, Task, queue_path
from kai.api.resources import INSUFFICIENT_RESOURCES, describe_shortage, vector_shortage
from kai.backends import EPS, get_backend

if TYPE_CHECKING:
    from kai.api.objects import NodeObject
    from kai.config import SchedulerConfig
    from kai.framework.plugin import Plugin
    from kai.framework.statement import Statement


@dataclass(slots=True)
class Decision:
    """A committed operation that leaves the session.

    While the session runs it points at its task; collecting the session's result
    fills in ``pod`` and ``pod_group_annotations`` and drops the task.
    """

    action: str
    type: str  # bind | pipeline | evict
    task: Task | None
    node: str | None
    gpu_groups: list[str] = field(default_factory=list)
    reason: str | None = None
    pod: str = ""  # namespace/name
    # What the bind writes into the PodGroup (its last start time), if anything;
    # read-only, shared by the decisions that write the same.
    pod_group_annotations: Mapping[str, str] | None = None

    def to_json(self, copies: dict[int, dict[str, Any]] | None = None) -> dict[str, Any]:
        """The decision as JSON values; ``copies`` (see :func:`plain_copy`) shares the
        copy of annotations that several decisions share."""
        out: dict[str, Any] = {
            "action": self.action,
            "type": self.type,
            "pod": self.pod,
            "node": self.node,
        }
        if self.type != "evict":
            out["gpuGroups"] = self.gpu_groups
        if self.reason is not None:
            out["reason"] = self.reason
        if self.pod_group_annotations:
            out["podGroupAnnotations"] = plain_copy(self.pod_group_annotations, copies)
        return out


def plain_copy(
    mapping: Mapping[str, Any], copies: dict[int, dict[str, Any]] | None
) -> dict[str, Any]:
    """A dict copy of a read-only ``mapping``.  With ``copies`` (id of a mapping -> its
    copy, for mappings that stay alive meanwhile), a mapping shared by many results is
    copied once and its copy shared."""
    if copies is None:
        return dict(mapping)
    found = copies.get(id(mapping))
    if found is None:
        found = copies[id(mapping)] = dict(mapping)
    return found


@dataclass
class Event:
    """The task an allocate or deallocate event is about."""

    task: Task


@dataclass
class EventHandler:
    """The functions a plugin runs on allocate and deallocate events.

    ``allocate_all_func`` and ``deallocate_all_func`` take the events of many pods at
    once, each pod already changed (:meth:`Session.fire_deallocate_all`): they must do
    what the single-event function does for each, in order.  A handler without them
    makes a batch fire its events one by one."""

    allocate_func: Callable[[Event], None] | None = None
    deallocate_func: Callable[[Event], None] | None = None
    allocate_all_func: Callable[[list[Task]], None] | None = None
    deallocate_all_func: Callable[[list[Task]], None] | None = None


class NodeInfo:
    """A read-only view of one node for scalar plugin functions."""

    __slots__ = ("_ssn", "index")

    def __init__(self, ssn: Session, index: int) -> None:
        self._ssn = ssn
        self.index = index

    @property
    def name(self) -> str:
        return self._ssn.nodes.names[self.index]

    @property
    def node(self) -> NodeObject:
        """The parsed node (labels, annotations, taints, ...)."""
        return self._ssn.nodes.objects[self.index]

    @property
    def labels(self) -> Mapping[str, str]:
        return self.node.labels

    def _vec(self, matrix: np.ndarray) -> dict[str, float]:
        return self._ssn.state.resources.to_dict(matrix[self.index], skip_zero=False)

    @property
    def idle(self) -> dict[str, float]:
        return self._vec(self._ssn.nodes.idle)

    @property
    def releasing(self) -> dict[str, float]:
        return self._vec(self._ssn.nodes.releasing)

    @property
    def allocatable(self) -> dict[str, float]:
        return self._vec(self._ssn.nodes.allocatable)

    @property
    def used(self) -> dict[str, float]:
        return self._vec(self._ssn.nodes.used)

    @property
    def tasks(self) -> list[Task]:
        return sorted(self._ssn.nodes.tasks[self.index], key=lambda t: t.key)

    def __repr__(self) -> str:
        return f"NodeInfo({self.name})"


@dataclass
class _Reg:
    """A function a plugin registered at an extension point."""

    tier: int
    plugin: str
    # A callable; for batch_predicate a (reason, callable) pair, for scenario_generator
    # the generator's name.
    fn: Any
    # queue_order: a function of one job (or None) that says all the comparison reads
    # of the job, when the plugin declares one (see Session.queue_order_job_key).
    job_key: Callable[[Job | None], Any] | None = None
    # scenario validators: whether ``fn`` reads nothing a simulation changes but its pods'
    # statuses, nodes and eviction marks (see Session.add_reclaim_scenario_validator_fn).
    reads_pods_only: bool = False
    # reclaim victim filters: the filter's answer for every victim of a queue, when it
    # reads the victim only through its queue (see Session.add_reclaim_victim_filter_fn).
    by_queue: Callable[[Job, str], bool] | None = None
    # reclaim victim filters: the filter for the victims of one leaf queue, made once per
    # leaf (see Session.add_reclaim_victim_filter_fn).
    in_queue: Callable[[Job, str], Callable[[Job], bool]] | None = None


class PredicateError(Exception):
    """Raised (or returned as a string) by scalar predicates to reject a node."""


@dataclass(eq=False)  # arrays: compared by identity
class FilterResult:
    """The nodes that pass the predicates for a task, and why the others failed."""

    mask: np.ndarray  # nodes that pass everything
    fits_idle: np.ndarray
    failures: dict[str, int]  # reason -> number of nodes rejected by it


def _default_order(left: Job | Task, right: Job | Task) -> int:
    lt, rt = left.creation_timestamp, right.creation_timestamp
    if lt != rt:
        if lt is None:
            return 1
        if rt is None:
            return -1
        return -1 if lt < rt else 1
    if left.uid != right.uid:
        return -1 if left.uid < right.uid else 1
    return 0


def default_order_key(x: Job | Task) -> tuple:
    """A sort key equal to :func:`_default_order`: older first (no timestamp last), then
    by uid."""
    ts = x.creation_timestamp
    return (0, ts, x.uid) if ts is not None else (1, x.uid)


def chained_order_key(keys: Sequence[Callable[[Any], Any]]) -> Callable[[Any], tuple]:
    """The sort key of an order chain whose functions carry the keys ``keys``: the
    first key that differs decides, then :func:`default_order_key`."""
    if not keys:
        return default_order_key
    if len(keys) == 1:
        (only,) = keys
        return lambda x: (only(x), default_order_key(x))
    if len(keys) == 2:
        first, second = keys
        return lambda x: (first(x), second(x), default_order_key(x))
    if len(keys) == 3:  # the default plugins' job order (no generator to set up per key)
        first, second, third = keys
        return lambda x: (first(x), second(x), third(x), default_order_key(x))
    return lambda x: (*(k(x) for k in keys), default_order_key(x))


class Session:
    """One scheduling cycle over a snapshot."""

    def __init__(
        self,
        state: ClusterState,
        config: SchedulerConfig,
        *,
        now: datetime,
        backend: str | None = None,
    ) -> None:
        self.state = state
        self.config = config
        self.now = now
        self.backend = get_backend(backend)
        self.nodes = state.nodes
        self.jobs = state.jobs
        self.queues: dict[str, QueueInfo] = state.queues
        self._version_paths: dict[str | None, tuple[str, ...]] = {}  # _versioned_queues
        self._queue_paths: dict[str | None, tuple[str, ...]] = {}  # _root_path
        self.decisions: list[Decision] = []
        self.plugins: list[Plugin] = []
        self.current_action: str = ""
        self._regs: dict[str, list[_Reg]] = defaultdict(list)
        self._current: tuple[int, str] = (0, "")
        self.event_handlers: list[EventHandler] = []
        self._batches_events = True  # see batches_events
        # Per-session scratch space plugins may share (e.g. min-runtime caches).
        self.cache: dict[Hashable, Any] = {}
        self.explain: dict[str, list[str]] = defaultdict(list)
        # Per queue: how many allocate/deallocate events touched a job of its subtree.
        # Lets the job queue reuse queue comparisons whose queues have not changed.
        self.queue_versions: dict[str, int] = defaultdict(int)
        # Moves with every version bump: one number for "some queue changed" (state
        # stamps read it).  Versions stood in by set_back_queue_versions are negative,
        # each used once.
        self.queue_epoch = 0
        self._unseen_versions = itertools.count(-1, -1)
        # (task, nodes.version, fits-idle mask) of the last filter_nodes call.
        self._fits_idle_cache: tuple[Task, int, np.ndarray] | None = None
        # Per job of the session, its tasks in task order (see ordered_tasks).
        self._task_orders: dict[Job, tuple[list[Task], list[Task]]] = {}
        self._task_key: Callable[[Task], tuple] | None | bool = False  # False: not made yet

    # ----------------------------------------------------------------- lifecycle
    def open(self, plugins: Sequence[tuple[int, Plugin]]) -> None:
        for tier, plugin in plugins:
            self._current = (tier, plugin.name)
            self.plugins.append(plugin)
            plugin.on_session_open(self)
        self._current = (0, "")

    def close(self) -> None:
        for plugin in self.plugins:
            plugin.on_session_close(self)

    def release(self) -> None:
        """Drop the session's state once its results have been read.

        Tasks and their jobs, and plugins and the session, point at each other, so
        left alone a session is freed by a later cyclic-GC pass, which for 100,000
        pods costs several times what freeing it by reference counting does.  This
        breaks those cycles; the session is unusable afterwards.
        """
        self.state.release()
        self.__dict__.clear()

    def statement(self) -> Statement:
        from kai.framework.statement import Statement

        return Statement(self)

    # ------------------------------------------------------------- registration
    def _add(
        self,
        point: str,
        fn: Any,
        job_key: Callable[[Job | None], Any] | None = None,
        *,
        reads_pods_only: bool = False,
        by_queue: Callable[[Job, str], bool] | None = None,
        in_queue: Callable[[Job, str], Callable[[Job], bool]] | None = None,
    ) -> None:
        tier, plugin = self._current
        self._regs[point].append(
            _Reg(tier, plugin, fn, job_key, reads_pods_only, by_queue, in_queue)
        )
        if point == "task_order":
            self._task_key = False
            self._task_orders.clear()

    def registered(self, point: str) -> list[_Reg]:
        return self._regs.get(point, [])

    def add_job_order_fn(self, fn: Callable[[Job, Job], int]) -> None:
        self._add("job_order", fn)

    def add_task_order_fn(self, fn: Callable[[Task, Task], int]) -> None:
        self._add("task_order", fn)

    def add_queue_order_fn(
        self, fn: Callable[..., int], *, job_key: Callable[[Job | None], Any] | None = None
    ) -> None:
        """fn(left_queue, right_queue, left_job, right_job, left_victims, right_victims).

        ``job_key(job)``, when given, is all that ``fn`` reads of a job without victims:
        two jobs of equal keys compare the same against anything, in the same state.
        """
        self._add("queue_order", fn, job_key)

    def add_pre_predicate_fn(self, fn: Callable[[Task, Job], str | None]) -> None:
        self._add("pre_predicate", fn)

    def add_predicate_fn(self, fn: Callable[[Task, Job, NodeInfo], str | None]) -> None:
        self._add("predicate", fn)

    def add_batch_predicate_fn(self, name: str, fn: Callable[[Task, Job], Any]) -> None:
        """fn(task, job) -> bool[N]; ``name`` is the reason reported for rejected nodes.

        fn may instead return ``(mask, codes, reasons)`` to give each rejected node its
        own reason: ``codes`` int[N] indexes ``reasons`` (a sequence of strings) for the
        nodes whose mask is False; ``name`` is used for codes outside the range.
        """
        self._add("batch_predicate", (name, fn))

    def add_node_pre_order_fn(self, fn: Callable[[Task, np.ndarray], None]) -> None:
        self._add("node_pre_order", fn)

    def add_node_order_fn(self, fn: Callable[[Task, NodeInfo], float]) -> None:
        self._add("node_order", fn)

    def add_batch_node_order_fn(self, fn: Callable[[Task, Job, np.ndarray], np.ndarray]) -> None:
        """fn(task, job, candidate_mask) -> float64[N] scores added to every node."""
        self._add("batch_node_order", fn)

    def add_gpu_order_fn(self, fn: Callable[[Task, NodeInfo, str | None], float]) -> None:
        """fn(task, node, gpu_group or None for a whole free device) -> score."""
        self._add("gpu_order", fn)

    def add_event_handler(self, handler: EventHandler) -> None:
        self.event_handlers.append(handler)
        self._batches_events = self._batches_events and (
            (handler.allocate_all_func is not None or handler.allocate_func is None)
            and (handler.deallocate_all_func is not None or handler.deallocate_func is None)
        )

    def add_reclaim_victim_filter_fn(
        self,
        fn: Callable[[Job, Job], bool],
        *,
        by_queue: Callable[[Job, str], bool] | None = None,
        in_queue: Callable[[Job, str], Callable[[Job], bool]] | None = None,
    ) -> None:
        """fn(reclaimer, victim) -> bool.

        ``by_queue(reclaimer, queue)``, when given, is ``fn``'s answer for every victim
        in ``queue`` (``fn`` reads the victim only through its queue): a search then
        leaves out the leaf queues it refuses without asking about each job
        (:meth:`reclaim_victim_queue_refused`).

        ``in_queue(reclaimer, queue)``, when given, returns ``fn(reclaimer, ·)`` for the
        victims of leaf queue ``queue`` (jobs whose ``queue or ""`` is ``queue``), with
        what depends on the two queues alone worked out once: a search asks it once per
        leaf, then the returned function of each job (:meth:`reclaim_victim_filter_in`).
        """
        self._add("reclaim_victim_filter", fn, by_queue=by_queue, in_queue=in_queue)

    def add_preempt_victim_filter_fn(self, fn: Callable[[Job, Job], bool]) -> None:
        self._add("preempt_victim_filter", fn)

    def add_reclaim_scenario_validator_fn(
        self, fn: Callable[..., bool], *, reads_pods_only: bool = False
    ) -> None:
        """fn(pending_job, victim_jobs, victim_tasks) -> bool.

        ``reads_pods_only``: ``fn`` reads nothing that a simulation changes but pods'
        statuses, nodes and eviction marks (not the node table, nor the queues'
        allocations, nor a cache that no queue version keys).  A simulation may then be
        judged on its pods set as its statement would leave them, without making the
        statement (kai.actions.solvers.simulate).
        """
        self._add("reclaim_scenario_validator", fn, reads_pods_only=reads_pods_only)

    def add_preempt_scenario_validator_fn(
        self, fn: Callable[..., bool], *, reads_pods_only: bool = False
    ) -> None:
        """fn(pending_job, victim_jobs, victim_tasks) -> bool; ``reads_pods_only`` as for
        :meth:`add_reclaim_scenario_validator_fn`."""
        self._add("preempt_scenario_validator", fn, reads_pods_only=reads_pods_only)

    def validators_read_pods_only(self, point: str) -> bool:
        """Whether every validator registered at ``point`` declares ``reads_pods_only``."""
        return all(reg.reads_pods_only for reg in self._regs.get(point, ()))

    def add_reclaimable_fn(self, fn: Callable[[Task, list[Task]], list[Task] | None]) -> None:
        self._add("reclaimable", fn)

    def add_preemptable_fn(self, fn: Callable[[Task, list[Task]], list[Task] | None]) -> None:
        self._add("preemptable", fn)

    def add_can_reclaim_resources_fn(self, fn: Callable[[Job], bool]) -> None:
        self._add("can_reclaim_resources", fn)

    def add_is_job_over_capacity_fn(self, fn: Callable[[Job, list[Task]], str | None]) -> None:
        self._add("job_over_capacity", fn)

    def add_is_non_preemptible_job_over_quota_fn(
        self, fn: Callable[[Job, list[Task]], str | None]
    ) -> None:
        self._add("non_preemptible_over_quota", fn)

    def add_on_job_solution_start_fn(self, fn: Callable[[], None]) -> None:
        self._add("on_job_solution_start", fn)

    def add_job_ready_fn(self, fn: Callable[[Job], bool]) -> None:
        self._add("job_ready", fn)

    def add_job_pipelined_fn(self, fn: Callable[[Job], bool]) -> None:
        self._add("job_pipelined", fn)

    def add_job_valid_fn(self, fn: Callable[[Job], str | None]) -> None:
        self._add("job_valid", fn)

    def add_job_starving_fn(self, fn: Callable[[Job], bool]) -> None:
        self._add("job_starving", fn)

    def add_overused_fn(self, fn: Callable[[QueueInfo], bool]) -> None:
        self._add("overused", fn)

    def add_queue_info_fns(
        self,
        *,
        fair_share: Callable[[str], dict[str, float]] | None = None,
        allocated: Callable[[str], dict[str, float]] | None = None,
        requested: Callable[[str], dict[str, float]] | None = None,
        deserved: Callable[[str], dict[str, float]] | None = None,
    ) -> None:
        for point, fn in (
            ("queue_fair_share", fair_share),
            ("queue_allocated", allocated),
            ("queue_requested", requested),
            ("queue_deserved", deserved),
        ):
            if fn is not None:
                self._add(point, fn)

    def add_scenario_generator(self, name: str) -> None:
        self._add("scenario_generator", name)

    # ------------------------------------------------------------- invocation
    def _chain_compare(self, point: str, left: Any, right: Any, *extra: Any) -> int:
        for reg in self._regs.get(point, ()):
            result = reg.fn(left, right, *extra)
            if result:
                return result
        return 0

    def job_order(self, left: Job, right: Job) -> int:
        return self._chain_compare("job_order", left, right) or _default_order(left, right)

    def queue_order_job_key(self, job: Job | None) -> tuple | None:
        """What :meth:`queue_order` reads of ``job`` (without victims): jobs of equal keys
        stand for their queue alike.  None when some queue order declares no key."""
        keys = []
        for reg in self._regs.get("queue_order", ()):
            if reg.job_key is None:
                return None
            keys.append(reg.job_key(job))
        return tuple(keys)

    def task_order(self, left: Task, right: Task) -> int:
        return self._chain_compare("task_order", left, right) or _default_order(left, right)

    def queue_order(
        self,
        left: QueueInfo,
        right: QueueInfo,
        left_job: Job | None,
        right_job: Job | None,
        left_victims: list[Job] | None = None,
        right_victims: list[Job] | None = None,
    ) -> int:
        result = self._chain_compare(
            "queue_order", left, right, left_job, right_job, left_victims, right_victims
        )
        if result:
            return result
        lt, rt = left.creation_timestamp, right.creation_timestamp
        if lt != rt and lt is not None and rt is not None:
            return -1 if lt < rt else 1
        return -1 if left.name < right.name else (1 if left.name > right.name else 0)

    def sorted_tasks(self, tasks: Iterable[Task]) -> list[Task]:
        key = self.task_order_key()
        if key is not None:
            return sorted(tasks, key=key)
        return sorted(tasks, key=functools.cmp_to_key(self.task_order))

    def order_keys(self, point: str) -> list[Callable[[Any], Any]] | None:
        """The ``order_key`` of every function registered at ``point`` (``job_order``
        or ``task_order``), in order; None when one of them declares none."""
        keys = [getattr(reg.fn, "order_key", None) for reg in self.registered(point)]
        return None if None in keys else keys  # type: ignore[return-value]

    def task_order_key(self) -> Callable[[Task], tuple] | None:
        """A sort key equal to :meth:`task_order`, or None when some task-order function
        declares no ``order_key`` (then only the comparisons give the order)."""
        key = self._task_key
        if key is False:
            keys = self.order_keys("task_order")
            key = None if keys is None else chained_order_key(keys)
            self._task_key = key
        return key  # type: ignore[return-value]

    def ordered_tasks(self, job: Job) -> list[Task] | None:
        """All of ``job``'s tasks in task order, or None when the order is not by keys.

        A key reads only what a session does not change (labels, creation, uid), so
        the order is made once per job of the session, and a view of a job (a subset
        of its tasks) takes it from the job's.
        """
        key = self.task_order_key()
        if key is None:
            return None
        tasks = job.tasks
        known = self._task_orders.get(job)
        if known is not None and known[0] is tasks:
            return known[1]
        origin = self.jobs.get(job.key)
        if origin is job:
            ordered = sorted(tasks, key=key)
            self._task_orders[job] = (tasks, ordered)
            return ordered
        if origin is not None and len(tasks) * 8 >= len(origin.tasks):
            # Filtering the job's order beats sorting unless the view is a small part.
            members = set(tasks)
            ordered = [t for t in self.ordered_tasks(origin) or () if t in members]
            if len(ordered) == len(tasks):
                return ordered
        return sorted(tasks, key=key)

    def sorted_jobs(self, jobs: Iterable[Job]) -> list[Job]:
        return sorted(jobs, key=functools.cmp_to_key(self.job_order))

    def _first(self, point: str) -> Callable | None:
        regs = self._regs.get(point)
        return regs[0].fn if regs else None

    def can_reclaim_resources(self, job: Job) -> bool:
        fn = self._first("can_reclaim_resources")
        return bool(fn(job)) if fn else False

    def is_job_over_capacity(self, job: Job, tasks: list[Task]) -> str | None:
        fn = self._first("job_over_capacity")
        return fn(job, tasks) if fn else None

    def is_non_preemptible_job_over_quota(self, job: Job, tasks: list[Task]) -> str | None:
        fn = self._first("non_preemptible_over_quota")
        return fn(job, tasks) if fn else None

    def queue_info(self, point: str, queue: str) -> dict[str, float] | None:
        fn = self._first(point)
        return fn(queue) if fn else None

    def reclaim_victim_filter(self, reclaimer: Job, victim: Job) -> bool:
        return self._all_accept("reclaim_victim_filter", reclaimer, victim)

    def preempt_victim_filter(self, preemptor: Job, victim: Job) -> bool:
        return self._all_accept("preempt_victim_filter", preemptor, victim)

    def reclaim_victim_queue_refused(self, reclaimer: Job, queue: str) -> bool:
        """Whether :meth:`reclaim_victim_filter` refuses every victim in ``queue`` for
        ``reclaimer`` by the filters that answer per queue (see
        :meth:`reclaim_victim_filter_in`)."""
        return self._queue_filters_passed(reclaimer, queue) < 0

    def _queue_filters_passed(self, reclaimer: Job, queue: str) -> int:
        """How many reclaim victim filters, from the first, answer per queue and accept
        the victims of ``queue``; -1 when one of them refuses them."""
        passed = 0
        for reg in self._regs.get("reclaim_victim_filter", ()):
            if reg.by_queue is None:
                break
            if not reg.by_queue(reclaimer, queue):
                return -1
            passed += 1
        return passed

    def reclaim_victim_filter_in(self, reclaimer: Job, queue: str) -> Callable[[Job], bool]:
        """:meth:`reclaim_victim_filter` of ``reclaimer`` for the victims of leaf queue
        ``queue``: the filters that answer per queue (``by_queue``) are asked here, in
        order up to the first that does not (a filter after that one would be asked of
        each job before it, and may count what it is asked); the others are asked of
        each job, through their per-leaf form (``in_queue``) where they have one."""
        first = self._queue_filters_passed(reclaimer, queue)
        if first < 0:
            return _refuse_all
        regs = self._regs.get("reclaim_victim_filter", ())
        rest = [_job_filter(reg, reclaimer, queue) for reg in regs[first:]]
        if not rest:
            return _accept_all
        if len(rest) == 1:
            return rest[0]

        def accepts(victim: Job) -> bool:
            for fn in rest:
                if not fn(victim):
                    return False
            return True

        return accepts

    def _all_accept(self, point: str, actor: Job, victim: Job) -> bool:
        # Asked of every candidate victim of every search: a loop, not all() over a
        # generator (whose setup costs more than the few filters it would call).
        for reg in self._regs.get(point, ()):
            if not reg.fn(actor, victim):
                return False
        return True

    def reclaim_scenario_valid(self, pending: Job, victims: list[Job], tasks: list[Task]) -> bool:
        regs = self._regs.get("reclaim_scenario_validator", ())
        return all(reg.fn(pending, victims, tasks) for reg in regs)

    def preempt_scenario_valid(self, pending: Job, victims: list[Job], tasks: list[Task]) -> bool:
        regs = self._regs.get("preempt_scenario_validator", ())
        return all(reg.fn(pending, victims, tasks) for reg in regs)

    def on_job_solution_start(self) -> None:
        for reg in self._regs.get("on_job_solution_start", ()):
            reg.fn()

    def _tiered_victims(self, point: str, actor: Task, candidates: list[Task]) -> list[Task]:
        """Intersection of the victims of a tier's plugins; the first deciding tier wins."""
        by_tier: dict[int, list[_Reg]] = defaultdict(list)
        for reg in self._regs.get(point, ()):
            by_tier[reg.tier].append(reg)
        for tier in sorted(by_tier):
            chosen: list[Task] | None = None
            for reg in by_tier[tier]:
                result = reg.fn(actor, candidates)
                if result is None:
                    continue  # the plugin abstains
                if chosen is None:
                    chosen = list(result)
                else:
                    keep = set(result)
                    chosen = [t for t in chosen if t in keep]
            if chosen is not None:
                return chosen
        return list(candidates)

    def reclaimable(self, reclaimer: Task, candidates: list[Task]) -> list[Task]:
        return self._tiered_victims("reclaimable", reclaimer, candidates)

    def preemptable(self, preemptor: Task, candidates: list[Task]) -> list[Task]:
        return self._tiered_victims("preemptable", preemptor, candidates)

    def job_ready(self, job: Job) -> bool:
        regs = self._regs.get("job_ready", ())
        if not regs:
            return job.is_gang_satisfied()
        return all(reg.fn(job) for reg in regs)

    def job_pipelined(self, job: Job) -> bool:
        return all(reg.fn(job) for reg in self._regs.get("job_pipelined", ()))

    def job_valid(self, job: Job) -> str | None:
        for reg in self._regs.get("job_valid", ()):
            problem = reg.fn(job)
            if problem:
                return problem
        return None

    def job_starving(self, job: Job) -> bool:
        regs = self._regs.get("job_starving", ())
        return all(reg.fn(job) for reg in regs) if regs else True

    def overused(self, queue: QueueInfo) -> bool:
        return any(reg.fn(queue) for reg in self._regs.get("overused", ()))

    def pre_predicate(self, task: Task, job: Job) -> str | None:
        for reg in self._regs.get("pre_predicate", ()):
            problem = reg.fn(task, job)
            if problem:
                return problem
        return None

    # ------------------------------------------------------------ node filters
    def node_info(self, index: int) -> NodeInfo:
        return NodeInfo(self, index)

    def filter_nodes(
        self, task: Task, job: Job, *, within: np.ndarray | None = None
    ) -> FilterResult:
        """Nodes that can take ``task``: resources (idle + releasing), then predicates."""
        nodes = self.nodes
        failures: dict[str, int] = {}
        request = task.request
        fits_any, fits_idle = self.backend.fit_mask(request, nodes.idle, nodes.releasing)
        if task.is_shared_gpu:
            shared_any, shared_idle = self._shared_gpu_fit(task)
            fits_any = fits_any & shared_any
            fits_idle = fits_idle & shared_idle
        fits_idle.flags.writeable = False
        self._fits_idle_cache = (task, nodes.version, fits_idle)
        if within is None:
            mask = fits_any  # a fresh array of the backend
            rejected = len(nodes) - int(np.count_nonzero(fits_any))
        else:
            mask = fits_any & within
            rejected = int(np.count_nonzero(within)) - int(np.count_nonzero(mask))
        if rejected:
            failures[INSUFFICIENT_RESOURCES] = rejected
        for reg in self._regs.get("batch_predicate", ()):
            name, fn = reg.fn
            ok = fn(task, job)
            if ok is None:
                continue
            if isinstance(ok, tuple):
                ok, codes, reasons = ok
                hit = mask & ~ok
                if hit.any():
                    c = np.asarray(codes, dtype=np.int64)[hit]
                    c = np.where((c >= 0) & (c < len(reasons)), c + 1, 0)
                    counts = np.bincount(c, minlength=len(reasons) + 1)
                    for slot in np.flatnonzero(counts):
                        reason = reasons[slot - 1] if slot > 0 else name
                        failures[reason] = failures.get(reason, 0) + int(counts[slot])
                mask = mask & ok
                continue
            rejected = int(np.count_nonzero(mask & ~ok))
            if rejected:
                failures[name] = failures.get(name, 0) + rejected
            mask = mask & ok
        scalar = self._regs.get("predicate", ())
        if scalar and mask.any():
            for i in np.flatnonzero(mask):
                info = NodeInfo(self, int(i))
                for reg in scalar:
                    try:
                        problem = reg.fn(task, job, info)
                    except PredicateError as err:
                        problem = str(err) or reg.plugin
                    if problem:
                        mask[i] = False
                        reason = reg.plugin or str(problem)
                        failures[reason] = failures.get(reason, 0) + 1
                        break
        return FilterResult(mask=mask, fits_idle=fits_idle & mask, failures=failures)

    def fits_idle(self, task: Task) -> np.ndarray:
        """Nodes where ``task`` fits on idle capacity alone (read-only array)."""
        cached = self._fits_idle_cache
        if cached is not None and cached[0] is task and cached[1] == self.nodes.version:
            return cached[2]
        _, idle = self.backend.fit_mask(task.request, self.nodes.idle, self.nodes.releasing)
        if task.is_shared_gpu:
            idle = idle & self._shared_gpu_fit(task)[1]
        return idle

    def resource_shortage(self, task: Task, *, within: np.ndarray | None = None) -> str:
        """What the nodes that cannot take ``task`` for resources lack (see filter_nodes).

        Per resource: how many nodes are short of it, what the task needs and the most
        (idle plus releasing) any of those nodes has; a fractional task's device counts
        as ``nvidia.com/gpu``.  Computed on demand: only a task that fits nowhere is
        described.
        """
        nodes = self.nodes
        names = self.state.resources.names
        request = task.request
        if within is None:
            free = nodes.idle + nodes.releasing
        else:  # victims' nodes: usually a few rows
            rows = np.flatnonzero(within)
            free = nodes.idle[rows] + nodes.releasing[rows]
        short = (request != 0.0) & ~(request <= free + EPS)
        counts = short.sum(axis=0)
        most_free = np.where(short, free, -np.inf).max(axis=0, initial=-np.inf)
        entries = vector_shortage(names, request, counts, most_free)
        if task.is_shared_gpu:
            lacking = ~self._shared_gpu_fit(task)[0]
            if within is not None:
                lacking &= within
            if lacking.any():
                entries.append(self._device_shortage(task, np.flatnonzero(lacking)))
        return describe_shortage(entries)

    def _device_shortage(self, task: Task, rows: np.ndarray) -> tuple[str, int, str, str]:
        """A fractional task's shortage on ``rows``: the room on one device, not GPUs."""
        nodes = self.nodes
        gpu = self.state.resources.index["nvidia.com/gpu"]
        whole = nodes.idle[rows, gpu] + nodes.releasing[rows, gpu] >= 1.0 - 1e-9
        shared = np.maximum(nodes.shared_free_any[rows], nodes.shared_free_idle[rows])
        room = np.maximum(np.maximum(shared, 0.0), whole.astype(np.float64))
        if task.gpu_fraction > 0:
            needs, most = f"{task.gpu_fraction:g} of a device", f"{float(room.max()):g}"
        else:
            mib = room * nodes.gpu_memory_mib[rows]
            needs, most = f"{task.gpu_memory_mib:g}Mi of a device", f"{float(mib.max()):g}Mi"
        return ("nvidia.com/gpu", len(rows), needs, most)

    def _shared_gpu_fit(self, task: Task) -> tuple[np.ndarray, np.ndarray]:
        """Whether a fractional task finds a device (shared group or whole free GPU)."""
        nodes = self.nodes
        gpu = self.state.resources.index["nvidia.com/gpu"]
        portion = nodes.portions(task)
        valid = (portion > 0) & (portion <= 1.0 + 1e-9)
        whole_any = nodes.idle[:, gpu] + nodes.releasing[:, gpu] >= 1.0 - 1e-9
        # Pods pipelined onto a node are charged to its releasing capacity, which can go
        # below zero while idle GPUs remain: those are promised, not free.
        whole_idle = (nodes.idle[:, gpu] >= 1.0 - 1e-9) & whole_any
        idle_ok = valid & (whole_idle | (nodes.shared_free_idle + 1e-9 >= portion))
        any_ok = idle_ok | (valid & (whole_any | (nodes.shared_free_any + 1e-9 >= portion)))
        return any_ok, idle_ok

    def score_nodes(self, task: Task, job: Job, candidates: np.ndarray) -> np.ndarray:
        scores = np.zeros(len(self.nodes), dtype=np.float64)
        for reg in self._regs.get("node_pre_order", ()):
            reg.fn(task, candidates)
        for reg in self._regs.get("batch_node_order", ()):
            scores += reg.fn(task, job, candidates)
        scalar = self._regs.get("node_order", ())
        if scalar:
            for i in np.flatnonzero(candidates):
                info = NodeInfo(self, int(i))
                scores[i] += sum(float(reg.fn(task, info)) for reg in scalar)
        return scores

    def ordered_nodes(self, task: Task, job: Job, mask: np.ndarray) -> np.ndarray:
        """Candidate nodes best first: score descending, then node name."""
        if not mask.any():
            return np.empty(0, dtype=np.int64)
        scores = self.score_nodes(task, job, mask)
        return self.backend.ordered_nodes(scores, mask)

    def best_node(self, task: Task, job: Job, mask: np.ndarray) -> int:
        if not mask.any():
            return -1
        scores = self.score_nodes(task, job, mask)
        return int(self.backend.best_node(scores, mask))

    def ordered_gpu_groups(self, task: Task, node: int, *, pipeline_only: bool) -> list[str | None]:
        """Devices for a fractional task on ``node``: shared groups and whole free GPUs.

        ``None`` stands for a whole free device (a new group).  Ordered by the summed
        GPU order scores, highest first; ties keep candidate order.
        """
        nodes = self.nodes
        portion = nodes.portion_on(task, node)
        candidates: list[str | None] = list(nodes.shared_fit(node, portion, idle_only=False))
        gpu = self.state.resources.index["nvidia.com/gpu"]
        whole = nodes.idle[node, gpu] + nodes.releasing[node, gpu]
        if whole >= 1.0 - 1e-9:
            candidates.append(None)
        regs = self._regs.get("gpu_order", ())
        if not regs or len(candidates) < 2:
            return candidates
        info = NodeInfo(self, node)
        scored = [
            (-sum(float(reg.fn(task, info, gid)) for reg in regs), i, gid)
            for i, gid in enumerate(candidates)
        ]
        scored.sort(key=lambda x: (x[0], x[1]))
        return [gid for _, _, gid in scored]

    # ---------------------------------------------------------------- events
    def bump_queue_versions(self, task: Task) -> None:
        """Bump the versions of ``task``'s queue and its ancestors, as an event on the task
        does: what is kept by those versions is read again."""
        versions = self.queue_versions
        for name in self._versioned_queues(task):
            versions[name] += 1
        self.queue_epoch += 1

    def count_queue_events(self, name: str, count: int) -> None:
        """Bump queue ``name``'s version by ``count`` events counted elsewhere (the
        compiled allocate loop counts them per queue, ancestors included)."""
        self.queue_versions[name] += count
        self.queue_epoch += 1

    def _versioned_queues(self, task: Task) -> tuple[str, ...]:
        """``task``'s queue and its ancestors: the queues whose versions its events bump
        (per leaf, made once: a session's queue tree does not change)."""
        job = task.job
        leaf = job.queue if job is not None else None
        path = self._version_paths.get(leaf)
        if path is None:
            path = self._version_paths[leaf] = tuple(reversed(self._root_path(leaf)))
        return path

    @contextmanager
    def set_back_queue_versions(self, tasks: Iterable[Task]) -> Iterator[None]:
        """For pods changed in the block and set back exactly as they were by its end:
        while it runs, their queues (and ancestors) and the epoch carry versions never
        used before, so nothing kept by the versions is read across the change; after it,
        the versions they had, so what was kept before the block holds again."""
        versions = self.queue_versions
        saved: dict[str, int] = {}
        for task in tasks:
            for name in self._versioned_queues(task):
                if name not in saved:
                    saved[name] = versions[name]
                    versions[name] = next(self._unseen_versions)
        epoch, self.queue_epoch = self.queue_epoch, next(self._unseen_versions)
        try:
            yield
        finally:
            versions.update(saved)
            self.queue_epoch = epoch

    def fire_allocate(self, task: Task) -> None:
        self.bump_queue_versions(task)
        event = Event(task)
        for handler in self.event_handlers:
            if handler.allocate_func is not None:
                handler.allocate_func(event)

    def fire_deallocate(self, task: Task) -> None:
        self.bump_queue_versions(task)
        event = Event(task)
        for handler in self.event_handlers:
            if handler.deallocate_func is not None:
                handler.deallocate_func(event)

    def batches_events(self) -> bool:
        """Whether every event handler takes a batch of events (``EventHandler``'s
        ``*_all_func``): a statement may then change many pods and fire their events
        together."""
        return self._batches_events

    def fire_allocate_all(self, tasks: list[Task]) -> None:
        """:meth:`fire_allocate` for each of ``tasks`` in order, the pods all changed
        before: the same versions and, where every handler takes a batch, one call
        each."""
        if self._batches_events:
            self._bump_all(tasks)
            for handler in self.event_handlers:
                if handler.allocate_all_func is not None:
                    handler.allocate_all_func(tasks)
        else:
            for task in tasks:
                self.fire_allocate(task)

    def fire_deallocate_all(self, tasks: list[Task]) -> None:
        """:meth:`fire_deallocate` for each of ``tasks`` in order, the pods all changed
        before (see :meth:`fire_allocate_all`)."""
        if self._batches_events:
            self._bump_all(tasks)
            for handler in self.event_handlers:
                if handler.deallocate_all_func is not None:
                    handler.deallocate_all_func(tasks)
        else:
            for task in tasks:
                self.fire_deallocate(task)

    def _bump_all(self, tasks: list[Task]) -> None:
        """:meth:`bump_queue_versions` for each of ``tasks``: one sum per leaf queue."""
        per_leaf: dict[str | None, int] = {}
        example: dict[str | None, Task] = {}
        for task in tasks:
            job = task.job
            leaf = job.queue if job is not None else None
            count = per_leaf.get(leaf)
            if count is None:
                per_leaf[leaf] = 1
                example[leaf] = task
            else:
                per_leaf[leaf] = count + 1
        versions = self.queue_versions
        for leaf, count in per_leaf.items():
            for name in self._versioned_queues(example[leaf]):
                versions[name] += count
        self.queue_epoch += len(tasks)

    # ---------------------------------------------------------------- results
    def record_fit_error(self, job: Job, message: str) -> None:
        if message not in job.fit_errors:
            job.fit_errors.append(message)

    def leaf_queue_of(self, job: Job) -> QueueInfo | None:
        return self.queues.get(job.queue) if job.queue else None

    def queue_path(self, name: str) -> list[str]:
        """Root-to-leaf list of queue names ending with ``name`` (per queue, walked once:
        a session's queue tree does not change, and every job queue an action makes
        links its leaves by their paths)."""
        return list(self._root_path(name))

    def _root_path(self, name: str | None) -> tuple[str, ...]:
        """:meth:`queue_path` of ``name`` (or of no queue: empty), walked once."""
        path = self._queue_paths.get(name)
        if path is None:
            path = self._queue_paths[name] = tuple(queue_path(self.queues, name))
        return path


def _job_filter(reg: _Reg, reclaimer: Job, queue: str) -> Callable[[Job], bool]:
    """A reclaim victim filter of ``reclaimer`` for the victims of leaf ``queue``."""
    if reg.in_queue is not None:
        return reg.in_queue(reclaimer, queue)
    fn = reg.fn
    return lambda victim: bool(fn(reclaimer, victim))


def _refuse_all(victim: Job) -> bool:
    return False


def _accept_all(victim: Job) -> bool:
    return True


# A job's next chunk is what the actions place and what the proportion plugin counts as
# a job's request, so it lives with the session that orders the tasks.
def tasks_to_allocate(ssn: Session, job: Job) -> list[Task]:
    """The next chunk of a job to place: the gang up to minMember, then one task at a time."""
    if len(job.tasks) == 1:  # one pod (most jobs): nothing to order or count
        task = job.tasks[0]
        return [task] if task.should_allocate() else []
    ordered = ssn.ordered_tasks(job)
    if ordered is not None:
        pending = [t for t in ordered if t.should_allocate()]
    else:
        pending = ssn.sorted_tasks(t for t in job.tasks if t.should_allocate())
    if not pending:
        return []
    allocated = job.active_allocated_count()
    if allocated < job.min_member:
        return pending[: job.min_member - allocated]
    return pending[:1]
