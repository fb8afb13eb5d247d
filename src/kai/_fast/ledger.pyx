# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled row arithmetic of the session's capacity and queue accounting.

Every statement operation charges a pod's request to a row of the node table
(``used``, ``idle``, ``releasing``) and to its queue and each ancestor's allocation. On
rows of a few resources, numpy's per-call cost is most of the work: a victim search
makes hundreds of thousands of these calls. These functions do the same element-wise
IEEE additions and subtractions as the numpy expressions of
:func:`kai.api.model.charge_rows` and :func:`kai.api.model.add_vector`, which stay the
reference: the results are bit-identical, and the tests hold them to it.

``charge_placed`` charges the pods already on nodes to their rows when a state is
built, as :func:`kai.snapshot.builder._charge_placed` does with ``np.add.at``.

``queue_sums`` is the proportion plugin's per-queue sums when a session opens: every
pod's charge added to its queue and each ancestor, one pod at a time, as
:meth:`kai.plugins.proportion.ProportionPlugin._accumulate` does with numpy in bulk.
"""

from cpython.buffer cimport (
    PyBUF_C_CONTIGUOUS,
    PyBUF_FORMAT,
    PyBUF_WRITABLE,
    PyBuffer_Release,
    PyObject_GetBuffer,
)
from libc.string cimport strcmp

from kai.api.model import Job, Task, TaskStatus

from kai._fast.fields cimport (
    J_COUNT, J_INVALID, J_PREEMPTIBILITY, J_PREEMPTIBLE, J_QUEUE, J_TASKS, T_COUNT,
    T_FRACTION, T_GPU_MEMORY, T_NODE, T_REQUEST, T_STATUS, job_field, job_fields,
    sets_as_object, task_field, task_fields, task_shares_gpu,
)
from kai._fast.slots cimport layout, replace

# The classes whose objects are read at their offsets, as C pointers: comparing a
# type with one, or making one, reads a pointer rather than a module global.
cdef type JOB_CLASS = Job
cdef type TASK_CLASS = Task

# The offsets queue_sums reads jobs and tasks at (kai/_fast/fields.pxd).
cdef Py_ssize_t JOB_OFF[J_COUNT]
cdef Py_ssize_t TASK_OFF[T_COUNT]
cdef bint JOB_SLOTS = layout(Job, job_fields(), JOB_OFF)
cdef bint TASK_SLOTS = layout(Task, task_fields(), TASK_OFF)

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


cdef int _get3(object a, object b, object c, Py_buffer* views) except -1:
    """Open three writable contiguous float64 matrices into ``views[0..2]`` (released
    by :func:`_release3`); on a failure, the ones already open are released."""
    _get(a, &views[0], PyBUF_WRITABLE, 2)
    try:
        _get(b, &views[1], PyBUF_WRITABLE, 2)
    except BaseException:
        PyBuffer_Release(&views[0])
        raise
    try:
        _get(c, &views[2], PyBUF_WRITABLE, 2)
    except BaseException:
        PyBuffer_Release(&views[1])
        PyBuffer_Release(&views[0])
        raise
    return 0


cdef inline void _release3(Py_buffer* views) noexcept:
    PyBuffer_Release(&views[2])
    PyBuffer_Release(&views[1])
    PyBuffer_Release(&views[0])


cdef inline void _add(double* row, const double* r, Py_ssize_t n, bint add) noexcept:
    cdef Py_ssize_t k
    if add:
        for k in range(n):
            row[k] = row[k] + r[k]
    else:
        for k in range(n):
            row[k] = row[k] - r[k]


cdef inline void _charge(Py_buffer* v, Py_ssize_t i, const double* r, Py_ssize_t n, int kind,
                         bint add) noexcept:
    _add(<double*>v[0].buf + i * n, r, n, add)
    if kind == RELEASING:
        _add(<double*>v[2].buf + i * n, r, n, add)
        _add(<double*>v[1].buf + i * n, r, n, not add)
    elif kind == PIPELINED:
        _add(<double*>v[2].buf + i * n, r, n, not add)
    else:
        _add(<double*>v[1].buf + i * n, r, n, not add)


cdef int _rows(
    object used, object idle, object releasing, Py_ssize_t i, object request,
    Py_buffer* vr, Py_buffer* v,
) except -1:
    """Acquire ``request`` (into ``vr``) and the three matrices (into ``v``), checking
    that row ``i`` of each takes the request; every buffer is released on an error."""
    _get(request, vr, 0, 1)
    cdef Py_ssize_t n = vr.shape[0]
    try:
        _get3(used, idle, releasing, v)
    except BaseException:
        PyBuffer_Release(vr)
        raise
    if (
        v[0].shape[1] != n or v[1].shape[1] != n or v[2].shape[1] != n
        or not (0 <= i < v[0].shape[0]) or v[1].shape[0] != v[0].shape[0]
        or v[2].shape[0] != v[0].shape[0]
    ):
        _release3(v)
        PyBuffer_Release(vr)
        raise IndexError(f"row {i} of a capacity matrix, {n} resources")
    return 0


def charge_rows(
    object used, object idle, object releasing, Py_ssize_t i, object request, int kind,
    bint add,
):
    """:func:`kai.api.model.charge_rows`, compiled."""
    cdef Py_buffer vr
    cdef Py_buffer v[3]  # used, idle, releasing
    _rows(used, idle, releasing, i, request, &vr, v)
    _charge(v, i, <const double*>vr.buf, vr.shape[0], kind, add)
    _release3(v)
    PyBuffer_Release(&vr)


def recharge_rows(
    object used, object idle, object releasing, Py_ssize_t i, object request, int old_kind,
    int new_kind,
):
    """:func:`kai.api.model.recharge_rows`, compiled."""
    cdef Py_buffer vr
    cdef Py_buffer v[3]
    _rows(used, idle, releasing, i, request, &vr, v)
    _charge(v, i, <const double*>vr.buf, vr.shape[0], old_kind, False)
    _charge(v, i, <const double*>vr.buf, vr.shape[0], new_kind, True)
    _release3(v)
    PyBuffer_Release(&vr)


cdef int _add_into(object target, Py_buffer* vv, bint add) except -1:
    """Add (or subtract) the open vector ``vv`` to the vector ``target``."""
    cdef Py_buffer vt
    _get(target, &vt, PyBUF_WRITABLE, 1)
    try:
        if vt.shape[0] != vv.shape[0]:
            raise ValueError(f"vectors of {vt.shape[0]} and {vv.shape[0]} elements")
        _add(<double*>vt.buf, <const double*>vv.buf, vv.shape[0], add)
    finally:
        PyBuffer_Release(&vt)
    return 0


def add_vector(object target, object vector, bint add):
    """:func:`kai.api.model.add_vector`, compiled."""
    cdef Py_buffer vv
    _get(vector, &vv, 0, 1)
    try:
        _add_into(target, &vv, add)
    finally:
        PyBuffer_Release(&vv)


def add_vector_to_each(tuple targets, object vector, bint add):
    """:func:`kai.api.model.add_vector_to_each`, compiled."""
    cdef Py_buffer vv
    cdef object target
    _get(vector, &vv, 0, 1)
    try:
        for target in targets:
            _add_into(target, &vv, add)
    finally:
        PyBuffer_Release(&vv)


# A task's status is written at its offset only where Task sets attributes as object does.
cdef bint TASK_WRITES = TASK_SLOTS and sets_as_object(Task)
cdef object STATUS_RELEASING = TaskStatus.RELEASING
cdef object STATUS_PIPELINED = TaskStatus.PIPELINED


cdef inline int _row_kind(object status) noexcept:
    """kai.api.model's row kind of a status (``_ROW_KIND``)."""
    if status is STATUS_RELEASING:
        return RELEASING
    if status is STATUS_PIPELINED:
        return PIPELINED
    return ON_IDLE


