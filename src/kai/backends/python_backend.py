"""Reference backend: plain numpy / Python.

This is the specification of every kernel: the numba and native backends perform the same
floating-point operations in the same order and must return identical results.  Inputs
are expected to be finite (NaN handling is not part of the contract).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kai.backends._common import (
    EPS,
    F64,
    I64,
    SOLVER_GPU_COLUMN,
    BoolArray,
    StatelessIncrementalFit,
    divide_tree,
    prep_binpack,
    prep_dominant_share,
    prep_fair_share,
    prep_fair_share_tree,
    prep_fit_mask,
    prep_idle_gpus_fit,
    prep_loadaware_filter,
    prep_loadaware_score,
    prep_scenario_fit,
    prep_scores_mask,
    prep_spread,
)
from kai.backends._fair_share import divide

NAME = "python"

# ----------------------------------------------------------------------------------- fit


def fit_mask(request: Any, idle: Any, releasing: Any) -> tuple[BoolArray, BoolArray]:
    """``(fits_any, fits_idle)``: does ``request`` fit each node (idle+releasing / idle)?

    A resource passes when ``request[r] == 0`` or ``request[r] <= available[n, r] + EPS``.
    """
    req, idle, releasing = prep_fit_mask(request, idle, releasing)
    zero = req == 0.0
    fits_any = np.all(zero | (req <= (idle + releasing) + EPS), axis=1)
    fits_idle = np.all(zero | (req <= idle + EPS), axis=1)
    return fits_any, fits_idle


# --------------------------------------------------------------------------------- score


def binpack_score(non_allocated: Any, allocatable: Any, candidates: Any, max_score: float) -> F64:
    """KAI nodeplacement "binpack" score of one resource, on a 0..max_score scale."""
    na, alloc, cand = prep_binpack(non_allocated, allocatable, candidates)
    out = np.zeros(na.shape[0], dtype=np.float64)
    has_resource = alloc > 0.0
    valid = cand & has_resource
    if not valid.any():
        return out
    lo = na[valid].min()
    hi = na[valid].max()
    if hi == 0.0:
        return out
    if lo == hi:
        out[has_resource] = max_score
    else:
        out[has_resource] = max_score * (1.0 - (na[has_resource] - lo) / (hi - lo))
    return out


def spread_score(non_allocated: Any, capacity: Any) -> F64:
    """``non_allocated / capacity``, 0 where ``capacity <= 0``."""
    na, cap = prep_spread(non_allocated, capacity)
    out = np.zeros(na.shape[0], dtype=np.float64)
    np.divide(na, cap, out=out, where=cap > 0.0)
    return out


def best_node(scores: Any, mask: Any) -> int:
    """Index of the best mask-true node (ties: smallest index), ``-1`` if none."""
    s, m = prep_scores_mask(scores, mask)
    idx = np.flatnonzero(m)
    if idx.size == 0:
        return -1
    return int(idx[np.argmax(s[idx])])


def ordered_nodes(scores: Any, mask: Any) -> I64:
    """Mask-true node indices by score descending, ties by index ascending."""
    s, m = prep_scores_mask(scores, mask)
    idx = np.flatnonzero(m).astype(np.int64)
    return idx[np.argsort(-s[idx], kind="stable")]


# ----------------------------------------------------------------------------- fairshare


def dominant_share(allocated: Any, total: Any) -> F64:
    """Per row: ``max_r allocated[m, r] / total[r]`` over resources with ``total[r] > 0``."""
    alloc, tot = prep_dominant_share(allocated, total)
    valid = tot > 0.0
    if not valid.any():
        return np.zeros(alloc.shape[0], dtype=np.float64)
    return (alloc[:, valid] / tot[valid]).max(axis=1)


def divide_fair_share(
    total: Any,
    deserved: Any,
    limit: Any,
    weight: Any,
    request: Any,
    priority: Any,
    rank: Any,
    k_value: Any,
    usage: Any,
) -> F64:
    """KAI proportion plugin: divide ``total`` units of ONE resource among sibling queues
    (:func:`kai.backends._fair_share.divide`, the rule, tells how)."""
    total, d, lim, w, req, prio, rnk, k, use = prep_fair_share(
        total, deserved, limit, weight, request, priority, rank, k_value, usage
    )
    nq = d.shape[0]
    priorities = prio.tolist()
    fair = [0.0] * nq
    # Lists: plain Python reads their items faster than an array's.
    divide(
        total,
        d.tolist(),
        lim.tolist(),
        w.tolist(),
        req.tolist(),
        priorities,
        rnk.tolist(),
        k,
        use.tolist(),
        sorted(set(priorities), reverse=True),
        fair,
        [0.0] * nq,
        [0.0] * nq,
        [0.0] * nq,
        [0] * nq,
        [0] * nq,
    )
    return np.array(fair, dtype=np.float64)


def divide_fair_share_tree(
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
) -> F64:
    """The fair shares of a queue tree, resource-major ``[R, Q]``: the root's children
    divide ``total`` (one value per resource), each queue's children divide its fair
    share, each resource on its own with :func:`divide_fair_share`.

    ``parent[q]`` is queue ``q``'s parent, -1 (or an index that names no queue) for
    the root.  ``deserved``, ``limit``, ``weight``, ``request`` and ``usage`` are
    ``[R, Q]``; ``priority`` and ``rank`` are per queue.  Siblings are divided in rank
    order (then index order); a queue no path from the root reaches gets 0.
    """
    return divide_tree(
        divide_fair_share,
        *prep_fair_share_tree(
            total, parent, deserved, limit, weight, request, priority, rank, k_value, usage
        ),
    )


# ----------------------------------------------------------------------------- loadaware


def _go_round(x: np.ndarray) -> np.ndarray:
    """Go's ``math.Round``: halves away from zero (exact: the fraction is computed exactly)."""
    t = np.trunc(x)
    return np.where(np.abs(x - t) >= 0.5, t + np.copysign(1.0, x), t)


