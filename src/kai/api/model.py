"""Session-level scheduling model: tasks (pods), jobs (pod groups), queues and nodes.

A :class:`ClusterState` is built once from a snapshot (``kai.snapshot.builder``) and is
then mutated only through a session's statements.  Node capacity lives in columnar
matrices (:class:`NodeTable`) so the filtering and scoring kernels see all nodes at
once; tasks and jobs are small Python objects that point into those matrices.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import field
from datetime import datetime
from typing import Any, NamedTuple, Protocol, TypeVar

import numpy as np

from kai import _fast
from kai._dataclasses import dataclass
from kai.api.objects import (
    NodeMetricObject,
    NodeObject,
    PodGroupObject,
    PodObject,
    QueueObject,
    QueueResource,
)
from kai.api.resources import GPU, ResourceTable

_T = TypeVar("_T")


class TaskStatus(enum.Enum):
    """Pod states of the batch-scheduling model."""

    PENDING = "Pending"
    GATED = "Gated"  # pending with spec.schedulingGates: not scheduled, not counted alive
    ALLOCATED = "Allocated"  # placed on idle capacity in this session, not yet committed
    PIPELINED = "Pipelined"  # placed on capacity that is being released
    BINDING = "Binding"  # allocated and committed this session
    BOUND = "Bound"
    RUNNING = "Running"
    RELEASING = "Releasing"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"

    # Members are singletons compared by identity; hashing them by identity (in C)
    # makes the status-set tests of the hot loops several times cheaper than Enum's
    # Python-level hash of the name.
    __hash__ = object.__hash__


# Groups of statuses, as the batch-scheduling model uses them.
ACTIVE_USED = frozenset(
    {
        TaskStatus.ALLOCATED,
        TaskStatus.PIPELINED,
        TaskStatus.BINDING,
        TaskStatus.BOUND,
        TaskStatus.RUNNING,
        TaskStatus.RELEASING,
    }
)
ACTIVE_ALLOCATED = frozenset(
    {
        TaskStatus.ALLOCATED,
        TaskStatus.PIPELINED,
        TaskStatus.BINDING,
        TaskStatus.BOUND,
        TaskStatus.RUNNING,
    }
)
ALLOCATED = frozenset(
    {TaskStatus.ALLOCATED, TaskStatus.BINDING, TaskStatus.BOUND, TaskStatus.RUNNING}
)
ALIVE = frozenset(
    {
        TaskStatus.PENDING,
        TaskStatus.ALLOCATED,
        TaskStatus.PIPELINED,
        TaskStatus.BINDING,
        TaskStatus.BOUND,
        TaskStatus.RUNNING,
    }
)
# Statuses whose resources are held on a node.
ON_NODE = ACTIVE_USED


# Tasks and jobs are compared and hashed by identity (eq=False keeps object's C-level
# methods): they live in many sets and dicts on hot paths.
@dataclass(slots=True, eq=False)
class Task:
    """One pod as the scheduler sees it."""

    uid: str
    name: str
    namespace: str
    job: Job
    request: np.ndarray  # resource vector; the gpu entry is 0 for shared-GPU tasks
    status: TaskStatus
    pod: PodObject
    node: int = -1  # index into NodeTable, -1 when not on a node
    gpu_fraction: float = 0.0  # > 0 for a shared-GPU (fractional) task
    gpu_memory_mib: float = 0.0  # > 0 for a task that asks for GPU memory
    gpu_group: str | None = None  # shared GPU device the task uses
    creation_timestamp: datetime | None = None
    # Set while a statement evicted the task; lets actions re-place (pipeline) it.
    virtually_evicted: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def is_shared_gpu(self) -> bool:
        return self.gpu_fraction > 0 or self.gpu_memory_mib > 0

    @property
    def requests_gpu(self) -> bool:
        return self.is_shared_gpu or self.request[GPU] > 0

    def should_allocate(self) -> bool:
        return self.status is TaskStatus.PENDING or (
            self.status is TaskStatus.RELEASING and self.virtually_evicted
        )

    def __repr__(self) -> str:
        return f"Task({self.key}, {self.status.value}, node={self.node})"


@dataclass(slots=True, eq=False, init=False)
class Job:
    """A pod group: the unit of gang scheduling."""

    uid: str
    name: str
    namespace: str
    key: str  # namespace/name, made once: jobs are looked up and hashed by it
    queue: str | None
    priority: int
    min_member: int
    preemptible: bool
    preemptibility: str  # "preemptible" | "non-preemptible" | "semi-preemptible"
    creation_timestamp: datetime | None
    tasks: list[Task]
    pod_group: PodGroupObject | None
    # From the PodGroup (None without one); the session may change the first two.
    last_start_timestamp: datetime | None
    stale_timestamp: datetime | None
    last_eviction_timestamp: datetime | None
    staleness_grace_period: float | None
    preemption_delay: float | None
    # Why the job cannot be scheduled at all (unknown queue, missing PodGroup, ...).
    invalid_reason: str | None
    warnings: list[str]
    # Human-readable reasons collected while actions try the job.
    fit_errors: list[str]
    # The last start time set by this session (the allocate action).
    new_start_timestamp: datetime | None
    stale_since_set: datetime | None

    def __init__(
        self,
        uid: str,
        name: str,
        namespace: str,
        queue: str | None,
        priority: int,
        min_member: int,
        preemptible: bool,
        preemptibility: str,
        creation_timestamp: datetime | None,
        tasks: list[Task] | None = None,
        pod_group: PodGroupObject | None = None,
    ) -> None:
        # Written out rather than generated: a large session makes 100,000 jobs, and
        # the PodGroup's fields are read here instead of being passed one by one.
        self.uid = uid
        self.name = name
        self.namespace = namespace
        self.key = f"{namespace}/{name}"
        self.queue = queue
        self.priority = priority
        self.min_member = min_member
        self.preemptible = preemptible
        self.preemptibility = preemptibility
        self.creation_timestamp = creation_timestamp
        self.tasks = [] if tasks is None else tasks
        self.pod_group = pod_group
        if pod_group is None:
            self.last_start_timestamp = self.stale_timestamp = None
            self.last_eviction_timestamp = None
            self.staleness_grace_period = self.preemption_delay = None
        else:
            self.last_start_timestamp = pod_group.last_start_timestamp
            self.stale_timestamp = pod_group.stale_timestamp
            self.last_eviction_timestamp = pod_group.last_eviction_timestamp
            self.staleness_grace_period = pod_group.staleness_grace_period
            self.preemption_delay = pod_group.preemption_delay
        self.invalid_reason = None
        self.warnings = []
        self.fit_errors = []
        self.new_start_timestamp = None
        self.stale_since_set = None

    def count(self, statuses: frozenset[TaskStatus]) -> int:
        # A loop, not sum() over a generator: this runs for every job of every search,
        # and most jobs have a pod or two, where the generator's setup is most of it.
        n = 0
        for t in self.tasks:
            if t.status in statuses:
                n += 1
        return n

    def active_allocated_count(self) -> int:
        return self.count(ACTIVE_ALLOCATED)

    def active_used_count(self) -> int:
        return self.count(ACTIVE_USED)

    def pending_tasks(self) -> list[Task]:
        return [t for t in self.tasks if t.should_allocate()]

    def has_pending(self) -> bool:
        for t in self.tasks:
            if t.status is TaskStatus.PENDING:
                return True
        return False

    def is_gang_satisfied(self) -> bool:
        return self.active_used_count() >= self.min_member

    def is_elastic(self) -> bool:
        return self.min_member < len(self.tasks)

    def is_task_preemptible(self, task: Task) -> bool:
        """Semi-preemptible jobs protect their first ``min_member`` pods only."""
        if self.preemptibility != "semi-preemptible":
            return self.preemptible
        return task not in self.core_tasks()

    def core_tasks(self) -> set[Task]:
        """The non-preemptible core of a semi-preemptible job: ``min_member`` active tasks.

        Pods that were already running when the session started come first (the core
        stays put while the session adds or evicts pods), then the oldest, then by name.
        """
        active = [t for t in self.tasks if t.status in ACTIVE_ALLOCATED]
        active.sort(key=_core_key)
        return set(active[: self.min_member])

    def with_tasks(self, tasks: list[Task]) -> Job:
        """A shallow copy of the job that holds only ``tasks``.  Victim searches make
        thousands of these views: ``kai._fast.build.job_with_tasks`` copies the slots."""
        compiled = _fast.module("build")
        if compiled is not None:
            view = compiled.job_with_tasks(self, tasks)
            if view is not None:
                return view
        return job_with_tasks(self, tasks)

    def __repr__(self) -> str:
        return f"Job({self.key}, queue={self.queue}, prio={self.priority})"


# Every field of a job (read in one C call).
_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(Job))
_job_fields = operator.attrgetter(*_JOB_FIELDS)


def job_with_tasks(job: Job, tasks: list[Task]) -> Job:
    """:meth:`Job.with_tasks` field by field: the reference of the compiled copy."""
    view = Job.__new__(Job)
    for name, value in zip(_JOB_FIELDS, _job_fields(job)):
        setattr(view, name, value)
    view.tasks = list(tasks)
    return view


def _task_age_key(task: Task) -> tuple:
    ts = task.creation_timestamp
    return (ts.timestamp() if ts else 0.0, task.name)


def _core_key(task: Task) -> tuple:
    placed_now = task.status not in (TaskStatus.RUNNING, TaskStatus.BOUND)
    return (placed_now, *_task_age_key(task))


@dataclass(eq=False)  # arrays: compared by identity
class QueueInfo:
    """A queue of the tree, with its spec turned into per-resource arrays.

    Arrays are indexed [cpu, memory, gpu] (``QUEUE_RESOURCES``), in canonical units.
    """

    name: str
    parent: str | None
    priority: int
    deserved: np.ndarray
    limit: np.ndarray
    over_quota_weight: np.ndarray
    creation_timestamp: datetime | None
    obj: QueueObject | None = None
    children: list[str] = field(default_factory=list)
    preempt_min_runtime: float | None = None
    reclaim_min_runtime: float | None = None

    @property
    def is_leaf(self) -> bool:
        return not self.children


# Queue quotas exist for these three resources only, in this order.
QUEUE_RESOURCES = ("cpu", "memory", "gpu")
Q_CPU, Q_MEMORY, Q_GPU = 0, 1, 2


def queue_arrays(resources: dict[str, QueueResource]) -> tuple[np.ndarray, ...]:
    zero = QueueResource()
    specs = [resources.get(name, zero) for name in QUEUE_RESOURCES]
    rows = np.array(
        [[s.quota for s in specs], [s.limit for s in specs], [s.over_quota_weight for s in specs]],
        dtype=np.float64,
    )
    deserved, limit, weight = rows  # rows of one array: one allocation, not three
    return deserved, limit, weight


class _Parented(Protocol):
    parent: str | None


class Holdable(Protocol):
    """What :meth:`NodeTable.hold` keeps releasing: a task, or a place one left."""

    request: np.ndarray


@dataclass(slots=True, eq=False)
class VacatedPlace:
    """The place on ``node`` a task placed by the session left when it was evicted
    again: it stays releasing for the rest of the session, as KAI-Scheduler keeps it,
    unless the task is placed on that node again and takes its place back
    (kai.framework.statement)."""

    request: np.ndarray
    node: int


def queue_path(queues: Mapping[str, _Parented], leaf: str | None) -> list[str]:
    """Root-to-leaf queue names ending with ``leaf`` (empty for an unknown queue).

    The walk stops at the first name ``queues`` lacks, and at a cycle.
    """
    path: list[str] = []
    current = leaf
    while current is not None and current in queues and current not in path:
        path.append(current)
        current = queues[current].parent
    path.reverse()
    return path


@dataclass
class GpuGroup:
    """A GPU device shared by fractional tasks (a KAI "GPU group").

    Portions are fractions of one device.
    """

    used: float = 0.0  # every task on it that holds the device (any on-node status)
    releasing: float = 0.0  # of which being released
    pipelined: float = 0.0  # of which pipelined onto releasing memory
    tasks: set[Task] = field(default_factory=set)
    # The device was taken from releasing (not idle) capacity when the group was opened.
    from_releasing: bool = False

    def free_counting_releasing(self) -> float:
        return 1.0 - self.used + self.releasing

    def free_idle(self) -> float:
        return 1.0 - self.used

    def state(self) -> str:
        """ "empty", "releasing" (all its usage is going away) or "busy"."""
        if not self.tasks:
            return "empty"
        if self.releasing >= self.used - 1e-9 and self.pipelined <= 1e-9:
            return "releasing"
        return "busy"


# Characters a label value may not hold (new GPU group ids become label values).
_LABEL_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def _gpu_memory_mib(raw: str) -> float:
    """A device's memory in MiB from the nvidia.com/gpu.memory label (0: unknown)."""
    try:
        mem = int(raw)
    except ValueError:
        return 0.0  # not an integer: the memory is unknown, as in KAI
    if mem >= 1024 * 1024:  # values this large are bytes
        mem = mem // (1024 * 1024)
    # Floored to a multiple of 100 MiB, as KAI does, so that fractions and memory
    # requests convert the same way.
    return float(max(mem, 0) - max(mem, 0) % 100)