def restatus_all(object used, object idle, object releasing, list tasks, list statuses):
    """:func:`kai.api.model.restatus_tasks`, compiled: the matrices are opened once and
    each task read (and its status written) at its offsets."""
    cdef Py_ssize_t count = len(tasks)
    if len(statuses) != count:
        raise ValueError("tasks and statuses of different lengths")
    cdef Py_buffer v[3]  # used, idle, releasing
    cdef Py_buffer vr
    cdef Py_ssize_t k, i, n, n_rows
    cdef bint direct
    _get3(used, idle, releasing, v)
    try:
        n_rows, n = v[0].shape[0], v[0].shape[1]
        if (
            v[1].shape[0] != n_rows or v[2].shape[0] != n_rows
            or v[1].shape[1] != n or v[2].shape[1] != n
        ):
            raise IndexError("capacity matrices of different shapes")
        for k in range(count):
            task = tasks[k]
            direct = TASK_SLOTS and type(task) is TASK_CLASS
            i = task_field(task, direct, TASK_OFF, T_NODE)
            _get(task_field(task, direct, TASK_OFF, T_REQUEST), &vr, 0, 1)
            if vr.shape[0] != n or not (0 <= i < n_rows):
                PyBuffer_Release(&vr)
                raise IndexError(f"row {i} of a capacity matrix, {n} resources")
            _charge(
                v, i, <const double*>vr.buf, n,
                _row_kind(task_field(task, direct, TASK_OFF, T_STATUS)), False,
            )
            _charge(v, i, <const double*>vr.buf, n, _row_kind(statuses[k]), True)
            PyBuffer_Release(&vr)
    finally:
        _release3(v)
    # The statuses after every row: each row moved from the status the task had before.
    for k in range(count):
        task = tasks[k]
        if TASK_WRITES and type(task) is TASK_CLASS:
            replace(task, TASK_OFF[T_STATUS], statuses[k])
        else:
            task.status = statuses[k]