def loadaware_filter(
    existing: Any, incoming: Any, allocatable: Any, thresholds: Any, state: Any
) -> tuple[BoolArray, I64]:
    """Koordinator LoadAwareScheduling filter of one pod against all nodes.

    ``E = existing[n] + incoming``; for each resource r (in column order) with
    ``thresholds[n, r] != 0`` and ``allocatable[n, r] != 0``, the usage
    ``round(float(E) / float(A) * 100)`` (Go ``math.Round``) must not exceed the threshold.
    ``state[n]``: 0 check, 1 pass, 2 reject (expired metric).  Returns ``(mask, code)``
    with code -1 for a passing node, -2 for an expired one, else the first failing r.
    """
    ex, inc, alloc, thr, st = prep_loadaware_filter(
        existing, incoming, allocatable, thresholds, state
    )
    n, r = ex.shape
    code = np.full(n, -1, dtype=np.int64)
    if n and r:
        used = (ex + inc).astype(np.float64)
        total = alloc.astype(np.float64)
        active = (thr != 0) & (alloc != 0)
        ratio = np.zeros_like(used)
        np.divide(used, total, out=ratio, where=active)
        usage = _go_round(ratio * 100.0)
        fail = active & (usage > thr.astype(np.float64))
        first = np.argmax(fail, axis=1)
        any_fail = fail.any(axis=1)
        code[any_fail] = first[any_fail]
    code[st == 1] = -1
    code[st == 2] = -2
    return code == -1, code


def loadaware_score(
    existing: Any,
    incoming: Any,
    allocatable: Any,
    weights: Any,
    dominant_weight: Any,
    valid: Any,
) -> I64:
    """Koordinator LoadAwareScheduling score (0..100, int64) of one pod on every node.

    ``s_r = (A - E) * 100 // A`` (0 where ``A == 0`` or ``E > A``);
    ``score = (sum w_r s_r + D * min_r s_r) // (sum w_r + D)``, 0 where the denominator
    is not positive or ``valid`` is false.
    """
    ex, inc, alloc, w, dom, ok = prep_loadaware_score(
        existing, incoming, allocatable, weights, dominant_weight, valid
    )
    n, r = ex.shape
    out = np.zeros(n, dtype=np.int64)
    den = int(w.sum()) + dom
    if n == 0 or r == 0 or den <= 0:
        return out
    used = ex + inc
    zero = (alloc == 0) | (used > alloc)
    safe = np.where(zero, 1, alloc)
    s = np.where(zero, 0, (alloc - used) * 100 // safe)
    total = (s * w).sum(axis=1)
    if dom > 0:
        total = total + dom * s.min(axis=1)
    out[:] = total // den
    out[~ok] = 0
    return out


# ------------------------------------------------------------------------------- solver


def idle_gpus_fit(capacity: Any, requests: Any) -> bool:
    """AccumulatedIdleGpus: match GPU needs (largest first) to the top-k nodes by capacity.

    Only the k = len(requests) nodes with the most capacity take part (ties: smaller
    index), largest first; each need goes to the first of them that still covers it.  A
    need of 0 ends the check successfully.
    """
    cap, req = prep_idle_gpus_fit(capacity, requests)
    k = req.shape[0]
    if k == 0:
        return True
    order = np.argsort(-cap, kind="stable")[:k]
    remaining = [float(cap[i]) for i in order]
    for r in sorted((float(x) for x in req), reverse=True):
        if not r > 0.0:
            return True
        for j, rem in enumerate(remaining):
            if r <= rem + EPS:
                remaining[j] = rem - r
                break
        else:
            return False
    return True


def scenario_fit(available: Any, requests: Any) -> bool:
    """Greedy per-node fit: tasks by GPU need descending onto nodes by free GPUs descending.

    Each task takes the first node where every requested resource fits
    (request <= available + EPS); that node is charged.  True if every task found one.
    """
    avail, req = prep_scenario_fit(available, requests)
    if req.shape[0] == 0:
        return True
    if avail.shape[0] == 0:
        return False
    g = SOLVER_GPU_COLUMN
    tasks = np.argsort(-req[:, g], kind="stable")
    nodes = np.argsort(-avail[:, g], kind="stable")
    work = avail[nodes].copy()
    for t in tasks:
        row = req[t]
        ok = np.all((row == 0.0) | (row <= work + EPS), axis=1)
        hit = np.flatnonzero(ok)
        if hit.size == 0:
            return False
        work[hit[0]] -= row
    return True


def incremental_fit(capacity: Any, available: Any, gpu_requests: Any, requests: Any) -> Any:
    """:func:`idle_gpus_fit` and :func:`scenario_fit` over arrays changed step by step.

    ``set_capacity(nodes, values)`` assigns capacities, ``add_available(nodes, rows)``
    adds rows in order (as ``np.add.at``); ``scenario_fit()`` leaves out the nodes whose
    available GPUs + EPS are below the smallest GPU request when that is > 0.
    """
    return StatelessIncrementalFit(
        idle_gpus_fit, scenario_fit, capacity, available, gpu_requests, requests
    )