# How a task on a node charges its request (charge_rows): on idle capacity, releasing
# (its pod is going), or pipelined onto capacity being released.
ROWS_IDLE, ROWS_RELEASING, ROWS_PIPELINED = 0, 1, 2


def charge_rows(
    used: np.ndarray,
    idle: np.ndarray,
    releasing: np.ndarray,
    i: int,
    request: np.ndarray,
    kind: int,
    add: bool,
) -> None:
    """Charge (``add``) or uncharge ``request`` to row ``i`` of a node table's capacity
    matrices as a task of status ``kind`` (``ROWS_*``) holds it: always ``used``; then
    ``idle`` for a task on idle capacity, ``releasing`` (and ``idle`` back) for a
    releasing one, and ``releasing`` for a pipelined one.

    The reference of ``kai._fast.ledger.charge_rows``, which gives bit-identical rows.
    """
    if add:
        used[i] += request
        if kind == ROWS_RELEASING:
            releasing[i] += request
            idle[i] -= request
        elif kind == ROWS_PIPELINED:
            releasing[i] -= request
        else:
            idle[i] -= request
    else:
        used[i] -= request
        if kind == ROWS_RELEASING:
            releasing[i] -= request
            idle[i] += request
        elif kind == ROWS_PIPELINED:
            releasing[i] += request
        else:
            idle[i] += request


