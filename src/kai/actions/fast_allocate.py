"""The allocate action's fast path: one native call runs the whole loop.

When every plugin of the session is a built-in that declares a native form
(``native_allocate = True``) and nothing else hooks into allocate (no scalar predicates
or node-order functions, no pre-predicates, no event handler but proportion's and
loadaware's), the action's inputs are turned into compact arrays here:

* nodes: idle / releasing / used / allocatable matrices, the GPU capacity nodeplacement
  spreads by;
* per distinct pod constraint set (node selector, required affinity, tolerations): the
  predicates plugin's masks, one per batch predicate;
* tasks (each job's pending tasks in task order): request vectors, queue vectors
  ([cpu, memory, gpu]), constraint set, nominated node;
* jobs: leaf queue, minMember, counts of active/pipelined/allocated tasks,
  preemptibility, job-order keys (static columns and the elastic state);
* queues: root-to-leaf paths, deserved / limit / fair share / allocatable share /
  allocated / allocated non-preemptible, priority and age rank;
* the score components in registration order and the nodeplacement strategies;
* where the backend's loop takes them (``Backend.allocate_loop_features``): the
  loadaware plugin's kernel form, and for fractional tasks the shared devices of the
  nodes, each task's fraction and the GPU order plugins.

The kernel (``_native.allocate_loop``, native/src/allocate.cpp; numba:
``kai.backends._numba_allocate``) performs exactly the slow path's decisions and
floating-point operations and returns the attempts in order (job, outcome, placements,
failure details) and the final node and queue accounting.  :func:`_apply` replays that
cheaply: task statuses and nodes, decisions, fit errors (with the slow path's
messages), start timestamps, queue versions, and the node matrices and proportion
shares as the kernel left them (bit-identical to the slow path's, rollbacks included),
and the shared devices (ids of the devices opened, tenants, room).

``KAI_FAST_ALLOCATE=0`` forces the slow path (tests compare the two).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from kai import _fast
from kai.api.model import ACTIVE_ALLOCATED, ALLOCATED, GpuGroup, Job, Task, TaskStatus
from kai.api.objects import PodObject
from kai.api.preemptibility import SEMI_PREEMPTIBLE
from kai.api.resources import (
    CPU,
    GPU,
    INSUFFICIENT_RESOURCES,
    MEMORY,
    describe_failures,
    describe_shortage,
    vector_shortage,
)
from kai.framework.kernel import KernelScore
from kai.framework.session import Decision, Session, default_order_key

ENV_VAR = "KAI_FAST_ALLOCATE"

log = logging.getLogger(__name__)
# The reasons for the general path said so far (each is logged once per process).
_said: set[str] = set()

_JOB_ORDER = {"priority", "elastic"}
_UNSUPPORTED_POINTS = ("pre_predicate", "predicate", "node_order", "node_pre_order")

#: job_columns: tasks, job_start, counted (job, active, non-pipelined, pipelined,
#: allocated-set counts of the jobs with any), leaf queue, minMember, non-preemptible
#: mode, negated priority, position in the default order (default_order_key).  (The
#: integer columns are lists here, ``array('q')`` from the compiled module.)
JobColumns = tuple[
    list[Task],
    Sequence[int],
    list[tuple[int, int, int, int, int]],
    Sequence[int],
    Sequence[int],
    Sequence[int],
    Sequence[int],
    Sequence[int] | None,  # the default-order ranks; None when two jobs have equal keys
]
#: task_columns: distinct request vectors, each task's row among them, one task per
#: constraint set, each task's constraint set, (task, node) of the nominated tasks,
#: (task, GPU fraction) of the tasks asking for a fraction.
TaskColumns = tuple[
    list[np.ndarray],
    Sequence[int],
    list[Task],
    Sequence[int],
    list[tuple[int, int]],
    list[tuple[int, float]],
]

KIND_OK, KIND_NO_TASKS, KIND_OVER_LIMIT, KIND_OVER_QUOTA, KIND_NO_NODE = 0, 1, 2, 3, 4


def enabled() -> bool:
    return os.environ.get(ENV_VAR, "1").strip().lower() not in ("0", "false", "no", "off")


def _kernel(ssn: Session):
    return getattr(ssn.backend, "allocate_loop", None)


def run(ssn: Session, jobs: list[Job]) -> bool:
    """Run allocate on the fast path; False (nothing done) when it does not apply."""
    if not enabled():
        return False
    kernel = _kernel(ssn)
    if kernel is None:
        return False
    plan = _prepare(ssn, jobs)
    if isinstance(plan, str):
        if plan not in _said:  # once per reason: sessions repeat
            _said.add(plan)
            log.debug("allocate takes the general path: %s", plan)
        return False
    out = kernel(plan.inputs)
    if out.get("aborted"):
        return False  # nothing was changed: the slow path runs the action
    _apply(ssn, plan, out)
    return True


# ------------------------------------------------------------------ eligibility
def _plugins(ssn: Session) -> dict[str, Any] | str:
    """The session's plugins by name, or why the loop cannot run them."""
    by_name: dict[str, Any] = {}
    for plugin in ssn.plugins:
        cls = type(plugin)
        if not getattr(cls, "native_allocate", False):
            return f"plugin {plugin.name} declares no kernel form"
        if not cls.__module__.startswith("kai.plugins."):
            return f"plugin {plugin.name} is not a built-in"
        if plugin.name in by_name:
            return f"plugin {plugin.name} is configured twice"
        by_name[plugin.name] = plugin
    return by_name


