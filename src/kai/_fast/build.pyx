# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled ``kai.snapshot.builder._group_pods`` and ``_assemble``: which job each pod
belongs to (once per snapshot), and every task and job of a state (once per session).

Single pods and gangs of plain pods (no shared-GPU annotation, no owner or label that
names a preemptibility, no deletion in progress, on a known node if on any) are made
here: parsed objects are read, and tasks and jobs written, slot by slot
(``kai/_fast/slots.pxd``). Any other job, and any pod this code does not take, is
made by the Python builder, in the same order: the state is the same, object for
object.
"""

from operator import attrgetter

import numpy as np

from kai.api.model import ON_NODE, Job, Task, TaskStatus
from kai.api.objects import PodGroupObject, PodObject
from kai.api.preemptibility import PREEMPTIBILITY_LABEL as _PREEMPTIBILITY_LABEL
from kai.api.preemptibility import resolve_preemptibility
from kai.snapshot.builder import GPU_FRACTION_ANNOTATION as _GPU_FRACTION_ANNOTATION
from kai.snapshot.builder import GPU_MEMORY_ANNOTATION as _GPU_MEMORY_ANNOTATION
from kai.snapshot.builder import POD_GROUP_ANNOTATION as _POD_GROUP_ANNOTATION
from kai.snapshot.builder import QUEUE_LABEL as _QUEUE_LABEL
from kai.snapshot.builder import (
    _add_foreign,
    earliest,
    missing_pod_group,
    pod_status,
)

from cpython cimport array
from cpython.long cimport PyLong_FromVoidPtr

from kai._fast.fields cimport (
    J_COUNT, J_CREATED, J_DELAY, J_FIT_ERRORS, J_GRACE, J_INVALID, J_LAST_EVICTION,
    J_KEY, J_LAST_START, J_MIN_MEMBER, J_NAME, J_NAMESPACE, J_NEW_START, J_POD_GROUP,
    J_PREEMPTIBILITY, J_PREEMPTIBLE, J_PRIORITY, J_QUEUE, J_STALE, J_STALE_SET, J_TASKS,
    J_UID, J_WARNINGS, T_COUNT, T_CREATED, T_EVICTED, T_FRACTION, T_GPU_GROUP,
    T_GPU_MEMORY, T_JOB, T_NAME, T_NAMESPACE, T_NODE, T_POD, T_REQUEST, T_STATUS, T_UID,
    job_fields, task_fields,
)
from kai._fast.slots cimport get, layout, new_object, offsets_of, put

# The classes whose objects are read at their offsets, as C pointers: comparing a
# type with one, or making one, reads a pointer rather than a module global.
cdef type POD_CLASS = PodObject
cdef type GROUP_CLASS = PodGroupObject
cdef type JOB_CLASS = Job
cdef type TASK_CLASS = Task

# The keys read of every pod, as C globals (a module global is a dictionary lookup).
cdef str PREEMPTIBILITY_LABEL = _PREEMPTIBILITY_LABEL
cdef str GPU_FRACTION_ANNOTATION = _GPU_FRACTION_ANNOTATION
cdef str GPU_MEMORY_ANNOTATION = _GPU_MEMORY_ANNOTATION
cdef str POD_GROUP_ANNOTATION = _POD_GROUP_ANNOTATION
cdef str QUEUE_LABEL = _QUEUE_LABEL

cdef Py_ssize_t TASK_OFF[T_COUNT]
cdef Py_ssize_t JOB_OFF[J_COUNT]
# Whether Task and Job still have the fields of kai/_fast/fields.pxd (else: made
# through the classes).
cdef bint DIRECT = (
    layout(Task, task_fields(), TASK_OFF) and layout(Job, job_fields(), JOB_OFF)
)

# The fields read of parsed pods and pod groups, by index.
cdef enum:
    P_NAME, P_NAMESPACE, P_UID, P_LABELS, P_ANNOTATIONS, P_OWNERS, P_CREATED,
    P_DELETED, P_SCHEDULER, P_NODE, P_PRIORITY, P_PRIORITY_CLASS, P_REQUESTS, P_PHASE,
    P_GATES, P_STARTED, P_COUNT
cdef tuple POD_READ = (
    "name", "namespace", "uid", "labels", "annotations", "owner_references",
    "creation_timestamp", "deletion_timestamp", "scheduler_name", "node_name",
    "priority", "priority_class_name", "requests", "phase", "scheduling_gates",
    "start_time",
)
cdef enum:
    G_NAME, G_NAMESPACE, G_MIN_MEMBER, G_QUEUE, G_PRIORITY_CLASS, G_PREEMPTIBILITY,
    G_OWNERS, G_CREATED, G_LAST_START, G_STALE, G_LAST_EVICTION, G_GRACE, G_DELAY,
    G_COUNT
cdef tuple GROUP_READ = (
    "name", "namespace", "min_member", "queue", "priority_class_name", "preemptibility",
    "owner_references", "creation_timestamp", "last_start_timestamp", "stale_timestamp",
    "last_eviction_timestamp", "staleness_grace_period", "preemption_delay",
)
cdef Py_ssize_t POD_OFF[P_COUNT]
cdef Py_ssize_t GROUP_OFF[G_COUNT]


cdef bint POD_SLOTS = offsets_of(PodObject, POD_READ, POD_OFF)
cdef bint GROUP_SLOTS = offsets_of(PodGroupObject, GROUP_READ, GROUP_OFF)


cdef inline object pf(object pod, int field):
    """A field of a parsed pod: read at its offset from a PodObject."""
    if POD_SLOTS and type(pod) is POD_CLASS:
        return get(pod, POD_OFF[field])
    return getattr(pod, POD_READ[field])


cdef inline object gf(object pg, int field):
    """A field of a parsed pod group."""
    if GROUP_SLOTS and type(pg) is GROUP_CLASS:
        return get(pg, GROUP_OFF[field])
    return getattr(pg, GROUP_READ[field])


cdef inline bint has_key(object mapping, object key) except -1:
    """``key in mapping``, at a dict's own cost for a dict (parsed maps are dicts)."""
    if type(mapping) is dict:
        return key in <dict>mapping
    return key in mapping


