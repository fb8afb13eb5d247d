# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled per-decision, per-pod and per-group loops of ``kai.engine.collect_result``.

A group of one pod that is not semi-preemptible (most groups of a large cluster) is
reported here, its result written slot by slot; every other group goes through
``kai.engine._job_result``. The results are the same as ``kai.engine._collect``'s.
"""

from kai.api.model import ACTIVE_ALLOCATED, TaskStatus
from kai.api.preemptibility import SEMI_PREEMPTIBLE
from kai.engine import (
    _OUTPUT_STATUS,
    _SCHEDULED,
    _STATUS_OF,
    IDLE_REASON,
    PodGroupResult,
    PodResult,
    _job_result,
)

from kai._fast.slots cimport layout, new_object, put

cdef tuple POD_FIELDS = ("status", "node")
cdef tuple GROUP_FIELDS = (
    "name", "queue", "preemptible", "preemptibility", "scheduled", "reason", "explain",
    "warnings", "annotations", "status", "extra_pods", "extra_pods_waiting", "evictions",
)
cdef Py_ssize_t POD_OFF[2]
cdef Py_ssize_t GROUP_OFF[13]
cdef bint POD_DIRECT = layout(PodResult, POD_FIELDS, POD_OFF)
cdef bint GROUP_DIRECT = layout(PodGroupResult, GROUP_FIELDS, GROUP_OFF)

cdef object PENDING = TaskStatus.PENDING
cdef object PIPELINED = TaskStatus.PIPELINED
cdef object PIPELINED_REASON = "pipelined: waiting for resources that are being released"
cdef object NOT_SCHEDULED_REASON = "not scheduled in this session"
cdef object ZERO = 0


def finish_decisions(list decisions, object annotations):
    """``kai.engine._collect.finish_decisions``, compiled."""
    cdef dict evictions = {}
    cdef list records
    cdef object d, task, kind, job, key, last_start
    cdef object seen_start = None, seen_annotations = None
    for d in decisions:
        task = d.task
        if task is None:
            continue  # collected already
        d.pod = f"{task.namespace}/{task.name}"
        kind = d.type
        if kind == "evict":
            job = task.job
            if job is not None:
                key = f"{job.namespace}/{job.name}"
                records = evictions.get(key)
                if records is None:
                    evictions[key] = [d]
                else:
                    records.append(d)
        elif kind == "bind":
            job = task.job
            if job is not None:
                last_start = job.new_start_timestamp
                if last_start is not None:
                    # A session starts its jobs at one time: the same mapping again.
                    if last_start is not seen_start:
                        seen_annotations = annotations(last_start)
                        seen_start = last_start
                    d.pod_group_annotations = seen_annotations
        d.task = None
    return evictions


def pod_results(list tasks, list names):
    """``kai.engine._collect.pod_results``, compiled."""
    cdef dict output_status = _OUTPUT_STATUS
    cdef list items = []
    cdef Py_ssize_t node
    for t in tasks:
        status = t.status
        node = t.node
        if node >= 0:
            where = names[node]
        elif status is PENDING:
            where = None
        else:
            where = t.pod.node_name
        if POD_DIRECT:
            result = new_object(PodResult)
            put(result, POD_OFF[0], output_status[status])
            put(result, POD_OFF[1], where)
        else:
            result = PodResult(output_status[status], where)
        items.append((f"{t.namespace}/{t.name}", result))
    items.sort()  # keys are unique: results never compared
    return dict(items)


def group_results(dict jobs, annotations, dict evictions):
    """``kai.engine._collect.group_results``, compiled."""
    cdef dict out = {}
    cdef frozenset scheduled_statuses = _SCHEDULED
    cdef frozenset active_allocated = ACTIVE_ALLOCATED
    cdef dict status_of = _STATUS_OF
    cdef list tasks
    cdef bint scheduled
    # Most groups share one (start, stale) pair: the annotations of the last one seen.
    last_start = stale_since = seen = None
    for key in sorted(jobs):
        job = jobs[key]
        found = evictions.get(key)
        group_evictions = () if found is None else tuple(found)
        tasks = job.tasks
        preemptibility = job.preemptibility
        min_member = job.min_member
        if len(tasks) != 1 or preemptibility == SEMI_PREEMPTIBLE or not min_member >= 1:
            out[key] = _job_result(key, job, annotations, group_evictions)
            continue
        status = (<object>tasks[0]).status
        scheduled = status in scheduled_statuses and min_member <= 1
        fit_errors = job.fit_errors
        if job.invalid_reason:
            reason = job.invalid_reason
        elif scheduled:
            reason = None
        elif status is PIPELINED:
            reason = PIPELINED_REASON
        elif fit_errors:
            reason = fit_errors[0]
        elif status not in active_allocated and status is not PENDING:
            reason = IDLE_REASON
        else:
            reason = NOT_SCHEDULED_REASON
        new_start = job.new_start_timestamp
        stale = job.stale_since_set
        if seen is None or new_start is not last_start or stale is not stale_since:
            seen = annotations(new_start, stale)
            last_start = new_start
            stale_since = stale
        if GROUP_DIRECT:
            result = new_object(PodGroupResult)
            put(result, GROUP_OFF[0], key)
            put(result, GROUP_OFF[1], job.queue)
            put(result, GROUP_OFF[2], job.preemptible)
            put(result, GROUP_OFF[3], preemptibility)
            put(result, GROUP_OFF[4], scheduled)
            put(result, GROUP_OFF[5], reason)
            put(result, GROUP_OFF[6], fit_errors)
            put(result, GROUP_OFF[7], job.warnings)
            put(result, GROUP_OFF[8], seen)
            put(result, GROUP_OFF[9], status_of[preemptibility])
            put(result, GROUP_OFF[10], ZERO)
            put(result, GROUP_OFF[11], ZERO)
            put(result, GROUP_OFF[12], group_evictions)
        else:
            result = PodGroupResult(key, job.queue, job.preemptible, preemptibility,
                                    scheduled, reason, fit_errors, job.warnings, seen,
                                    status_of[preemptibility], 0, 0, group_evictions)
        out[key] = result
    return out


cdef bint _plain(object value) except -1:
    cdef type kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return True
    if kind is float:
        # repr (what json writes) and orjson agree on finite floats written without
        # an exponent.
        return value == 0.0 or 1e-4 <= abs(<double>value) < 1e16
    if kind is dict:
        for k, v in (<dict>value).items():
            if type(k) is not str or not _plain(v):
                return False
        return True
    if kind is list:
        for v in <list>value:
            if not _plain(v):
                return False
        return True
    if kind is tuple:
        for v in <tuple>value:
            if not _plain(v):
                return False
        return True
    return False


def json_plain(value):
    """``kai.output._json_plain``, compiled."""
    return _plain(value)


def direct():
    """Whether results are written slot by slot (False: through their classes)."""
    return bool(POD_DIRECT and GROUP_DIRECT)
