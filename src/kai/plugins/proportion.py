"""proportion: hierarchical fair share, queue order and queue capacity.

Every queue has, per resource (cpu millicores, memory bytes, gpu devices): a quota
(deserved), a limit, an over-quota weight and a priority.  The cluster's capacity is
divided level by level down the queue tree: each level first gives every queue its
deserved share (up to what it requests), then the rest by over-quota weight among the
queues of the highest priority, then the next priority (``divide_fair_share`` of the
backends).  A queue's fair share is what its children divide in turn.

The plugin also orders queues (under-served and starved queues first, then priority,
then dominant resource share), enforces limits (a queue over its limit gets nothing
more) and keeps non-preemptible jobs within quota.  The reclaim rules live in
:mod:`kai.plugins.reclaim_rules` and use the same queue state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from operator import attrgetter
from typing import Any, NamedTuple

import numpy as np

from kai import _fast
from kai._dataclasses import dataclass
from kai.api.model import (
    ALLOCATED,
    Q_CPU,
    Q_GPU,
    Q_MEMORY,
    QUEUE_RESOURCES,
    Job,
    NodeTable,
    QueueInfo,
    Task,
    TaskStatus,
    queue_path,
    row_functions,
)
from kai.api.preemptibility import (
    SEMI_PREEMPTIBLE,
    counts_as_non_preemptible,
    non_preemptible_part,
)
from kai.api.resources import CPU, GPU, MEMORY
from kai.fairshare import QUEUE_USAGE_KEY, usage_vectors
from kai.framework import EventHandler, Plugin, Session, register_plugin
from kai.framework.session import tasks_to_allocate

UNLIMITED = -1.0
#: The task resource columns of a queue vector ([cpu, memory, gpu]).
QUEUE_COLUMNS = np.array([CPU, MEMORY, GPU], dtype=np.intp)
# What an event on a queue's pod charges: its path's allocated vectors, and those followed
# by its path's non-preemptible ones.
_Charged = tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]
# What a job's cached request is kept by, per pod.
_TASK_STATE = attrgetter("uid", "status", "virtually_evicted")
#: Where the session's cache keeps a job's next request, per its tasks' states.
JOB_REQUEST_KEY = "proportion.job_request"
# ALLOCATED in a fixed order, for the compiled queue sums (which compare identities).
_ALLOCATED_STATUSES = tuple(sorted(ALLOCATED, key=lambda status: status.value))


def allocatable_shares(
    deserved: np.ndarray, fair_share: np.ndarray, limit: np.ndarray
) -> np.ndarray:
    """What queues may hold: max(deserved, fair share), capped by the limit.

    Elementwise, for one queue's vectors or a matrix of queues' rows; -1 (unlimited)
    where both the quota and the limit are unlimited.
    """
    out = np.maximum(deserved, fair_share)
    out = np.where(deserved == UNLIMITED, limit, out)
    capped = np.where(limit != UNLIMITED, np.minimum(out, limit), out)
    return np.where((deserved == UNLIMITED) & (limit == UNLIMITED), UNLIMITED, capped)


def _dominant_share(scale: list[float], vec: list[float]) -> float:
    """The largest of ``vec``'s shares of ``scale`` (resource by resource; a resource of
    no scale counts 1000 times its amount)."""
    best = 0.0
    for cap, value in zip(scale, vec):
        share = value / cap if cap > 0 else value * 1000.0
        if share > best:  # max(best, share), without the call
            best = share
    return best


def _uses_missing(allocatable: list[float], total: list[float]) -> bool:
    """Whether ``total`` holds some of a resource the queue may hold none of."""
    for cap, amount in zip(allocatable, total):
        if cap == 0 and amount > 0:
            return True
    return False


def _over_bound(bound: np.ndarray, used: np.ndarray, request: list[float]) -> list[bool] | None:
    """Per resource, whether ``used`` plus ``request`` passes ``bound`` (-1: unlimited)
    in a resource the request asks for; None when it passes none.  In Python floats:
    the same operations as on the arrays, without numpy's cost per call on three
    values (every simulation checks its jobs' capacity)."""
    over = [
        b != UNLIMITED and r > 0 and b < u + r - 1e-9
        for b, u, r in zip(bound.tolist(), used.tolist(), request)
    ]
    return over if any(over) else None


def within_bound(bound: list[float], values: list[float]) -> bool:
    """Whether ``values`` stay within ``bound`` in every resource (unlimited where it is
    -1), to 1e-9: a queue's quota or fair share, in Python floats (the same operations as
    on arrays, without numpy's cost per call on three values)."""
    for b, v in zip(bound, values):  # a loop: cheaper than all() over a generator
        if b != UNLIMITED and not v <= b + 1e-9:
            return False
    return True


@dataclass(frozen=True, eq=False)  # arrays: compared by identity
class QueueKernel:
    """The queue tree as the compiled allocate loop orders and charges it (proportion's
    kernel form): per queue, in session order, its root-to-leaf path, [cpu, memory,
    gpu] rows of deserved, limit, fair share, allocatable share, allocated and
    allocated non-preemptible, its priority and age rank; and the cluster's total."""

    names: list[str]
    path_start: np.ndarray  # [Q + 1]: queue q's path is path[path_start[q]:path_start[q+1]]
    path: np.ndarray
    deserved: np.ndarray
    limit: np.ndarray
    fair_share: np.ndarray
    allocatable: np.ndarray
    allocated: np.ndarray
    allocated_non_preemptible: np.ndarray
    priority: np.ndarray
    rank: np.ndarray
    total: np.ndarray


#: Where a share keeps the values derived from its arrays, each with the values it was
#: made of: QueueShare.allocatable_share, ProportionPlugin._order_view.
_ALLOCATABLE = "_allocatable"
_ORDER_VIEW = "_order_view"
_DERIVED = (_ALLOCATABLE, _ORDER_VIEW)
#: How many order views a share keeps (one per value of its allocation and fair share).
_ORDER_VIEWS_KEPT = 8


@dataclass(eq=False)  # arrays: compared by identity
class QueueShare:
    """Per-queue accounting, arrays indexed [cpu, memory, gpu]."""

    name: str
    parent: str | None
    priority: int
    rank: int  # tie-break: older queue first
    deserved: np.ndarray
    limit: np.ndarray
    weight: np.ndarray
    fair_share: np.ndarray
    allocated: np.ndarray
    allocated_non_preemptible: np.ndarray
    request: np.ndarray

    def clone(self) -> QueueShare:
        return self.clone_with(
            self.fair_share.copy(),
            self.allocated.copy(),
            self.allocated_non_preemptible.copy(),
            self.request.copy(),
        )

    def clone_with(
        self,
        fair_share: np.ndarray,
        allocated: np.ndarray,
        allocated_non_preemptible: np.ndarray,
        request: np.ndarray,
    ) -> QueueShare:
        """A copy of the share holding these arrays (copies of its own, or of its values
        at some earlier time)."""
        copy = QueueShare(
            self.name,
            self.parent,
            self.priority,
            self.rank,
            self.deserved,
            self.limit,
            self.weight,
            fair_share,
            allocated,
            allocated_non_preemptible,
            request,
        )
        # What is derived from the arrays is kept with the values it was made of, so it
        # holds for the copy too (a search clones every share when it starts).
        for derived in _DERIVED:
            if derived in self.__dict__:
                copy.__dict__[derived] = self.__dict__[derived]
        return copy

    def allocatable_share(self) -> np.ndarray:
        """What the queue may hold: max(deserved, fair share), capped by its limit.

        Memoized on the three inputs' values (it is called several times per queue
        comparison); the returned array is read-only.
        """
        key = (self.deserved.tobytes(), self.fair_share.tobytes(), self.limit.tobytes())
        cached = self.__dict__.get(_ALLOCATABLE)
        if cached is not None and cached[0] == key:
            return cached[1]
        value = allocatable_shares(self.deserved, self.fair_share, self.limit)
        value.flags.writeable = False
        self.__dict__[_ALLOCATABLE] = (key, value)
        return value

    def requestable(self) -> np.ndarray:
        return np.where(self.limit == UNLIMITED, self.request, np.minimum(self.request, self.limit))


class _ShareRows(NamedTuple):
    """The matrices whose rows are the shares' arrays, one row per queue in rank order
    (``QueueShare.rank``)."""

    deserved: np.ndarray
    limit: np.ndarray
    weight: np.ndarray
    fair_share: np.ndarray
    allocated: np.ndarray
    allocated_non_preemptible: np.ndarray
    request: np.ndarray


def queue_charge(
    ssn: Session,
    task: Task,
    *,
    node: int | None = None,
    for_request: bool = False,
    min_gpu_memory: float = 0.0,
) -> tuple[float, float, float]:
    """The cpu, memory and gpu a task charges to its queue."""
    r = task.request
    gpu = r[GPU]
    if task.gpu_fraction > 0:
        gpu = task.gpu_fraction
    elif task.gpu_memory_mib > 0:
        where = task.node if node is None else node
        mem = ssn.nodes.gpu_memory_mib[where] if where is not None and where >= 0 else 0.0
        if mem <= 0 or for_request:
            mem = min_gpu_memory
        gpu = task.gpu_memory_mib / mem if mem > 0 else 0.0
    return float(r[CPU]), float(r[MEMORY]), float(gpu)


def queue_vector(
    ssn: Session,
    task: Task,
    *,
    node: int | None = None,
    for_request: bool = False,
    min_gpu_memory: float = 0.0,
) -> np.ndarray:
    """The [cpu, memory, gpu] a task charges to its queue (:func:`queue_charge`)."""
    charge = queue_charge(
        ssn, task, node=node, for_request=for_request, min_gpu_memory=min_gpu_memory
    )
    return np.array(charge, dtype=np.float64)


def _ready_capacity(nodes: NodeTable) -> tuple[np.ndarray, np.ndarray]:
    """Which nodes are ready, and the [cpu, memory, gpu] they have in all."""
    ready = np.array([n.ready for n in nodes.objects], dtype=np.bool_)
    alloc = nodes.allocatable[ready]
    total = np.array([alloc[:, CPU].sum(), alloc[:, MEMORY].sum(), alloc[:, GPU].sum()])
    ready.flags.writeable = total.flags.writeable = False  # kept for the table's lifetime
    return ready, total


class ProportionPlugin(Plugin):
    name = "proportion"
    native_allocate = True
    arguments = ("kValue", "relcaimerSaturationMultiplier", "reclaimerSaturationMultiplier")

    def __init__(self, args: Mapping[str, Any] | None = None) -> None:
        super().__init__(args)
        self.k_value = max(0.0, self.arg_float("kValue", 1.0))
        key = (
            "relcaimerSaturationMultiplier"
            if "relcaimerSaturationMultiplier" in self.args
            else "reclaimerSaturationMultiplier"
        )
        self.saturation_multiplier = max(1.0, self.arg_float(key, 1.0))
        self.shares: dict[str, QueueShare] = {}
        self._share_paths: dict[str | None, list[QueueShare]] = {}
        # Per queue, the allocated and the non-preemptible vectors of its path's shares
        # (what an event charges; the arrays are only ever changed in place).
        self._charged: dict[str | None, _Charged | None] = {}
        # Per pod on whole GPUs of a job that is not semi-preemptible, what its events
        # charge (_charge_of): read only from the pod's job, queue and request, which a
        # session never changes.  A large reclaim charges the same victims at every
        # simulation of its search.
        self._fixed_charges: dict[Task, tuple[tuple[np.ndarray, ...], np.ndarray]] = {}
        self._limited_paths: dict[str | None, list[QueueShare]] = {}
        # Each whole-GPU request vector's queue columns, as an array and as Python
        # floats (see _whole_columns): pods of a workload share one request vector
        # (kept with it, so that an id is never taken for another's).
        self._queue_columns: dict[int, tuple[np.ndarray, np.ndarray, list[float]]] = {}

    # ------------------------------------------------------------------ setup
    def on_session_open(self, ssn: Session) -> None:
        self.ssn = ssn
        rows = row_functions()
        self._add_to_each, self._add_vectors_to_each = (
            rows.add_vector_to_each,
            rows.add_vectors_to_each,
        )
        self._queue_columns = {}
        self._held: dict[tuple[Job, ...], tuple[float, float, float]] = {}
        self._held_stamp: tuple | None = None
        gpu_mem = ssn.nodes.gpu_memory_mib[ssn.nodes.gpu_memory_mib > 0]
        self.min_gpu_memory = float(gpu_mem.min()) if gpu_mem.size else 0.0
        self.max_gpu_memory = float(gpu_mem.max()) if gpu_mem.size else 0.0
        self._build_shares(ssn)
        self.total = self._cluster_total(ssn)
        self._divide(ssn)
        ssn.cache["proportion"] = self
        ssn.add_queue_order_fn(self._queue_order_fn(), job_key=self._job_key)
        ssn.add_is_job_over_capacity_fn(self.job_over_capacity)
        ssn.add_is_non_preemptible_job_over_quota_fn(self.non_preemptible_over_quota)
        ssn.add_event_handler(
            EventHandler(
                self._on_allocate,
                self._on_deallocate,
                self._on_allocate_all,
                self._on_deallocate_all,
            )
        )
        ssn.add_queue_info_fns(
            fair_share=lambda q: self._as_dict(self.shares[q].fair_share),
            allocated=lambda q: self._as_dict(self.shares[q].allocated),
            requested=lambda q: self._as_dict(self.shares[q].request),
            deserved=lambda q: self._as_dict(self.shares[q].deserved),
        )
        from kai.plugins.reclaim_rules import register_reclaim_rules

        register_reclaim_rules(self, ssn)

    @property
    def share_rows(self) -> _ShareRows:
        """The matrices whose rows are the shares' arrays (one row per queue, in rank
        order), changed only in place."""
        return self._rows

    @staticmethod
    def _as_dict(vec: np.ndarray) -> dict[str, float]:
        values = vec.tolist()  # Python floats, as float() of each element gives
        return {"gpu": values[Q_GPU], "cpu": values[Q_CPU], "memory": values[Q_MEMORY]}

    def _build_shares(self, ssn: Session) -> None:
        queues = sorted(
            ssn.queues.values(),
            key=lambda q: (
                q.creation_timestamp.timestamp() if q.creation_timestamp else 0.0,
                q.name,
            ),
        )
        # Every array of a share is its row of one matrix per quantity (rows in rank
        # order), so the matrices are made and filled in bulk and read whole by the
        # kernels: the rows are only ever changed in place.
        n = len(queues)
        quotas = np.array(
            [(q.deserved, q.limit, q.over_quota_weight) for q in queues], dtype=np.float64
        ).reshape(n, 3, len(QUEUE_RESOURCES))
        deserved, limit, weight = quotas.transpose(1, 0, 2)
        fair, allocated, allocated_np, request = np.zeros((4, n, len(QUEUE_RESOURCES)))
        self._rows = _ShareRows(deserved, limit, weight, fair, allocated, allocated_np, request)
        for rank, q in enumerate(queues):
            self.shares[q.name] = QueueShare(
                q.name,
                q.parent,
                q.priority,
                rank,
                deserved[rank],
                limit[rank],
                weight[rank],
                fair[rank],
                allocated[rank],
                allocated_np[rank],
                request[rank],
            )
        self._accumulate(ssn, allocated, allocated_np, request)

    def _accumulate(
        self,
        ssn: Session,
        allocated_out: np.ndarray,
        allocated_np_out: np.ndarray,
        request_out: np.ndarray,
    ) -> None:
        """Charge the allocated pods and request the pending ones, in bulk.

        Every queue's sums get the pods' vectors added in the order of jobs and tasks,
        so they are bit-identical to charging one pod at a time.  The ``*_out``
        matrices (one row per queue, in share order) receive the sums.  This is the
        reference of ``kai._fast.ledger.queue_sums``, which adds the same vectors one
        pod at a time, in the same order.
        """
        shares = self.shares
        qindex = {name: i for i, name in enumerate(shares)}
        min_mem = self.min_gpu_memory

        def shared_vector(task: Task, allocated: bool) -> np.ndarray:
            """A shared-GPU pod's charge: on its node's devices, or requested."""
            if allocated:
                return queue_vector(ssn, task)
            return queue_vector(ssn, task, for_request=True, min_gpu_memory=min_mem)

        compiled = _fast.module("ledger")
        queue_rows = {name: [qindex[a] for a in self.ancestors(name)] for name in shares}
        if compiled is not None and all(
            len(rows) <= compiled.QUEUE_DEPTH_LIMIT for rows in queue_rows.values()
        ):
            compiled.queue_sums(
                ssn.jobs.values(),
                queue_rows,
                _ALLOCATED_STATUSES,
                TaskStatus.PENDING,
                SEMI_PREEMPTIBLE,
                shared_vector,
                request_out,
                allocated_out,
                allocated_np_out,
                CPU,
                MEMORY,
                GPU,
            )
            return
        paths = list(queue_rows.values())
        path_ids = {name: k for k, name in enumerate(queue_rows)}
        by_request: dict[int, int] = {}  # id(task.request) -> row of ``sources``
        sources: list[np.ndarray] = []  # request vectors (pods of one workload share them)
        special: list[np.ndarray] = []  # queue vectors of shared-GPU pods
        src: list[int] = []  # per pod: row of ``sources``, or -1 - index into ``special``
        pid: list[int] = []  # per pod: its queue path
        alloc_rows: list[int] = []  # pods that are allocated (the others are pending)
        np_rows: list[int] = []  # allocated pods charged as non-preemptible
        pending = TaskStatus.PENDING
        last_request, row = None, -1
        for job in ssn.jobs.values():
            queue = job.queue
            if queue not in shares or job.invalid_reason:
                continue
            path = path_ids[queue]
            core = job.core_tasks() if job.preemptibility == SEMI_PREEMPTIBLE else ()
            non_preemptible = not job.preemptible
            for task in job.tasks:
                status = task.status
                if status in ALLOCATED:
                    allocated = True
                    if core:
                        charge_np = task in core
                    else:
                        charge_np = non_preemptible
                    if charge_np:
                        np_rows.append(len(src))
                    alloc_rows.append(len(src))
                elif status is pending:
                    allocated = False
                else:
                    continue
                if task.gpu_fraction > 0 or task.gpu_memory_mib > 0:  # a shared GPU
                    special.append(shared_vector(task, allocated))
                    src.append(-len(special))
                else:
                    request = task.request
                    if request is not last_request:  # neighbours mostly share it
                        row = by_request.get(id(request), -1)
                        if row < 0:
                            row = by_request[id(request)] = len(sources)
                            sources.append(request)
                        last_request = request
                    src.append(row)
                pid.append(path)
        if not src:
            return
        n_q = len(shares)
        vectors = np.zeros((len(sources) + len(special), len(QUEUE_RESOURCES)))
        if sources:
            vectors[: len(sources)] = np.array(sources)[:, QUEUE_COLUMNS]
        if special:
            vectors[len(sources) :] = np.array(special)
        rows = np.array(src, dtype=np.int64)
        rows[rows < 0] = len(sources) - 1 - rows[rows < 0]
        per_pod = vectors[rows]
        width = max(len(p) for p in paths)
        path_mat = np.full((len(paths), max(width, 1)), -1, dtype=np.int64)
        for i, p in enumerate(paths):
            path_mat[i, : len(p)] = p
        pod_paths = path_mat[np.array(pid, dtype=np.int64)]  # pods x width, leaf first

        # Every pod's charge to each queue on its path, pod-major: the order in which
        # charging one pod at a time adds them.
        n_pods, k = len(src), len(QUEUE_RESOURCES)
        events = pod_paths.ravel()
        owners = np.repeat(np.arange(n_pods, dtype=np.int64), pod_paths.shape[1])
        keep = events >= 0
        events, owners = events[keep], owners[keep]
        values = per_pod[owners]
        # One bincount sums the request, allocated and non-preemptible sums of every
        # queue and resource (bins offset by ``stride`` per sum): it adds each bin's
        # weights in input order onto zero, as charging one pod at a time does.
        bins = (events * k)[:, None] + np.arange(k, dtype=np.int64)
        stride = n_q * k
        all_bins, all_weights = [bins.ravel()], [values.ravel()]
        for offset, rows_of in ((stride, alloc_rows), (2 * stride, np_rows)):
            if rows_of:
                member = np.zeros(n_pods, dtype=np.bool_)
                member[rows_of] = True
                chosen = member[owners]
                all_bins.append((bins[chosen] + offset).ravel())
                all_weights.append(values[chosen].ravel())
        sums = np.bincount(
            np.concatenate(all_bins), np.concatenate(all_weights), minlength=3 * stride
        ).reshape(3, n_q, k)
        request_out[...] = sums[0]
        allocated_out[...] = sums[1]
        allocated_np_out[...] = sums[2]

    def ancestors(self, queue: str) -> list[str]:
        """The queue and its ancestors, leaf first."""
        return queue_path(self.shares, queue)[::-1]

    def _share_path(self, queue: str | None) -> list[QueueShare] | None:
        """The shares of ``queue`` and its ancestors, leaf first (None if unknown).

        Cached: the queue tree and its share objects are fixed once the session opened.
        """
        path = self._share_paths.get(queue)
        if path is None:
            if queue not in self.shares:
                return None
            path = self._share_paths[queue] = [self.shares[n] for n in self.ancestors(queue)]
        return path

    def _charged_vectors(self, queue: str | None) -> _Charged | None:
        """The vectors an event charges in ``queue``: the allocations of its path, leaf
        first, and the same followed by the path's non-preemptible allocations (None
        for an unknown queue)."""
        path = self._share_path(queue)
        if path is None:
            return None
        allocated = tuple(share.allocated for share in path)
        return allocated, allocated + tuple(share.allocated_non_preemptible for share in path)

    def _charge_of(self, task: Task) -> tuple[tuple[np.ndarray, ...], np.ndarray] | None:
        """What an event of ``task`` charges: the vectors it changes (its queue's path's
        allocations, and their non-preemptible parts for a pod that counts as such) and
        its queue vector; None for nothing.

        Semi-preemptible jobs: only the core (up to minMember) is non-preemptible.
        """
        fixed = self._fixed_charges.get(task)
        if fixed is not None:
            return fixed
        job = task.job
        if job is None:
            return None
        try:
            charged = self._charged[job.queue]
        except KeyError:
            charged = self._charged[job.queue] = self._charged_vectors(job.queue)
        if charged is None:
            return None
        whole = not (task.gpu_fraction > 0 or task.gpu_memory_mib > 0)
        vec = self._whole_columns(task.request)[1] if whole else queue_vector(self.ssn, task)
        semi = job.preemptibility == SEMI_PREEMPTIBLE
        if semi:
            non_preemptible = counts_as_non_preemptible(task)
        else:
            non_preemptible = not job.preemptible  # what it gives for other jobs
        # ``share += sign * vec`` for sign -1 is ``share -= vec``, bit for bit; each
        # vector is its own sum, so charging the path's allocations, then its
        # non-preemptible ones, adds the same as alternating them share by share
        got = charged[1] if non_preemptible else charged[0], vec
        if whole and not semi:
            self._fixed_charges[task] = got
        return got

    def _whole_columns(self, request: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[float]]:
        """What a pod on whole GPUs with ``request`` charges its queue: the request, its
        queue columns (what :func:`queue_vector` gives) and the same as Python floats
        (what :func:`queue_charge` gives), read once per request vector."""
        known = self._queue_columns.get(id(request))
        if known is None or known[0] is not request:
            columns = request[QUEUE_COLUMNS]
            known = self._queue_columns[id(request)] = (request, columns, columns.tolist())
        return known

    def _charge_all(self, tasks: list[Task], sign: int) -> None:
        """An allocate (+1) or deallocate (-1) event of each of ``tasks``, in order: its
        queue vector added to (subtracted from) its queue and every ancestor."""
        targets: list[tuple[np.ndarray, ...]] = []
        vectors: list[np.ndarray] = []
        charge_of, fixed = self._charge_of, self._fixed_charges
        for task in tasks:
            got = fixed.get(task)  # most pods: without the call
            if got is None:
                got = charge_of(task)
                if got is None:
                    continue
            targets.append(got[0])
            vectors.append(got[1])
        self._add_vectors_to_each(targets, vectors, sign > 0)

    def _cluster_total(self, ssn: Session) -> np.ndarray:
        nodes = ssn.nodes
        ready, ready_total = nodes.derived("proportion.ready", lambda: _ready_capacity(nodes))
        total = ready_total.copy()
        for task in ssn.state.foreign_tasks:
            if task.node >= 0 and ready[task.node]:
                total -= queue_vector(ssn, task)
        return np.maximum(total, 0.0)

    def _divide(self, ssn: Session) -> None:
        """Every queue's fair share, top down through the queue tree (the backend's
        ``divide_fair_share_tree``, in one call)."""
        shares = list(self.shares.values())
        if not shares:
            return
        index: dict[str | None, int] = {share.name: i for i, share in enumerate(shares)}
        parent = np.array([index.get(share.parent, -1) for share in shares])  # -1: the root
        rows = self._rows
        # Resource-major: row r holds every queue's value for resource r.
        quantities = (rows.deserved, rows.limit, rows.weight, rows.request)
        deserved, limit, weight, request = (np.ascontiguousarray(m.T) for m in quantities)
        # Time-based fair share: the queues' historical usage, 0 where none is known.
        usage = np.zeros((len(QUEUE_RESOURCES), len(shares)))
        table = ssn.cache.get(QUEUE_USAGE_KEY)
        if table:
            parents = {name: share.parent for name, share in self.shares.items()}
            history = usage_vectors(table, parents, QUEUE_RESOURCES)
            for i, share in enumerate(shares):
                known = history.get(share.name)
                if known is not None:
                    usage[:, i] = known
        fair = ssn.backend.divide_fair_share_tree(
            self.total,
            parent,
            deserved,
            limit,
            weight,
            request,
            np.array([s.priority for s in shares]),
            np.array([s.rank for s in shares]),
            self.k_value,
            usage,
        )
        rows.fair_share[...] = fair.T

    # ----------------------------------------------------------- accounting
    def kernel_form(self, ssn: Session) -> QueueKernel | None:
        """The queue tree for the compiled allocate loop, queues in session order
        (None when a queue has no share)."""
        names = list(ssn.queues)
        shares = self.shares
        if any(name not in shares for name in names):
            return None
        index = {name: i for i, name in enumerate(names)}
        path_start = [0]
        path: list[int] = []
        for name in names:
            path.extend(index[q] for q in ssn.queue_path(name))
            path_start.append(len(path))
        at = np.array([shares[name].rank for name in names], dtype=np.int64)  # rows by rank
        rows = self._rows
        deserved, limit, fair = rows.deserved[at], rows.limit[at], rows.fair_share[at]
        return QueueKernel(
            names=names,
            path_start=np.array(path_start, dtype=np.int64),
            path=np.array(path, dtype=np.int64),
            deserved=deserved,
            limit=limit,
            fair_share=fair,
            allocatable=allocatable_shares(deserved, fair, limit),
            allocated=rows.allocated[at],
            allocated_non_preemptible=rows.allocated_non_preemptible[at],
            priority=np.array([shares[name].priority for name in names], dtype=np.int64),
            rank=at,
            total=np.asarray(self.total, dtype=np.float64),
        )

    def kernel_charged(
        self, names: list[str], allocated: np.ndarray, allocated_non_preemptible: np.ndarray
    ) -> None:
        """Take the queues' allocations as the compiled loop left them (one row per
        queue of ``names``)."""
        shares = self.shares
        for i, name in enumerate(names):
            share = shares[name]
            share.allocated[...] = allocated[i]
            share.allocated_non_preemptible[...] = allocated_non_preemptible[i]

    def handles(self, handler: EventHandler) -> bool:
        """Whether ``handler`` is the one this plugin registered (its accounting)."""
        return handler.allocate_func == self._on_allocate

    # One event: what _charge_all does for one pod, without the lists.
    def _on_allocate(self, event) -> None:
        got = self._charge_of(event.task)
        if got is not None:
            self._add_to_each(got[0], got[1], True)

    def _on_deallocate(self, event) -> None:
        got = self._charge_of(event.task)
        if got is not None:
            self._add_to_each(got[0], got[1], False)

    def _on_allocate_all(self, tasks: list[Task]) -> None:
        self._charge_all(tasks, +1)

    def _on_deallocate_all(self, tasks: list[Task]) -> None:
        self._charge_all(tasks, -1)

    def request_of(self, tasks: list[Task], *, conservative: bool = False) -> np.ndarray:
        """Summed [cpu, memory, gpu] of tasks not yet placed."""
        mem = self.max_gpu_memory if conservative else self.min_gpu_memory
        # Summed in Python floats: the same additions, in the same order, as adding each
        # task's vector to an array of zeros (a large gang's request is read often).
        cpu = memory = gpu = 0.0
        ssn = self.ssn
        whole = self._whole_columns
        for task in tasks:
            if task.gpu_fraction > 0 or task.gpu_memory_mib > 0:
                c, m, g = queue_charge(ssn, task, for_request=True, min_gpu_memory=mem)
            else:
                c, m, g = whole(task.request)[2]
            cpu += c
            memory += m
            gpu += g
        return np.array([cpu, memory, gpu])

    # ------------------------------------------------------------ queue order
    # The comparison works on the three resources as Python floats: the same IEEE
    # operations in the same order as on the arrays, so the same answers, without
    # numpy's per-call cost on three-element arrays (allocate compares queues after
    # every placement).
    def _order_view(self, share: QueueShare) -> tuple:
        """What :meth:`queue_order` reads of a queue apart from its job: allocated,
        over its fair share, deserved, allocatable share, the scale of its dominant
        share (the allocatable share, the cluster's total where unlimited), its
        dominant share and its fair share.

        Kept per value of the queue's allocation and fair share (a few of them: a
        simulation moves a queue's allocation away and back, and its comparisons read
        each state more than once), for the cluster total they were made with."""
        key = (share.allocated.tobytes(), share.fair_share.tobytes())
        kept = share.__dict__.get(_ORDER_VIEW)
        if kept is None or kept[0] is not self.total:
            kept = share.__dict__[_ORDER_VIEW] = (self.total, {})
        views: dict[tuple[bytes, bytes], tuple] = kept[1]
        found = views.get(key)
        if found is not None:
            return found
        alloc = share.allocated.tolist()
        fair = share.fair_share.tolist()
        cap = share.allocatable_share().tolist()
        scale = [t if c == UNLIMITED else c for c, t in zip(cap, self.total.tolist())]
        view = (
            alloc,
            all(f < a for f, a in zip(fair, alloc)),
            share.deserved.tolist(),
            cap,
            scale,
            _dominant_share(scale, alloc),
            fair,  # for the compiled queue order (kai._fast.order)
        )
        if len(views) >= _ORDER_VIEWS_KEPT:
            views.clear()
        views[key] = view
        return view

    def _queue_order_fn(self) -> Callable[..., int]:
        """:meth:`queue_order`, compiled where ``kai._fast.order`` is built (the native
        core's rule on this plugin's order views)."""
        compiled = _fast.module("order")
        if compiled is None:
            return self.queue_order
        order = partial(compiled.queue_order, self)
        order.queue_local = True  # type: ignore[attr-defined]  # as queue_order's (below)
        return order

    def queue_order(
        self,
        left: QueueInfo,
        right: QueueInfo,
        left_job: Job | None,
        right_job: Job | None,
        left_victims=None,
        right_victims=None,
    ) -> int:
        ls, rs = self.shares.get(left.name), self.shares.get(right.name)
        if ls is None or rs is None:
            return 0
        lalloc, lover, ldeserved, lcap, lscale, lds_alone, _ = self._order_view(ls)
        ralloc, rover, rdeserved, rcap, rscale, rds_alone, _ = self._order_view(rs)

        # 1. under-utilized queues before over-utilized ones
        if lover != rover:
            return 1 if lover else -1
        # 2. starved queues (within deserved even with the job) first
        lwith = [a + r for a, r in zip(lalloc, self.job_request_values(left_job))]
        rwith = [a + r for a, r in zip(ralloc, self.job_request_values(right_job))]
        lstarved = within_bound(ldeserved, lwith)
        rstarved = within_bound(rdeserved, rwith)
        if lstarved != rstarved:
            return -1 if lstarved else 1
        # 3. queue priority
        if ls.priority != rs.priority:
            return -1 if ls.priority > rs.priority else 1
        # 4. a queue that would use a resource it may not have goes last
        lzero = _uses_missing(lcap, lwith)
        rzero = _uses_missing(rcap, rwith)
        if lzero != rzero:
            return 1 if lzero else -1
        # 5. smaller dominant share with the job (and without the victims taken so far)
        if left_victims:
            lwith = [t - v for t, v in zip(lwith, self._victims_held(left_victims))]
        if right_victims:
            rwith = [t - v for t, v in zip(rwith, self._victims_held(right_victims))]
        lds = _dominant_share(lscale, lwith)
        rds = _dominant_share(rscale, rwith)
        if lds != rds:
            return -1 if lds < rds else 1
        # 6. smaller dominant share without it
        if lds_alone != rds_alone:
            return -1 if lds_alone < rds_alone else 1
        # 7. smaller allocatable share
        pairs = list(zip(lcap, rcap))
        if all(a <= b for a, b in pairs) and any(a < b for a, b in pairs):
            return -1
        if all(b <= a for a, b in pairs) and any(b < a for a, b in pairs):
            return 1
        # 8. the older queue
        if ls.rank != rs.rank:
            return -1 if ls.rank < rs.rank else 1
        return 0

    def _job_key(self, job: Job | None) -> bytes:
        """All :meth:`queue_order` reads of a job: its next request."""
        return self.job_request(job).tobytes()

    def job_request(self, job: Job | None) -> np.ndarray:
        """What the queue order reads of a job: the summed request of its next pods."""
        return self._job_request_entry(job)[0]

    def job_request_values(self, job: Job | None) -> list[float]:
        """:meth:`job_request` as Python floats."""
        return self._job_request_entry(job)[1]

    def _job_request_entry(self, job: Job | None) -> tuple[np.ndarray, list[float]]:
        if job is None:
            return np.zeros(len(QUEUE_RESOURCES)), [0.0] * len(QUEUE_RESOURCES)
        # Cached per job state: the next chunk (gang, then one pod at a time) changes
        # whenever one of the job's tasks changes status, as KAI invalidates its cache.
        # The pods are named too: views of one job may hold different pods.
        state = tuple(map(_TASK_STATE, job.tasks))
        key = (JOB_REQUEST_KEY, job.key, state)
        cached = self.ssn.cache.get(key)
        if cached is None:
            request = self.request_of(tasks_to_allocate(self.ssn, job))
            cached = self.ssn.cache[key] = (request, request.tolist())
        return cached

    def _victims_held(self, victims: list[Job]) -> tuple[float, float, float]:
        """What the victims hold, as KAI counts a job's allocation: its allocated, binding,
        bound and running tasks (not the pipelined ones).  Summed task by task in Python
        floats: the same additions, in the same order, as on arrays.

        A victim queue compares its leaves' victims so far plus one more job, again and
        again: the sums are remembered per list of victims while no pod changes status
        (the node table's version and the decisions stay the same), and a list one job
        longer than a remembered one goes on from its sums (the same additions)."""
        ssn = self.ssn
        stamp = (ssn.nodes, ssn.nodes.version, len(ssn.decisions))
        memo = self._held
        if self._held_stamp != stamp:
            memo.clear()
            self._held_stamp = stamp
        key = tuple(victims)
        held = memo.get(key)
        if held is not None:
            return held
        start = memo.get(key[:-1]) if len(key) > 1 else None
        if start is None:
            cpu = memory = gpu = 0.0
            jobs = key
        else:
            cpu, memory, gpu = start
            jobs = key[-1:]
        for job in jobs:
            for task in job.tasks:
                if task.status in ALLOCATED:
                    c, m, g = queue_charge(ssn, task)
                    cpu += c
                    memory += m
                    gpu += g
        held = memo[key] = (cpu, memory, gpu)
        return held

    # ------------------------------------------------------------ capacity
    def job_over_capacity(self, job: Job, tasks: list[Task]) -> str | None:
        if job.queue not in self.shares:
            return None
        limited = self._limited_path(job.queue)
        if not limited:
            return self.non_preemptible_over_quota(job, tasks)
        request = self.request_of(tasks, conservative=True)
        values = request.tolist()
        for share in limited:
            over = _over_bound(share.limit, share.allocated, values)
            if over is not None:
                return self.quota_message(
                    "OverLimit", share.name, over, share.limit, share.allocated, request, "limit"
                )
        return self.non_preemptible_over_quota(job, tasks)

    def _limited_path(self, queue: str | None) -> list[QueueShare]:
        """The shares of ``queue`` and its ancestors (leaf first) with some limit: no
        other one can be over its limit."""
        limited = self._limited_paths.get(queue)
        if limited is None:
            path = self._share_path(queue) or []
            limited = [s for s in path if np.any(s.limit != UNLIMITED)]
            self._limited_paths[queue] = limited
        return limited

    def non_preemptible_over_quota(self, job: Job, tasks: list[Task]) -> str | None:
        tasks = non_preemptible_part(job, tasks)  # semi-preemptible: the core only
        if not tasks or job.queue not in self.shares:
            return None
        request = self.request_of(tasks, conservative=True)
        values = request.tolist()
        for name in self.ancestors(job.queue):
            share = self.shares[name]
            over = _over_bound(share.deserved, share.allocated_non_preemptible, values)
            if over is not None:
                return self.quota_message(
                    "NonPreemptibleOverQuota",
                    name,
                    over,
                    share.deserved,
                    share.allocated_non_preemptible,
                    request,
                    "quota",
                )
        return None

    @staticmethod
    def quota_message(
        kind: str,
        queue: str,
        over: np.ndarray | list[bool],
        bound: np.ndarray,
        used: np.ndarray,
        request: np.ndarray,
        what: str,
    ) -> str:
        parts = []
        for r in np.flatnonzero(over):
            name = QUEUE_RESOURCES[r]
            parts.append(
                f"{name}: {what} {_fmt(bound[r], name)}, "
                f"in use {_fmt(used[r], name)}, requested {_fmt(request[r], name)}"
            )
        return f"{kind}: queue {queue!r} would exceed its {what} ({'; '.join(parts)})"


def _fmt(value: float, resource: str) -> str:
    if resource == "memory":
        return f"{value / 1e6:g}MB"
    if resource == "cpu":
        return f"{value:g}m"
    return f"{value:g}"


# queue_order reads only the two queues' shares (changed through allocate/deallocate
# events) and the jobs compared: the job queue may reuse its results (actions.common).
ProportionPlugin.queue_order.queue_local = True  # type: ignore[attr-defined]

register_plugin("proportion", ProportionPlugin)
