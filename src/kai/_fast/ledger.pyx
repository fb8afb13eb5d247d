# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled row arithmetic of the session's capacity and queue accounting.

Every statement operation charges a pod's request to a row of the node table
(``used``, ``idle``, ``releasing``) and to its queue and each ancestor's allocation. On
rows of a few resources, numpy's per-call cost is most of the work: a victim search
makes hundreds of thousands of these calls. These functions do the same element-wise
IEEE additions and subtractions as the numpy expressions of
:func:`kai.api.model.charge_rows` and :func:`kai.api.model.add_vector`, which stay the
reference: the results are bit-identical, and the tests hold them to it.
"""

from cpython.buffer cimport (
    PyBUF_C_CONTIGUOUS,
    PyBUF_FORMAT,
    PyBUF_WRITABLE,
    PyBuffer_Release,
    PyObject_GetBuffer,
)
from libc.string cimport strcmp

# The node's status kinds, as kai.api.model.charge_rows numbers them.
cdef enum:
    ON_IDLE = 0
    RELEASING = 1
    PIPELINED = 2


cdef int _get(object array, Py_buffer* view, int flags, int ndim) except -1:
    PyObject_GetBuffer(array, view, flags | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)
    if view.ndim != ndim or view.itemsize != 8 or view.format == NULL or (
        strcmp(view.format, b"d") != 0 and strcmp(view.format, b"<d") != 0
    ):
        PyBuffer_Release(view)
        raise TypeError(f"expected a contiguous float64 array of {ndim} dimension(s)")
    return 0


cdef inline void _add(double* row, const double* r, Py_ssize_t n, bint add) noexcept:
    cdef Py_ssize_t k
    if add:
        for k in range(n):
            row[k] = row[k] + r[k]
    else:
        for k in range(n):
            row[k] = row[k] - r[k]


def charge_rows(
    object used, object idle, object releasing, Py_ssize_t i, object request, int kind,
    bint add,
):
    """:func:`kai.api.model.charge_rows`, compiled."""
    cdef Py_buffer vr, vu, vi, vl
    _get(request, &vr, 0, 1)
    cdef Py_ssize_t n = vr.shape[0]
    cdef const double* r = <const double*>vr.buf
    try:
        _get(used, &vu, PyBUF_WRITABLE, 2)
        try:
            _get(idle, &vi, PyBUF_WRITABLE, 2)
            try:
                _get(releasing, &vl, PyBUF_WRITABLE, 2)
                try:
                    if (
                        vu.shape[1] != n or vi.shape[1] != n or vl.shape[1] != n
                        or not (0 <= i < vu.shape[0]) or vi.shape[0] != vu.shape[0]
                        or vl.shape[0] != vu.shape[0]
                    ):
                        raise IndexError(f"row {i} of a capacity matrix, {n} resources")
                    _add(<double*>vu.buf + i * n, r, n, add)
                    if kind == RELEASING:
                        _add(<double*>vl.buf + i * n, r, n, add)
                        _add(<double*>vi.buf + i * n, r, n, not add)
                    elif kind == PIPELINED:
                        _add(<double*>vl.buf + i * n, r, n, not add)
                    else:
                        _add(<double*>vi.buf + i * n, r, n, not add)
                finally:
                    PyBuffer_Release(&vl)
            finally:
                PyBuffer_Release(&vi)
        finally:
            PyBuffer_Release(&vu)
    finally:
        PyBuffer_Release(&vr)


def add_vector(object target, object vector, bint add):
    """:func:`kai.api.model.add_vector`, compiled."""
    cdef Py_buffer vt, vv
    _get(vector, &vv, 0, 1)
    try:
        _get(target, &vt, PyBUF_WRITABLE, 1)
        try:
            if vt.shape[0] != vv.shape[0]:
                raise ValueError(f"vectors of {vt.shape[0]} and {vv.shape[0]} elements")
            _add(<double*>vt.buf, <const double*>vv.buf, vv.shape[0], add)
        finally:
            PyBuffer_Release(&vt)
    finally:
        PyBuffer_Release(&vv)

