# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled layout of a victim-search simulation's participants.

Before each simulation it takes, the compiled re-placement
(:mod:`kai.actions.solvers.replacement`) lays the simulation's participants out in
about twenty small arrays: a few participants, a dozen pods. Made with numpy from
Python lists, that costs more than the compiled re-placement itself. :func:`lay_out`
fills the same arrays directly, ordering the participants by precomputed ranks instead
of comparing their job-order keys; :func:`gather` puts a scenario's victims and
participants together from its batches, each laid out once per probe
(:func:`pack_victims`). The functions of the same names in
:mod:`kai.actions.solvers.replacement` stay the reference, and the tests hold the two to
identical arrays.
"""

from cpython.buffer cimport (
    PyBUF_C_CONTIGUOUS,
    PyBUF_FORMAT,
    PyBUF_WRITABLE,
    PyBuffer_Release,
    PyObject_GetBuffer,
)
from libc.stdlib cimport free, malloc, qsort
from libc.string cimport memcpy, strcmp

import numpy as np

# Typed memoryviews cost about a microsecond each to take; a simulation's layout takes
# a dozen of them and one per pod, so the buffers are read through the protocol itself.


cdef void _row(object array, double* out, Py_ssize_t n) except *:
    """Copy a contiguous float64 vector of ``n`` elements."""
    cdef Py_buffer view
    PyObject_GetBuffer(array, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)
    try:
        if view.ndim != 1 or view.shape[0] != n or view.itemsize != 8 or view.format == NULL or (
            strcmp(view.format, b"d") != 0 and strcmp(view.format, b"<d") != 0
        ):
            raise TypeError(f"expected a contiguous float64 vector of {n} elements")
        memcpy(out, view.buf, n * sizeof(double))
    finally:
        PyBuffer_Release(&view)


cdef object _columns(object rows, Py_ssize_t n, Py_ssize_t width, tuple columns):
    """``rows[:, columns]``, as a fresh contiguous array (``rows`` is C-contiguous)."""
    cdef Py_ssize_t c = len(columns), i, j
    cdef Py_ssize_t picked[8]
    if c > 8:
        raise ValueError("at most 8 columns")
    for j in range(c):
        picked[j] = columns[j]
        if not (0 <= picked[j] < width):
            raise IndexError(f"column {picked[j]} of rows of {width}")
    out = np.empty((n, c), dtype=np.float64)
    cdef Py_buffer vs, vo
    PyObject_GetBuffer(rows, &vs, PyBUF_C_CONTIGUOUS)
    try:
        PyObject_GetBuffer(out, &vo, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE)
        try:
            for i in range(n):
                for j in range(c):
                    (<double*>vo.buf)[i * c + j] = (<double*>vs.buf)[i * width + picked[j]]
        finally:
            PyBuffer_Release(&vo)
    finally:
        PyBuffer_Release(&vs)
    return out


cdef void* _open(object array, Py_buffer* view) except? NULL:
    """The buffer of a fresh contiguous array, to write (released by the caller)."""
    PyObject_GetBuffer(array, view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE)
    return view.buf


def victims(
    list tasks,
    dict kinds,
    object kind_of,
    dict held,
    object vacated,
    tuple bound_before,
    object binding,
    object pipelined,
    Py_ssize_t n_resources,
    tuple columns,
):
    """:func:`kai.actions.solvers.replacement.victim_arrays`, compiled."""
    cdef Py_ssize_t n = len(tasks), i
    req_a = np.empty((n, n_resources), dtype=np.float64)
    ints_a = np.empty(3 * n, dtype=np.int64)
    flags_a = np.empty(2 * n, dtype=np.bool_)
    cdef Py_buffer vr, vi, vb
    cdef double* req = <double*>_open(req_a, &vr)
    cdef long long* at = <long long*>_open(ints_a, &vi)
    cdef long long* leaves = at + n
    cdef long long* holds = at + 2 * n
    cdef unsigned char* flags = <unsigned char*>_open(flags_a, &vb)
    cdef unsigned char* piped = flags + n
    cdef Py_ssize_t node
    try:
        for i in range(n):
            task = tasks[i]
            kind = kinds.get(task)
            if kind is None:
                kind = kinds[task] = kind_of(task)
            status = task.status
            node = task.node
            if not kind or task.virtually_evicted or node < 0:
                return None
            if status is pipelined and not task.pod.node_name:
                piped[i] = 1
                holds[i] = held.get(task, -1)
            elif (
                status in bound_before or (status is binding and not task.pod.node_name)
            ) and not (task in held or task in vacated):
                piped[i] = 0
                holds[i] = -1
            else:
                return None
            leaves[i] = kind[0]
            flags[i] = 1 if kind[1] else 0
            at[i] = node
            _row(task.request, req + i * n_resources, n_resources)
    finally:
        PyBuffer_Release(&vr)
        PyBuffer_Release(&vi)
        PyBuffer_Release(&vb)
    return (
        req_a,
        _columns(req_a, n, n_resources, columns),
        ints_a[:n],
        ints_a[n : 2 * n],
        flags_a[:n],
        flags_a[n:],
        ints_a[2 * n :],
    )


cdef struct _Ranked:
    double rank
    Py_ssize_t index


cdef int _by_rank(const void* a, const void* b) noexcept nogil:
    cdef const _Ranked* x = <const _Ranked*>a
    cdef const _Ranked* y = <const _Ranked*>b
    if x.rank < y.rank:
        return -1
    if x.rank > y.rank:
        return 1
    return -1 if x.index < y.index else (1 if x.index > y.index else 0)


cdef void _block(object array, double* out, Py_ssize_t n) except *:
    """Copy a C-contiguous float64 array of ``n`` elements."""
    cdef Py_buffer view
    PyObject_GetBuffer(array, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)
    try:
        if view.len != n * 8 or view.itemsize != 8 or view.format == NULL or (
            strcmp(view.format, b"d") != 0 and strcmp(view.format, b"<d") != 0
        ):
            raise TypeError(f"expected a contiguous float64 array of {n} elements")
        memcpy(out, view.buf, n * sizeof(double))
    finally:
        PyBuffer_Release(&view)


# The rows of a participant's per-pod integers (``_Participant.ints``: POD_INTS of them).
cdef enum:
    _POD_INTS = 6


cdef void _pod_ints(object array, long long** out, Py_ssize_t k) except *:
    """Copy a participant's per-pod integers (``[_POD_INTS, k]`` int64, C-contiguous),
    each row to its place in ``out``."""
    cdef Py_buffer view
    cdef Py_ssize_t r
    PyObject_GetBuffer(array, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)
    try:
        if view.len != _POD_INTS * k * 8 or view.itemsize != 8 or view.format == NULL or not (
            strcmp(view.format, b"l") == 0 or strcmp(view.format, b"<l") == 0
            or strcmp(view.format, b"q") == 0 or strcmp(view.format, b"<q") == 0
        ):
            raise TypeError(f"expected contiguous int64 rows of {k} values")
        for r in range(_POD_INTS):
            memcpy(out[r], (<long long*>view.buf) + r * k, k * sizeof(long long))
    finally:
        PyBuffer_Release(&view)


cdef void _flags(object array, unsigned char* out, Py_ssize_t k) except *:
    """Copy a bool vector of ``k`` elements."""
    cdef Py_buffer view
    PyObject_GetBuffer(array, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)
    try:
        if view.len != k or view.itemsize != 1 or view.format == NULL or (
            strcmp(view.format, b"?") != 0
        ):
            raise TypeError(f"expected a bool vector of {k} elements")
        memcpy(out, view.buf, k)
    finally:
        PyBuffer_Release(&view)


def lay_out(list parts, Py_ssize_t n_queues, Py_ssize_t n_resources, tuple columns):
    """:func:`kai.actions.solvers.replacement.lay_out`, compiled.

    The participants are ordered by their ranks (which compare as their (leaf, key)
    pairs do), then by their place in ``parts``: the reference's order, without
    comparing keys.
    """
    cdef Py_ssize_t n = len(parts)
    cdef Py_ssize_t i, j, k, m, q, t, n_rows = 0
    cdef _Ranked* ranked = <_Ranked*>malloc((n if n > 0 else 1) * sizeof(_Ranked))
    if ranked == NULL:
        raise MemoryError()
    cdef list order = [None] * n
    cdef list pods = [None] * n
    try:
        for i in range(n):
            part = parts[i]
            ranked[i].rank = part.rank.value
            ranked[i].index = i
            piped = part.piped
            pods[i] = piped
            n_rows += len(piped)
        qsort(ranked, n, sizeof(_Ranked), _by_rank)
        for m in range(n):
            order[m] = ranked[m].index
    finally:
        free(ranked)

    # One block per type, cut into the arrays (contiguous views).
    cdef Py_ssize_t n_int = (n_queues + 1) + 5 * n + 1 + 6 * n_rows
    ints_a = np.empty(n_int, dtype=np.int64)
    floats_a = np.empty(4 * n + n_rows * n_resources, dtype=np.float64)
    np_charge_a = np.empty(n + n_rows, dtype=np.bool_)
    cdef Py_buffer vi, vf, vb
    cdef long long* own_start = <long long*>_open(ints_a, &vi)
    cdef double* request = <double*>_open(floats_a, &vf)
    cdef unsigned char* np_charge = <unsigned char*>_open(np_charge_a, &vb)
    cdef long long* own = own_start + n_queues + 1
    cdef long long* before = own + n
    cdef long long* leaf = before + n
    cdef long long* np_count = leaf + n
    cdef long long* task_start = np_count + n
    cdef long long* t_mask = task_start + n + 1
    cdef long long* t_nominated = t_mask + n_rows
    cdef long long* t_evicted = t_nominated + n_rows
    cdef long long* t_vacated = t_evicted + n_rows
    cdef long long* t_held = t_vacated + n_rows
    cdef long long* t_also = t_held + n_rows
    cdef unsigned char* t_piped = np_charge + n
    cdef double* gpu_need = request + 3 * n
    cdef double* t_req = gpu_need + n
    cdef long long* rows[_POD_INTS]
    cdef Py_ssize_t preemptor_at = -1
    try:
        for q in range(n_queues + 1):
            own_start[q] = 0
        t = 0
        task_start[0] = 0
        for m in range(n):
            i = order[m]
            part = parts[i]
            q = part.leaf
            if i == n - 1:
                preemptor_at = m
            own_start[q + 1] += 1
            own[m] = m
            before[m] = part.before
            _row(part.request, request + 3 * m, 3)
            leaf[m] = q
            np_count[m] = part.np_count
            np_charge[m] = 1 if part.np_charge else 0
            gpu_need[m] = part.gpu_need
            piped = pods[i]
            k = len(piped)
            # In the order of the rows of _Participant.ints.
            rows[0] = t_nominated + t
            rows[1] = t_evicted + t
            rows[2] = t_vacated + t
            rows[3] = t_held + t
            rows[4] = t_also + t
            rows[5] = t_mask + t
            _pod_ints(part.ints, rows, k)
            _flags(piped, t_piped + t, k)
            _block(part.block, t_req + t * n_resources, k * n_resources)
            t += k
            task_start[m + 1] = t
        for q in range(n_queues):
            own_start[q + 1] += own_start[q]
    finally:
        PyBuffer_Release(&vi)
        PyBuffer_Release(&vf)
        PyBuffer_Release(&vb)
    t_req_a = floats_a[4 * n :].reshape(n_rows, n_resources)
    cdef Py_ssize_t a = n_queues + 1
    return (
        preemptor_at,
        ints_a[:a],
        ints_a[a : a + n],
        ints_a[a + n : a + 2 * n],
        floats_a[: 3 * n].reshape(n, 3),
        ints_a[a + 2 * n : a + 3 * n],
        ints_a[a + 4 * n : a + 5 * n + 1],
        ints_a[a + 3 * n : a + 4 * n],
        np_charge_a[:n],
        floats_a[3 * n : 4 * n],
        t_req_a,
        _columns(t_req_a, n_rows, n_resources, columns),
        ints_a[a + 5 * n + 1 : a + 5 * n + 1 + n_rows],
        ints_a[a + 5 * n + 1 + n_rows : a + 5 * n + 1 + 2 * n_rows],
        ints_a[a + 5 * n + 1 + 2 * n_rows : a + 5 * n + 1 + 3 * n_rows],
        ints_a[a + 5 * n + 1 + 3 * n_rows : a + 5 * n + 1 + 4 * n_rows],
        np_charge_a[n:],
        ints_a[a + 5 * n + 1 + 4 * n_rows : a + 5 * n + 1 + 5 * n_rows],
        ints_a[a + 5 * n + 1 + 5 * n_rows : a + 5 * n + 1 + 6 * n_rows],
        order,
    )


def gather(
    list batches,
    dict slots,
    object make_slot,
    object versions,
    object preemptor,
    set recorded_jobs,
    list recorded_slots,
    object recorded_packed,
    object view,
    Py_ssize_t view_at,
    object feasible,
    Py_ssize_t n_resources,
    object whole,
    object refused,
):
    """:func:`kai.actions.solvers.replacement.gather`, compiled."""
    cdef list chosen = []
    cdef Py_ssize_t width = n_resources + 8, rows = 0, i, j, k, v, at
    for batch in batches:
        key = id(batch)
        slot = slots.get(key)
        if slot is None or (slot is not whole and versions.get(slot.queue, 0) != slot.version):
            slot = make_slot(batch)
            slots[key] = slot
        if slot is whole:
            return None
        if slot.refused:
            return refused
        if slot.job is preemptor:
            return None
        chosen.append(slot)
    cdef set jobs = set()
    for slot in chosen:
        jobs.add(slot.job)
    if len(jobs) != len(chosen) or (recorded_jobs and not recorded_jobs.isdisjoint(jobs)):
        return None
    cdef list blocks = [slot.packed for slot in chosen]
    if recorded_packed is not None:
        blocks.insert(0, recorded_packed)
    for block in blocks:
        rows += block.shape[0]
    req_a = np.empty((rows, n_resources), dtype=np.float64)
    qvec_a = np.empty((rows, 3), dtype=np.float64)
    ints_a = np.empty(3 * rows, dtype=np.int64)
    flags_a = np.empty(2 * rows, dtype=np.bool_)
    within_a = np.array(feasible, dtype=np.bool_, copy=True)
    cdef Py_buffer vr, vq, vi, vf, vw, vb
    cdef double* req = <double*>_open(req_a, &vr)
    cdef double* qvec = <double*>_open(qvec_a, &vq)
    cdef long long* node = <long long*>_open(ints_a, &vi)
    cdef long long* leaf = node + rows
    cdef long long* held = node + 2 * rows
    cdef unsigned char* flags = <unsigned char*>_open(flags_a, &vf)
    cdef unsigned char* piped = flags + rows
    cdef unsigned char* within = <unsigned char*>_open(within_a, &vw)
    cdef Py_ssize_t n_nodes = len(within_a)
    cdef const double* src
    try:
        v = 0
        for block in blocks:
            PyObject_GetBuffer(block, &vb, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)
            try:
                if vb.itemsize != 8 or vb.len % (width * 8) != 0 or vb.format == NULL or (
                    strcmp(vb.format, b"d") != 0 and strcmp(vb.format, b"<d") != 0
                ):
                    raise TypeError(f"expected contiguous float64 rows of {width}")
                k = vb.len // (width * 8)
                src = <const double*>vb.buf
                for i in range(k):
                    for j in range(n_resources):
                        req[v * n_resources + j] = src[i * width + j]
                    for j in range(3):
                        qvec[v * 3 + j] = src[i * width + n_resources + j]
                    at = <Py_ssize_t>src[i * width + n_resources + 3]
                    if not (0 <= at < n_nodes):
                        raise IndexError(f"victim on node {at} of {n_nodes}")
                    node[v] = at
                    within[at] = 1
                    leaf[v] = <long long>src[i * width + n_resources + 4]
                    flags[v] = 1 if src[i * width + n_resources + 5] != 0 else 0
                    piped[v] = 1 if src[i * width + n_resources + 6] != 0 else 0
                    held[v] = <long long>src[i * width + n_resources + 7]
                    v += 1
            finally:
                PyBuffer_Release(&vb)
    finally:
        PyBuffer_Release(&vr)
        PyBuffer_Release(&vq)
        PyBuffer_Release(&vi)
        PyBuffer_Release(&vf)
        PyBuffer_Release(&vw)
    cdef list parts = [slot.part for slot in recorded_slots]
    cdef list skipped = [slot.base_at for slot in recorded_slots if slot.base_at >= 0]
    for slot in chosen:
        parts.append(slot.part)
        if slot.base_at >= 0:
            skipped.append(slot.base_at)
    parts.append(view)
    if view_at >= 0:
        skipped.append(view_at)
    return (
        parts,
        skipped,
        req_a,
        qvec_a,
        ints_a[:rows],
        ints_a[rows : 2 * rows],
        flags_a[:rows],
        flags_a[rows:],
        ints_a[2 * rows :],
        within_a,
    )


def pack_victims(tuple arrays):
    """:func:`kai.actions.solvers.replacement.pack_victims`, compiled."""
    req_a, qvec_a, node_a, leaf_a, flags_a, piped_a, held_a = arrays
    cdef Py_ssize_t rows = len(node_a), i, j
    cdef Py_ssize_t r = req_a.shape[1] if rows else (req_a.shape[1] if req_a.ndim == 2 else 0)
    cdef Py_ssize_t width = r + 8
    out_a = np.empty((rows, width), dtype=np.float64)
    if rows == 0:
        return out_a
    cdef Py_buffer vo, vr, vq, vn, vl, vf, vp, vh
    cdef double* out = <double*>_open(out_a, &vo)
    try:
        PyObject_GetBuffer(req_a, &vr, PyBUF_C_CONTIGUOUS)
        PyObject_GetBuffer(qvec_a, &vq, PyBUF_C_CONTIGUOUS)
        PyObject_GetBuffer(node_a, &vn, PyBUF_C_CONTIGUOUS)
        PyObject_GetBuffer(leaf_a, &vl, PyBUF_C_CONTIGUOUS)
        PyObject_GetBuffer(flags_a, &vf, PyBUF_C_CONTIGUOUS)
        PyObject_GetBuffer(piped_a, &vp, PyBUF_C_CONTIGUOUS)
        PyObject_GetBuffer(held_a, &vh, PyBUF_C_CONTIGUOUS)
        try:
            if (
                vr.len != rows * r * 8 or vq.len != rows * 24 or vn.len != rows * 8
                or vl.len != rows * 8 or vf.len != rows or vp.len != rows
                or vh.len != rows * 8
            ):
                raise TypeError("victims' arrays of unexpected sizes")
            for i in range(rows):
                for j in range(r):
                    out[i * width + j] = (<double*>vr.buf)[i * r + j]
                for j in range(3):
                    out[i * width + r + j] = (<double*>vq.buf)[i * 3 + j]
                out[i * width + r + 3] = <double>(<long long*>vn.buf)[i]
                out[i * width + r + 4] = <double>(<long long*>vl.buf)[i]
                out[i * width + r + 5] = 1.0 if (<unsigned char*>vf.buf)[i] else 0.0
                out[i * width + r + 6] = 1.0 if (<unsigned char*>vp.buf)[i] else 0.0
                out[i * width + r + 7] = <double>(<long long*>vh.buf)[i]
        finally:
            PyBuffer_Release(&vr)
            PyBuffer_Release(&vq)
            PyBuffer_Release(&vn)
            PyBuffer_Release(&vl)
            PyBuffer_Release(&vf)
            PyBuffer_Release(&vp)
            PyBuffer_Release(&vh)
    finally:
        PyBuffer_Release(&vo)
    return out_a
