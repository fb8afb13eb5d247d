"""Numba-compiled kernels (imported lazily by :mod:`kai.backends.numba_backend`).

Each ``@njit(cache=True)`` function mirrors the reference implementation in
:mod:`kai.backends.python_backend` operation for operation, except the fair-share
division, which both backends run from one source (:mod:`kai.backends._fair_share`).
Arguments arrive already validated and converted (C-contiguous float64 / bool / int64).
Constants such as ``EPS`` are passed as arguments so that the on-disk cache never holds
stale values.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kai.backends import _fair_share

# ----------------------------------------------------------------------------------- fit


@njit(cache=True)
def fit_mask(request, idle, releasing, eps):  # pragma: no cover - compiled
    n, r = idle.shape
    fits_any = np.empty(n, dtype=np.bool_)
    fits_idle = np.empty(n, dtype=np.bool_)
    for i in range(n):
        any_ok = True
        idle_ok = True
        for j in range(r):
            req = request[j]
            if req == 0.0:
                continue
            if not (req <= (idle[i, j] + releasing[i, j]) + eps):
                any_ok = False
            if not (req <= idle[i, j] + eps):
                idle_ok = False
        fits_any[i] = any_ok
        fits_idle[i] = idle_ok
    return fits_any, fits_idle


# --------------------------------------------------------------------------------- score


@njit(cache=True)
def binpack_score(non_allocated, allocatable, candidates, max_score):  # pragma: no cover - compiled
    n = non_allocated.shape[0]
    out = np.zeros(n, dtype=np.float64)
    have = False
    lo = 0.0
    hi = 0.0
    for i in range(n):
        if not candidates[i] or not (allocatable[i] > 0.0):
            continue
        v = non_allocated[i]
        if not have:
            lo = v
            hi = v
            have = True
        else:
            if v < lo:
                lo = v
            if v > hi:
                hi = v
    if not have or hi == 0.0:
        return out
    for i in range(n):
        if not (allocatable[i] > 0.0):
            continue
        if lo == hi:
            out[i] = max_score
        else:
            out[i] = max_score * (1.0 - (non_allocated[i] - lo) / (hi - lo))
    return out


@njit(cache=True)
def spread_score(non_allocated, capacity):  # pragma: no cover - compiled
    n = non_allocated.shape[0]
    out = np.zeros(n, dtype=np.float64)
    for i in range(n):
        if capacity[i] > 0.0:
            out[i] = non_allocated[i] / capacity[i]
    return out


@njit(cache=True)
def best_node(scores, mask):  # pragma: no cover - compiled
    best = -1
    best_score = 0.0
    for i in range(scores.shape[0]):
        if not mask[i]:
            continue
        if best < 0 or scores[i] > best_score:
            best = i
            best_score = scores[i]
    return best


@njit(cache=True)
def ordered_nodes(scores, mask):  # pragma: no cover - compiled
    idx = np.flatnonzero(mask).astype(np.int64)
    neg = np.empty(idx.shape[0], dtype=np.float64)
    for i in range(idx.shape[0]):
        neg[i] = -scores[idx[i]]
    return idx[np.argsort(neg, kind="mergesort")]


# ----------------------------------------------------------------------------- fairshare


@njit(cache=True)
def dominant_share(allocated, total):  # pragma: no cover - compiled
    m, r = allocated.shape
    out = np.zeros(m, dtype=np.float64)
    for i in range(m):
        have = False
        best = 0.0
        for j in range(r):
            if not (total[j] > 0.0):
                continue
            share = allocated[i, j] / total[j]
            if not have or share > best:
                best = share
                have = True
        if have:
            out[i] = best
    return out


# The rule, written once (kai.backends._fair_share), compiled for arrays.
_divide = njit(cache=True)(_fair_share.divide)


def divide_fair_share(total, deserved, limit, weight, request, priority, rank, k_value, usage):
    nq = deserved.shape[0]
    fair = np.zeros(nq, dtype=np.float64)
    # Highest priority first, copied contiguous: one compiled signature for every call.
    levels = np.unique(priority)[::-1].copy()
    _divide(
        total, deserved, limit, weight, request, priority, rank, k_value, usage, levels,
        fair, np.zeros(nq), np.zeros(nq), np.zeros(nq), np.zeros(nq, dtype=np.int64),
        np.zeros(nq, dtype=np.int64),
    )  # fmt: skip
    return fair


# ----------------------------------------------------------------------------- loadaware


@njit(cache=True)
def _go_round(x):  # pragma: no cover - compiled
    t = np.trunc(x)
    if abs(x - t) >= 0.5:
        return t + (1.0 if x >= 0.0 else -1.0)
    return t


@njit(cache=True)
def loadaware_filter(existing, incoming, allocatable, thresholds, state):  # pragma: no cover
    n, r = existing.shape
    mask = np.empty(n, dtype=np.bool_)
    code = np.full(n, -1, dtype=np.int64)
    for i in range(n):
        if state[i] == 1:
            mask[i] = True
            continue
        if state[i] == 2:
            mask[i] = False
            code[i] = -2
            continue
        for j in range(r):
            thr = thresholds[i, j]
            total = allocatable[i, j]
            if thr == 0 or total == 0:
                continue
            used = existing[i, j] + incoming[j]
            usage = _go_round(float(used) / float(total) * 100.0)
            if usage > float(thr):
                code[i] = j
                break
        mask[i] = code[i] == -1
    return mask, code


@njit(cache=True)
def loadaware_score(existing, incoming, allocatable, weights, dominant, valid):  # pragma: no cover
    n, r = existing.shape
    out = np.zeros(n, dtype=np.int64)
    den = dominant
    for j in range(r):
        den += weights[j]
    if den <= 0 or r == 0:
        return out
    for i in range(n):
        if not valid[i]:
            continue
        total = 0
        lowest = 0
        for j in range(r):
            cap = allocatable[i, j]
            used = existing[i, j] + incoming[j]
            s = 0
            if cap != 0 and used <= cap:
                s = (cap - used) * 100 // cap
            total += weights[j] * s
            if j == 0 or s < lowest:
                lowest = s
        if dominant > 0:
            total += dominant * lowest
        out[i] = total // den
    return out


# ------------------------------------------------------------------------------- solver


@njit(cache=True)
def idle_gpus_fit(capacity, requests, eps):  # pragma: no cover - compiled
    k = requests.shape[0]
    if k == 0:
        return True
    order = np.argsort(-capacity, kind="mergesort")[:k]
    remaining = np.empty(order.shape[0], dtype=np.float64)
    for j in range(order.shape[0]):
        remaining[j] = capacity[order[j]]
    req = np.sort(requests)[::-1]
    for i in range(k):
        r = req[i]
        if not r > 0.0:
            return True
        placed = False
        for j in range(remaining.shape[0]):
            if r <= remaining[j] + eps:
                remaining[j] = remaining[j] - r
                placed = True
                break
        if not placed:
            return False
    return True


@njit(cache=True)
def scenario_fit(available, requests, gpu, eps):  # pragma: no cover - compiled
    t_count, r_count = requests.shape
    n = available.shape[0]
    if t_count == 0:
        return True
    if n == 0:
        return False
    tasks = np.argsort(-requests[:, gpu], kind="mergesort")
    nodes = np.argsort(-available[:, gpu], kind="mergesort")
    work = np.empty((n, r_count), dtype=np.float64)
    for j in range(n):
        for r in range(r_count):
            work[j, r] = available[nodes[j], r]
    for ti in range(t_count):
        t = tasks[ti]
        placed = False
        for j in range(n):
            fits = True
            for r in range(r_count):
                q = requests[t, r]
                if q == 0.0:
                    continue
                if not (q <= work[j, r] + eps):
                    fits = False
                    break
            if fits:
                for r in range(r_count):
                    work[j, r] = work[j, r] - requests[t, r]
                placed = True
                break
        if not placed:
            return False
    return True