cdef inline object get_key(object mapping, object key):
    """``mapping.get(key)``, without a method call for a dict."""
    if type(mapping) is dict:
        return (<dict>mapping).get(key)
    return mapping.get(key)


cdef object PENDING = TaskStatus.PENDING
cdef object RUNNING = TaskStatus.RUNNING
cdef object BOUND = TaskStatus.BOUND
cdef array.array DOUBLES = array.array("d")
cdef object ZERO = 0.0
cdef object MISSING = object()
cdef object by_pod_name = attrgetter("name")
cdef object by_namespace_name = attrgetter("namespace", "name")


cdef class _Maker:
    cdef object maker, state, make_task, default_priority
    cdef dict node_index
    cdef frozenset on_node
    cdef list tasks
    cdef dict jobs, by_map, priorities
    cdef dict preemptibility  # priority -> (preemptible, value, warnings or None)
    cdef dict queue_problems
    cdef bint delegated  # the Python maker made a task of the job being made

    def __init__(self, maker):
        self.maker = maker
        self.state = maker.state
        self.make_task = maker.make_task
        self.tasks = self.state.tasks
        self.jobs = self.state.jobs
        self.by_map = self.make_task.by_map
        self.node_index = self.make_task.node_index
        self.priorities = maker.priorities
        self.default_priority = maker.priority_of(None, [])
        self.preemptibility = {}
        self.queue_problems = {}
        self.on_node = ON_NODE

    cdef object task(self, object pod, object job):
        """The task of a plain pod, or one the Python maker makes."""
        annotations = pf(pod, P_ANNOTATIONS)
        if (
            has_key(annotations, GPU_FRACTION_ANNOTATION)
            or has_key(annotations, GPU_MEMORY_ANNOTATION)
            or pf(pod, P_DELETED) is not None
        ):
            self.delegated = True
            return self.make_task(pod, job)
        requests = pf(pod, P_REQUESTS)
        key = PyLong_FromVoidPtr(<void*>requests)  # id(requests), without a call
        request = self.by_map.get(key)
        if request is None:
            request = self.make_task.request_vector(requests)
            self.by_map[key] = request
        phase = pf(pod, P_PHASE)
        node_name = pf(pod, P_NODE)
        if phase == "Running":
            status = RUNNING
        elif phase == "Pending" and not node_name and not pf(pod, P_GATES):
            status = PENDING
        else:
            status = pod_status(pod)
        node = -1
        if node_name is not None and status in self.on_node:
            node = self.node_index.get(node_name, -1)
            if node < 0:
                self.delegated = True
                return self.make_task(pod, job)  # which warns about the unknown node
        name = pf(pod, P_NAME)
        namespace = pf(pod, P_NAMESPACE)
        uid = pf(pod, P_UID) or f"{namespace}/{name}"
        created = pf(pod, P_CREATED)
        if not DIRECT:
            return Task(uid, name, namespace, job, request, status, pod, node, ZERO, ZERO,
                        None, created, False)
        # Written field by field: no tuple of them made and freed per pod.
        task = new_object(TASK_CLASS)
        put(task, TASK_OFF[T_UID], uid)
        put(task, TASK_OFF[T_NAME], name)
        put(task, TASK_OFF[T_NAMESPACE], namespace)
        put(task, TASK_OFF[T_JOB], job)
        put(task, TASK_OFF[T_REQUEST], request)
        put(task, TASK_OFF[T_STATUS], status)
        put(task, TASK_OFF[T_POD], pod)
        put(task, TASK_OFF[T_NODE], node)
        put(task, TASK_OFF[T_FRACTION], ZERO)
        put(task, TASK_OFF[T_GPU_MEMORY], ZERO)
        put(task, TASK_OFF[T_GPU_GROUP], None)
        put(task, TASK_OFF[T_CREATED], created)
        put(task, TASK_OFF[T_EVICTED], False)
        return task

    cdef object priority(self, object pg, list pods):
        """maker.priority_of."""
        cdef dict priorities = self.priorities
        if pg is not None:
            name = gf(pg, G_PRIORITY_CLASS)
            if name:
                value = priorities.get(name, MISSING)
                if value is not MISSING:
                    return value
        for pod in pods:
            value = pf(pod, P_PRIORITY)
            if value is not None:
                return value
        for pod in pods:
            name = pf(pod, P_PRIORITY_CLASS)
            if name and name in priorities:
                return priorities[name]
        return self.default_priority

    cdef object job(self, object uid, object name, object namespace, object pg, list pods,
                    object min_member, str key):
        """Make and add one job, of key ``key`` (namespace/name: the Python maker, which
        takes what this does not, makes it itself)."""
        cdef Py_ssize_t n = len(pods)
        cdef bint single = n == 1
        if pg is not None and (
            gf(pg, G_PREEMPTIBILITY) is not None or gf(pg, G_OWNERS)
        ):
            return self.maker(uid, name, namespace, pg, pods, min_member)
        for pod in pods:
            if pf(pod, P_OWNERS) or has_key(pf(pod, P_LABELS), PREEMPTIBILITY_LABEL):
                return self.maker(uid, name, namespace, pg, pods, min_member)
        if not single:
            pods = sorted(pods, key=by_pod_name)
        queue = gf(pg, G_QUEUE) if pg is not None else None
        if not queue:
            queue = None
            for pod in pods:
                labels = pf(pod, P_LABELS)
                if QUEUE_LABEL in labels:
                    queue = labels[QUEUE_LABEL]
                    break
        priority = self.priority(pg, pods)
        pre = self.preemptibility.get(priority)
        if pre is None:
            # No explicit value: the priority rule, the same for every such job.
            resolved = resolve_preemptibility(None, (), priority, self.maker.lookup)
            pre = self.preemptibility[priority] = (
                resolved.preemptible, resolved.value, resolved.warning
            )
        preemptible, value, warning = <tuple>pre
        created = gf(pg, G_CREATED) if pg is not None else None
        if created is None:
            if single:
                created = pf(pods[0], P_CREATED)
            else:
                created = earliest([pf(p, P_CREATED) for p in pods])
        last_start = gf(pg, G_LAST_START) if pg is not None else None
        cdef list tasks = []
        if pg is None:
            stale = last_eviction = grace = delay = None
        else:
            stale = gf(pg, G_STALE)
            last_eviction = gf(pg, G_LAST_EVICTION)
            grace = gf(pg, G_GRACE)
            delay = gf(pg, G_DELAY)
        if DIRECT:
            # What Job.__init__ sets, with the pod group's fields read at
            # their offsets, written field by field.
            job = new_object(JOB_CLASS)
            put(job, JOB_OFF[J_UID], uid)
            put(job, JOB_OFF[J_NAME], name)
            put(job, JOB_OFF[J_NAMESPACE], namespace)
            put(job, JOB_OFF[J_KEY], key)
            put(job, JOB_OFF[J_QUEUE], queue)
            put(job, JOB_OFF[J_PRIORITY], priority)
            put(job, JOB_OFF[J_MIN_MEMBER], min_member)
            put(job, JOB_OFF[J_PREEMPTIBLE], preemptible)
            put(job, JOB_OFF[J_PREEMPTIBILITY], value)
            put(job, JOB_OFF[J_CREATED], created)
            put(job, JOB_OFF[J_TASKS], tasks)
            put(job, JOB_OFF[J_POD_GROUP], pg)
            put(job, JOB_OFF[J_LAST_START], last_start)
            put(job, JOB_OFF[J_STALE], stale)
            put(job, JOB_OFF[J_LAST_EVICTION], last_eviction)
            put(job, JOB_OFF[J_GRACE], grace)
            put(job, JOB_OFF[J_DELAY], delay)
            put(job, JOB_OFF[J_INVALID], None)
            put(job, JOB_OFF[J_WARNINGS], [warning] if warning else [])
            put(job, JOB_OFF[J_FIT_ERRORS], [])
            put(job, JOB_OFF[J_NEW_START], None)
            put(job, JOB_OFF[J_STALE_SET], None)
        else:
            job = Job(uid, name, namespace, queue, priority, min_member, preemptible, value,
                      created, tasks, pg)
            if warning:
                job.warnings.append(warning)
        self.delegated = False
        for pod in pods:
            tasks.append(self.task(pod, job))
        self.tasks.extend(tasks)
        if last_start is None:
            if single:
                task = tasks[0]
                status = task.status
                if status is RUNNING or status is BOUND:
                    pod = pods[0]
                    job.last_start_timestamp = pf(pod, P_STARTED) or pf(pod, P_CREATED)
            else:
                job.last_start_timestamp = earliest(
                    [
                        pf(t.pod, P_STARTED) or pf(t.pod, P_CREATED)
                        for t in tasks
                        if t.status is RUNNING or t.status is BOUND
                    ]
                )
        # A pod's bad GPU annotation may have set the invalid reason.
        if not self.delegated or job.invalid_reason is None:
            problem = self.queue_problems.get(queue, self)
            if problem is self:
                problem = self.queue_problems[queue] = self.maker.queue_problem(queue)
            job.invalid_reason = problem
        self.jobs[job.key] = job
        return job