cdef bint _is_int64(const char* fmt) noexcept:
    """Whether a buffer format is an 8-byte signed integer (numpy's intp and int64)."""
    if fmt == NULL:
        return False
    if fmt[0] == b"<" or fmt[0] == b"=" or fmt[0] == b"@":
        fmt += 1
    return (fmt[0] == b"l" or fmt[0] == b"q" or fmt[0] == b"n") and fmt[1] == 0


def add_at(object target, object index, object values):
    """``np.add.at(target, index, values)`` for a float64 vector or matrix ``target``,
    an int64 ``index`` and ``values`` of one element or row per index: the same
    additions, one at a time in index order, so the same bits."""
    cdef Py_buffer vt, vi, vv
    cdef Py_ssize_t k, j, n, width, count, row
    cdef double* t
    cdef const double* v
    cdef const long long* idx
    PyObject_GetBuffer(target, &vt, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)
    try:
        if vt.ndim not in (1, 2) or vt.itemsize != 8 or vt.format == NULL or (
            strcmp(vt.format, b"d") != 0 and strcmp(vt.format, b"<d") != 0
        ):
            raise TypeError("expected a contiguous float64 vector or matrix")
        n = vt.shape[0]
        width = 1 if vt.ndim == 1 else vt.shape[1]
        _get(values, &vv, 0, vt.ndim)
        try:
            PyObject_GetBuffer(index, &vi, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)
            try:
                if vi.ndim != 1 or vi.itemsize != 8 or not _is_int64(vi.format):
                    raise TypeError("expected a contiguous int64 index")
                count = vi.shape[0]
                if vv.shape[0] != count or (vt.ndim == 2 and vv.shape[1] != width):
                    raise ValueError(f"{count} indices and values of shape {vv.shape[0]}")
                t = <double*>vt.buf
                v = <const double*>vv.buf
                idx = <const long long*>vi.buf
                for k in range(count):
                    if not (0 <= idx[k] < n):
                        raise IndexError(f"index {idx[k]} out of bounds for {n} rows")
                for k in range(count):
                    row = idx[k] * width
                    for j in range(width):
                        t[row + j] = t[row + j] + v[k * width + j]
            finally:
                PyBuffer_Release(&vi)
        finally:
            PyBuffer_Release(&vv)
    finally:
        PyBuffer_Release(&vt)