def recharge_rows(
    used: np.ndarray,
    idle: np.ndarray,
    releasing: np.ndarray,
    i: int,
    request: np.ndarray,
    old_kind: int,
    new_kind: int,
) -> None:
    """Uncharge ``request`` from row ``i`` as a task of status ``old_kind``, then charge
    it as one of ``new_kind`` (:func:`charge_rows` twice): a task whose status changes
    on its node.

    The reference of ``kai._fast.ledger.recharge_rows``, which gives bit-identical rows.
    """
    charge_rows(used, idle, releasing, i, request, old_kind, False)
    charge_rows(used, idle, releasing, i, request, new_kind, True)


def add_vector(target: np.ndarray, vector: np.ndarray, add: bool) -> None:
    """``target += vector`` (``add``) or ``target -= vector``, in place.

    The reference of ``kai._fast.ledger.add_vector``, which gives bit-identical values.
    """
    if add:
        np.add(target, vector, out=target)
    else:
        np.subtract(target, vector, out=target)


_ROW_KIND = {TaskStatus.RELEASING: ROWS_RELEASING, TaskStatus.PIPELINED: ROWS_PIPELINED}.get


def add_vector_to_each(targets: tuple[np.ndarray, ...], vector: np.ndarray, add: bool) -> None:
    """:func:`add_vector` of ``vector`` to each of ``targets``, in order.

    The reference of ``kai._fast.ledger.add_vector_to_each``, which gives bit-identical
    values.
    """
    for target in targets:
        add_vector(target, vector, add)