def _unsupported(ssn: Session, plugins: dict[str, Any]) -> str | None:
    """Why the loop cannot run this session's allocate (None: it can)."""
    registered = ssn.registered
    for point in _UNSUPPORTED_POINTS:
        for reg in registered(point):
            return f"plugin {reg.plugin or '(unnamed)'} registers a {point} function"
    proportion = plugins.get("proportion")
    if proportion is None:
        return "the proportion plugin is not configured"
    loadaware = plugins.get("loadaware")
    if loadaware is not None and "loadaware" not in ssn.backend.allocate_loop_features:
        return f"the {ssn.backend.name} backend's loop does not take the loadaware plugin"
    handlers = ssn.event_handlers
    if not any(proportion.handles(h) for h in handlers) or any(
        not (proportion.handles(h) or (loadaware is not None and loadaware.handles(h)))
        for h in handlers
    ):
        return "an event handler other than proportion's and loadaware's is registered"
    queue_order = registered("queue_order")
    if len(queue_order) != 1 or queue_order[0].plugin != "proportion":
        return "the queue order is not proportion's alone"
    capacity = registered("job_over_capacity")
    if not capacity or capacity[0].plugin != "proportion":
        return "the job capacity check is not proportion's"
    for reg in registered("job_order"):
        if reg.plugin not in _JOB_ORDER:
            return f"plugin {reg.plugin} orders jobs"
    predicates = [reg.plugin for reg in registered("batch_predicate")]
    if loadaware is not None and predicates and predicates[-1] == "loadaware":
        predicates.pop()  # the loop runs the load-aware filter after the static masks
    for name in predicates:
        if name != "predicates":
            return f"plugin {name} filters nodes (only predicates' filters, then loadaware's)"
    # Each score must be one the plugin declares (kai.framework.kernel).
    for reg in registered("batch_node_order"):
        if _kernel_score(plugins, reg.plugin) is None:
            return f"plugin {reg.plugin} declares no kernel form for its node score"
    return None


def _kernel_score(plugins: dict[str, Any], name: str) -> KernelScore | None:
    plugin = plugins.get(name)
    return getattr(plugin, "kernel_score", None) if plugin is not None else None


def _gpu_order_kinds(ssn: Session, plugins: dict[str, Any]) -> list[int] | None:
    """The GPU order plugins' declared kinds, in registration order (None: one has
    none)."""
    kinds = []
    for reg in ssn.registered("gpu_order"):
        kind = getattr(plugins.get(reg.plugin), "gpu_order_kind", None)
        if kind is None:
            return None
        kinds.append(int(kind))
    return kinds


# ------------------------------------------------------------------ one task
#: Where a session keeps its node picker (``ssn.cache``): a NodePicker, or a reason.
PICKER_KEY = "fast_allocate.picker"

#: From this many pods to place one after another (a simulation's re-placement, a
#: probe's pending pods), the core groups the nodes by score inputs per class of pods
#: alike, as the allocate loop does: the same choices, and cheaper than scoring every
#: node at each pick once the groups are made.
GROUP_NODES_FROM = 48


class NodePicker:
    """The compiled loop's node choice for one task at a time, for the general path
    (``kai.actions.common.allocate_task``: victims re-placed by a simulation, a
    preemptor's pods, allocate when the whole loop does not apply).

    It scores every node as the session's filter and scorers would, on the node
    matrices as they are at the call, and gives the same node and the same "fits on
    idle capacity".  Made once per session where the loop's eligibility holds (the
    loadaware plugin aside: its filter follows the pods placed) and the backend has the
    compiled picker; the predicates' masks are made once per constraint set.
    """

    def __init__(self, ssn: Session, plugins: dict[str, Any], picker: Any) -> None:
        self.ssn = ssn
        nodes = ssn.nodes
        components, gpu_binpack, cpu_binpack, cap_gpu = _scoring(ssn, plugins)
        self.native = picker(
            nodes.allocatable,
            cap_gpu,
            np.array([code for code, _ in components], dtype=np.int64),
            np.array([scale for _, scale in components], dtype=np.float64),
            GPU,
            CPU,
            gpu_binpack,
            cpu_binpack,
        )
        self.predicates = ssn.registered("batch_predicate")
        self.masks: dict[Any, np.ndarray | None] = {}

    @classmethod
    def for_session(cls, ssn: Session) -> NodePicker | None:
        found = ssn.cache.get(PICKER_KEY)
        if found is None:
            found = ssn.cache[PICKER_KEY] = cls._make(ssn)
        return found if isinstance(found, NodePicker) else None

    @classmethod
    def _make(cls, ssn: Session) -> NodePicker | str:
        picker = getattr(ssn.backend, "node_picker", None)
        if picker is None or not enabled():
            return "no compiled node picker"
        plugins = _plugins(ssn)
        if isinstance(plugins, str):
            return plugins
        if "loadaware" in plugins:
            return "the loadaware plugin"
        unsupported = _unsupported(ssn, plugins)
        if unsupported is not None:
            return unsupported
        if _gpu_order_kinds(ssn, plugins) is None:
            return "a GPU order declares no kind"
        return cls(ssn, plugins, picker)

    def constraint_masks(self, task: Task, job: Job) -> np.ndarray | None:
        """The batch predicates' masks of ``task`` (P x N), made once per constraint set;
        None when a predicate gives reasons per node instead."""
        key = constraint_key(task.pod)
        if key in self.masks:
            return self.masks[key]
        masks = np.ones((len(self.predicates), len(self.ssn.nodes)), dtype=np.bool_)
        if _predicate_masks(self.predicates, task, job, masks) is not None:
            self.masks[key] = None  # reasons per node: the general path
            return None
        self.masks[key] = masks
        return masks

    def pick(
        self, task: Task, job: Job, within: np.ndarray | None, alike: AlikePicks | None = None
    ) -> tuple[int, bool] | None:
        """(node, fits on idle capacity there) for ``task`` among the nodes ``within``
        (-1: none may take it); None when the picker does not take this task.  Through
        ``alike``, if given for these nodes, on whole GPUs: the same choice."""
        if task.gpu_memory_mib > 0:
            return None
        masks = self.constraint_masks(task, job)
        if masks is None:
            return None
        nodes = self.ssn.nodes
        nominated = task.pod.nominated_node_name
        nominated_at = nodes.index.get(nominated, -1) if nominated else -1
        if alike is not None and within is alike.within and task.gpu_fraction <= 0:
            return alike.pick(masks, task.request, nominated_at)
        node, on_idle = self.native.pick(
            nodes.idle,
            nodes.releasing,
            task.request,
            masks,
            nominated_at,
            task.gpu_fraction,
            nodes.shared_free_idle,
            nodes.shared_free_any,
            within,
        )
        return node, on_idle


