"""Numba form of the allocate loop (native/src/allocate.cpp): the fallback kernel.

Same inputs and outputs as ``_native.allocate_loop`` (see kai.actions.fast_allocate),
same decisions and the same floating-point operations in the same order.  Importing
this module imports numba; the kernel compiles (or loads from numba's cache) on first
use.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

EPS = 1e-9
UNLIMITED = -1.0
MAX_BUCKETS = 4096

K_OK, K_NO_TASKS, K_OVER_LIMIT, K_OVER_QUOTA, K_NO_NODE = 0, 1, 2, 3, 4


@njit(cache=True)
def _fits(rq, idle, rel, n, idle_only):
    for r in range(rq.shape[0]):
        q = rq[r]
        if q == 0.0:
            continue
        if idle_only:
            if not (q <= idle[n, r] + EPS):
                return False
        else:
            if not (q <= (idle[n, r] + rel[n, r]) + EPS):
                return False
    return True


@njit(cache=True)
def _passes(pred, sig, n):
    for p in range(pred.shape[1]):
        if not pred[sig, p, n]:
            return False
    return True


@njit(cache=True)
def _dominant(q, vec, q_allocatable, total):
    best = 0.0
    for r in range(3):
        cap = q_allocatable[q, r]
        if cap == UNLIMITED:
            cap = total[r]
        value = vec[r] / cap if cap > 0 else vec[r] * 1000.0
        if value > best:
            best = value
    return best


@njit(cache=True)
def _job_request(j, st, job_start, job_min, task_qvec, jreq, jreq_ok):
    if not jreq_ok[j]:
        first, count = _chunk(j, st, job_start, job_min)
        jreq[j, 0] = 0.0
        jreq[j, 1] = 0.0
        jreq[j, 2] = 0.0
        for t in range(first, first + count):
            for r in range(3):
                jreq[j, r] = jreq[j, r] + task_qvec[t, r]
        jreq_ok[j] = True
    return jreq[j]


@njit(cache=True)
def _chunk(j, st, job_start, job_min):
    start = st[j, 0]
    pending = job_start[j + 1] - start
    a = st[j, 1]
    m = job_min[j]
    n = m - a if a < m else 1
    if n > pending:
        n = pending
    if n < 0:
        n = 0
    return start, n


@njit(cache=True)
def _queue_order(
    lq, r, lreq, rreq, q_alloc, q_fair, q_deserved, q_allocatable, q_priority, q_rank, total
):
    lover = True
    rover = True
    for k in range(3):
        lover = lover and q_fair[lq, k] < q_alloc[lq, k]
        rover = rover and q_fair[r, k] < q_alloc[r, k]
    if lover != rover:
        return 1 if lover else -1
    lst = True
    rst = True
    for k in range(3):
        tl = q_alloc[lq, k] + lreq[k]
        if not (q_deserved[lq, k] == UNLIMITED or tl <= q_deserved[lq, k] + 1e-9):
            lst = False
        tr = q_alloc[r, k] + rreq[k]
        if not (q_deserved[r, k] == UNLIMITED or tr <= q_deserved[r, k] + 1e-9):
            rst = False
    if lst != rst:
        return -1 if lst else 1
    if q_priority[lq] != q_priority[r]:
        return -1 if q_priority[lq] > q_priority[r] else 1
    lz = False
    rz = False
    for k in range(3):
        if q_allocatable[lq, k] == 0 and q_alloc[lq, k] + lreq[k] > 0:
            lz = True
        if q_allocatable[r, k] == 0 and q_alloc[r, k] + rreq[k] > 0:
            rz = True
    if lz != rz:
        return 1 if lz else -1
    lv = np.empty(3)
    rv = np.empty(3)
    for k in range(3):
        lv[k] = (q_alloc[lq, k] + lreq[k]) - 0.0
        rv[k] = (q_alloc[r, k] + rreq[k]) - 0.0
    lds = _dominant(lq, lv, q_allocatable, total)
    rds = _dominant(r, rv, q_allocatable, total)
    if lds != rds:
        return -1 if lds < rds else 1
    lds = _dominant(lq, q_alloc[lq], q_allocatable, total)
    rds = _dominant(r, q_alloc[r], q_allocatable, total)
    if lds != rds:
        return -1 if lds < rds else 1
    all_le = True
    any_lt = False
    all_ge = True
    any_gt = False
    for k in range(3):
        lc = q_allocatable[lq, k]
        rc = q_allocatable[r, k]
        all_le = all_le and lc <= rc
        any_lt = any_lt or lc < rc
        all_ge = all_ge and rc <= lc
        any_gt = any_gt or rc < lc
    if all_le and any_lt:
        return -1
    if all_ge and any_gt:
        return 1
    if q_rank[lq] != q_rank[r]:
        return -1 if q_rank[lq] < q_rank[r] else 1
    return 0


@njit(cache=True)
def _best_child(
    parent,
    kids,
    kids_n,
    best_job,
    st,
    job_start,
    job_min,
    task_qvec,
    jreq,
    jreq_ok,
    q_alloc,
    q_fair,
    q_deserved,
    q_allocatable,
    q_priority,
    q_rank,
    total,
):
    """The best job among the subtrees of ``parent`` by queue order (-1: none)."""
    bj = -1
    bq = -1
    for c in range(kids_n[parent]):
        child = kids[parent, c]
        cj = best_job[child]
        if cj < 0:
            continue
        if bj < 0:
            bj = cj
            bq = child
            continue
        lreq = _job_request(cj, st, job_start, job_min, task_qvec, jreq, jreq_ok)
        rreq = _job_request(bj, st, job_start, job_min, task_qvec, jreq, jreq_ok)
        order = _queue_order(
            child,
            bq,
            lreq,
            rreq,
            q_alloc,
            q_fair,
            q_deserved,
            q_allocatable,
            q_priority,
            q_rank,
            total,
        )
        if order < 0:
            bj = cj
            bq = child
    return bj


@njit(cache=True)
def _job_less(a, b, cur_key):
    for k in range(cur_key.shape[1]):
        x = cur_key[a, k]
        y = cur_key[b, k]
        if x != y:
            return x < y
    return a < b


@njit(cache=True)
def _elastic_state(j, st, job_min):
    a = st[j, 1]
    m = job_min[j]
    if a < m:
        return 0
    return 1 if a == m else 2


@njit(cache=True)
def _push(
    j,
    st,
    job_leaf,
    job_min,
    job_key,
    key_kinds,
    max_depth,
    heap,
    heap_off,
    heap_size,
    heap_made,
    cur_key,
    kids,
    kids_n,
    q_path_start,
    q_path,
    n_queues,
):
    leaf = job_leaf[j]
    if leaf < 0:
        return
    if not heap_made[leaf]:
        heap_made[leaf] = True
        parent = n_queues
        for k in range(q_path_start[leaf], q_path_start[leaf + 1]):
            q = q_path[k]
            found = False
            for c in range(kids_n[parent]):
                if kids[parent, c] == q:
                    found = True
            if not found:
                kids[parent, kids_n[parent]] = q
                kids_n[parent] += 1
            parent = q
    if max_depth >= 0 and heap_size[leaf] >= max_depth:
        return
    for k in range(key_kinds.shape[0]):
        if key_kinds[k] == 1:
            cur_key[j, k] = _elastic_state(j, st, job_min)
        else:
            cur_key[j, k] = job_key[j, k]
    off = heap_off[leaf]
    i = heap_size[leaf]
    heap_size[leaf] += 1
    heap[off + i] = j
    while i > 0:
        p = (i - 1) // 2
        if not _job_less(heap[off + i], heap[off + p], cur_key):
            break
        tmp = heap[off + i]
        heap[off + i] = heap[off + p]
        heap[off + p] = tmp
        i = p


@njit(cache=True)
def _heap_pop(leaf, heap, heap_off, heap_size, cur_key):
    off = heap_off[leaf]
    top = heap[off]
    heap_size[leaf] -= 1
    n = heap_size[leaf]
    if n > 0:
        heap[off] = heap[off + n]
        i = 0
        while True:
            lc = 2 * i + 1
            rc = lc + 1
            m = i
            if lc < n and _job_less(heap[off + lc], heap[off + m], cur_key):
                m = lc
            if rc < n and _job_less(heap[off + rc], heap[off + m], cur_key):
                m = rc
            if m == i:
                break
            tmp = heap[off + i]
            heap[off + i] = heap[off + m]
            heap[off + m] = tmp
            i = m
    return top


@njit(cache=True)
def _charge(
    j, t, sign, np_flag, job_leaf, q_path_start, q_path, task_qvec, q_alloc, q_alloc_np, q_events
):
    leaf = job_leaf[j]
    for k in range(q_path_start[leaf + 1] - 1, q_path_start[leaf] - 1, -1):
        q = q_path[k]
        for r in range(3):
            d = task_qvec[t, r] if sign > 0 else -task_qvec[t, r]
            q_alloc[q, r] = q_alloc[q, r] + d
            if np_flag:
                q_alloc_np[q, r] = q_alloc_np[q, r] + d
        q_events[q] += 1


@njit(cache=True)
def _np_charge(j, placed, st, job_np_mode, job_min):
    mode = job_np_mode[j]
    if mode != 2:
        return mode == 1
    if placed:
        return st[j, 1] <= job_min[j]
    return st[j, 1] < job_min[j]


@njit(cache=True)
def _touch(n, idle, rel, gpu, index, bits, bucket):
    # index: [on, nb, words, version]
    index[3] += 1
    if index[0] == 0:
        return
    na = idle[n, gpu] + rel[n, gpu]
    if not (na >= 0.0) or na != np.floor(na) or na >= index[1]:
        index[0] = 0
        return
    b = np.int64(na)
    old = bucket[n]
    if b == old:
        return
    w = n // 64
    bit = np.uint64(1) << np.uint64(n % 64)
    bits[old, w] &= ~bit
    bits[b, w] |= bit
    bucket[n] = b


@njit(cache=True)
def _select_generic(
    t,
    task_req,
    task_sig,
    task_nom,
    idle,
    rel,
    allocatable,
    cap_gpu,
    pred,
    comps,
    comp_scale,
    gpu,
    cpu,
    gpu_binpack,
    cpu_binpack,
    cand,
):
    rq = task_req[t]
    sig = task_sig[t]
    n_nodes = idle.shape[0]
    nc = 0
    for n in range(n_nodes):
        if _fits(rq, idle, rel, n, False) and _passes(pred, sig, n):
            cand[nc] = n
            nc += 1
    if nc == 0:
        return -1, False
    gpu_task = rq[gpu] > 0
    res = gpu if gpu_task else cpu
    binpack = gpu_binpack if gpu_task else cpu_binpack
    any_valid = False
    lo = 0.0
    hi = 0.0
    for i in range(nc):
        n = cand[i]
        if not (allocatable[n, res] > 0.0):
            continue
        na = idle[n, res] + rel[n, res]
        if not any_valid:
            lo = na
            hi = na
            any_valid = True
        else:
            if na < lo:
                lo = na
            if na > hi:
                hi = na
    nom = task_nom[t]
    best = -1
    best_score = 0.0
    for i in range(nc):
        n = cand[i]
        s = 0.0
        for c in range(comps.shape[0]):
            code = comps[c]
            scale = comp_scale[c]
            v = 0.0
            if code == 1:
                v = scale if _fits(rq, idle, rel, n, True) else 0.0
            elif code == 3:
                v = scale if (not gpu_task and allocatable[n, gpu] <= 0) else 0.0
            elif code == 4:
                v = scale if n == nom else 0.0
            elif code == 5:
                na = idle[n, res] + rel[n, res]
                alloc = allocatable[n, res]
                if binpack:
                    if (not any_valid) or hi == 0.0 or not (alloc > 0.0):
                        v = 0.0
                    elif lo == hi:
                        v = scale
                    else:
                        v = scale * (1.0 - (na - lo) / (hi - lo))
                else:
                    cap = cap_gpu[n] if gpu_task else alloc
                    v = na / cap if cap > 0.0 else 0.0
            s = s + v
        if best < 0 or s > best_score:
            best = n
            best_score = s
    return best, _fits(rq, idle, rel, best, True)


@njit(cache=True)
def _select(
    t,
    task_req,
    task_sig,
    task_nom,
    idle,
    rel,
    allocatable,
    cap_gpu,
    pred,
    comps,
    comp_scale,
    gpu,
    cpu,
    gpu_binpack,
    cpu_binpack,
    cand,
    index,
    bits,
):
    rq = task_req[t]
    g = rq[gpu]
    if index[0] != 0 and g > 0 and g == np.floor(g) and task_nom[t] < 0:
        sig = task_sig[t]
        n_nodes = idle.shape[0]
        for b in range(np.int64(g), index[1]):
            for k in range(index[2]):
                word = bits[b, k]
                if word == 0:
                    continue
                for bit in range(64):
                    if (word >> np.uint64(bit)) & np.uint64(1):
                        n = k * 64 + bit
                        if n < n_nodes and _fits(rq, idle, rel, n, False) and _passes(pred, sig, n):
                            return n, True
        return -1, False
    return _select_generic(
        t,
        task_req,
        task_sig,
        task_nom,
        idle,
        rel,
        allocatable,
        cap_gpu,
        pred,
        comps,
        comp_scale,
        gpu,
        cpu,
        gpu_binpack,
        cpu_binpack,
        cand,
    )


@njit(cache=True)
def _failure_counts(t, task_req, task_sig, idle, rel, pred, out, short, most_free):
    rq = task_req[t]
    sig = task_sig[t]
    out[:] = 0
    short[:] = 0
    most_free[:] = 0.0
    for n in range(idle.shape[0]):
        if not _fits(rq, idle, rel, n, False):
            out[0] += 1
            # per resource: the nodes short of it and the most any of them had free
            for r in range(rq.shape[0]):
                free = idle[n, r] + rel[n, r]
                if rq[r] == 0.0 or rq[r] <= free + EPS:
                    continue
                most_free[r] = free if short[r] == 0 else max(most_free[r], free)
                short[r] += 1
            continue
        for p in range(pred.shape[1]):
            if not pred[sig, p, n]:
                out[1 + p] += 1
                break


@njit(cache=True)
def _loop(
    idle,
    rel,
    used,
    allocatable,
    cap_gpu,
    gpu,
    cpu,
    pred,
    comps,
    comp_scale,
    gpu_binpack,
    cpu_binpack,
    task_req,
    task_qvec,
    task_sig,
    task_nom,
    job_start,
    job_leaf,
    job_min,
    job_np_mode,
    job_key,
    key_kinds,
    max_depth,
    st,
    q_path_start,
    q_path,
    q_deserved,
    q_limit,
    q_fair,
    q_allocatable,
    q_alloc,
    q_alloc_np,
    q_priority,
    q_rank,
    total,
    q_events,
    att,
    att_vec,
    att_fail,
    att_short,
    att_free,
    pl,
):
    n_nodes, n_res = idle.shape
    n_jobs = job_leaf.shape[0]
    n_queues = q_path_start.shape[0] - 1
    n_pred = pred.shape[1]
    # heaps
    heap_off = np.zeros(n_queues + 1, dtype=np.int64)
    for j in range(n_jobs):
        if job_leaf[j] >= 0:
            heap_off[job_leaf[j] + 1] += 1
    for q in range(n_queues):
        heap_off[q + 1] += heap_off[q]
    heap = np.zeros(max(heap_off[n_queues], 1), dtype=np.int64)
    heap_size = np.zeros(n_queues, dtype=np.int64)
    heap_made = np.zeros(n_queues, dtype=np.bool_)
    kids = np.zeros((n_queues + 1, max(n_queues, 1)), dtype=np.int64)
    kids_n = np.zeros(n_queues + 1, dtype=np.int64)
    cur_key = np.zeros((n_jobs, key_kinds.shape[0]), dtype=np.int64)
    jreq = np.zeros((n_jobs, 3))
    jreq_ok = np.zeros(n_jobs, dtype=np.bool_)
    best_job = np.full(n_queues + 1, -1, dtype=np.int64)
    # queues deepest first (children before their parents)
    depth = np.empty(n_queues, dtype=np.int64)
    for q in range(n_queues):
        depth[q] = q_path_start[q + 1] - q_path_start[q]
    by_depth = np.argsort(-depth, kind="mergesort")
    cand = np.zeros(max(n_nodes, 1), dtype=np.int64)
    # bucket index
    index = np.zeros(4, dtype=np.int64)  # on, nb, words, version
    releasing_zero = True
    for n in range(n_nodes):
        for r in range(n_res):
            if rel[n, r] != 0.0:
                releasing_zero = False
    on = releasing_zero and gpu_binpack and n_nodes > 0
    hi = 0.0
    if on:
        for n in range(n_nodes):
            na = idle[n, gpu] + rel[n, gpu]
            if not (na >= 0.0) or na != np.floor(na) or na >= MAX_BUCKETS - 1:
                on = False
                break
            if allocatable[n, gpu] <= 0.0 and na > 0.0:
                on = False
                break
            if na > hi:
                hi = na
    nb = np.int64(hi) + 1 if on else 1
    words = (n_nodes + 63) // 64
    bits = np.zeros((nb, max(words, 1)), dtype=np.uint64)
    bucket = np.full(max(n_nodes, 1), -1, dtype=np.int64)
    if on:
        for n in range(n_nodes):
            b = np.int64(idle[n, gpu] + rel[n, gpu])
            bucket[n] = b
            bits[b, n // 64] |= np.uint64(1) << np.uint64(n % 64)
        index[0] = 1
    index[1] = nb
    index[2] = words
    # failure-count cache
    fc = np.zeros(1 + n_pred, dtype=np.int64)
    fc_short = np.zeros(n_res, dtype=np.int64)
    fc_free = np.zeros(n_res)
    fc_version = -1
    fc_sig = -1
    fc_req = np.zeros(n_res)
    n_att = 0
    n_fail = 0  # the failure rows (att_vec, att_fail, ...) written
    n_pl = 0
    for j in range(n_jobs):
        _push(
            j,
            st,
            job_leaf,
            job_min,
            job_key,
            key_kinds,
            max_depth,
            heap,
            heap_off,
            heap_size,
            heap_made,
            cur_key,
            kids,
            kids_n,
            q_path_start,
            q_path,
            n_queues,
        )
    while True:
        # ---- pop: the best job of every subtree, deepest queues first
        for i in range(n_queues):
            q = by_depth[i]
            if heap_size[q] > 0:
                best_job[q] = heap[heap_off[q]]
                continue
            best_job[q] = _best_child(
                q,
                kids,
                kids_n,
                best_job,
                st,
                job_start,
                job_min,
                task_qvec,
                jreq,
                jreq_ok,
                q_alloc,
                q_fair,
                q_deserved,
                q_allocatable,
                q_priority,
                q_rank,
                total,
            )
        bj = _best_child(
            n_queues,
            kids,
            kids_n,
            best_job,
            st,
            job_start,
            job_min,
            task_qvec,
            jreq,
            jreq_ok,
            q_alloc,
            q_fair,
            q_deserved,
            q_allocatable,
            q_priority,
            q_rank,
            total,
        )
        if bj < 0:
            break
        j = _heap_pop(job_leaf[bj], heap, heap_off, heap_size, cur_key)
        # ---- attempt
        first, count = _chunk(j, st, job_start, job_min)
        pl0 = n_pl
        att[n_att, 0] = j
        att[n_att, 2] = pl0
        att[n_att, 3] = 0
        att[n_att, 4] = -1
        att[n_att, 5] = 0
        att[n_att, 6] = st[j, 1]
        if count == 0:
            att[n_att, 1] = K_NO_TASKS
            n_att += 1
            continue
        leaf = job_leaf[j]
        p0 = q_path_start[leaf]
        p1 = q_path_start[leaf + 1]
        request = np.zeros(3)
        for t in range(first, first + count):
            for r in range(3):
                request[r] = request[r] + task_qvec[t, r]
        over = K_OK
        for k in range(p1 - 1, p0 - 1, -1):
            q = q_path[k]
            for r in range(3):
                if (
                    q_limit[q, r] != UNLIMITED
                    and request[r] > 0
                    and q_limit[q, r] < (q_alloc[q, r] + request[r]) - 1e-9
                ):
                    over = K_OVER_LIMIT
                    break
            if over != K_OK:
                att[n_att, 4] = q
                for s in range(3):
                    att_vec[n_fail, s] = q_alloc[q, s]
                    att_vec[n_fail, 3 + s] = request[s]
                break
        if over == K_OK:
            mode = job_np_mode[j]
            if mode == 0:
                np_count = 0
            elif mode == 1:
                np_count = count
            else:
                room = job_min[j] - st[j, 1]
                np_count = 0 if room < 0 else (room if room < count else count)
            if np_count > 0:
                npreq = np.zeros(3)
                for t in range(first, first + np_count):
                    for r in range(3):
                        npreq[r] = npreq[r] + task_qvec[t, r]
                for k in range(p1 - 1, p0 - 1, -1):
                    q = q_path[k]
                    for r in range(3):
                        if (
                            q_deserved[q, r] != UNLIMITED
                            and npreq[r] > 0
                            and q_deserved[q, r] < (q_alloc_np[q, r] + npreq[r]) - 1e-9
                        ):
                            over = K_OVER_QUOTA
                            break
                    if over != K_OK:
                        att[n_att, 4] = q
                        for s in range(3):
                            att_vec[n_fail, s] = q_alloc_np[q, s]
                            att_vec[n_fail, 3 + s] = npreq[s]
                        break
        if over != K_OK:
            att[n_att, 1] = over
            n_att += 1
            n_fail += 1
            continue
        active_before = st[j, 1]
        had_allocated = st[j, 4] > 0
        placed = 0
        failed = False
        for t in range(first, first + count):
            n, on_idle = _select(
                t,
                task_req,
                task_sig,
                task_nom,
                idle,
                rel,
                allocatable,
                cap_gpu,
                pred,
                comps,
                comp_scale,
                gpu,
                cpu,
                gpu_binpack,
                cpu_binpack,
                cand,
                index,
                bits,
            )
            if n < 0:
                sig = task_sig[t]
                same = fc_version == index[3] and fc_sig == sig
                if same:
                    for r in range(n_res):
                        if fc_req[r] != task_req[t, r]:
                            same = False
                if not same:
                    _failure_counts(t, task_req, task_sig, idle, rel, pred, fc, fc_short, fc_free)
                    fc_version = index[3]
                    fc_sig = sig
                    for r in range(n_res):
                        fc_req[r] = task_req[t, r]
                att[n_att, 1] = K_NO_NODE
                att[n_att, 2] = placed
                att[n_att, 3] = count
                att[n_att, 4] = t
                att[n_att, 6] = active_before
                for k in range(1 + n_pred):
                    att_fail[n_fail, k] = fc[k]
                for r in range(n_res):
                    att_short[n_fail, r] = fc_short[r]
                    att_free[n_fail, r] = fc_free[r]
                n_att += 1
                n_fail += 1
                for k in range(placed - 1, -1, -1):
                    tt = pl[pl0 + k, 0]
                    nn = pl[pl0 + k, 1]
                    pipe = pl[pl0 + k, 2] != 0
                    for x in range(n_res):
                        used[nn, x] = used[nn, x] - task_req[tt, x]
                    if pipe:
                        for x in range(n_res):
                            rel[nn, x] = rel[nn, x] + task_req[tt, x]
                        index[0] = 0
                    else:
                        for x in range(n_res):
                            idle[nn, x] = idle[nn, x] + task_req[tt, x]
                    _touch(nn, idle, rel, gpu, index, bits, bucket)
                    st[j, 1] -= 1
                    if pipe:
                        st[j, 3] -= 1
                    else:
                        st[j, 2] -= 1
                    _charge(
                        j,
                        tt,
                        -1,
                        _np_charge(j, False, st, job_np_mode, job_min),
                        job_leaf,
                        q_path_start,
                        q_path,
                        task_qvec,
                        q_alloc,
                        q_alloc_np,
                        q_events,
                    )
                n_pl = pl0
                jreq_ok[j] = False
                failed = True
                break
            pipe = not on_idle
            for x in range(n_res):
                used[n, x] = used[n, x] + task_req[t, x]
            if pipe:
                for x in range(n_res):
                    rel[n, x] = rel[n, x] - task_req[t, x]
                index[0] = 0
            else:
                for x in range(n_res):
                    idle[n, x] = idle[n, x] - task_req[t, x]
            _touch(n, idle, rel, gpu, index, bits, bucket)
            st[j, 1] += 1
            if pipe:
                st[j, 3] += 1
            else:
                st[j, 2] += 1
            _charge(
                j,
                t,
                1,
                _np_charge(j, True, st, job_np_mode, job_min),
                job_leaf,
                q_path_start,
                q_path,
                task_qvec,
                q_alloc,
                q_alloc_np,
                q_events,
            )
            pl[n_pl, 0] = t
            pl[n_pl, 1] = n
            pl[n_pl, 2] = 1 if pipe else 0
            n_pl += 1
            placed += 1
        if failed:
            continue
        if st[j, 3] > 0 and st[j, 2] < job_min[j]:
            for k in range(placed):
                if pl[pl0 + k, 2]:
                    continue
                tt = pl[pl0 + k, 0]
                nn = pl[pl0 + k, 1]
                for x in range(n_res):
                    used[nn, x] = used[nn, x] - task_req[tt, x]
                for x in range(n_res):
                    idle[nn, x] = idle[nn, x] + task_req[tt, x]
                for x in range(n_res):
                    used[nn, x] = used[nn, x] + task_req[tt, x]
                for x in range(n_res):
                    rel[nn, x] = rel[nn, x] - task_req[tt, x]
                index[0] = 0
                _touch(nn, idle, rel, gpu, index, bits, bucket)
                pl[pl0 + k, 2] = 1
                st[j, 2] -= 1
                st[j, 3] += 1
        binds = 0
        for k in range(placed):
            if not pl[pl0 + k, 2]:
                binds += 1
        att[n_att, 1] = K_OK
        att[n_att, 2] = pl0
        att[n_att, 3] = placed
        att[n_att, 5] = (1 if st[j, 3] > 0 else 0) | (2 if had_allocated else 0)
        att[n_att, 6] = active_before
        n_att += 1
        st[j, 4] += binds
        st[j, 0] += placed
        jreq_ok[j] = False
        if st[j, 0] < job_start[j + 1]:
            _push(
                j,
                st,
                job_leaf,
                job_min,
                job_key,
                key_kinds,
                max_depth,
                heap,
                heap_off,
                heap_size,
                heap_made,
                cur_key,
                kids,
                kids_n,
                q_path_start,
                q_path,
                n_queues,
            )
    return n_att, n_fail, n_pl


def allocate_loop(inputs: dict[str, Any]) -> dict[str, Any]:
    d = inputs
    f64 = np.float64
    i64 = np.int64
    n, r = int(d["N"]), int(d["R"])
    t, j, q = int(d["T"]), int(d["J"]), int(d["Q"])
    s, p, k = int(d["S"]), int(d["P"]), int(d["K"])

    def arr(key, dtype, shape):
        return np.ascontiguousarray(np.asarray(d[key], dtype=dtype).reshape(shape))

    idle = arr("idle", f64, (n, r)).copy()
    rel = arr("releasing", f64, (n, r)).copy()
    used = arr("used", f64, (n, r)).copy()
    q_alloc = arr("q_alloc", f64, (q, 3)).copy()
    q_alloc_np = arr("q_alloc_np", f64, (q, 3)).copy()
    job_start = arr("job_start", i64, (j + 1,))
    st = np.zeros((j, 5), dtype=i64)  # ptr, active, nonpipe, pipelined, allocset
    st[:, 0] = job_start[:-1]
    st[:, 1] = arr("job_active", i64, (j,))
    st[:, 2] = arr("job_nonpipe", i64, (j,))
    st[:, 3] = arr("job_pipelined", i64, (j,))
    st[:, 4] = arr("job_allocset", i64, (j,))
    q_events = np.zeros(q, dtype=i64)
    att = np.zeros((t + j + 1, 7), dtype=i64)
    att_vec = np.zeros((t + j + 1, 6), dtype=f64)
    att_fail = np.zeros((t + j + 1, 1 + p), dtype=i64)
    att_short = np.zeros((t + j + 1, r), dtype=i64)
    att_free = np.zeros((t + j + 1, r), dtype=f64)
    pl = np.zeros((t + 1, 3), dtype=i64)
    n_att, n_fail, n_pl = _loop(
        idle,
        rel,
        used,
        arr("allocatable", f64, (n, r)),
        arr("cap_gpu", f64, (n,)),
        int(d["gpu_col"]),
        int(d["cpu_col"]),
        arr("pred_masks", np.bool_, (s, p, n)),
        arr("comps", i64, (int(d["C"]),)),
        arr("comp_scale", f64, (int(d["C"]),)),
        bool(d["gpu_binpack"]),
        bool(d["cpu_binpack"]),
        arr("task_req", f64, (t, r)),
        arr("task_qvec", f64, (t, 3)),
        arr("task_sig", i64, (t,)),
        arr("task_nom", i64, (t,)),
        job_start,
        arr("job_leaf", i64, (j,)),
        arr("job_min", i64, (j,)),
        arr("job_np_mode", i64, (j,)),
        arr("job_key", i64, (j, k)),
        arr("key_kinds", i64, (k,)),
        int(d["max_depth"]),
        st,
        arr("q_path_start", i64, (q + 1,)),
        arr("q_path", i64, (-1,)),
        arr("q_deserved", f64, (q, 3)),
        arr("q_limit", f64, (q, 3)),
        arr("q_fair", f64, (q, 3)),
        arr("q_allocatable", f64, (q, 3)),
        q_alloc,
        q_alloc_np,
        arr("q_priority", i64, (q,)),
        arr("q_rank", i64, (q,)),
        arr("total", f64, (3,)),
        q_events,
        att,
        att_vec,
        att_fail,
        att_short,
        att_free,
        pl,
    )
    att = att[:n_att]
    pl = pl[:n_pl]
    return {
        "idle": idle,
        "releasing": rel,
        "used": used,
        "q_alloc": q_alloc,
        "q_alloc_np": q_alloc_np,
        "q_events": q_events,
        "att_job": att[:, 0].copy(),
        "att_kind": att[:, 1].copy(),
        "att_first": att[:, 2].copy(),
        "att_count": att[:, 3].copy(),
        "att_info": att[:, 4].copy(),
        "att_flags": att[:, 5].copy(),
        "att_active": att[:, 6].copy(),
        "att_vec": att_vec[:n_fail].copy(),
        "att_fail": att_fail[:n_fail].copy(),
        "att_short": att_short[:n_fail].copy(),
        "att_free": att_free[:n_fail].copy(),
        "pl_task": pl[:, 0].copy(),
        "pl_node": pl[:, 1].copy(),
        "pl_pipe": pl[:, 2].copy(),
    }