def node_rows(list nodes, dict column_of, Py_ssize_t width, Py_ssize_t pods_column,
              double pods_default):
    """``kai.api.model.node_rows``, compiled: each value written at its column of one
    block, which numpy then copies whole."""
    cdef Py_ssize_t n = len(nodes), i = 0, column
    if not 0 <= pods_column < width:
        raise IndexError(f"pods column {pods_column} of {width}")
    cdef array.array block = array.clone(DOUBLES, n * width, zero=True)
    cdef double* row
    for node in nodes:
        row = block.data.as_doubles + i * width
        row[pods_column] = pods_default
        alloc = node.allocatable
        for name, value in ((<dict>alloc).items() if type(alloc) is dict else alloc.items()):
            found = column_of.get(name)
            if found is not None:
                column = found
                if not 0 <= column < width:
                    raise IndexError(f"column {column} of {width}")
                row[column] = value
        i += 1
    return np.array(block, dtype=np.float64).reshape(n, width)


def requested_resources(list pods, list occupants):
    """``kai.snapshot.builder.requested_resources``, compiled. Pods of one workload
    share one requests map (the loaders make them so): each map is read once, where it
    differs from the last one read."""
    cdef set names = set()
    cdef set read = set()  # the maps read, by address
    last = None
    for group in (pods, occupants):
        for pod in <list>group:
            requests = pf(pod, P_REQUESTS)
            if requests is last:
                continue
            last = requests
            key = PyLong_FromVoidPtr(<void*>requests)
            if key in read:
                continue
            read.add(key)
            names.update(requests)
    return names