class AlikePicks:
    """:meth:`NodePicker.pick` for many pods placed one after another on the nodes
    ``within`` (a probe's pending pods, mostly alike): the compiled chooser keeps the
    nodes grouped by score inputs, and reads again only the nodes each placement
    changed, which the caller reports (:meth:`placed`).  A change to the node table it
    was not told of (the table's version moved since) starts the groups afresh, as does
    a pod of another constraint set."""

    __slots__ = ("picker", "within", "masks", "native", "version")

    def __init__(self, picker: NodePicker, within: np.ndarray) -> None:
        self.picker = picker
        self.within = within
        self.masks: np.ndarray | None = None
        self.native: Any = None
        self.version = -1

    @classmethod
    def for_run(cls, ssn: Session, within: np.ndarray | None, pods: int) -> AlikePicks | None:
        """The picks of a run of ``pods`` placements on ``within``; None where grouping
        does not pay (fewer than ``GROUP_NODES_FROM``) or there is no compiled picker."""
        if pods < GROUP_NODES_FROM or within is None or not len(within):
            return None
        picker = NodePicker.for_session(ssn)
        return cls(picker, within) if picker is not None else None

    def pick(self, masks: np.ndarray, request: np.ndarray, nominated: int) -> tuple[int, bool]:
        nodes = self.picker.ssn.nodes
        if self.native is None or masks is not self.masks or nodes.version != self.version:
            self.native = self.picker.native.alike(masks, self.within)
            self.masks = masks
            self.version = nodes.version
        node, on_idle = self.native.pick(nodes.idle, nodes.releasing, request, nominated)
        return node, on_idle

    def placed(self, nodes: Iterable[int], since: int) -> None:
        """A placement changed the rows of ``nodes`` (and of no other node) from the
        node table's version ``since`` (taken before it) to the version now; anything
        else changed since the last pick starts the groups afresh at the next one."""
        native = self.native
        if native is None:
            return
        if since != self.version:
            self.native = None
            return
        for node in nodes:
            if node >= 0:
                native.changed(node)
        self.version = self.picker.ssn.nodes.version


def _predicate_masks(predicates: list, task: Task, job: Job, out: np.ndarray) -> str | None:
    """Write the batch predicates' masks of ``task`` into the rows of ``out`` (all true to
    start with; a predicate that does not apply leaves its row so).  Returns the name of
    a predicate that gives a reason per node instead, which the loop does not take."""
    for p, reg in enumerate(predicates):
        name, fn = reg.fn
        ok = fn(task, job)
        if ok is None:
            continue
        if isinstance(ok, tuple):
            return name
        out[p] = ok
    return None


def _scoring(
    ssn: Session, plugins: dict[str, Any]
) -> tuple[list[tuple[int, float]], bool, bool, np.ndarray]:
    """The score components in registration order, the binpack strategies and the GPU
    capacity spreading divides by."""
    components = []
    for reg in ssn.registered("batch_node_order"):
        declared = _kernel_score(plugins, reg.plugin)
        assert declared is not None  # checked by _unsupported
        components.append((int(declared.kind), declared.score))
    placement = plugins.get("nodeplacement")
    if placement is None:
        # No placement score: no strategy.  Not binpack either, whose bucket index
        # would take the fullest node where every node scores the same.
        return components, False, False, ssn.nodes.allocatable[:, GPU].copy()
    declared_placement = placement.kernel_placement()
    return (
        components,
        declared_placement.gpu_binpack,
        declared_placement.cpu_binpack,
        declared_placement.gpu_capacity,
    )


# ------------------------------------------------------------------ preparation
class _Plan:
    __slots__ = (
        "inputs",
        "jobs",
        "tasks",
        "queues",
        "predicate_names",
        "proportion",
        "loadaware",
        "devices",
    )

    def __init__(self) -> None:
        self.inputs: dict[str, Any] = {}
        self.jobs: list[Job] = []
        self.tasks: list[Task] = []
        self.queues: list[str] = []
        # Failure reasons after "insufficient resources", in the kernel's count order.
        self.predicate_names: list[str] = []
        self.proportion: Any = None
        self.loadaware: Any = None
        # The shared GPU devices at the start, in the loop's order: (node, id, device).
        self.devices: list[tuple[int, str, GpuGroup]] | None = None


