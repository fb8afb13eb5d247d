"""Reference backend: plain numpy / Python.

This is the specification of every kernel: the numba and native backends perform the same
floating-point operations in the same order and must return identical results.  Inputs
are expected to be finite (NaN handling is not part of the contract).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kai.backends._common import (
    EPS,
    F64,
    I64,
    UNLIMITED,
    BoolArray,
    prep_binpack,
    prep_dominant_share,
    prep_fair_share,
    prep_fit_mask,
    prep_scores_mask,
    prep_spread,
)

NAME = "python"

#: Maximum node-placement score (KAI nodeplacement plugin scale).
MAX_SCORE = 9.0

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


def binpack_score(non_allocated: Any, allocatable: Any, candidates: Any) -> F64:
    """KAI nodeplacement "binpack" score of one resource, on a 0..9 scale."""
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
        out[has_resource] = MAX_SCORE
    else:
        out[has_resource] = MAX_SCORE * (1.0 - (na[has_resource] - lo) / (hi - lo))
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
    """KAI proportion plugin: divide ``total`` units of ONE resource among sibling queues.

    ``-1`` in ``deserved`` = unlimited deserved quota, ``-1`` in ``limit`` = no limit.
    ``rank`` breaks ties (smaller = older queue = wins).  Phases:

    1. deserved quota in index order (may exhaust ``total``);
    2. over-quota, per priority group from high to low, in weighted rounds handing out
       whole units (``floor``) and remembering each queue's fractional remainder;
    3. left-over units: per priority group, queues by remainder desc / rank asc get
       ``min(1, remaining)`` each, one pass.
    """
    total, d, lim, w, req, prio, rnk, k, use = prep_fair_share(
        total, deserved, limit, weight, request, priority, rank, k_value, usage
    )
    deserved_l = d.tolist()
    limit_l = lim.tolist()
    weight_l = w.tolist()
    request_l = req.tolist()
    rank_l = rnk.tolist()
    usage_l = use.tolist()
    nq = len(deserved_l)

    requestable = [
        request_l[q] if limit_l[q] == UNLIMITED else _min(request_l[q], limit_l[q])
        for q in range(nq)
    ]

    # Phase 1: deserved quota.
    fair = [0.0] * nq
    remaining = total
    for q in range(nq):
        wanted = total if deserved_l[q] == UNLIMITED else deserved_l[q]
        amount = _min(wanted, requestable[q])
        fair[q] += amount
        remaining -= amount
    if remaining <= 0.0:
        return np.array(fair, dtype=np.float64)

    # Priority groups, highest first; queues of a group in index order.
    prio_l = prio.tolist()
    groups = [
        [q for q in range(nq) if prio_l[q] == level] for level in sorted(set(prio_l), reverse=True)
    ]

    def unsatisfied(q: int) -> bool:
        request_met = request_l[q] <= fair[q]
        limit_met = limit_l[q] != UNLIMITED and limit_l[q] <= fair[q]
        return not (request_met or limit_met)

    # Phase 2: over-quota rounds.
    remainder = [0.0] * nq
    share_weight = [0.0] * nq
    for group in groups:
        if not remaining > 0.0:
            break
        while remaining > 0.0:
            active = [q for q in group if unsatisfied(q)]
            total_weight = 0.0
            for q in active:
                if requestable[q] - fair[q] > 0.0:
                    total_weight += weight_l[q]
            if total_weight == 0.0:
                break
            sum_share_weight = 0.0
            for q in active:
                nw = weight_l[q] / total_weight
                share_weight[q] = _max(0.0, nw + k * (nw - usage_l[q]))
                sum_share_weight += share_weight[q]
            if sum_share_weight == 0.0:
                break
            amount_this_round = remaining
            someone_needed_less = False
            changed = False
            for q in active:
                if not share_weight[q] > 0.0:
                    continue
                fair_q = amount_this_round * share_weight[q] / sum_share_weight
                need = requestable[q] - fair[q]
                before = fair[q]
                if need <= fair_q:
                    fair[q] += need
                    remaining -= need
                    someone_needed_less = True
                else:
                    whole = _floor(fair_q)
                    fair[q] += whole
                    remaining -= whole
                    remainder[q] = fair_q - whole
                if fair[q] != before:
                    changed = True
            if not someone_needed_less or not changed:
                break

    # Phase 3: fractional left-overs.
    for group in groups:
        if not remaining > 0.0:
            break
        order = sorted(
            (q for q in group if remainder[q] > 0.0),
            key=lambda q: (-remainder[q], rank_l[q], q),
        )
        for q in order:
            if not remaining > 0.0:
                break
            give = _min(1.0, remaining)
            fair[q] += give
            remaining -= give

    return np.array(fair, dtype=np.float64)


# Explicit min/max/floor with the exact semantics of the C++ implementation
# (std::min(a, b) == (b < a ? b : a), std::max(a, b) == (a < b ? b : a)).


def _min(a: float, b: float) -> float:
    return b if b < a else a


def _max(a: float, b: float) -> float:
    return b if a < b else a


def _floor(x: float) -> float:
    return float(math.floor(x)) if math.isfinite(x) else x