def charge_placed(object used, object idle, list node_tasks, list placed, tuple not_idle):
    """The bulk charge of :func:`kai.snapshot.builder._charge_placed`, compiled: each
    task's request added to row ``task.node`` of ``used`` and its negation to that row
    of ``idle``, one task at a time in list order (the bits of ``np.add.at`` on the
    stacked requests), and the task added to ``node_tasks[task.node]``.

    False, with nothing written, when a task is not charged in bulk: its status is one
    of ``not_idle`` (releasing or pipelined), or it asks for a fraction of a GPU or GPU
    memory.  The rows are checked before anything is written; a request of the wrong
    length raises on the way."""
    cdef Py_buffer vu, vi, vr
    cdef Py_ssize_t n, width, row, j
    cdef double* u
    cdef double* d
    cdef const double* r
    cdef bint open_request = False, direct
    cdef object task, request, status, last = None
    cdef list rows = []
    for task in placed:
        direct = TASK_SLOTS and type(task) is TASK_CLASS
        status = task_field(task, direct, TASK_OFF, T_STATUS)
        for other in not_idle:
            if status is other:
                return False
        if task_shares_gpu(task, direct, TASK_OFF):
            return False
        rows.append(task_field(task, direct, TASK_OFF, T_NODE))
    _get(used, &vu, PyBUF_WRITABLE, 2)
    try:
        _get(idle, &vi, PyBUF_WRITABLE, 2)
        try:
            n = vu.shape[0]
            width = vu.shape[1]
            if vi.shape[0] != n or vi.shape[1] != width or len(node_tasks) != n:
                raise ValueError("used, idle and the node task sets of different sizes")
            for node in rows:
                row = node
                if not (0 <= row < n):
                    raise IndexError(f"node {row} out of bounds for {n} nodes")
            for i in range(len(placed)):
                task = placed[i]
                row = rows[i]
                direct = TASK_SLOTS and type(task) is TASK_CLASS
                request = task_field(task, direct, TASK_OFF, T_REQUEST)
                if request is not last:  # tasks of one workload share their vector
                    if open_request:
                        PyBuffer_Release(&vr)
                        open_request = False
                    _get(request, &vr, 0, 1)
                    open_request = True
                    if vr.shape[0] != width:
                        raise ValueError(f"a request of {vr.shape[0]} resources, not {width}")
                    last = request
                r = <const double*>vr.buf
                u = <double*>vu.buf + row * width
                d = <double*>vi.buf + row * width
                for j in range(width):
                    u[j] = u[j] + r[j]
                    d[j] = d[j] + (-r[j])
                (<set?>node_tasks[row]).add(task)
        finally:
            if open_request:
                PyBuffer_Release(&vr)
            PyBuffer_Release(&vi)
    finally:
        PyBuffer_Release(&vu)
    return True


# The most distinct targets add_vectors_to_each keeps open at once (a queue path's
# vectors: more are opened for each addition).
cdef enum:
    MAX_OPEN_TARGETS = 32


def add_vectors_to_each(list targets, list vectors, bint add):
    """:func:`kai.api.model.add_vectors_to_each`, compiled: each target is opened once."""
    cdef Py_ssize_t count = len(targets)
    if len(vectors) != count:
        raise ValueError("targets and vectors of different lengths")
    cdef Py_buffer opened[MAX_OPEN_TARGETS]
    cdef void* keys[MAX_OPEN_TARGETS]
    cdef Py_ssize_t n_open = 0, k, j
    cdef Py_buffer vv
    cdef object target
    try:
        for k in range(count):
            _get(vectors[k], &vv, 0, 1)
            try:
                for target in <tuple>targets[k]:
                    j = 0
                    while j < n_open and keys[j] != <void*>target:
                        j += 1
                    if j == n_open:
                        if n_open == MAX_OPEN_TARGETS:
                            _add_into(target, &vv, add)
                            continue
                        _get(target, &opened[j], PyBUF_WRITABLE, 1)
                        keys[j] = <void*>target
                        n_open += 1
                    if opened[j].shape[0] != vv.shape[0]:
                        raise ValueError(
                            f"vectors of {opened[j].shape[0]} and {vv.shape[0]} elements"
                        )
                    _add(<double*>opened[j].buf, <const double*>vv.buf, vv.shape[0], add)
            finally:
                PyBuffer_Release(&vv)
    finally:
        for j in range(n_open):
            PyBuffer_Release(&opened[j])


cdef inline bint _is_any(object value, tuple among) noexcept:
    """Whether ``value`` is one of ``among`` (identity: statuses are enum members)."""
    cdef object member
    for member in among:
        if value is member:
            return True
    return False


cdef inline void _charge_path(
    double* out, const Py_ssize_t* rows, Py_ssize_t n_rows, const double* vec
) noexcept:
    cdef Py_ssize_t i
    cdef double* row
    for i in range(n_rows):
        row = out + rows[i] * 3
        row[0] = row[0] + vec[0]
        row[1] = row[1] + vec[1]
        row[2] = row[2] + vec[2]


# The deepest queue path queue_sums takes (the caller sums deeper trees itself).
cdef enum:
    MAX_QUEUE_DEPTH = 64

QUEUE_DEPTH_LIMIT = MAX_QUEUE_DEPTH