def recharge_all(
    used: np.ndarray,
    idle: np.ndarray,
    releasing: np.ndarray,
    rows: list[int],
    requests: list[np.ndarray],
    old_kinds: list[int],
    new_kinds: list[int],
) -> None:
    """:func:`recharge_rows` of each request, in order: ``requests[k]`` on row
    ``rows[k]``, from ``old_kinds[k]`` to ``new_kinds[k]``.

    The rows of :func:`restatus_tasks`.
    """
    for i, request, old, new in zip(rows, requests, old_kinds, new_kinds, strict=True):
        recharge_rows(used, idle, releasing, i, request, old, new)


def restatus_tasks(
    used: np.ndarray,
    idle: np.ndarray,
    releasing: np.ndarray,
    tasks: list[Task],
    statuses: list[TaskStatus],
) -> None:
    """Each of ``tasks`` (each at most once) to its status in ``statuses``: its request
    moved on its node's rows from the row kind of its status to that of the new one
    (:func:`recharge_all`, in order), then the statuses set.

    The reference of ``kai._fast.ledger.restatus_all``, which gives bit-identical rows.
    """
    recharge_all(
        used,
        idle,
        releasing,
        [task.node for task in tasks],
        [task.request for task in tasks],
        [_ROW_KIND(task.status, ROWS_IDLE) for task in tasks],
        [_ROW_KIND(status, ROWS_IDLE) for status in statuses],
    )
    for task, status in zip(tasks, statuses, strict=True):
        task.status = status


