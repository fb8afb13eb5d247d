# The fields of the model classes the compiled modules make, read and write at their
# offsets (kai/_fast/slots.pxd): kai.api.model's Job and Task and
# kai.framework.session's Decision, each field numbered in its dataclass's order.
#
# A module keeps the offsets of a class in an array of its own, filled when it loads:
#
#     cdef type JOB_CLASS = Job
#     cdef Py_ssize_t JOB_OFF[J_COUNT]
#     cdef bint JOB_SLOTS = layout(Job, job_fields(), JOB_OFF)
#
# and reads a field with job_field(job, JOB_SLOTS and type(job) is JOB_CLASS, JOB_OFF,
# J_...): the class kept as a C global, so the test is a pointer comparison.
# layout() checks that the class still has exactly these fields, as object slots; if
# it does not, every object is read through its attributes (correct, slower), and the
# modules' direct() say so.

from kai._fast.slots cimport get

cdef enum:
    J_UID, J_NAME, J_NAMESPACE, J_KEY, J_QUEUE, J_PRIORITY, J_MIN_MEMBER, J_PREEMPTIBLE,
    J_PREEMPTIBILITY, J_CREATED, J_TASKS, J_POD_GROUP, J_LAST_START, J_STALE,
    J_LAST_EVICTION, J_GRACE, J_DELAY, J_INVALID, J_WARNINGS, J_FIT_ERRORS, J_NEW_START,
    J_STALE_SET, J_COUNT

cdef enum:
    T_UID, T_NAME, T_NAMESPACE, T_JOB, T_REQUEST, T_STATUS, T_POD, T_NODE, T_FRACTION,
    T_GPU_MEMORY, T_GPU_GROUP, T_CREATED, T_EVICTED, T_COUNT

cdef enum:
    D_ACTION, D_TYPE, D_TASK, D_NODE, D_GPU_GROUPS, D_REASON, D_POD, D_ANNOTATIONS, D_COUNT


cdef inline tuple job_fields():
    """Job's fields, numbered as the J_ constants."""
    return (
        "uid", "name", "namespace", "key", "queue", "priority", "min_member", "preemptible",
        "preemptibility", "creation_timestamp", "tasks", "pod_group",
        "last_start_timestamp", "stale_timestamp", "last_eviction_timestamp",
        "staleness_grace_period", "preemption_delay", "invalid_reason", "warnings",
        "fit_errors", "new_start_timestamp", "stale_since_set",
    )


cdef inline tuple task_fields():
    """Task's fields, numbered as the T_ constants."""
    return (
        "uid", "name", "namespace", "job", "request", "status", "pod", "node",
        "gpu_fraction", "gpu_memory_mib", "gpu_group", "creation_timestamp",
        "virtually_evicted",
    )


cdef inline tuple decision_fields():
    """Decision's fields, numbered as the D_ constants."""
    return (
        "action", "type", "task", "node", "gpu_groups", "reason", "pod",
        "pod_group_annotations",
    )


cdef inline object job_field(object job, bint direct, const Py_ssize_t* offsets, int index):
    """Field ``index`` of a job: at its offset when ``direct`` (a Job, laid out as
    job_fields() says), else as an attribute."""
    return get(job, offsets[index]) if direct else getattr(job, job_fields()[index])


cdef inline object task_field(object task, bint direct, const Py_ssize_t* offsets, int index):
    """Field ``index`` of a task (see job_field)."""
    return get(task, offsets[index]) if direct else getattr(task, task_fields()[index])


cdef inline str task_key(object task, bint direct, const Py_ssize_t* offsets):
    """``task.key`` (kai.api.model.Task): its pod as results and messages name it,
    namespace/name."""
    return (
        f"{task_field(task, direct, offsets, T_NAMESPACE)}/"
        f"{task_field(task, direct, offsets, T_NAME)}"
    )


cdef inline bint task_shares_gpu(
    object task, bint direct, const Py_ssize_t* offsets
) except -1:
    """``task.is_shared_gpu`` (kai.api.model.Task): a GPU fraction or GPU memory asked."""
    return (
        task_field(task, direct, offsets, T_FRACTION) > 0
        or task_field(task, direct, offsets, T_GPU_MEMORY) > 0
    )


cdef inline object decision_field(
    object decision, bint direct, const Py_ssize_t* offsets, int index
):
    """Field ``index`` of a decision (see job_field)."""
    return get(decision, offsets[index]) if direct else getattr(decision, decision_fields()[index])


cdef inline bint sets_as_object(type cls):
    """Whether ``cls`` sets attributes as object does: a module writes an existing
    object's fields at their offsets only then."""
    return cls.__setattr__ is object.__setattr__