def queue_sums(
    object jobs,
    dict paths,
    tuple allocated_statuses,
    object pending,
    object semi_preemptible,
    object shared_vector,
    object request_out,
    object allocated_out,
    object allocated_np_out,
    Py_ssize_t cpu,
    Py_ssize_t memory,
    Py_ssize_t gpu,
):
    """The queues' request, allocated and non-preemptible sums of
    :meth:`kai.plugins.proportion.ProportionPlugin._accumulate`, compiled.

    ``paths`` maps each queue to the rows of its queue and ancestors; a job of another
    queue, or an invalid one, is not counted. Every pod's [cpu, memory, gpu] is added
    to each of its rows in the order of jobs and tasks (the order the reference's one
    bincount adds them in), so the sums are bit-identical. ``shared_vector(task,
    allocated)`` gives the charge of a pod asking for GPU memory (a device fraction
    charges its request's cpu and memory and the fraction). The three (queues x 3) matrices
    receive the sums; they are expected zero.
    """
    cdef Py_buffer vr
    cdef Py_buffer v[3]  # request, allocated, allocated non-preemptible
    cdef Py_ssize_t n_q, n_rows, i, width = 0
    cdef double vec[3]
    cdef double fraction
    cdef bint allocated, charge_np, non_preemptible, direct, task_direct
    cdef object path, job, task, status, core, request, last = None, shared
    cdef Py_ssize_t rows[MAX_QUEUE_DEPTH]
    for path in paths.values():
        if len(path) > MAX_QUEUE_DEPTH:
            raise ValueError(f"a queue path deeper than {MAX_QUEUE_DEPTH} levels")
        for i in path:
            width = max(width, i + 1)
    _get3(request_out, allocated_out, allocated_np_out, v)
    try:
        n_q = v[0].shape[0]
        if (
            v[0].shape[1] != 3 or v[1].shape[1] != 3 or v[2].shape[1] != 3
            or v[1].shape[0] != n_q or v[2].shape[0] != n_q or width > n_q
        ):
            raise IndexError(f"queue sums of {n_q} queues, paths to row {width - 1}")
        for job in jobs:
            direct = JOB_SLOTS and type(job) is JOB_CLASS
            path = paths.get(job_field(job, direct, JOB_OFF, J_QUEUE))
            if path is None or job_field(job, direct, JOB_OFF, J_INVALID):
                continue
            n_rows = len(path)
            for i in range(n_rows):
                rows[i] = path[i]
            if job_field(job, direct, JOB_OFF, J_PREEMPTIBILITY) == semi_preemptible:
                core = job.core_tasks()
            else:
                core = ()
            non_preemptible = not job_field(job, direct, JOB_OFF, J_PREEMPTIBLE)
            for task in job_field(job, direct, JOB_OFF, J_TASKS):
                task_direct = TASK_SLOTS and type(task) is TASK_CLASS
                status = task_field(task, task_direct, TASK_OFF, T_STATUS)
                if _is_any(status, allocated_statuses):
                    allocated = True
                    charge_np = (task in core) if core else non_preemptible
                elif status is pending:
                    allocated = charge_np = False
                else:
                    continue
                fraction = task_field(task, task_direct, TASK_OFF, T_FRACTION)
                if not fraction > 0 and task_field(task, task_direct, TASK_OFF, T_GPU_MEMORY) > 0:
                    shared = shared_vector(task, allocated)
                    vec[0], vec[1], vec[2] = shared[0], shared[1], shared[2]
                    last = None  # vec no longer holds a request's columns
                else:
                    request = task_field(task, task_direct, TASK_OFF, T_REQUEST)
                    if request is not last:  # neighbours mostly share it
                        _get(request, &vr, 0, 1)
                        try:
                            if not (0 <= cpu < vr.shape[0] and 0 <= memory < vr.shape[0]
                                    and 0 <= gpu < vr.shape[0]):
                                raise IndexError("a request without a queue column")
                            vec[0] = (<const double*>vr.buf)[cpu]
                            vec[1] = (<const double*>vr.buf)[memory]
                            vec[2] = (<const double*>vr.buf)[gpu]
                        finally:
                            PyBuffer_Release(&vr)
                        last = request
                    if fraction > 0:
                        # A device fraction charges the fraction wherever it runs
                        # (queue_charge), without the callback.
                        vec[2] = fraction
                        last = None
                _charge_path(<double*>v[0].buf, rows, n_rows, vec)
                if allocated:
                    _charge_path(<double*>v[1].buf, rows, n_rows, vec)
                    if charge_np:
                        _charge_path(<double*>v[2].buf, rows, n_rows, vec)
    finally:
        _release3(v)