def _task_key_fns(ssn: Session) -> tuple[list, frozenset[str]] | None:
    """The registered task-order keys (``order_key`` of each task-order function), and
    the pod labels they read; None when a task order has no key.

    A pod without any of those labels gets the same value from every key, so a gang
    whose pods carry none of them is ordered by the default key alone.
    """
    keys = ssn.order_keys("task_order")
    if keys is None:
        return None
    labels = frozenset().union(
        *(getattr(reg.fn, "order_labels", ()) for reg in ssn.registered("task_order"))
    )
    return keys, labels


def _prepare(ssn: Session, jobs: list[Job]) -> _Plan | str:
    """The loop's inputs, or why it cannot run this session's allocate."""
    plugins = _plugins(ssn)
    if isinstance(plugins, str):
        return plugins
    unsupported = _unsupported(ssn, plugins)
    if unsupported is not None:
        return unsupported
    compiled = _fast.module("loop")
    proportion = plugins["proportion"]
    nodes = ssn.nodes
    n_nodes = len(nodes)
    plan = _Plan()
    plan.proportion = proportion

    # ---- queues
    queues = proportion.kernel_form(ssn)
    if queues is None:
        return "a queue has no share"
    qidx = {name: i for i, name in enumerate(queues.names)}

    # ---- tasks and jobs
    task_order = _task_key_fns(ssn)
    if task_order is None:
        return "a task order declares no order key"
    task_keys, key_labels = task_order
    gpu_order = _gpu_order_kinds(ssn, plugins)
    fractions = "shared-gpu" in ssn.backend.allocate_loop_features and gpu_order is not None
    job_cols: JobColumns | None = (job_columns if compiled is None else compiled.job_columns)(
        jobs, qidx, task_keys, key_labels, fractions
    )
    if job_cols is None:
        return (
            "a pending pod asks for GPU memory or for a fraction of a GPU the loop does "
            "not take, or a pod was evicted earlier in the session"
        )
    tasks, job_start, counted, job_leaf, job_min, job_np_mode, job_priority, default_rank = job_cols
    if default_rank is None:
        # Jobs the job order cannot tell apart: the heap's tie order is not reproduced.
        return "jobs with equal creation times and uids"
    job_counts = np.zeros((4, len(jobs)), dtype=np.int64)
    for j, active, nonpipe, pipelined, allocset in counted:
        job_counts[:, j] = (active, nonpipe, pipelined, allocset)
    job_active, job_nonpipe, job_pipelined, job_allocset = job_counts

    # ---- job order keys: registered order, then the default order as a rank
    n_jobs = len(jobs)
    kinds: list[int] = []
    columns: list[np.ndarray] = []
    for reg in ssn.registered("job_order"):
        if reg.plugin == "priority":
            kinds.append(0)
            columns.append(np.array(job_priority, dtype=np.int64))
        else:  # elastic: computed by the kernel from the job's active tasks
            kinds.append(1)
            columns.append(np.zeros(n_jobs, dtype=np.int64))
    kinds.append(0)
    columns.append(np.array(default_rank, dtype=np.int64))
    job_key = np.stack(columns, axis=1) if jobs else np.zeros((0, len(kinds)))

    # ---- task arrays
    n_res = nodes.idle.shape[1]
    task_cols: TaskColumns = (task_columns if compiled is None else compiled.task_columns)(
        tasks, nodes.index
    )
    sources, rows, sig_tasks, sigs, nominated_at, portions = task_cols
    if tasks:
        task_req = np.array(sources, dtype=np.float64)[np.array(rows, dtype=np.int64)]
    else:
        task_req = np.zeros((0, n_res))
    task_qvec = np.ascontiguousarray(task_req[:, [CPU, MEMORY, GPU]])
    if portions:
        # A fractional task charges its fraction to its queue (proportion.queue_vector).
        rows_at = np.array([i for i, _ in portions], dtype=np.int64)
        task_qvec[rows_at, 2] = [p for _, p in portions]
    task_sig = np.array(sigs, dtype=np.int64)
    task_nom = np.full(len(tasks), -1, dtype=np.int64)
    for i, n in nominated_at:
        task_nom[i] = n

    # ---- the load-aware filter and score, run by the loop itself
    loadaware = plugins.get("loadaware")
    la_form = None
    if loadaware is not None:
        la_form = loadaware.kernel_form(tasks)
        if la_form is None:
            return "a pending pod's usage is already reported in a NodeMetric (loadaware)"
        plan.loadaware = loadaware

    # ---- predicate masks per constraint set
    predicates = [reg for reg in ssn.registered("batch_predicate") if reg.plugin != "loadaware"]
    plan.predicate_names = [reg.fn[0] for reg in predicates]
    masks = np.ones((max(len(sig_tasks), 1), len(predicates), n_nodes), dtype=np.bool_)
    for s, t in enumerate(sig_tasks):
        refused = _predicate_masks(predicates, t, t.job, masks[s])
        if refused is not None:
            return f"predicate {refused} gives a reason per node"

    # ---- scoring
    components, gpu_binpack, cpu_binpack, cap_gpu = _scoring(ssn, plugins)

    max_depth = ssn.config.queue_depth_per_action.get("allocate")
    inputs = {
        "N": n_nodes,
        "R": n_res,
        "T": len(tasks),
        "J": len(jobs),
        "Q": len(queues.names),
        "S": masks.shape[0],
        "P": len(predicates),
        "K": len(kinds),
        "C": len(components),
        "gpu_col": GPU,
        "cpu_col": CPU,
        "max_depth": -1 if max_depth is None else int(max_depth),
        "gpu_binpack": gpu_binpack,
        "cpu_binpack": cpu_binpack,
        "idle": nodes.idle,
        "releasing": nodes.releasing,
        "used": nodes.used,
        "allocatable": nodes.allocatable,
        "cap_gpu": np.asarray(cap_gpu, dtype=np.float64),
        "pred_masks": masks,
        "comps": np.array([code for code, _ in components], dtype=np.int64),
        "comp_scale": np.array([scale for _, scale in components], dtype=np.float64),
        "task_req": task_req,
        "task_qvec": task_qvec,
        "task_sig": task_sig,
        "task_nom": task_nom,
        "job_start": np.array(job_start, dtype=np.int64),
        "job_leaf": np.array(job_leaf, dtype=np.int64),
        "job_min": np.array(job_min, dtype=np.int64),
        "job_active": np.ascontiguousarray(job_active),
        "job_nonpipe": np.ascontiguousarray(job_nonpipe),
        "job_pipelined": np.ascontiguousarray(job_pipelined),
        "job_allocset": np.ascontiguousarray(job_allocset),
        "job_np_mode": np.array(job_np_mode, dtype=np.int64),
        "job_key": np.ascontiguousarray(job_key, dtype=np.int64),
        "key_kinds": np.array(kinds, dtype=np.int64),
        "q_path_start": queues.path_start,
        "q_path": queues.path,
        "q_deserved": queues.deserved,
        "q_limit": queues.limit,
        "q_fair": queues.fair_share,
        "q_allocatable": queues.allocatable,
        "q_alloc": queues.allocated,
        "q_alloc_np": queues.allocated_non_preemptible,
        "q_priority": queues.priority,
        "q_rank": queues.rank,
        "total": queues.total,
    }
    if portions:
        assert gpu_order is not None  # fractions are taken only then
        inputs.update(_shared_gpu_inputs(ssn, plan, len(tasks), portions, gpu_order))
    if la_form is not None:
        plan.predicate_names.extend(la_form.reasons)
        inputs.update(
            {
                "la_R": la_form.allocatable.shape[1],
                "la_reasons": len(la_form.reasons),
                "la_expired_reason": len(la_form.reasons) - 1,
                "la_dominant_weight": la_form.dominant_weight,
                "la_allocatable": la_form.allocatable,
                "la_thresholds": la_form.thresholds,
                "la_state": la_form.state,
                "la_reason_slot": la_form.reason_slot,
                "la_row_delta": la_form.row_delta,
                "la_valid": la_form.valid,
                "la_weights": la_form.weights,
                "la_counted": la_form.counted,
                "la_estimates": la_form.estimates,
                "la_task_flags": la_form.task_flags,
                "la_existing": la_form.existing,
            }
        )
    plan.inputs = inputs
    plan.jobs = jobs
    plan.tasks = tasks
    plan.queues = queues.names
    return plan