cdef tuple group_index(list pod_groups):
    """``kai.snapshot.builder._group_index``, compiled."""
    cdef dict by_namespace = {}
    cdef dict of_namespace
    for pg in pod_groups:
        namespace = gf(pg, G_NAMESPACE)
        found = by_namespace.get(namespace)
        if found is None:
            found = by_namespace[namespace] = {}
        (<dict>found)[gf(pg, G_NAME)] = pg
    cdef list ordered = []
    cdef list members = []
    cdef dict lists = {}
    cdef list pods_of
    for namespace in sorted(by_namespace):
        of_namespace = <dict>by_namespace[namespace]
        for name in sorted(of_namespace):  # names are unique in a namespace
            pods_of = []
            ordered.append(of_namespace[name])
            members.append(pods_of)
            # The group's entry now holds its pods' list: a value replaced, where a
            # second map of every name would be built entry by entry.
            of_namespace[name] = pods_of
        lists[namespace] = of_namespace
    return ordered, members, lists


def group_pods(list pods, list pod_groups, str scheduler_name):
    """``kai.snapshot.builder._group_pods``, compiled (same arguments, same lists)."""
    ordered_groups, members, lists = group_index(pod_groups)
    cdef dict no_groups = {}
    cdef dict missing_group = {}
    cdef list foreign = []
    cdef list singles = []
    for pod in pods:
        if pf(pod, P_SCHEDULER) != scheduler_name:
            foreign.append(pod)
            continue
        group_name = get_key(pf(pod, P_ANNOTATIONS), POD_GROUP_ANNOTATION)
        if group_name:
            namespace = pf(pod, P_NAMESPACE)
            pods_of_group = (<dict>(<dict>lists).get(namespace, no_groups)).get(group_name)
            if pods_of_group is not None:
                (<list>pods_of_group).append(pod)
            else:
                key = (namespace, group_name)
                found = missing_group.get(key)
                if found is None:
                    missing_group[key] = [pod]
                else:
                    (<list>found).append(pod)
        else:
            singles.append(pod)
    singles.sort(key=by_namespace_name)
    missing = [(key, missing_group[key]) for key in sorted(missing_group)]
    group_keys = [f"{gf(pg, G_NAMESPACE)}/{gf(pg, G_NAME)}" for pg in ordered_groups]
    single_keys = [f"{pf(pod, P_NAMESPACE)}/{pf(pod, P_NAME)}" for pod in singles]
    single_uids = [f"pg-{pf(pod, P_NAME)}-{pf(pod, P_UID)}" for pod in singles]
    return (foreign, ordered_groups, members, missing, singles, group_keys, single_keys,
            single_uids)