def add_vectors_to_each(
    targets: list[tuple[np.ndarray, ...]], vectors: list[np.ndarray], add: bool
) -> None:
    """:func:`add_vector_to_each` of each vector, in order: ``vectors[k]`` to each of
    ``targets[k]``.

    The reference of ``kai._fast.ledger.add_vectors_to_each``, which gives bit-identical
    values.
    """
    for each, vector in zip(targets, vectors, strict=True):
        add_vector_to_each(each, vector, add)


class RowFunctions(NamedTuple):
    """The row arithmetic of statements and queue accounting, compiled or not."""

    charge_rows: Callable[..., None]
    recharge_rows: Callable[..., None]
    add_vector: Callable[..., None]
    add_vector_to_each: Callable[..., None]
    add_vectors_to_each: Callable[..., None]
    restatus_all: Callable[..., None]


def row_functions() -> RowFunctions:
    """The row arithmetic (:func:`charge_rows`, :func:`recharge_rows`,
    :func:`add_vector`, :func:`add_vector_to_each` and their batches), compiled where
    ``kai._fast`` is."""
    ledger = _fast.module("ledger")
    if ledger is None:
        return RowFunctions(
            charge_rows,
            recharge_rows,
            add_vector,
            add_vector_to_each,
            add_vectors_to_each,
            restatus_tasks,
        )
    return RowFunctions(
        ledger.charge_rows,
        ledger.recharge_rows,
        ledger.add_vector,
        ledger.add_vector_to_each,
        ledger.add_vectors_to_each,
        ledger.restatus_all,
    )


#: The pods a node takes when it declares no ``pods`` capacity (the kubelet's default).
KUBELET_MAX_PODS = 110.0


def node_rows(
    nodes: list[NodeObject],
    column_of: dict[str, int],
    width: int,
    pods_column: int,
    pods_default: float,
) -> np.ndarray:
    """The allocatable matrix of ``nodes``, one row each: a node's allocatable values at
    their resources' columns (a resource without one is left out), and
    ``pods_default`` in ``pods_column`` unless the node declares its pods.

    The reference of ``kai._fast.build.node_rows``, which gives the same matrix.
    """
    # Rows built as Python lists and converted once: nodes of one pool mostly declare
    # the same resources, so the column lookups are shared per key set.
    rows: list[list[float]] = []
    columns: dict[tuple[str, ...], list[int | None]] = {}
    zero = [0.0] * width
    for node in nodes:
        alloc = node.allocatable
        names = tuple(alloc)
        cols = columns.get(names)
        if cols is None:
            cols = columns[names] = [column_of.get(name) for name in names]
        row = zero.copy()
        row[pods_column] = pods_default
        for col, value in zip(cols, alloc.values()):
            if col is not None:
                row[col] = value
        rows.append(row)
    return np.array(rows, dtype=np.float64).reshape(len(nodes), width)


class NodeStatics:
    """What a node table derives from its node objects alone: their order, names,
    allocatable matrix, GPU memory and schedulability, and the values plugins derive
    from them (see :meth:`NodeTable.derived`).

    Read-only, and shared by every table made from the same objects (a snapshot's
    sessions, a live scheduler's cycles while no node changes): those sessions then
    build none of it again."""

    __slots__ = (
        "source", "resources", "objects", "names", "index", "allocatable",
        "gpu_memory_mib", "schedulable", "derived",
    )  # fmt: skip

    def __init__(self, nodes: list[NodeObject], table: ResourceTable) -> None:
        self.source = tuple(nodes)  # the objects as given, to know them again (matches)
        self.resources = table.names
        nodes = sorted(nodes, key=operator.attrgetter("name"))
        self.objects = nodes
        self.names = [n.name for n in nodes]
        self.index = {name: i for i, name in enumerate(self.names)}
        n = len(nodes)
        build = _fast.module("build")
        self.allocatable = (node_rows if build is None else build.node_rows)(
            nodes, table.index, len(table), table.index["pods"], KUBELET_MAX_PODS
        )
        # GPU memory per device in MiB, from the label nvidia.com/gpu.memory (0 = unknown).
        # Nodes of one kind share the label's value: each distinct value is parsed once.
        parsed: dict[str, float] = {"": 0.0}
        memory = []
        for node in nodes:
            raw = node.labels.get("nvidia.com/gpu.memory", "")
            mib = parsed.get(raw)
            if mib is None:
                mib = parsed[raw] = _gpu_memory_mib(raw)
            memory.append(mib)
        self.gpu_memory_mib = np.array(memory, dtype=np.float64).reshape(n)
        self.schedulable = np.array(
            [n.ready and not n.unschedulable and not n.pressure_conditions for n in nodes],
            dtype=np.bool_,
        )
        for array in (self.allocatable, self.gpu_memory_mib, self.schedulable):
            array.flags.writeable = False
        self.derived: dict[str, Any] = {}

    def matches(self, nodes: list[NodeObject], table: ResourceTable) -> bool:
        """Whether these are the statics of exactly ``nodes`` (the same objects, in the
        same order) over ``table``'s resources."""
        source = self.source
        return (
            len(source) == len(nodes)
            and all(map(operator.is_, source, nodes))
            and table.names == self.resources
        )