def job_columns(
    jobs: list[Job],
    qidx: dict[str, int],
    task_keys: list,
    key_labels: frozenset[str],
    fractions: bool,
) -> JobColumns | None:
    """The loop's tasks (each job's pending tasks in task order) and per-job columns;
    None when a job needs the slow path (a task asking for GPU memory, or, unless
    ``fractions``, for a fraction of a GPU; a virtually evicted task). The last column,
    each job's rank in the default order (creation time, then uid), is None when two
    jobs have equal keys there.

    The reference of ``kai._fast.loop.job_columns``, which gives the same columns.
    """
    pending_status = TaskStatus.PENDING
    tasks: list[Task] = []
    job_start = [0]
    counted: list[tuple[int, int, int, int, int]] = []  # jobs with active/allocated tasks
    # Per-job columns, gathered in the same pass over the jobs.
    job_leaf: list[int] = []
    job_min: list[int] = []
    job_np_mode: list[int] = []
    job_priority: list[int] = []
    # default_order_key, flattened: (0, creation, uid), or (1, 0.0, uid) without a creation
    # time.
    default_keys: list[tuple] = []
    # Bound once: these run for every job of a large session.
    add_leaf, add_min, add_np_mode = job_leaf.append, job_min.append, job_np_mode.append
    add_priority, add_default_key = job_priority.append, default_keys.append
    add_task, add_start = tasks.append, job_start.append
    for j, job in enumerate(jobs):
        queue = job.queue
        add_leaf(-1 if queue is None else qidx.get(queue, -1))
        add_min(job.min_member)
        add_np_mode(2 if job.preemptibility == SEMI_PREEMPTIBLE else (0 if job.preemptible else 1))
        add_priority(-job.priority)
        ts = job.creation_timestamp
        add_default_key((1, 0.0, job.uid) if ts is None else (0, ts, job.uid))
        job_tasks = job.tasks
        if len(job_tasks) == 1 and job_tasks[0].status is pending_status:
            # The common case: a single pending pod.
            t = job_tasks[0]
            if t.gpu_memory_mib > 0 or (t.gpu_fraction > 0 and not fractions):
                return None  # shared GPUs the loop does not take: the slow path
            add_task(t)
            add_start(len(tasks))
            continue
        pending = []
        active = nonpipe = pipelined = allocset = 0
        for t in job_tasks:
            status = t.status
            if status is pending_status:
                if t.gpu_memory_mib > 0 or (t.gpu_fraction > 0 and not fractions):
                    return None
                pending.append(t)
                continue  # neither active nor allocated
            if t.virtually_evicted:
                return None
            if status in ACTIVE_ALLOCATED:
                active += 1
                if status is TaskStatus.PIPELINED:
                    pipelined += 1
                else:
                    nonpipe += 1
            if status in ALLOCATED:
                allocset += 1
        if len(pending) > 1:
            # Lexicographic (task_keys..., default) as stable sorts, last key first:
            # one cheap key call per task and pass instead of a tuple per task.
            pending.sort(key=default_order_key)
            if any(not key_labels.isdisjoint(t.pod.labels) for t in pending):
                for key_fn in reversed(task_keys):
                    pending.sort(key=key_fn)
        tasks.extend(pending)
        job_start.append(len(tasks))
        if active or allocset:
            counted.append((j, active, nonpipe, pipelined, allocset))
    order = sorted(range(len(jobs)), key=default_keys.__getitem__)
    if any(default_keys[a] == default_keys[b] for a, b in zip(order, order[1:])):
        # two jobs of equal keys
        return tasks, job_start, counted, job_leaf, job_min, job_np_mode, job_priority, None
    default_rank = [0] * len(jobs)
    for position, j in enumerate(order):
        default_rank[j] = position
    return tasks, job_start, counted, job_leaf, job_min, job_np_mode, job_priority, default_rank


