# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled per-job and per-task loops of the actions and the fused allocate loop.

``scan_jobs`` picks the jobs an action may try (every action starts with it).
``job_columns`` and ``task_columns`` read every job and pending task of a session into the loop's columns;
``place_decisions`` puts the placed tasks on their nodes and makes their decisions;
``record_fit_messages`` records the failed attempts' messages. Each is the compiled
form of the Python function of the same name (``kai.actions.common.scan_jobs``, the
others ``kai.actions.fast_allocate``'s), which stays the reference: both give the same
jobs, columns and state. Integer columns come
as ``array('q')`` rather than lists: the same values, which numpy takes as one block.
"""

from cpython cimport array
from cpython.datetime cimport (
    PyDateTime_CheckExact, PyDateTime_DATE_GET_TZINFO, datetime_day, datetime_hour,
    datetime_microsecond, datetime_minute, datetime_month, datetime_second, datetime_year,
    import_datetime,
)
from cpython.long cimport PyLong_FromVoidPtr
from cpython.unicode cimport PyUnicode_Check
from libc.stdlib cimport free, malloc, qsort
from libc.string cimport memcmp, memcpy, memset

from datetime import timezone

from kai.actions.common import job_unready_reason
from kai.api.model import ACTIVE_ALLOCATED, ALIVE, ALLOCATED, Job, Task, TaskStatus
from kai.api.preemptibility import SEMI_PREEMPTIBLE as _SEMI_PREEMPTIBLE
from kai.framework.session import Decision, default_order_key

from kai._fast.fields cimport (
    D_ACTION, D_ANNOTATIONS, D_COUNT, D_GPU_GROUPS, D_NODE, D_POD, D_REASON, D_TASK,
    D_TYPE, J_COUNT, J_CREATED, J_INVALID, J_MIN_MEMBER, J_PREEMPTIBILITY, J_PREEMPTIBLE,
    J_PRIORITY, J_QUEUE, J_TASKS, J_UID, T_COUNT, T_EVICTED, T_FRACTION, T_GPU_MEMORY,
    T_NODE, T_POD, T_REQUEST, T_STATUS, decision_fields, job_field, job_fields,
    sets_as_object, task_field, task_fields, task_key,
)
from kai._fast.slots cimport layout, new_object, put, replace

# The classes whose objects are read at their offsets, as C pointers: comparing a
# type with one, or making one, reads a pointer rather than a module global.
cdef type JOB_CLASS = Job
cdef type TASK_CLASS = Task
cdef str SEMI_PREEMPTIBLE = _SEMI_PREEMPTIBLE  # compared with every job's
cdef type DECISION_CLASS = Decision

cdef array.array INT64 = array.array("q")

import_datetime()
cdef object UTC = timezone.utc

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object unicode, Py_ssize_t* size) except NULL

cdef object PENDING = TaskStatus.PENDING
cdef object PIPELINED = TaskStatus.PIPELINED
cdef object BINDING = TaskStatus.BINDING

cdef Py_ssize_t JOB_OFF[J_COUNT]
cdef bint JOB_SLOTS = layout(Job, job_fields(), JOB_OFF)
cdef Py_ssize_t TASK_OFF[T_COUNT]
# Tasks are also written at these offsets (place_decisions).
cdef bint TASK_SLOTS = layout(Task, task_fields(), TASK_OFF) and sets_as_object(Task)
cdef Py_ssize_t DECISION_OFF[D_COUNT]
cdef bint DECISION_DIRECT = layout(Decision, decision_fields(), DECISION_OFF)


def scan_jobs(ssn, jobs, list with_pending, bint pending_only, bint preemptible_only, check):
    """``kai.actions.common.scan_jobs``, compiled."""
    cdef list out = []
    cdef frozenset alive_statuses = ALIVE
    cdef Py_ssize_t alive
    cdef bint has_pending, direct, task_direct
    record = ssn.record_fit_error
    for job in jobs:
        direct = JOB_SLOTS and type(job) is JOB_CLASS
        invalid = job_field(job, direct, JOB_OFF, J_INVALID)
        if invalid:
            record(job, invalid)
            continue
        alive = 0
        has_pending = False
        for t in <list?>job_field(job, direct, JOB_OFF, J_TASKS):
            task_direct = TASK_SLOTS and type(t) is TASK_CLASS
            status = task_field(t, task_direct, TASK_OFF, T_STATUS)
            if status in alive_statuses:
                alive += 1
                if status is PENDING:
                    has_pending = True
        if with_pending is not None and has_pending:
            with_pending.append(job)
        if pending_only and not has_pending:
            continue
        if alive < job_field(job, direct, JOB_OFF, J_MIN_MEMBER):
            record(job, job_unready_reason(job))
            continue
        if preemptible_only and not job_field(job, direct, JOB_OFF, J_PREEMPTIBLE):
            continue
        if check is not None:
            problem = check(job)
            if problem:
                record(job, problem)
                continue
        out.append(job)
    return out


def job_columns(list jobs, dict qidx, list task_keys, frozenset key_labels, bint fractions):
    """``kai.actions.fast_allocate.job_columns``, compiled."""
    cdef Py_ssize_t n = len(jobs)
    cdef list tasks = []
    cdef array.array job_start = array.clone(INT64, n + 1, zero=False)
    cdef list counted = []
    cdef array.array job_leaf = array.clone(INT64, n, zero=False)
    cdef array.array job_min = array.clone(INT64, n, zero=False)
    cdef array.array job_np_mode = array.clone(INT64, n, zero=False)
    cdef array.array job_priority = array.clone(INT64, n, zero=False)
    cdef list created = []  # each job's creation time and uid: its default-order key
    cdef list uids = []
    cdef frozenset active_allocated = ACTIVE_ALLOCATED
    cdef frozenset allocated = ALLOCATED
    cdef list job_tasks, pending
    cdef Py_ssize_t j = 0
    cdef Py_ssize_t active, nonpipe, pipelined, allocset
    cdef bint direct, task_direct
    job_start.data.as_longlongs[0] = 0
    for job in jobs:
        direct = JOB_SLOTS and type(job) is JOB_CLASS
        queue = job_field(job, direct, JOB_OFF, J_QUEUE)
        job_leaf.data.as_longlongs[j] = -1 if queue is None else qidx.get(queue, -1)
        job_min.data.as_longlongs[j] = job_field(job, direct, JOB_OFF, J_MIN_MEMBER)
        if job_field(job, direct, JOB_OFF, J_PREEMPTIBILITY) == SEMI_PREEMPTIBLE:
            job_np_mode.data.as_longlongs[j] = 2
        elif job_field(job, direct, JOB_OFF, J_PREEMPTIBLE):
            job_np_mode.data.as_longlongs[j] = 0
        else:
            job_np_mode.data.as_longlongs[j] = 1
        job_priority.data.as_longlongs[j] = -job_field(job, direct, JOB_OFF, J_PRIORITY)
        created.append(job_field(job, direct, JOB_OFF, J_CREATED))
        uids.append(job_field(job, direct, JOB_OFF, J_UID))
        job_tasks = job_field(job, direct, JOB_OFF, J_TASKS)
        if len(job_tasks) == 1:
            t = job_tasks[0]
            task_direct = TASK_SLOTS and type(t) is TASK_CLASS
            if task_field(t, task_direct, TASK_OFF, T_STATUS) is PENDING:
                if task_field(t, task_direct, TASK_OFF, T_GPU_MEMORY) > 0 or (
                    task_field(t, task_direct, TASK_OFF, T_FRACTION) > 0 and not fractions
                ):
                    return None
                tasks.append(t)
                job_start.data.as_longlongs[j + 1] = len(tasks)
                j += 1
                continue
        pending = []
        active = nonpipe = pipelined = allocset = 0
        for t in job_tasks:
            task_direct = TASK_SLOTS and type(t) is TASK_CLASS
            status = task_field(t, task_direct, TASK_OFF, T_STATUS)
            if status is PENDING:
                if task_field(t, task_direct, TASK_OFF, T_GPU_MEMORY) > 0 or (
                    task_field(t, task_direct, TASK_OFF, T_FRACTION) > 0 and not fractions
                ):
                    return None
                pending.append(t)
                continue
            if task_field(t, task_direct, TASK_OFF, T_EVICTED):
                return None
            if status in active_allocated:
                active += 1
                if status is PIPELINED:
                    pipelined += 1
                else:
                    nonpipe += 1
            if status in allocated:
                allocset += 1
        if len(pending) > 1:
            pending.sort(key=default_order_key)
            if any(not key_labels.isdisjoint(t.pod.labels) for t in pending):
                for key_fn in reversed(task_keys):
                    pending.sort(key=key_fn)
        tasks.extend(pending)
        job_start.data.as_longlongs[j + 1] = len(tasks)
        if active or allocset:
            counted.append((j, active, nonpipe, pipelined, allocset))
        j += 1
    return (
        tasks, job_start, counted, job_leaf, job_min, job_np_mode, job_priority,
        default_ranks(created, uids),
    )


# One job's default-order key in C: its creation time (UTC microseconds, after every
# time where it has none) and its uid's UTF-8 bytes, whose order is the code points'.
cdef struct DefaultKey:
    long long created
    const char* uid
    Py_ssize_t uid_size
    Py_ssize_t index


cdef int by_default_order(const void* a, const void* b) noexcept nogil:
    cdef const DefaultKey* x = <const DefaultKey*>a
    cdef const DefaultKey* y = <const DefaultKey*>b
    if x.created != y.created:
        return -1 if x.created < y.created else 1
    cdef Py_ssize_t n = x.uid_size if x.uid_size < y.uid_size else y.uid_size
    cdef int c = memcmp(x.uid, y.uid, n)
    if c != 0:
        return c
    if x.uid_size != y.uid_size:
        return -1 if x.uid_size < y.uid_size else 1
    return -1 if x.index < y.index else (1 if x.index > y.index else 0)  # a stable sort


cdef long long days_from_civil(long long y, long long m, long long d) noexcept nogil:
    """Days from 1970-01-01 to a proleptic Gregorian date."""
    y -= m <= 2
    cdef long long era = (y if y >= 0 else y - 399) // 400
    cdef long long yoe = y - era * 400
    cdef long long doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    cdef long long doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


cdef void sort_rows(DefaultKey* rows, DefaultKey* spare, Py_ssize_t n) noexcept nogil:
    """Sort ``rows`` as by_default_order does: stably by creation time, eight bits a
    pass from the lowest (a pass whose byte all rows share is skipped), then each run
    of one time by uid (and input order) with qsort.  ``spare`` holds n rows."""
    cdef Py_ssize_t count[256]
    cdef Py_ssize_t i, start, total
    cdef int shift, digit
    cdef DefaultKey* src = rows
    cdef DefaultKey* dst = spare
    cdef DefaultKey* swap
    cdef unsigned long long flip = 1ULL << 63  # signed order as unsigned
    for shift in range(0, 64, 8):
        memset(count, 0, sizeof(count))
        for i in range(n):
            count[((<unsigned long long>src[i].created ^ flip) >> shift) & 255] += 1
        digit = ((<unsigned long long>src[0].created ^ flip) >> shift) & 255
        if count[digit] == n:
            continue
        total = 0
        for digit in range(256):
            start = total
            total += count[digit]
            count[digit] = start
        for i in range(n):
            digit = ((<unsigned long long>src[i].created ^ flip) >> shift) & 255
            dst[count[digit]] = src[i]
            count[digit] += 1
        swap = src
        src = dst
        dst = swap
    if src != rows:
        memcpy(rows, src, n * sizeof(DefaultKey))
    start = 0
    while start < n:
        i = start + 1
        while i < n and rows[i].created == rows[start].created:
            i += 1
        if i - start > 1:
            qsort(rows + start, i - start, sizeof(DefaultKey), by_default_order)
        start = i


cdef object default_ranks(list created, list uids):
    """Each job's position in the default order of its creation time and uid
    (default_order_key's), as the reference's stable sort gives it; None when two jobs
    have equal keys. Sorted in C where every creation time is a datetime in UTC and
    every uid a string; else by the keys."""
    cdef Py_ssize_t n = len(created), i
    cdef array.array ranks = array.clone(INT64, n, zero=False)
    cdef DefaultKey* rows = <DefaultKey*>malloc(max(n, 1) * 2 * sizeof(DefaultKey))
    if rows == NULL:
        raise MemoryError()
    cdef bint exact = True
    try:
        for i in range(n):
            ts = created[i]
            uid = uids[i]
            if not PyUnicode_Check(uid):
                exact = False
                break
            if ts is None:
                rows[i].created = 0x7FFFFFFFFFFFFFFF  # after every time
            elif PyDateTime_CheckExact(ts) and <object>PyDateTime_DATE_GET_TZINFO(ts) is UTC:
                rows[i].created = (
                    days_from_civil(datetime_year(ts), datetime_month(ts), datetime_day(ts))
                    * 86400
                    + datetime_hour(ts) * 3600
                    + datetime_minute(ts) * 60
                    + datetime_second(ts)
                ) * 1000000 + datetime_microsecond(ts)
            else:
                exact = False
                break
            try:
                rows[i].uid = PyUnicode_AsUTF8AndSize(uid, &rows[i].uid_size)
            except UnicodeEncodeError:  # a lone surrogate: no UTF-8 bytes to compare
                exact = False
                break
            rows[i].index = i
        if exact:
            if n > 0:
                sort_rows(rows, rows + n, n)
            for i in range(1, n):
                if (
                    rows[i].created == rows[i - 1].created
                    and rows[i].uid_size == rows[i - 1].uid_size
                    and memcmp(rows[i].uid, rows[i - 1].uid, rows[i].uid_size) == 0
                ):
                    return None
            for i in range(n):
                ranks.data.as_longlongs[rows[i].index] = i
            return ranks
    finally:
        free(rows)
    keys = [(1, 0.0, u) if t is None else (0, t, u) for t, u in zip(created, uids)]
    order = sorted(range(n), key=keys.__getitem__)
    for i in range(1, n):
        if keys[<Py_ssize_t>order[i]] == keys[<Py_ssize_t>order[i - 1]]:
            return None
    for i in range(n):
        ranks.data.as_longlongs[<Py_ssize_t>order[i]] = i
    return ranks


def task_columns(list tasks, dict node_index):
    """``kai.actions.fast_allocate.task_columns``, compiled."""
    cdef Py_ssize_t n = len(tasks)
    cdef dict by_id = {}
    cdef list sources = []
    cdef array.array rows = array.clone(INT64, n, zero=False)
    cdef dict sig_index = {}
    cdef list sig_tasks = []
    cdef array.array sigs = array.clone(INT64, n, zero=False)
    cdef list nominated_at = []
    cdef list portions = []
    cdef Py_ssize_t i = 0, row = -1, s, unconstrained = -1
    cdef bint direct
    last_request = None
    for t in tasks:
        direct = TASK_SLOTS and type(t) is TASK_CLASS
        request = task_field(t, direct, TASK_OFF, T_REQUEST)
        if request is not last_request:
            key = PyLong_FromVoidPtr(<void*>request)  # id(request), without a call
            row = by_id.get(key, -1)
            if row < 0:
                row = len(sources)
                by_id[key] = row
                sources.append(request)
            last_request = request
        rows.data.as_longlongs[i] = row
        pod = task_field(t, direct, TASK_OFF, T_POD)
        if pod.node_selector or pod.required_node_affinity is not None or pod.tolerations:
            key = (
                tuple(sorted(pod.node_selector.items())),
                repr(pod.required_node_affinity),
                tuple(pod.tolerations),
            )
            s = sig_index.get(key, -1)
            if s < 0:
                s = len(sig_tasks)
                sig_index[key] = s
                sig_tasks.append(t)
        elif unconstrained >= 0:
            s = unconstrained
        else:
            s = unconstrained = len(sig_tasks)
            sig_index[None] = s
            sig_tasks.append(t)
        sigs.data.as_longlongs[i] = s
        nominated = pod.nominated_node_name
        if nominated:
            nominated_at.append((i, node_index.get(nominated, -1)))
        fraction = task_field(t, direct, TASK_OFF, T_FRACTION)
        if fraction > 0:
            portions.append((i, fraction))
        i += 1
    return sources, rows, sig_tasks, sigs, nominated_at, portions


def place_decisions(
    list tasks, list pl_task, list pl_node, list pl_pipe, pl_device, list names,
    list node_tasks, list decisions, action,
):
    """``kai.actions.fast_allocate.place_decisions``, compiled."""
    cdef Py_ssize_t k
    cdef bint direct
    for k in range(len(pl_task)):
        task = tasks[<Py_ssize_t>pl_task[k]]
        node = pl_node[k]
        if pl_pipe[k]:
            status = PIPELINED
            kind = "pipeline"
        else:
            status = BINDING
            kind = "bind"
        direct = TASK_SLOTS and type(task) is TASK_CLASS
        if direct:
            replace(task, TASK_OFF[T_NODE], node)
            replace(task, TASK_OFF[T_STATUS], status)
        else:
            task.node = node
            task.status = status
        (<set>node_tasks[<Py_ssize_t>node]).add(task)
        device = None if pl_device is None else pl_device[k]
        groups = [] if device is None else [device]
        if DECISION_DIRECT:
            # Decision's fields (decision_fields()), written one by one.
            decision = new_object(DECISION_CLASS)
            put(decision, DECISION_OFF[D_ACTION], action)
            put(decision, DECISION_OFF[D_TYPE], kind)
            put(decision, DECISION_OFF[D_TASK], task)
            put(decision, DECISION_OFF[D_NODE], names[<Py_ssize_t>node])
            put(decision, DECISION_OFF[D_GPU_GROUPS], groups)
            put(decision, DECISION_OFF[D_REASON], None)
            put(decision, DECISION_OFF[D_POD], "")
            put(decision, DECISION_OFF[D_ANNOTATIONS], None)
        else:
            decision = Decision(action, kind, task, names[<Py_ssize_t>node], groups)
        decisions.append(decision)


def record_fit_messages(
    list jobs, list tasks, list capacity, list att_job, list placed, list chunks, list info,
    list active, list keys, problem_of, capacity_of, record,
):
    """``kai.actions.fast_allocate.record_fit_messages``, compiled."""
    cdef dict problems = {}
    cdef Py_ssize_t row, chunk, min_member
    for row in range(len(capacity)):
        job = jobs[<Py_ssize_t>att_job[row]]
        if capacity[row]:
            record(job, capacity_of(row))
            continue
        key = keys[row]
        problem = problems.get(key)
        if problem is None:
            problem = problems[key] = problem_of(row)
        task = tasks[<Py_ssize_t>info[row]]
        pod = task_key(task, TASK_SLOTS and type(task) is TASK_CLASS, TASK_OFF)
        chunk = chunks[row]
        min_member = job_field(job, JOB_SLOTS and type(job) is JOB_CLASS, JOB_OFF, J_MIN_MEMBER)
        if chunk > 1 or min_member > 1:
            needed = max(min_member - <Py_ssize_t>active[row], chunk)
            record(
                job,
                f"Resources were found for {placed[row]} pods while {needed} are required "
                f"for gang scheduling; pod {pod}: {problem}",
            )
        else:
            record(job, f"Resources were not found for pod {pod} due to: {problem}")


def direct():
    """Whether decisions are written, and jobs and tasks read and written, slot by slot
    (see kai._fast.slots; False: through their classes)."""
    return bool(DECISION_DIRECT and JOB_SLOTS and TASK_SLOTS)
