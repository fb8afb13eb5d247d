# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled per-decision, per-pod and per-group loops of ``kai.engine.collect_result``,
and of the result's JSON document (``kai.engine.SessionResult.to_json``).

A group of one pod that is not semi-preemptible (most groups of a large cluster) is
reported here, its result written slot by slot; every other group goes through
``kai.engine._job_result``. The results are the same as ``kai.engine._collect``'s, and
the document is the same as ``SessionResult.to_json``'s.
"""

from kai.api.model import ACTIVE_ALLOCATED, Job, Task, TaskStatus
from kai.api.preemptibility import SEMI_PREEMPTIBLE as _SEMI_PREEMPTIBLE
from kai.engine import (
    _OUTPUT_STATUS,
    _SCHEDULED,
    _STATUS_OF,
    IDLE_REASON,
    PodGroupResult,
    PodResult,
    PodResults,
    _job_result,
)
from kai.framework.session import Decision

from kai._fast.fields cimport (
    D_ACTION, D_ANNOTATIONS, D_COUNT, D_GPU_GROUPS, D_NODE, D_POD, D_REASON, D_TASK,
    D_TYPE, J_COUNT, J_FIT_ERRORS, J_INVALID, J_KEY, J_MIN_MEMBER, J_NEW_START,
    J_PREEMPTIBILITY, J_PREEMPTIBLE, J_QUEUE, J_STALE_SET, J_TASKS, J_WARNINGS, T_COUNT,
    T_JOB, T_NODE, T_POD, T_STATUS, decision_field, decision_fields, job_field,
    job_fields, sets_as_object, task_field, task_fields, task_key,
)
from kai._fast.slots cimport field, layout, new_object, put, replace

# The classes whose objects are read at their offsets, as C pointers: comparing a
# type with one, or making one, reads a pointer rather than a module global.
cdef type JOB_CLASS = Job
cdef type TASK_CLASS = Task
cdef str SEMI_PREEMPTIBLE = _SEMI_PREEMPTIBLE  # compared with every job's
cdef type DECISION_CLASS = Decision
cdef type GROUP_RESULT_CLASS = PodGroupResult
cdef type POD_RESULT_CLASS = PodResult
cdef object POD_RESULTS_CLASS = PodResults  # an ABCMeta class: an object to Cython


cdef extern from "Python.h":
    # A dict with room for minused keys (CPython 3.10 to 3.13 have it; Cython's dict
    # literals are made with it).
    dict _PyDict_NewPresized(Py_ssize_t minused)

cdef tuple POD_FIELDS = ("status", "node")
cdef tuple GROUP_FIELDS = (
    "name", "queue", "preemptible", "preemptibility", "scheduled", "reason", "explain",
    "warnings", "annotations", "status", "extra_pods", "extra_pods_waiting", "evictions",
)
cdef Py_ssize_t POD_OFF[2]
cdef Py_ssize_t GROUP_OFF[13]
cdef bint POD_DIRECT = layout(PodResult, POD_FIELDS, POD_OFF)
cdef bint GROUP_DIRECT = layout(PodGroupResult, GROUP_FIELDS, GROUP_OFF)
cdef Py_ssize_t DECISION_OFF[D_COUNT]
cdef bint DECISION_DIRECT = layout(Decision, decision_fields(), DECISION_OFF)
# Decisions are also written at these offsets (finish_decisions).
cdef bint DECISION_WRITABLE = DECISION_DIRECT and sets_as_object(Decision)
cdef Py_ssize_t JOB_OFF[J_COUNT]
cdef Py_ssize_t TASK_OFF[T_COUNT]
cdef bint JOB_SLOTS = layout(Job, job_fields(), JOB_OFF)
cdef bint TASK_SLOTS = layout(Task, task_fields(), TASK_OFF)

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
    cdef bint direct, task_direct, job_direct
    for d in decisions:
        direct = DECISION_WRITABLE and type(d) is DECISION_CLASS
        task = decision_field(d, direct, DECISION_OFF, D_TASK)
        if task is None:
            continue  # collected already
        task_direct = TASK_SLOTS and type(task) is TASK_CLASS
        pod = task_key(task, task_direct, TASK_OFF)
        if direct:
            replace(d, DECISION_OFF[D_POD], pod)
        else:
            d.pod = pod
        kind = decision_field(d, direct, DECISION_OFF, D_TYPE)
        if kind == "evict":
            job = task_field(task, task_direct, TASK_OFF, T_JOB)
            if job is not None:
                job_direct = JOB_SLOTS and type(job) is JOB_CLASS
                key = job_field(job, job_direct, JOB_OFF, J_KEY)
                records = evictions.get(key)
                if records is None:
                    evictions[key] = [d]
                else:
                    records.append(d)
        elif kind == "bind":
            job = task_field(task, task_direct, TASK_OFF, T_JOB)
            if job is not None:
                job_direct = JOB_SLOTS and type(job) is JOB_CLASS
                last_start = job_field(job, job_direct, JOB_OFF, J_NEW_START)
                if last_start is not None:
                    # A session starts its jobs at one time: the same mapping again.
                    if last_start is not seen_start:
                        seen_annotations = annotations(last_start)
                        seen_start = last_start
                    if direct:
                        replace(d, DECISION_OFF[D_ANNOTATIONS], seen_annotations)
                    else:
                        d.pod_group_annotations = seen_annotations
        if direct:
            replace(d, DECISION_OFF[D_TASK], None)
        else:
            d.task = None
    return evictions


def pod_results(list tasks, list names):
    """``kai.engine._collect.pod_results``, compiled: the columns, with no PodResult."""
    cdef dict output_status = _OUTPUT_STATUS
    cdef Py_ssize_t n = len(tasks)
    cdef list keys = [None] * n, statuses = [None] * n, nodes = [None] * n
    cdef Py_ssize_t i = 0, node
    cdef bint direct, ordered = True
    cdef str key, previous = None
    for t in tasks:
        direct = TASK_SLOTS and type(t) is TASK_CLASS
        status = task_field(t, direct, TASK_OFF, T_STATUS)
        node = task_field(t, direct, TASK_OFF, T_NODE)
        if node >= 0:
            where = names[node]
        elif status is PENDING:
            where = None
        else:
            where = task_field(t, direct, TASK_OFF, T_POD).node_name
        key = task_key(t, direct, TASK_OFF)
        if ordered and previous is not None and not previous < key:
            ordered = False
        previous = key
        keys[i] = key
        statuses[i] = output_status[status]
        nodes[i] = where
        i += 1
    if not ordered:  # a state lists its tasks in job order, which is mostly key order
        order = sorted(range(n), key=keys.__getitem__)  # keys are unique
        keys = [keys[k] for k in order]
        statuses = [statuses[k] for k in order]
        nodes = [nodes[k] for k in order]
    return POD_RESULTS_CLASS(keys, statuses, nodes)


cdef bint _in_key_order(dict jobs) except -1:
    """Whether ``jobs`` iterates in key order: a state adds its jobs in job order, which
    is mostly key order (then the results are made in one pass over its entries, with
    no lookup of each key)."""
    previous = None
    for key in jobs:
        if previous is not None and not previous < key:
            return False
        previous = key
    return True


def group_results(dict jobs, annotations, dict evictions):
    """``kai.engine._collect.group_results``, compiled."""
    cdef dict out = {}
    cdef frozenset scheduled_statuses = _SCHEDULED
    cdef frozenset active_allocated = ACTIVE_ALLOCATED
    cdef dict status_of = _STATUS_OF
    cdef list tasks
    cdef bint scheduled, direct
    # Most groups share one of a few (start, stale) pairs: the annotations of the last
    # one seen, and of each pair seen (by value, as ``annotations`` keeps them).
    last_start = stale_since = seen = None
    cdef dict made = {}
    pairs = jobs.items() if _in_key_order(jobs) else [(key, jobs[key]) for key in sorted(jobs)]
    for key, job in pairs:
        direct = JOB_SLOTS and type(job) is JOB_CLASS
        found = evictions.get(key)
        group_evictions = () if found is None else tuple(found)
        tasks = job_field(job, direct, JOB_OFF, J_TASKS)
        preemptibility = job_field(job, direct, JOB_OFF, J_PREEMPTIBILITY)
        min_member = job_field(job, direct, JOB_OFF, J_MIN_MEMBER)
        if len(tasks) != 1 or preemptibility == SEMI_PREEMPTIBLE or not min_member >= 1:
            out[key] = _job_result(key, job, annotations, group_evictions)
            continue
        task = <object>tasks[0]
        status = task_field(task, TASK_SLOTS and type(task) is TASK_CLASS, TASK_OFF, T_STATUS)
        scheduled = status in scheduled_statuses and min_member <= 1
        fit_errors = job_field(job, direct, JOB_OFF, J_FIT_ERRORS)
        invalid = job_field(job, direct, JOB_OFF, J_INVALID)
        if invalid:
            reason = invalid
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
        new_start = job_field(job, direct, JOB_OFF, J_NEW_START)
        stale = job_field(job, direct, JOB_OFF, J_STALE_SET)
        if seen is None or new_start is not last_start or stale is not stale_since:
            pair = (new_start, stale)
            seen = made.get(pair)
            if seen is None:
                seen = made[pair] = annotations(new_start, stale)
            last_start = new_start
            stale_since = stale
        if GROUP_DIRECT:
            result = new_object(GROUP_RESULT_CLASS)
            put(result, GROUP_OFF[0], key)
            put(result, GROUP_OFF[1], job_field(job, direct, JOB_OFF, J_QUEUE))
            put(result, GROUP_OFF[2], job_field(job, direct, JOB_OFF, J_PREEMPTIBLE))
            put(result, GROUP_OFF[3], preemptibility)
            put(result, GROUP_OFF[4], scheduled)
            put(result, GROUP_OFF[5], reason)
            put(result, GROUP_OFF[6], fit_errors)
            put(result, GROUP_OFF[7], job_field(job, direct, JOB_OFF, J_WARNINGS))
            put(result, GROUP_OFF[8], seen)
            put(result, GROUP_OFF[9], status_of[preemptibility])
            put(result, GROUP_OFF[10], ZERO)
            put(result, GROUP_OFF[11], ZERO)
            put(result, GROUP_OFF[12], group_evictions)
        else:
            result = PodGroupResult(key, job_field(job, direct, JOB_OFF, J_QUEUE),
                                    job_field(job, direct, JOB_OFF, J_PREEMPTIBLE), preemptibility,
                                    scheduled, reason, fit_errors,
                                    job_field(job, direct, JOB_OFF, J_WARNINGS), seen,
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


cdef class _Copies:
    """``kai.framework.session.plain_copy``'s ``copies``: one dict copy per read-only
    mapping, the last one at hand (consecutive groups mostly share theirs)."""

    cdef dict by_id
    cdef object last
    cdef dict last_copy

    def __cinit__(self):
        self.by_id = {}

    cdef dict of(self, object mapping):
        if mapping is self.last:
            return self.last_copy
        key = id(mapping)
        found = self.by_id.get(key)
        if found is None:
            found = self.by_id[key] = dict(mapping)
        self.last = mapping
        self.last_copy = found
        return found


def result_document(result, bint explain):
    """``kai.engine.SessionResult.to_json``, compiled."""
    cdef _Copies copies = _Copies()
    cdef dict groups = {}, pods = {}, queues = {}, entry
    cdef list decisions = []
    cdef bint direct
    for key, g in (<dict?>result.pod_groups).items():
        direct = GROUP_DIRECT and type(g) is GROUP_RESULT_CLASS
        entry = _PyDict_NewPresized(8)  # room for every key: no resize on the way
        entry["queue"] = field(g, direct, GROUP_OFF[1], "queue")
        entry["preemptible"] = field(g, direct, GROUP_OFF[2], "preemptible")
        entry["preemptibility"] = field(g, direct, GROUP_OFF[3], "preemptibility")
        entry["scheduled"] = field(g, direct, GROUP_OFF[4], "scheduled")
        entry["reason"] = field(g, direct, GROUP_OFF[5], "reason")
        value = field(g, direct, GROUP_OFF[8], "annotations")
        if value:
            entry["annotations"] = copies.of(value)
        value = field(g, direct, GROUP_OFF[9], "status")
        if value:
            entry["status"] = copies.of(value)
        value = field(g, direct, GROUP_OFF[7], "warnings")
        if value:
            entry["warnings"] = value
        if explain:
            entry["explain"] = field(g, direct, GROUP_OFF[6], "explain")
        groups[key] = entry
    for d in <list?>result.decisions:
        direct = DECISION_DIRECT and type(d) is DECISION_CLASS
        kind = decision_field(d, direct, DECISION_OFF, D_TYPE)
        entry = _PyDict_NewPresized(7)
        entry["action"] = decision_field(d, direct, DECISION_OFF, D_ACTION)
        entry["type"] = kind
        entry["pod"] = decision_field(d, direct, DECISION_OFF, D_POD)
        entry["node"] = decision_field(d, direct, DECISION_OFF, D_NODE)
        if kind != "evict":
            entry["gpuGroups"] = decision_field(d, direct, DECISION_OFF, D_GPU_GROUPS)
        value = decision_field(d, direct, DECISION_OFF, D_REASON)
        if value is not None:
            entry["reason"] = value
        value = decision_field(d, direct, DECISION_OFF, D_ANNOTATIONS)
        if value:
            entry["podGroupAnnotations"] = copies.of(value)
        decisions.append(entry)
    cdef list pod_statuses, pod_nodes
    cdef Py_ssize_t row = 0
    if type(result.pods) is POD_RESULTS_CLASS:  # the columns, read as they are
        pod_statuses, pod_nodes = result.pods.statuses, result.pods.nodes
        for key in <list?>result.pods.keys_in_order:
            entry = _PyDict_NewPresized(2)
            entry["status"] = pod_statuses[row]
            entry["node"] = pod_nodes[row]
            pods[key] = entry
            row += 1
    else:
        for key, p in result.pods.items():
            direct = POD_DIRECT and type(p) is POD_RESULT_CLASS
            pods[key] = {
                "status": field(p, direct, POD_OFF[0], "status"),
                "node": field(p, direct, POD_OFF[1], "node"),
            }
    for name, q in (<dict?>result.queues).items():
        queues[name] = {
            "fairShare": q.fair_share,
            "allocated": q.allocated,
            "requested": q.requested,
        }
    return {"decisions": decisions, "pods": pods, "podGroups": groups, "queues": queues}


def direct():
    """Whether results are written, and jobs, tasks and decisions read, slot by slot
    (False: through their classes)."""
    return bool(POD_DIRECT and GROUP_DIRECT and JOB_SLOTS and TASK_SLOTS and DECISION_WRITABLE)