def constraint_key(pod: PodObject) -> tuple | None:
    """What the predicates' masks of a pod depend on: its node selector, required node
    affinity and tolerations (None: it has none)."""
    if not (pod.node_selector or pod.required_node_affinity is not None or pod.tolerations):
        return None
    return (
        tuple(sorted(pod.node_selector.items())),
        repr(pod.required_node_affinity),
        tuple(pod.tolerations),
    )


def task_columns(tasks: list[Task], node_index: dict[str, int]) -> TaskColumns:
    """Per task: its request vector's row among the distinct vectors, its constraint
    set (node selector, required affinity, tolerations) and its nominated node.

    The reference of ``kai._fast.loop.task_columns``, which gives the same columns.
    """
    # Pods of one workload share their request vector: stack each once.
    by_id: dict[int, int] = {}
    sources: list[np.ndarray] = []
    rows: list[int] = []
    sig_index: dict[Any, int] = {}
    sig_tasks: list[Task] = []
    sigs: list[int] = []
    nominated_at: list[tuple[int, int]] = []
    portions: list[tuple[int, float]] = []
    add_row, add_sig = rows.append, sigs.append
    last_request, row = None, -1  # neighbouring tasks mostly share their vector
    unconstrained = -1  # the constraint set of pods with none, once seen
    for i, t in enumerate(tasks):  # one pass: request rows and constraint sets
        request = t.request
        if request is not last_request:
            row = by_id.get(id(request), -1)
            if row < 0:
                row = by_id[id(request)] = len(sources)
                sources.append(request)
            last_request = request
        add_row(row)
        pod = t.pod
        if pod.node_selector or pod.required_node_affinity is not None or pod.tolerations:
            key = constraint_key(pod)
            s = sig_index.get(key, -1)
            if s < 0:
                s = sig_index[key] = len(sig_tasks)
                sig_tasks.append(t)
        elif unconstrained >= 0:
            s = unconstrained
        else:
            s = unconstrained = sig_index[None] = len(sig_tasks)
            sig_tasks.append(t)
        add_sig(s)
        nominated = pod.nominated_node_name
        if nominated:
            nominated_at.append((i, node_index.get(nominated, -1)))
        if t.gpu_fraction > 0:
            portions.append((i, t.gpu_fraction))
    return sources, rows, sig_tasks, sigs, nominated_at, portions


def _shared_gpu_inputs(
    ssn: Session,
    plan: _Plan,
    n_tasks: int,
    portions: list[tuple[int, float]],
    gpu_order: list[int],
) -> dict[str, Any]:
    """The shared devices of the session and the tasks' fractions (allocate.hpp
    SharedGpus)."""
    nodes = ssn.nodes
    devices = [
        (i, gid, group)
        for i, groups in enumerate(nodes.gpu_groups)
        if groups
        for gid, group in groups.items()
    ]
    plan.devices = devices
    portion = np.zeros(n_tasks, dtype=np.float64)
    for i, p in portions:
        portion[i] = p
    return {
        "sg_groups": len(devices),
        "sg_group_node": np.array([i for i, _, _ in devices], dtype=np.int64),
        "sg_group_used": np.array([g.used for _, _, g in devices], dtype=np.float64),
        "sg_group_releasing": np.array([g.releasing for _, _, g in devices], dtype=np.float64),
        "sg_group_pipelined": np.array([g.pipelined for _, _, g in devices], dtype=np.float64),
        "sg_group_tenants": np.array([len(g.tasks) for _, _, g in devices], dtype=np.int64),
        "sg_group_from_releasing": np.array(
            [g.from_releasing for _, _, g in devices], dtype=np.bool_
        ),
        "sg_free_idle": nodes.shared_free_idle,
        "sg_free_any": nodes.shared_free_any,
        "sg_task_portion": portion,
        "sg_gpu_order": np.array(gpu_order, dtype=np.int64),
    }


