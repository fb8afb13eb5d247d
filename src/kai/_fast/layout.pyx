# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled layout of a victim-search simulation's participants.

Before each simulation it takes, the compiled re-placement
(:mod:`kai.actions.solvers.replacement`) lays the simulation's participants out in
about twenty small arrays: a few participants, a dozen pods. Made with numpy from
Python lists, that costs more than the compiled re-placement itself. :func:`lay_out`
fills the same arrays directly; :func:`kai.actions.solvers.replacement.lay_out` stays
the reference, and the tests hold the two to identical arrays.
"""

from cpython.buffer cimport (
    PyBUF_C_CONTIGUOUS,
    PyBUF_FORMAT,
    PyBUF_WRITABLE,
    PyBuffer_Release,
    PyObject_GetBuffer,
)
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
    object held,
    object vacated,
    tuple bound_before,
    object binding,
    Py_ssize_t n_resources,
    tuple columns,
):
    """:func:`kai.actions.solvers.replacement.victim_arrays`, compiled."""
    cdef Py_ssize_t n = len(tasks), i
    req_a = np.empty((n, n_resources), dtype=np.float64)
    ints_a = np.empty(2 * n, dtype=np.int64)
    np_a = np.empty(n, dtype=np.bool_)
    cdef Py_buffer vr, vi, vb
    cdef double* req = <double*>_open(req_a, &vr)
    cdef long long* at = <long long*>_open(ints_a, &vi)
    cdef long long* leaves = at + n
    cdef unsigned char* flags = <unsigned char*>_open(np_a, &vb)
    cdef Py_ssize_t node
    try:
        for i in range(n):
            task = tasks[i]
            kind = kinds.get(task)
            if kind is None:
                kind = kinds[task] = kind_of(task)
            status = task.status
            node = task.node
            if (
                not kind
                or (
                    status not in bound_before
                    and not (status is binding and not task.pod.node_name)
                )
                or task.virtually_evicted
                or node < 0
                or task in held
                or task in vacated
            ):
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
        ints_a[n:],
        np_a,
    )


def lay_out(list parts, Py_ssize_t n_queues, Py_ssize_t n_resources, tuple columns):
    """:func:`kai.actions.solvers.replacement.lay_out`, compiled."""
    cdef Py_ssize_t n = len(parts)
    cdef Py_ssize_t i, j, k, m, q, t, n_rows = 0
    cdef list order = []
    for i in range(n):
        part = parts[i]
        order.append((part.leaf, part.key, i - n, i))
        n_rows += len(part.rows)
    order.sort()

    # One block per type, cut into the arrays (contiguous views).
    cdef Py_ssize_t n_int = (n_queues + 1) + 5 * n + 1 + 4 * n_rows
    ints_a = np.empty(n_int, dtype=np.int64)
    floats_a = np.empty(4 * n + n_rows * n_resources, dtype=np.float64)
    np_charge_a = np.empty(n, dtype=np.bool_)
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
    cdef double* gpu_need = request + 3 * n
    cdef double* t_req = gpu_need + n
    cdef dict slots = {}
    cdef list stacked = []
    cdef list values
    cdef Py_ssize_t preemptor_at = -1
    try:
        for q in range(n_queues + 1):
            own_start[q] = 0
        t = 0
        task_start[0] = 0
        for m in range(n):
            i = order[m][3]
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
            values = part.nominated
            k = len(values)
            for j in range(k):
                t_nominated[t + j] = values[j]
            values = part.evicted_from
            for j in range(k):
                t_evicted[t + j] = values[j]
            values = part.vacated_at
            for j in range(k):
                t_vacated[t + j] = values[j]
            values = part.masks
            for j in range(k):
                mask = values[j]
                slot = slots.get(id(mask))
                if slot is None:
                    slot = slots[id(mask)] = len(stacked)
                    stacked.append(mask)
                t_mask[t + j] = slot
            values = part.rows
            for j in range(k):
                _row(values[j], t_req + (t + j) * n_resources, n_resources)
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
        np_charge_a,
        floats_a[3 * n : 4 * n],
        np.array(stacked, dtype=np.bool_),
        t_req_a,
        _columns(t_req_a, n_rows, n_resources, columns),
        ints_a[a + 5 * n + 1 : a + 5 * n + 1 + n_rows],
        ints_a[a + 5 * n + 1 + n_rows : a + 5 * n + 1 + 2 * n_rows],
        ints_a[a + 5 * n + 1 + 2 * n_rows : a + 5 * n + 1 + 3 * n_rows],
        ints_a[a + 5 * n + 1 + 3 * n_rows : a + 5 * n + 1 + 4 * n_rows],
    )
