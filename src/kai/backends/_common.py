"""Shared pieces of the kernel backends: constants, the ``Backend`` interface and input
coercion/validation used identically by every backend (so they all raise the same errors).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
from numpy.typing import ArrayLike

#: Tolerance of resource comparisons: ``request <= available + EPS``.
EPS: float = 1e-9

#: Sentinel for "unlimited" deserved quota / "no limit" in the fair-share kernel.
UNLIMITED: float = -1.0

#: Names of all kernels every backend must provide (add new kernels here).
KERNELS: tuple[str, ...] = (
    # fit
    "fit_mask",
    # score
    "binpack_score",
    "spread_score",
    "best_node",
    "ordered_nodes",
    # fairshare
    "dominant_share",
    "divide_fair_share",
    "divide_fair_share_tree",
    # loadaware
    "loadaware_filter",
    "loadaware_score",
    # solver
    "idle_gpus_fit",
    "scenario_fit",
    "incremental_fit",
)

F64 = np.ndarray
BoolArray = np.ndarray
I64 = np.ndarray


class Backend(Protocol):
    """Interface of a kernel backend (see ``kai.backends`` for the semantics)."""

    name: str
    # The allocate action's fused loop (kai.actions.fast_allocate), where the backend
    # has one: the native and Numba backends do, the plain-Python one does not.
    allocate_loop: Callable[[dict[str, Any]], dict[str, Any]] | None
    # What else that loop covers ("loadaware", "shared-gpu").
    allocate_loop_features: frozenset[str]
    # The loop's node choice for one task at a time, where the backend has it (a class:
    # kai.actions.fast_allocate.NodePicker wraps it).
    node_picker: Any

    def fit_mask(self, request: F64, idle: F64, releasing: F64) -> tuple[BoolArray, BoolArray]: ...

    def binpack_score(
        self, non_allocated: F64, allocatable: F64, candidates: BoolArray, max_score: float
    ) -> F64: ...

    def spread_score(self, non_allocated: F64, capacity: F64) -> F64: ...

    def best_node(self, scores: F64, mask: BoolArray) -> int: ...

    def ordered_nodes(self, scores: F64, mask: BoolArray) -> I64: ...

    def dominant_share(self, allocated: F64, total: F64) -> F64: ...

    def divide_fair_share(
        self,
        total: float,
        deserved: F64,
        limit: F64,
        weight: F64,
        request: F64,
        priority: I64,
        rank: I64,
        k_value: float,
        usage: F64,
    ) -> F64: ...

    def divide_fair_share_tree(
        self,
        total: F64,
        parent: I64,
        deserved: F64,
        limit: F64,
        weight: F64,
        request: F64,
        priority: I64,
        rank: I64,
        k_value: float,
        usage: F64,
    ) -> F64: ...

    def loadaware_filter(
        self, existing: I64, incoming: I64, allocatable: I64, thresholds: I64, state: I64
    ) -> tuple[BoolArray, I64]: ...

    def loadaware_score(
        self,
        existing: I64,
        incoming: I64,
        allocatable: I64,
        weights: I64,
        dominant_weight: int,
        valid: BoolArray,
    ) -> I64: ...

    def idle_gpus_fit(self, capacity: F64, requests: F64) -> bool: ...

    def scenario_fit(self, available: F64, requests: F64) -> bool: ...

    def incremental_fit(
        self, capacity: F64, available: F64, gpu_requests: F64, requests: F64
    ) -> IncrementalFit: ...


class IncrementalFit(Protocol):
    """``idle_gpus_fit`` and ``scenario_fit`` over arrays changed step by step.

    ``scenario_fit`` leaves out the nodes whose available GPUs (+ EPS) are below the
    smallest GPU request of ``requests`` when that is > 0 (they fit no task).  Every
    check returns what the stateless kernels return on the current arrays.
    """

    # Node indices and values: arrays or sequences, converted like the kernels' inputs.
    # capacity[nodes] = values
    def set_capacity(self, nodes: ArrayLike, values: ArrayLike) -> None: ...

    # available[nodes] += rows
    def add_available(self, nodes: ArrayLike, rows: ArrayLike) -> None: ...

    def idle_gpus_fit(self) -> bool: ...

    def scenario_fit(self) -> bool: ...

    def capacity(self) -> F64: ...  # copies of the current arrays

    def available(self) -> F64: ...


class KernelSet:
    """Concrete :class:`Backend`: a name plus one callable per entry of :data:`KERNELS`.

    Built from a module (or any object) exposing the kernel functions by name.
    """

    def __init__(self, name: str, impl: Any) -> None:
        self.name = name
        missing = [k for k in KERNELS if not callable(getattr(impl, k, None))]
        if missing:
            raise TypeError(f"backend {name!r} lacks kernels: {', '.join(missing)}")
        for kernel in KERNELS:
            setattr(self, kernel, getattr(impl, kernel))
        self.allocate_loop = getattr(impl, "allocate_loop", None)
        self.allocate_loop_features = frozenset(getattr(impl, "ALLOCATE_LOOP_FEATURES", ()))
        self.node_picker = getattr(impl, "node_picker", None)

    def __repr__(self) -> str:
        return f"<kai backend {self.name!r}>"


# --------------------------------------------------------------------------- coercion
# Each helper returns a C-contiguous array of the wanted dtype, copying only when needed.
# Inputs are never modified (kernels only read them).


def f64_1d(x: Any, name: str) -> F64:
    a = np.ascontiguousarray(x, dtype=np.float64)
    if a.ndim != 1:
        raise ValueError(f"{name}: expected a 1-d array, got shape {a.shape}")
    return a


def f64_2d(x: Any, name: str, ncols: int) -> F64:
    a = np.ascontiguousarray(x, dtype=np.float64)
    if a.ndim == 1 and a.size == 0:  # [] -> zero rows
        a = a.reshape(0, ncols)
    if a.ndim != 2 or a.shape[1] != ncols:
        raise ValueError(f"{name}: expected shape (N, {ncols}), got {a.shape}")
    return a


def bool_1d(x: Any, name: str, n: int) -> BoolArray:
    a = np.ascontiguousarray(x, dtype=np.bool_)
    _check_len(a, name, n)
    return a


def i64_1d(x: Any, name: str, n: int) -> I64:
    a = np.ascontiguousarray(x, dtype=np.int64)
    _check_len(a, name, n)
    return a


def f64_1d_len(x: Any, name: str, n: int) -> F64:
    a = np.ascontiguousarray(x, dtype=np.float64)
    _check_len(a, name, n)
    return a


def _check_len(a: np.ndarray, name: str, n: int) -> None:
    if a.ndim != 1 or a.shape[0] != n:
        raise ValueError(f"{name}: expected shape ({n},), got {a.shape}")


# Per-kernel argument preparation, shared by all backends.


def prep_fit_mask(request: Any, idle: Any, releasing: Any) -> tuple[F64, F64, F64]:
    req = f64_1d(request, "request")
    idl = f64_2d(idle, "idle", req.shape[0])
    rel = f64_2d(releasing, "releasing", req.shape[0])
    if rel.shape != idl.shape:
        raise ValueError(f"releasing: shape {rel.shape} does not match idle {idl.shape}")
    return req, idl, rel


def prep_binpack(non_allocated: Any, allocatable: Any, candidates: Any) -> tuple[F64, F64, Any]:
    na = f64_1d(non_allocated, "non_allocated")
    n = na.shape[0]
    return na, f64_1d_len(allocatable, "allocatable", n), bool_1d(candidates, "candidates", n)


def prep_spread(non_allocated: Any, capacity: Any) -> tuple[F64, F64]:
    na = f64_1d(non_allocated, "non_allocated")
    return na, f64_1d_len(capacity, "capacity", na.shape[0])


def prep_scores_mask(scores: Any, mask: Any) -> tuple[F64, BoolArray]:
    s = f64_1d(scores, "scores")
    return s, bool_1d(mask, "mask", s.shape[0])


def prep_dominant_share(allocated: Any, total: Any) -> tuple[F64, F64]:
    t = f64_1d(total, "total")
    return f64_2d(allocated, "allocated", t.shape[0]), t


def prep_fair_share(
    total: Any,
    deserved: Any,
    limit: Any,
    weight: Any,
    request: Any,
    priority: Any,
    rank: Any,
    k_value: Any,
    usage: Any,
) -> tuple[float, F64, F64, F64, F64, I64, I64, float, F64]:
    d = f64_1d(deserved, "deserved")
    q = d.shape[0]
    return (
        float(total),
        d,
        f64_1d_len(limit, "limit", q),
        f64_1d_len(weight, "weight", q),
        f64_1d_len(request, "request", q),
        i64_1d(priority, "priority", q),
        i64_1d(rank, "rank", q),
        float(k_value),
        f64_1d_len(usage, "usage", q),
    )


def prep_fair_share_tree(
    total: Any,
    parent: Any,
    deserved: Any,
    limit: Any,
    weight: Any,
    request: Any,
    priority: Any,
    rank: Any,
    k_value: Any,
    usage: Any,
) -> tuple[F64, I64, F64, F64, F64, F64, I64, I64, float, F64]:
    t = f64_1d(total, "total")
    p = np.ascontiguousarray(parent, dtype=np.int64)
    if p.ndim != 1:
        raise ValueError(f"parent: expected a 1-d array, got shape {p.shape}")
    shape = (t.shape[0], p.shape[0])
    return (
        t,
        p,
        _f64_shaped(deserved, "deserved", shape),
        _f64_shaped(limit, "limit", shape),
        _f64_shaped(weight, "weight", shape),
        _f64_shaped(request, "request", shape),
        i64_1d(priority, "priority", shape[1]),
        i64_1d(rank, "rank", shape[1]),
        float(k_value),
        _f64_shaped(usage, "usage", shape),
    )


def _f64_shaped(x: Any, name: str, shape: tuple[int, int]) -> F64:
    a = np.ascontiguousarray(x, dtype=np.float64)
    if a.shape != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {a.shape}")
    return a


def sibling_groups(parent: I64, rank: I64) -> list[tuple[int, list[int]]]:
    """A queue tree's sibling groups, each after its parent's (breadth first from the
    root): the parent's index (-1 for the root) and its children, by rank then index.
    A parent index that names no queue stands for the root; a queue that no path from
    the root reaches (a cycle) is in no group."""
    n = len(parent)
    children: dict[int, list[int]] = {}
    for q, p in enumerate(parent.tolist()):
        children.setdefault(p if 0 <= p < n else -1, []).append(q)
    ranks = rank.tolist()
    groups: list[tuple[int, list[int]]] = []
    todo = [-1]
    for p in todo:  # grows as it is read
        kids = children.get(p)
        if kids:
            kids.sort(key=ranks.__getitem__)  # stable: index order among equal ranks
            groups.append((p, kids))
            todo.extend(kids)
    return groups


def divide_tree(
    divide: Callable[..., F64],
    total: F64,
    parent: I64,
    deserved: F64,
    limit: F64,
    weight: F64,
    request: F64,
    priority: I64,
    rank: I64,
    k_value: float,
    usage: F64,
) -> F64:
    """``divide_fair_share_tree`` made of a backend's ``divide_fair_share`` (arguments
    prepared by :func:`prep_fair_share_tree`)."""
    n_resources = deserved.shape[0]
    fair = np.zeros(deserved.shape, dtype=np.float64)
    for p, kids in sibling_groups(parent, rank):
        at = np.array(kids, dtype=np.int64)
        for r in range(n_resources):
            amount = total[r] if p < 0 else fair[r, p]
            fair[r, at] = divide(
                float(amount),
                deserved[r, at],
                limit[r, at],
                weight[r, at],
                request[r, at],
                priority[at],
                rank[at],
                k_value,
                usage[r, at],
            )
    return fair


# loadaware: node usage matrices are int64 (cpu millicores, other resources in units).
#: ``state`` values of :func:`loadaware_filter`: check the thresholds, pass, or reject
#: (the node's NodeMetric expired).
LA_CHECK, LA_PASS, LA_EXPIRED = 0, 1, 2
#: Codes returned by :func:`loadaware_filter` besides a resource index.
LA_CODE_PASS, LA_CODE_EXPIRED = -1, -2


def i64_2d(x: Any, name: str, ncols: int) -> I64:
    a = np.ascontiguousarray(x, dtype=np.int64)
    if a.ndim == 1 and a.size == 0:
        a = a.reshape(0, ncols)
    if a.ndim != 2 or a.shape[1] != ncols:
        raise ValueError(f"{name}: expected shape (N, {ncols}), got {a.shape}")
    return a


def prep_loadaware_filter(
    existing: Any, incoming: Any, allocatable: Any, thresholds: Any, state: Any
) -> tuple[I64, I64, I64, I64, I64]:
    inc = np.ascontiguousarray(incoming, dtype=np.int64)
    if inc.ndim != 1:
        raise ValueError(f"incoming: expected a 1-d array, got shape {inc.shape}")
    r = inc.shape[0]
    ex = i64_2d(existing, "existing", r)
    n = ex.shape[0]
    al = i64_2d(allocatable, "allocatable", r)
    th = i64_2d(thresholds, "thresholds", r)
    for a, nm in ((al, "allocatable"), (th, "thresholds")):
        if a.shape[0] != n:
            raise ValueError(f"{nm}: expected {n} rows, got {a.shape[0]}")
    return ex, inc, al, th, i64_1d(state, "state", n)


def prep_loadaware_score(
    existing: Any, incoming: Any, allocatable: Any, weights: Any, dominant_weight: Any, valid: Any
) -> tuple[I64, I64, I64, I64, int, BoolArray]:
    inc = np.ascontiguousarray(incoming, dtype=np.int64)
    if inc.ndim != 1:
        raise ValueError(f"incoming: expected a 1-d array, got shape {inc.shape}")
    r = inc.shape[0]
    ex = i64_2d(existing, "existing", r)
    n = ex.shape[0]
    al = i64_2d(allocatable, "allocatable", r)
    if al.shape[0] != n:
        raise ValueError(f"allocatable: expected {n} rows, got {al.shape[0]}")
    w = i64_1d(weights, "weights", r)
    return ex, inc, al, w, int(dominant_weight), bool_1d(valid, "valid", n)


# solver: capacity checks of the victim search (GPU is column 2 of resource vectors).
SOLVER_GPU_COLUMN = 2


def prep_idle_gpus_fit(capacity: Any, requests: Any) -> tuple[F64, F64]:
    return f64_1d(capacity, "capacity"), f64_1d(requests, "requests")


def prep_scenario_fit(available: Any, requests: Any) -> tuple[F64, F64]:
    req = np.ascontiguousarray(requests, dtype=np.float64)
    if req.ndim != 2:
        raise ValueError(f"requests: expected a 2-d array, got shape {req.shape}")
    r = req.shape[1]
    if r <= SOLVER_GPU_COLUMN:
        raise ValueError(f"requests: expected more than {SOLVER_GPU_COLUMN} resource columns")
    return f64_2d(available, "available", r), req


def prep_incremental_fit(
    capacity: Any, available: Any, gpu_requests: Any, requests: Any
) -> tuple[F64, F64, F64, F64]:
    """Copies (the state is changed in place) of the four arrays, validated."""
    cap = np.array(f64_1d(capacity, "capacity"), dtype=np.float64, copy=True)
    avail, req = prep_scenario_fit(available, requests)
    avail = np.array(avail, dtype=np.float64, copy=True)
    if avail.shape[0] != cap.shape[0]:
        raise ValueError(f"available: expected {cap.shape[0]} rows, got {avail.shape[0]}")
    return cap, avail, f64_1d(gpu_requests, "gpu_requests").copy(), req.copy()


def prep_fit_update(nodes: Any, rows: Any, n: int, r: int) -> tuple[I64, F64]:
    idx = np.ascontiguousarray(nodes, dtype=np.int64)
    if idx.ndim != 1:
        raise ValueError(f"nodes: expected a 1-d array, got shape {idx.shape}")
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise IndexError("nodes: node index out of range")
    if r == 0:
        vals = f64_1d(rows, "values")
        if vals.shape[0] != idx.shape[0]:
            raise ValueError(f"values: expected length {idx.shape[0]}")
        return idx, vals
    if idx.size == 0:
        return idx, np.zeros((0, r), dtype=np.float64)
    vals = f64_2d(rows, "rows", r)
    if vals.shape[0] != idx.shape[0]:
        raise ValueError(f"rows: expected shape ({idx.shape[0]}, {r})")
    return idx, vals


class StatelessIncrementalFit:
    """:class:`IncrementalFit` by calling the stateless kernels on the current arrays."""

    def __init__(
        self,
        idle_gpus_fit: Any,
        scenario_fit: Any,
        capacity: Any,
        available: Any,
        gpu_requests: Any,
        requests: Any,
    ) -> None:
        self._idle = idle_gpus_fit
        self._fit = scenario_fit
        self._cap, self._avail, self._gpu, self._req = prep_incremental_fit(
            capacity, available, gpu_requests, requests
        )
        req = self._req
        self._smallest = float(req[:, SOLVER_GPU_COLUMN].min()) if req.shape[0] else 0.0

    def set_capacity(self, nodes: Any, values: Any) -> None:
        idx, vals = prep_fit_update(nodes, values, self._cap.shape[0], 0)
        for i, v in zip(idx.tolist(), vals.tolist()):
            self._cap[i] = v

    def add_available(self, nodes: Any, rows: Any) -> None:
        idx, vals = prep_fit_update(nodes, rows, *self._avail.shape)
        np.add.at(self._avail, idx, vals)

    def idle_gpus_fit(self) -> bool:
        return bool(self._idle(self._cap, self._gpu))

    def scenario_fit(self) -> bool:
        avail = self._avail
        if self._smallest > 0:
            avail = avail[avail[:, SOLVER_GPU_COLUMN] + EPS >= self._smallest]
        return bool(self._fit(avail, self._req))

    def capacity(self) -> F64:
        return self._cap.copy()

    def available(self) -> F64:
        return self._avail.copy()