class NodeTable:
    """All nodes of the snapshot, columnar; index order is node-name order.

    ``statics`` (optional) are those of an earlier table, reused where they
    :meth:`~NodeStatics.matches` ``nodes``; the table's own are in ``statics`` after."""

    def __init__(
        self, nodes: list[NodeObject], table: ResourceTable, statics: NodeStatics | None = None
    ) -> None:
        self._bind_rows()
        if statics is None or not statics.matches(nodes, table):
            statics = NodeStatics(nodes, table)
        self.statics = statics
        self.objects = statics.objects
        self.names = statics.names
        self.index = statics.index
        self.resources = table
        n, r = len(statics.objects), len(table)
        self.allocatable = statics.allocatable
        self.idle = self.allocatable.copy()
        self.releasing = np.zeros((n, r), dtype=np.float64)
        self.used = np.zeros((n, r), dtype=np.float64)
        self.gpu_groups: list[dict[str, GpuGroup]] = [{} for _ in range(n)]
        # The nodes whose shared devices ever changed (see _refresh_shared_free): every
        # node with a shared device is one, so walks over the devices need read no other.
        self.shared_nodes: set[int] = set()
        self.tasks: list[set[Task]] = [set() for _ in range(n)]
        self.gpu_memory_mib = statics.gpu_memory_mib
        self.schedulable = statics.schedulable
        # Per node, the most room on one shared device (-1: none); see shared_fit.
        self.shared_free_idle = np.full(n, -1.0)
        self.shared_free_any = np.full(n, -1.0)
        # Bumped on every change of the capacity matrices (add_task / remove_task), so
        # results computed from them can be cached until the next change.
        self.version = 0
        # Moved victims (evicted, then placed on another node in this session) -> the
        # node they still run on, whose capacity they hold as releasing until they go.
        self.held: dict[Holdable, int] = {}
        # The places each task left when the session undid its placements (held).
        self.vacated: dict[Task, list[VacatedPlace]] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_charge_rows"]  # chosen again where the table is loaded
        del state["_recharge_rows"]
        del state["_restatus_all"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._bind_rows()

    def _bind_rows(self) -> None:
        """The row arithmetic the table uses, compiled where it is (chosen again where
        a pickled table is loaded)."""
        rows = row_functions()
        self._charge_rows, self._recharge_rows = rows.charge_rows, rows.recharge_rows
        self._restatus_all = rows.restatus_all

    def derived(self, key: str, make: Callable[[], _T]) -> _T:
        """The value ``make()`` derives from the node objects alone (their labels,
        taints), made once per node set under ``key`` and kept with the table's
        :class:`NodeStatics`: the objects never change while the statics live."""
        derived = self.statics.derived
        try:
            return derived[key]
        except KeyError:
            value = derived[key] = make()
            return value

    def __len__(self) -> int:
        return len(self.names)

    def new_group_id(self, node: int, seed: str) -> str:
        """An id for a shared GPU a task opens on ``node`` (``seed``: the task's uid).

        The live scheduler writes it into the pod's ``runai-gpu-group`` label and the next
        session reads it back, so it must stay unique on the node across sessions: it is
        the node's name and a hash of (node, the first pod's uid), which no other pod
        shares (a running pod keeps its group, a new pod has a new uid); an id still in
        use on the node (the same pod moved to another device in one session) gets a
        suffix.  Deterministic, so ``kai simulate`` prints the same ids on every run, and
        a valid label value (at most 63 characters).
        """
        name = self.names[node]
        digest = hashlib.sha1(f"{name}\0{seed}".encode()).hexdigest()[:10]
        prefix = _LABEL_UNSAFE.sub("-", name)[:40].strip("-_.")
        base = f"{prefix}-{digest}" if prefix else digest
        gid, n = base, 1
        while gid in self.gpu_groups[node]:
            n += 1
            gid = f"{base}-{n}"
        return gid

    def non_allocated(self) -> np.ndarray:
        return self.idle + self.releasing

    def portion_on(self, task: Task, node: int) -> float:
        """The fraction of one device a shared-GPU task takes on ``node`` (0 if unknown)."""
        if task.gpu_fraction > 0:
            return task.gpu_fraction
        mem = self.gpu_memory_mib[node]
        return task.gpu_memory_mib / mem if mem > 0 else 0.0

    def add_task(self, task: Task) -> None:
        """Charge a task's resources to its node according to its status."""
        self.version += 1
        i = task.node
        self._charge_rows(
            self.used,
            self.idle,
            self.releasing,
            i,
            task.request,
            _ROW_KIND(task.status, ROWS_IDLE),
            True,
        )
        self.tasks[i].add(task)
        if task.is_shared_gpu and task.gpu_group is not None:
            self._update_group(task, +1)

    def remove_task(self, task: Task) -> None:
        """Undo :meth:`add_task` (the task's status must be the one it was added with)."""
        self.version += 1
        i = task.node
        self._charge_rows(
            self.used,
            self.idle,
            self.releasing,
            i,
            task.request,
            _ROW_KIND(task.status, ROWS_IDLE),
            False,
        )
        self.tasks[i].discard(task)
        if task.is_shared_gpu and task.gpu_group is not None:
            self._update_group(task, -1)

    def restatus(self, task: Task, status: TaskStatus) -> None:
        """Set the status of ``task``, on its node before and after, and charge its rows
        as the new status: :meth:`remove_task`, the status set, :meth:`add_task` (the
        same rows, bit for bit), in one step.  Both statuses hold the node
        (``ON_NODE``), and the task is on whole GPUs (no device to update)."""
        self.version += 2
        self._recharge_rows(
            self.used,
            self.idle,
            self.releasing,
            task.node,
            task.request,
            _ROW_KIND(task.status, ROWS_IDLE),
            _ROW_KIND(status, ROWS_IDLE),
        )
        task.status = status

    def restatus_all(self, tasks: list[Task], statuses: list[TaskStatus]) -> None:
        """:meth:`restatus` of each of ``tasks`` to its status in ``statuses``, in order
        (a task at most once)."""
        self.version += 2 * len(tasks)
        self._restatus_all(self.used, self.idle, self.releasing, tasks, statuses)

    def hold(self, task: Holdable, node: int) -> None:
        """Keep ``task``'s request releasing on ``node`` (the node a moved victim runs on,
        which frees the capacity only when its pod terminates: something may be
        pipelined onto it in this session, nothing bound)."""
        self.version += 1
        self._charge_rows(
            self.used, self.idle, self.releasing, node, task.request, ROWS_RELEASING, True
        )
        self.held[task] = node

    def vacate(self, task: Task, node: int) -> VacatedPlace:
        """Keep the place on ``node`` that ``task`` leaves releasing, as one of its
        vacated places (an undone placement; kai.framework.statement)."""
        place = VacatedPlace(task.request, node)
        self.hold(place, node)
        self.vacated.setdefault(task, []).append(place)
        return place

    def unvacate(self, task: Task, place: VacatedPlace) -> None:
        """Undo :meth:`vacate`."""
        places = self.vacated[task]
        places.remove(place)
        if not places:
            del self.vacated[task]
        self.unhold(place)

    def retake(self, task: Task, node: int) -> tuple[int, VacatedPlace] | None:
        """``task``'s latest vacated place on ``node``, freed for it to take back, and
        where it was in its list; None if it left none there."""
        places = self.vacated.get(task, [])
        at = next((i for i in reversed(range(len(places))) if places[i].node == node), -1)
        if at < 0:
            return None
        place = places.pop(at)
        if not places:
            del self.vacated[task]
        self.unhold(place)
        return at, place

    def give_back(self, task: Task, retaken: tuple[int, VacatedPlace]) -> None:
        """Undo :meth:`retake` (``retaken``: what it returned)."""
        at, place = retaken
        self.hold(place, place.node)
        self.vacated.setdefault(task, []).insert(at, place)

    def release_holds(self) -> None:
        """Free every place held releasing (moved victims' old places and vacated places):
        their pods are gone by the next session of a state that outlives one."""
        for held in list(self.held):
            self.unhold(held)
        self.vacated.clear()

    def unhold(self, task: Holdable) -> int:
        """Undo :meth:`hold`; the node it was held on."""
        node = self.held.pop(task)
        self.version += 1
        self._charge_rows(
            self.used, self.idle, self.releasing, node, task.request, ROWS_RELEASING, False
        )
        return node

    def _update_group(self, task: Task, sign: int) -> None:
        i = task.node
        key = task.gpu_group
        assert key is not None  # callers update only the tasks on a shared device
        groups = self.gpu_groups[i]
        group = groups.get(key)
        if group is None:
            group = groups[key] = GpuGroup(from_releasing=task.status is TaskStatus.PIPELINED)
        self._charge_group_state(i, group, -1)
        p = self.portion_on(task, i)
        group.used += sign * p
        if task.status is TaskStatus.RELEASING:
            group.releasing += sign * p
        elif task.status is TaskStatus.PIPELINED:
            group.pipelined += sign * p
        if sign > 0:
            group.tasks.add(task)
        else:
            group.tasks.discard(task)
        self._charge_group_state(i, group, +1)
        if not group.tasks:
            del groups[key]
        self._refresh_shared_free(i)

    def _refresh_shared_free(self, i: int) -> None:
        """Largest room on a shared device of node ``i``, as :meth:`shared_fit` sees it.

        Kept per node so that fitting a fractional task is one vector comparison over
        all nodes instead of a walk over every node's devices.
        """
        self.shared_nodes.add(i)
        idle = any_ = -1.0
        for group in self.gpu_groups[i].values():
            # A device all of whose tenants are being released is offered as a whole
            # releasing GPU instead: its room is not offered twice.
            if group.state() != "busy":
                continue
            idle = max(idle, group.free_idle())
            any_ = max(any_, group.free_counting_releasing())
        self.shared_free_idle[i] = idle
        self.shared_free_any[i] = any_

    def portions(self, task: Task) -> np.ndarray:
        """:meth:`portion_on` for every node at once."""
        if task.gpu_fraction > 0:
            return np.full(len(self.names), task.gpu_fraction)
        mem = self.gpu_memory_mib
        out = np.zeros(len(self.names))
        np.divide(task.gpu_memory_mib, mem, out=out, where=mem > 0)
        return out

    def _charge_group_state(self, i: int, group: GpuGroup, sign: int) -> None:
        """A shared device counts as one GPU: busy (used) or releasing."""
        state = group.state()
        if state == "empty":
            return
        self.used[i, GPU] += sign
        if state == "releasing":
            self.releasing[i, GPU] += sign
            self.idle[i, GPU] -= sign
        elif group.from_releasing:
            self.releasing[i, GPU] -= sign
        else:
            self.idle[i, GPU] -= sign

    def shared_fit(self, node: int, portion: float, *, idle_only: bool) -> list[str]:
        """Existing shared GPU groups on ``node`` with room for ``portion``."""
        out = []
        for gid, group in self.gpu_groups[node].items():
            if group.state() == "empty":
                continue
            free = group.free_idle() if idle_only else group.free_counting_releasing()
            if group.state() == "releasing" and not idle_only:
                continue  # a fully released device is offered as a whole GPU instead
            if free + 1e-9 >= portion:
                out.append(gid)
        return out


@dataclass(eq=False)  # arrays: compared by identity
class ClusterState:
    """Mutable scheduling state of one session."""

    resources: ResourceTable
    nodes: NodeTable
    tasks: list[Task]
    jobs: dict[str, Job]
    queues: dict[str, QueueInfo]
    # Pods kai does not schedule but which hold node capacity (other schedulers).
    foreign_tasks: list[Task] = field(default_factory=list)
    # Pods that are ignored entirely (completed, or not on any known node), kept for output.
    passive_tasks: list[Task] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # Koordinator NodeMetrics by node name (read by the loadaware plugin).
    node_metrics: dict[str, NodeMetricObject] = field(default_factory=dict)
    # Request vectors shared by pods that ask for the same resources (read-only).
    request_vectors: dict[tuple, np.ndarray] = field(default_factory=dict, repr=False)
    # Pods' placement-constraint signatures by id(pod), with the pod: kept with the state,
    # so a state that lives across sessions (the replay's) computes each pod's once.
    pod_signatures: dict[int, tuple[PodObject, str]] = field(default_factory=dict, repr=False)

    def all_tasks(self) -> list[Task]:
        return self.tasks + self.foreign_tasks + self.passive_tasks

    def release(self) -> None:
        """Break the task <-> job cycles so the state is freed by reference counting."""
        for job in self.jobs.values():
            job.tasks.clear()