# ------------------------------------------------------------------ replay
def place_decisions(
    tasks: list[Task],
    pl_task: list[int],
    pl_node: list[int],
    pl_pipe: list[int],
    pl_device: list[str | None] | None,
    names: list[str],
    node_tasks: list[set[Task]],
    decisions: list[Decision],
    action: str,
) -> None:
    """Put the placed tasks on their nodes (binding, or pipelined) and append their
    decisions, in placement order; ``pl_device``: the shared device of each placement
    (None: a whole-GPU task), or None when there is none.

    The reference of ``kai._fast.loop.place_decisions``, which does the same.
    """
    binding, pipelined_status = TaskStatus.BINDING, TaskStatus.PIPELINED
    append = decisions.append
    for k, (t, node, pipelined) in enumerate(zip(pl_task, pl_node, pl_pipe)):
        task = tasks[t]
        task.node = node
        node_tasks[node].add(task)
        device = None if pl_device is None else pl_device[k]
        groups = [] if device is None else [device]
        if pipelined:
            task.status = pipelined_status
            append(Decision(action, "pipeline", task, names[node], groups))
        else:
            task.status = binding
            append(Decision(action, "bind", task, names[node], groups))


def _apply(ssn: Session, plan: _Plan, out: dict[str, Any]) -> None:
    nodes = ssn.nodes
    jobs, tasks = plan.jobs, plan.tasks
    now = ssn.now
    # The kernel keeps only committed placements (a failed gang's are truncated), in
    # attempt order: the decisions come out in the order the slow path makes them.
    pl_task = out["pl_task"].tolist()
    devices = None if plan.devices is None else _apply_devices(ssn, plan, out, pl_task)
    compiled = _fast.module("loop")
    (place_decisions if compiled is None else compiled.place_decisions)(
        tasks,
        pl_task,
        out["pl_node"].tolist(),
        out["pl_pipe"].tolist(),
        devices,
        nodes.names,
        nodes.tasks,
        ssn.decisions,
        ssn.current_action,
    )
    if plan.loadaware is not None:
        plan.loadaware.kernel_placed([tasks[t] for t in pl_task])
    kinds = out["att_kind"]
    att_job = out["att_job"]
    # Jobs that start now: placed, not pipelined, and nothing allocated before.
    for j in att_job[(kinds == KIND_OK) & (out["att_flags"] == 0)].tolist():
        job = jobs[j]
        job.last_start_timestamp = now
        job.new_start_timestamp = now
    failed = np.flatnonzero(kinds >= KIND_OVER_LIMIT)
    if failed.size:
        _record_failures(ssn, plan, out, failed)
    # the accounting as the kernel left it
    nodes.idle[...] = out["idle"]
    nodes.releasing[...] = out["releasing"]
    nodes.used[...] = out["used"]
    nodes.version += 1 + len(pl_task)
    ssn._fits_idle_cache = None
    plan.proportion.kernel_charged(plan.queues, out["q_alloc"], out["q_alloc_np"])
    for name, count in zip(plan.queues, out["q_events"].tolist()):
        if count:
            ssn.count_queue_events(name, count)


def _apply_devices(
    ssn: Session, plan: _Plan, out: dict[str, Any], pl_task: list[int]
) -> list[str | None]:
    """The shared devices as the loop left them (NodeTable.gpu_groups, in each node's
    order, and the room they leave); each placement's device id, which the fractional
    tasks take."""
    nodes = ssn.nodes
    tasks = plan.tasks
    assert plan.devices is not None
    start = plan.devices
    node_of = out["sg_node"].tolist()
    opener = out["sg_opener"].tolist()
    # Devices opened get their ids in the order they were opened, as the slow path's.
    ids = [gid for _, gid, _ in start]
    for h in range(len(start), len(node_of)):
        ids.append(nodes.new_group_id(node_of[h], tasks[opener[h]].uid))
    members: dict[int, list[Task]] = {}
    placed_on: list[str | None] = []
    for t, h in zip(pl_task, out["pl_group"].tolist()):
        if h < 0:
            placed_on.append(None)
            continue
        task = tasks[t]
        task.gpu_group = ids[h]
        members.setdefault(h, []).append(task)
        placed_on.append(ids[h])
    used, releasing = out["sg_used"].tolist(), out["sg_releasing"].tolist()
    pipelined, seq = out["sg_pipelined"].tolist(), out["sg_seq"].tolist()
    from_releasing = out["sg_from_releasing"].astype(bool).tolist()
    alive = out["sg_alive"].astype(bool).tolist()
    changed = {node_of[h] for h in range(len(start), len(node_of))}
    for h, (node, _, group) in enumerate(start):
        state = (group.used, group.releasing, group.pipelined, group.from_releasing)
        now = (used[h], releasing[h], pipelined[h], from_releasing[h])
        if state != now or h in members or not alive[h]:
            changed.add(node)
    by_node: dict[int, list[int]] = {}
    for h, node in enumerate(node_of):
        if node in changed and alive[h]:
            by_node.setdefault(node, []).append(h)
    for node in changed:
        groups: dict[str, GpuGroup] = {}
        for h in sorted(by_node.get(node, ()), key=seq.__getitem__):
            group = start[h][2] if h < len(start) else GpuGroup()
            group.used, group.releasing = used[h], releasing[h]
            group.pipelined, group.from_releasing = pipelined[h], from_releasing[h]
            group.tasks.update(members.get(h, ()))
            groups[ids[h]] = group
        nodes.gpu_groups[node] = groups
        nodes._refresh_shared_free(node)
    return placed_on


