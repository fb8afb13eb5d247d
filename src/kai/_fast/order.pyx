# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled ``kai.plugins.proportion.ProportionPlugin.queue_order``.

Every queue comparison of an eviction action (its job queue, each simulation's
re-allocation queue, each victim queue) goes through proportion's queue order, about
seven times per probe of a search. The rule itself is the native core's
(``kai::alloc::queue_order`` in native/src/queue_policy.cpp, which the allocate loop
and the simulation run too): this module reads the two queues' values as proportion
keeps them (its order views, Python floats), lays them out as a two-queue table and
calls the core. The Python method stays the reference; the tests hold the two to the
same answers.
"""

from libc.stdint cimport int64_t

from kai.api.model import Task
from kai.plugins.proportion import _ORDER_VIEW, JOB_REQUEST_KEY

from kai._fast.fields cimport T_COUNT, T_EVICTED, T_STATUS, T_UID, task_field, task_fields
from kai._fast.slots cimport layout

cdef type TASK_CLASS = Task
cdef Py_ssize_t TASK_OFF[T_COUNT]
cdef bint TASK_SLOTS = layout(Task, task_fields(), TASK_OFF)
cdef str ORDER_VIEW = _ORDER_VIEW
cdef str REQUEST_KEY = JOB_REQUEST_KEY
cdef list NO_REQUEST = [0.0, 0.0, 0.0]

cdef extern from "kai/queue_policy.hpp" namespace "kai::alloc":
    cdef cppclass QueueRules:
        const double* deserved
        const double* limit
        const double* fair
        const double* allocatable
        const int64_t* priority
        const int64_t* rank
        const double* total
        const int64_t* path_start
        const int64_t* path
    int core_queue_order "kai::alloc::queue_order" (
        const QueueRules& q, const double* alloc, int64_t l, int64_t r,
        const double* lreq, const double* rreq, const double* lheld, const double* rheld
    ) noexcept


cdef inline int floats(object values, double* out) except -1:
    """A (cpu, memory, gpu) sequence of numbers into ``out`` (proportion keeps Python
    floats: each is read without a call)."""
    out[0] = <double>values[0]
    out[1] = <double>values[1]
    out[2] = <double>values[2]
    return 0


cdef tuple view_of(object plugin, object share):
    """``plugin._order_view(share)``: the view it keeps on the share for the values of
    the share's allocation and fair share, else made there."""
    kept = share.__dict__.get(ORDER_VIEW)
    if kept is not None and (<tuple>kept)[0] is plugin.total:
        found = (<dict>(<tuple>kept)[1]).get(
            (share.allocated.tobytes(), share.fair_share.tobytes())
        )
        if found is not None:
            return found
    return plugin._order_view(share)


cdef list request_of(object plugin, object job):
    """``plugin.job_request_values(job)``: the entry proportion keeps in the session's
    cache for the job's tasks' states, else made there."""
    if job is None:
        return NO_REQUEST
    cdef list tasks = job.tasks
    cdef Py_ssize_t n = len(tasks), i
    state = [None] * n
    cdef bint direct
    for i in range(n):
        task = tasks[i]
        direct = TASK_SLOTS and type(task) is TASK_CLASS
        state[i] = (
            task_field(task, direct, TASK_OFF, T_UID),
            task_field(task, direct, TASK_OFF, T_STATUS),
            task_field(task, direct, TASK_OFF, T_EVICTED),
        )
    cached = plugin.ssn.cache.get((REQUEST_KEY, job.key, tuple(state)))
    if cached is not None:
        return (<tuple>cached)[1]
    return plugin.job_request_values(job)


def queue_order(
    object plugin,
    object left,
    object right,
    object left_job,
    object right_job,
    object left_victims=None,
    object right_victims=None,
):
    """``plugin.queue_order(left, right, left_job, right_job, left_victims,
    right_victims)``, decided by the native core's rule."""
    cdef dict shares = plugin.shares
    ls = shares.get(left.name)
    rs = shares.get(right.name)
    if ls is None or rs is None:
        return 0
    cdef tuple lview = view_of(plugin, ls)
    cdef tuple rview = view_of(plugin, rs)
    # A two-queue table: the left queue is row 0, the right one row 1.
    cdef double alloc[6]
    cdef double fair[6]
    cdef double deserved[6]
    cdef double cap[6]
    cdef double total[3]
    cdef double lreq[3]
    cdef double rreq[3]
    cdef double lheld[3]
    cdef double rheld[3]
    cdef int64_t priority[2]
    cdef int64_t rank[2]
    cdef const double* lheld_at = NULL
    cdef const double* rheld_at = NULL
    floats(lview[0], alloc)
    floats(rview[0], alloc + 3)
    floats(lview[6], fair)
    floats(rview[6], fair + 3)
    floats(lview[2], deserved)
    floats(rview[2], deserved + 3)
    floats(lview[3], cap)
    floats(rview[3], cap + 3)
    # The cluster's total is read only where a queue's allocatable share is unlimited,
    # and there its view's scale is that total.
    cdef list lscale = lview[4]
    cdef list rscale = rview[4]
    cdef int k
    for k in range(3):
        total[k] = <double>(lscale[k] if cap[k] == -1.0 else rscale[k])
    floats(request_of(plugin, left_job), lreq)
    floats(request_of(plugin, right_job), rreq)
    if left_victims:
        floats(plugin._victims_held(left_victims), lheld)
        lheld_at = lheld
    if right_victims:
        floats(plugin._victims_held(right_victims), rheld)
        rheld_at = rheld
    priority[0] = ls.priority
    priority[1] = rs.priority
    rank[0] = ls.rank
    rank[1] = rs.rank
    cdef QueueRules rules
    rules.deserved = deserved
    rules.fair = fair
    rules.allocatable = cap
    rules.priority = priority
    rules.rank = rank
    rules.total = total
    return core_queue_order(rules, alloc, 0, 1, lreq, rreq, lheld_at, rheld_at)


def direct():
    """Whether tasks are read slot by slot (False: the model's classes changed, and
    this module reads their attributes)."""
    return bool(TASK_SLOTS)