def assemble(maker, grouping):
    """``kai.snapshot.builder._assemble``, compiled (same arguments, same result)."""
    cdef _Maker m = _Maker(maker)
    state = maker.state
    for pod in <list>grouping.foreign:
        _add_foreign(state, maker.make_task(pod, None))
    cdef list ordered_groups = grouping.groups
    cdef list members = grouping.members
    cdef list keys = grouping.group_keys
    cdef Py_ssize_t i
    for i in range(len(ordered_groups)):
        pg = ordered_groups[i]
        min_member = gf(pg, G_MIN_MEMBER)
        name = gf(pg, G_NAME)
        # KAI identifies a job by its PodGroup name; it breaks ordering ties.
        m.job(name, name, gf(pg, G_NAMESPACE), pg, <list>members[i],
              1 if min_member is None else min_member, keys[i])
    for key, pods_of in <list>grouping.missing:
        namespace, name = key
        maker(f"{namespace}/{name}", name, namespace, None, pods_of, 1,
              missing_pod_group(key))
    cdef list singles = grouping.singles
    cdef list uids = grouping.single_uids
    keys = grouping.single_keys
    for i in range(len(singles)):
        pod = singles[i]
        m.job(uids[i], pf(pod, P_NAME), pf(pod, P_NAMESPACE), None, [pod], 1, keys[i])
    placed = []
    for task in m.tasks:
        if task.node >= 0:
            placed.append(task)
    for task in state.foreign_tasks:
        if task.node >= 0:
            placed.append(task)
    return placed


def job_with_tasks(object job, object tasks):
    """``Job.with_tasks``: a shallow copy of ``job`` that holds only ``tasks`` (a new
    list), its fields copied slot by slot; None for an object this module does not lay
    out (a subclass, or a changed model), which the reference copies."""
    if not DIRECT or type(job) is not JOB_CLASS:
        return None
    view = new_object(JOB_CLASS)
    cdef int i
    for i in range(J_COUNT):
        if i != J_TASKS:
            put(view, JOB_OFF[i], get(job, JOB_OFF[i]))
    put(view, JOB_OFF[J_TASKS], list(tasks))
    return view


def direct():
    """Whether tasks and jobs are written and parsed objects read slot by slot (False:
    the model's classes changed, and this module goes through them)."""
    return bool(DIRECT and POD_SLOTS and GROUP_SLOTS)