def _record_failures(ssn: Session, plan: _Plan, out: dict[str, Any], failed: np.ndarray) -> None:
    """Record why each failed attempt (in attempt order) did not place its job."""
    jobs, tasks = plan.jobs, plan.tasks
    n_nodes = len(ssn.nodes)
    names = ssn.state.resources.names
    kinds = out["att_kind"][failed]
    info = out["att_info"][failed]  # a failure's pod, or the queue of a capacity refusal
    # The failure rows: one per failed attempt, in attempt order.
    counts_m = out["att_fail"]
    short_m = out["att_short"]
    free_m = out["att_free"]
    if "att_device_short" in out:  # fractional tasks: the nodes with no room on a device
        device_m = np.stack([out["att_device_short"], out["att_device_room"]], 1)
    else:
        device_m = np.zeros((len(failed), 2))
    capacity = (kinds == KIND_OVER_LIMIT) | (kinds == KIND_OVER_QUOTA)
    # A failure's explanation reads its failure counts, its pod's request and GPU
    # fraction, the shortage, the most free and the device room: failures alike in all
    # of these share one text, worked out for the first of them.  Each one's key is
    # those values' bytes (+ 0.0: -0.0 and 0.0 are alike, as they compare).
    keys: list[bytes] = [b""] * len(failed)  # capacity refusals have none
    resource = np.flatnonzero(~capacity)
    if resource.size:
        pods = info[resource]
        fractions = np.array([tasks[i].gpu_fraction for i in pods.tolist()], dtype=np.float64)
        alike = np.hstack(
            [
                counts_m[resource].astype(np.float64),
                plan.inputs["task_req"][pods],
                short_m[resource].astype(np.float64),
                free_m[resource].astype(np.float64),
                fractions[:, None],
                device_m[resource].astype(np.float64),
            ]
        )
        alike += 0.0
        # Each row's bytes, sliced from the matrix's (a view per row costs more).
        raw, width = alike.tobytes(), alike.shape[1] * alike.itemsize
        for k, row in enumerate(resource.tolist()):
            keys[row] = raw[k * width : (k + 1) * width]

    def problem_of(row: int) -> str:
        """The explanation of resource failure ``row`` (once per distinct key)."""
        task = tasks[int(info[row])]
        counts = counts_m[row].tolist()
        failures: dict[str, int] = {}
        if counts[0]:
            failures[INSUFFICIENT_RESOURCES] = counts[0]
        for name, count in zip(plan.predicate_names, counts[1:]):
            if count:
                failures[name] = failures.get(name, 0) + count
        entries = vector_shortage(names, task.request, short_m[row], free_m[row])
        dev_short, dev_room = device_m[row].tolist()
        if dev_short:
            # Session._device_shortage: the room on one device, not GPUs
            needs = f"{task.gpu_fraction:g} of a device"
            entries.append(("nvidia.com/gpu", int(dev_short), needs, f"{dev_room:g}"))
        return describe_failures(failures, n_nodes, describe_shortage(entries))

    def capacity_of(row: int) -> str:
        return _capacity_message(plan, out, int(info[row]), row, int(kinds[row]))

    compiled = _fast.module("loop")
    (record_fit_messages if compiled is None else compiled.record_fit_messages)(
        jobs,
        tasks,
        capacity.tolist(),
        out["att_job"][failed].tolist(),
        out["att_first"][failed].tolist(),  # for a failure: the pods placed
        out["att_count"][failed].tolist(),
        info.tolist(),
        out["att_active"][failed].tolist(),
        keys,
        problem_of,
        capacity_of,
        ssn.record_fit_error,
    )


def record_fit_messages(
    jobs: list[Job],
    tasks: list[Task],
    capacity: list[bool],
    att_job: list[int],
    placed: list[int],
    chunks: list[int],
    info: list[int],
    active: list[int],
    keys: list[bytes],
    problem_of: Callable[[int], str],
    capacity_of: Callable[[int], str],
    record: Callable[[Job, str], None],
) -> None:
    """Record each failed attempt's message on its job, in attempt order: a capacity
    refusal's (``capacity_of``; ``capacity`` tells which rows are), or its pod's with
    the explanation ``problem_of`` gives for the first failure of each key.

    The reference of ``kai._fast.loop.record_fit_messages``, which records the same.
    """
    problems: dict[bytes, str] = {}
    for row, (refused, j, found, chunk, at, active_before) in enumerate(
        zip(capacity, att_job, placed, chunks, info, active)
    ):
        job = jobs[j]
        if refused:
            record(job, capacity_of(row))
            continue
        problem = problems.get(keys[row])
        if problem is None:
            problem = problems[keys[row]] = problem_of(row)
        pod = tasks[at].key
        if chunk > 1 or job.min_member > 1:
            needed = max(job.min_member - active_before, chunk)
            record(
                job,
                f"Resources were found for {found} pods while {needed} are required for "
                f"gang scheduling; pod {pod}: {problem}",
            )
        else:
            record(job, f"Resources were not found for pod {pod} due to: {problem}")


def _capacity_message(plan: _Plan, out: dict[str, Any], queue: int, row: int, kind: int) -> str:
    """The message of a capacity refusal by queue ``queue`` (failure row ``row``)."""
    name = plan.queues[queue]
    share = plan.proportion.shares[name]
    vec = out["att_vec"][row]
    used, request = vec[:3].copy(), vec[3:].copy()
    if kind == KIND_OVER_LIMIT:
        bound = share.limit
        over = (bound != -1.0) & (request > 0) & (bound < used + request - 1e-9)
        return plan.proportion.quota_message("OverLimit", name, over, bound, used, request, "limit")
    bound = share.deserved
    over = (bound != -1.0) & (request > 0) & (bound < used + request - 1e-9)
    return plan.proportion.quota_message(
        "NonPreemptibleOverQuota", name, over, bound, used, request, "quota"
    )
