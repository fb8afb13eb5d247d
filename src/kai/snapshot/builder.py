"""Turn parsed Kubernetes objects into the scheduling state of one session.

The rules of the acceptance interface (section 1) live here: pod to group, group to
queue, priority, running versus releasing pods, fractional GPUs.  Problems that
concern one group only (an unknown queue, a missing PodGroup) make that group
unschedulable with a reason; the rest of the cluster is still scheduled.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np

from kai import _fast
from kai._dataclasses import dataclass
from kai.api.model import (
    ON_NODE,
    ClusterState,
    Job,
    NodeStatics,
    NodeTable,
    QueueInfo,
    Task,
    TaskStatus,
    queue_arrays,
)
from kai.api.objects import (
    ClusterObjects,
    GenericObject,
    OwnerReference,
    PodGroupObject,
    PodObject,
)
from kai.api.preemptibility import resolve_preemptibility
from kai.api.resources import GPU, PODS, ResourceTable

KAI_SCHEDULER_NAME = "kai-scheduler"
POD_GROUP_ANNOTATION = "pod-group-name"
QUEUE_LABEL = "kai.scheduler/queue"
GPU_FRACTION_ANNOTATION = "gpu-fraction"
GPU_MEMORY_ANNOTATION = "gpu-memory"
GPU_GROUP_LABEL = "runai-gpu-group"
DEFAULT_PRIORITY = 50


def build_state(
    objects: ClusterObjects,
    *,
    scheduler_name: str = KAI_SCHEDULER_NAME,
    node_statics: NodeStatics | None = None,
    grouping: PodGrouping | None = None,
) -> ClusterState:
    """A fresh state of ``objects``; ``node_statics`` (an earlier state's
    ``nodes.statics``) are reused where they are those of the same node objects, and
    ``grouping`` (:func:`group_pods` of these objects) where it is theirs."""
    table = _resource_table(objects)
    nodes = NodeTable(objects.nodes, table, node_statics)
    state = ClusterState(
        resources=table, nodes=nodes, tasks=[], jobs={}, queues=_build_queues(objects)
    )
    state.node_metrics = {m.name: m for m in objects.node_metrics}
    make_job = _JobMaker(state, objects)
    if grouping is None or not grouping.matches(objects, scheduler_name):
        grouping = group_pods(objects, scheduler_name)
    compiled = _fast.module("build")
    placed = (_assemble if compiled is None else compiled.assemble)(make_job, grouping)
    for pod in objects.occupants:
        task = make_job.make_task(pod, None)
        if task.node >= 0:  # on this pool's node (a pod that ended holds nothing)
            state.foreign_tasks.append(task)
            placed.append(task)
    _charge_placed(nodes, placed)
    return state


@dataclass(frozen=True, eq=False)
class PodGrouping:
    """Which job each pod belongs to, and the jobs' order: what a state derives from
    the pod and PodGroup objects alone, the same for every session of a snapshot
    (:meth:`kai.engine.Snapshot.state` makes it once).  Its lists are only read."""

    pods: list[PodObject]  # the objects it was made of
    pod_groups: list[PodGroupObject]
    counts: tuple[int, int]  # their lengths then
    scheduler_name: str
    foreign: list[PodObject]  # the pods of other schedulers, in snapshot order
    groups: list[PodGroupObject]  # in job order
    members: list[list[PodObject]]  # each group's pods, in snapshot order
    # The groups the pods name that the snapshot lacks, by (namespace, name), with
    # their pods.
    missing: list[tuple[tuple[str, str], list[PodObject]]]
    singles: list[PodObject]  # the pods that name no group, by namespace and name
    # The keys of the groups' jobs and of the singles' (namespace/name), and the
    # singles' job uids: made once, their hashes too.
    group_keys: list[str]
    single_keys: list[str]
    single_uids: list[str]

    def matches(self, objects: ClusterObjects, scheduler_name: str) -> bool:
        """Whether this is the grouping of ``objects`` for ``scheduler_name``: the same
        lists of pods and pod groups (a snapshot's objects never change)."""
        return (
            self.pods is objects.pods
            and self.pod_groups is objects.pod_groups
            and self.counts == (len(objects.pods), len(objects.pod_groups))
            and self.scheduler_name == scheduler_name
        )


def group_pods(objects: ClusterObjects, scheduler_name: str = KAI_SCHEDULER_NAME) -> PodGrouping:
    """The jobs of ``objects``' pods (see :class:`PodGrouping`)."""
    compiled = _fast.module("build")
    parts = (_group_pods if compiled is None else compiled.group_pods)(
        objects.pods, objects.pod_groups, scheduler_name
    )
    counts = (len(objects.pods), len(objects.pod_groups))
    return PodGrouping(objects.pods, objects.pod_groups, counts, scheduler_name, *parts)


def _group_pods(
    pods: list[PodObject], pod_groups: list[PodGroupObject], scheduler_name: str
) -> tuple[Any, ...]:
    """:class:`PodGrouping`'s lists (``foreign`` on).  The reference for
    ``kai._fast.build.group_pods``, which gives the same lists."""
    groups, members, lists = _group_index(pod_groups)
    no_groups: dict[str, list[PodObject]] = {}
    missing: dict[tuple[str, str], list[PodObject]] = defaultdict(list)
    foreign: list[PodObject] = []
    singles: list[PodObject] = []
    for pod in pods:
        if pod.scheduler_name != scheduler_name:
            foreign.append(pod)
            continue
        group_name = pod.annotations.get(POD_GROUP_ANNOTATION)
        if group_name:
            pods_of_group = lists.get(pod.namespace, no_groups).get(group_name)
            if pods_of_group is not None:
                pods_of_group.append(pod)
            else:
                missing[(pod.namespace, group_name)].append(pod)
        else:
            singles.append(pod)
    singles.sort(key=_namespace_name)
    return (
        foreign,
        groups,
        members,
        [(key, missing[key]) for key in sorted(missing)],
        singles,
        [f"{pg.namespace}/{pg.name}" for pg in groups],
        [f"{pod.namespace}/{pod.name}" for pod in singles],
        # Named like the PodGroups KAI's pod grouper would create for them.
        [f"pg-{pod.name}-{pod.uid}" for pod in singles],
    )


def _group_index(
    pod_groups: list[PodGroupObject],
) -> tuple[list[PodGroupObject], list[list[PodObject]], dict[str, dict[str, list[PodObject]]]]:
    """Pod groups in job order, the list each one's pods are collected into, and those
    lists by namespace and name (pods find their group through per-namespace maps of
    names: string keys hash once)."""
    by_namespace: dict[str, dict[str, PodGroupObject]] = defaultdict(dict)
    for pg in pod_groups:
        by_namespace[pg.namespace][pg.name] = pg
    ordered_groups: list[PodGroupObject] = []
    members: list[list[PodObject]] = []
    lists: dict[str, dict[str, list[PodObject]]] = {}  # namespace -> name -> pods
    for namespace in sorted(by_namespace):
        items = sorted(by_namespace[namespace].items())  # unique names: pgs never compared
        ordered_groups.extend(map(itemgetter(1), items))
        pods_of: list[list[PodObject]] = [[] for _ in items]
        members.extend(pods_of)
        lists[namespace] = dict(zip(map(itemgetter(0), items), pods_of))
    return ordered_groups, members, lists


def _assemble(make_job: _JobMaker, grouping: PodGrouping) -> list[Task]:
    """Make every task and job, in job order; the tasks on a node, to be charged to it.

    The reference for ``kai._fast.build.assemble``, which gives the same state.
    """
    state = make_job.state
    for pod in grouping.foreign:
        _add_foreign(state, make_job.make_task(pod, None))
    for pg, pods_of in zip(grouping.groups, grouping.members):
        min_member = 1 if pg.min_member is None else pg.min_member
        # KAI identifies a job by its PodGroup name; it breaks ordering ties.
        make_job(pg.name, pg.name, pg.namespace, pg, pods_of, min_member)
    for key, pods_of in grouping.missing:
        namespace, name = key
        make_job(f"{namespace}/{name}", name, namespace, None, pods_of, 1, missing_pod_group(key))
    for pod, uid in zip(grouping.singles, grouping.single_uids):
        make_job(uid, pod.name, pod.namespace, None, [pod], 1)
    return [t for t in state.tasks + state.foreign_tasks if t.node >= 0]


def missing_pod_group(key: tuple[str, str]) -> str:
    """The invalid reason of the pods that name a PodGroup the snapshot lacks."""
    namespace, name = key
    return (
        f"PodGroup {namespace}/{name} named by the pods' "
        f"{POD_GROUP_ANNOTATION} annotation does not exist"
    )


#: The statuses of pods on a node that add_task does not charge to its idle capacity.
_NOT_IDLE = (TaskStatus.RELEASING, TaskStatus.PIPELINED)


def _charge_placed(nodes: NodeTable, placed: list[Task]) -> None:
    """Charge the tasks already on a node (in state order) to their nodes: in bulk
    unless one needs add_task (releasing, pipelined, on a shared GPU)."""
    if not placed:
        return
    ledger = _fast.module("ledger")
    if ledger is not None:
        # Charged in bulk, or nothing written (the reference is _charge_bulk).
        charged = ledger.charge_placed(nodes.used, nodes.idle, nodes.tasks, placed, _NOT_IDLE)
    else:
        charged = _charge_bulk(nodes, placed)
    if charged:
        nodes.version += len(placed)
    else:
        for task in placed:
            nodes.add_task(task)


def _charge_bulk(nodes: NodeTable, placed: list[Task]) -> bool:
    """What add_task does per task, in bulk, unless a task needs add_task (False,
    nothing written). The rows are added in task order, so the sums are bit-identical
    to charging the tasks one at a time (and x - y is x + -y, bit for bit)."""
    for t in placed:  # a loop: no generator frame per task, as any() over one takes
        if t.status in _NOT_IDLE or t.gpu_fraction > 0 or t.gpu_memory_mib > 0:
            return False
    rows = np.fromiter((t.node for t in placed), np.int64, len(placed))
    requests = np.array([t.request for t in placed], dtype=np.float64)
    np.add.at(nodes.used, rows, requests)
    np.add.at(nodes.idle, rows, -requests)
    node_tasks = nodes.tasks
    for t in placed:
        node_tasks[t.node].add(t)
    return True


class _JobMaker:
    """Makes the jobs of one state, with their tasks: ``maker(uid, name, namespace,
    pod_group, pods, min_member, invalid=None)`` adds the job to the state."""

    def __init__(self, state: ClusterState, objects: ClusterObjects) -> None:
        self.state = state
        self.make_task = _TaskMaker(state, objects.other_pool_nodes)
        self.priorities = {pc.name: pc.value for pc in objects.priority_classes}
        self.global_default = next(
            (pc.value for pc in objects.priority_classes if pc.global_default), None
        )
        owners = _owner_index(objects.others)
        self.by_uid: dict[str, GenericObject] = owners["uid"]
        self.by_name: dict[tuple, GenericObject] = owners["name"]
        # Queue -> why jobs cannot be submitted to it (None: they can).
        self.queue_problems: dict[str | None, str | None] = {}

    def lookup(self, namespace: str, ref: OwnerReference) -> GenericObject | None:
        if ref.uid and ref.uid in self.by_uid:
            return self.by_uid[ref.uid]
        by_name = self.by_name
        return by_name.get((namespace, ref.kind, ref.name)) or by_name.get(
            (None, ref.kind, ref.name)
        )

    def priority_of(self, pg: PodGroupObject | None, pods: list[PodObject]) -> int:
        priorities = self.priorities
        if pg is not None and pg.priority_class_name and pg.priority_class_name in priorities:
            return priorities[pg.priority_class_name]
        for pod in pods:
            if pod.priority is not None:
                return pod.priority
        for pod in pods:
            if pod.priority_class_name and pod.priority_class_name in priorities:
                return priorities[pod.priority_class_name]
        return self.global_default if self.global_default is not None else DEFAULT_PRIORITY

    def queue_problem(self, queue: str | None) -> str | None:
        problems = self.queue_problems
        if queue not in problems:
            problems[queue] = _queue_problem(queue, self.state.queues)
        return problems[queue]

    def __call__(
        self,
        uid: str,
        name: str,
        namespace: str,
        pg: PodGroupObject | None,
        pods: list[PodObject],
        min_member: int,
        invalid: str | None = None,
    ) -> Job:
        state = self.state
        make_task = self.make_task
        # Most jobs have one pod: that case avoids the sorts and scans over pods.
        single = len(pods) == 1
        if not single:
            pods = sorted(pods, key=_pod_name)
        queue = pg.queue if pg is not None and pg.queue else None
        if queue is None:
            for p in pods:
                if QUEUE_LABEL in p.labels:
                    queue = p.labels[QUEUE_LABEL]
                    break
        priority = self.priority_of(pg, pods)
        pre = resolve_preemptibility(pg, pods, priority, self.lookup)
        created = pg.creation_timestamp if pg is not None else None
        if created is None:
            if single:
                created = pods[0].creation_timestamp
            else:
                created = earliest([p.creation_timestamp for p in pods])
        job = Job(
            uid,
            name,
            namespace,
            queue,
            priority,
            min_member,
            pre.preemptible,
            pre.value,
            created,
            [],
            pg,
        )
        if pre.warning:
            job.warnings.append(pre.warning)
        tasks = job.tasks
        if single:
            task = make_task(pods[0], job)
            tasks.append(task)
            state.tasks.append(task)
            if job.last_start_timestamp is None and task.status in _RUNNING:
                pod = task.pod
                job.last_start_timestamp = pod.start_time or pod.creation_timestamp
        else:
            for pod in pods:
                tasks.append(make_task(pod, job))
            state.tasks.extend(tasks)
            if job.last_start_timestamp is None:
                job.last_start_timestamp = earliest(
                    [
                        t.pod.start_time or t.pod.creation_timestamp
                        for t in tasks
                        if t.status in _RUNNING
                    ]
                )
        if invalid:
            job.invalid_reason = invalid
        elif job.invalid_reason is None:  # a pod's bad GPU annotation may have set it
            job.invalid_reason = self.queue_problem(queue)
        state.jobs[job.key] = job
        return job


_RUNNING = (TaskStatus.RUNNING, TaskStatus.BOUND)
_namespace_name = attrgetter("namespace", "name")


def pod_status(pod: PodObject) -> TaskStatus:
    """A pod's status as the batch-scheduling model defines it."""
    phase = pod.phase or "Pending"
    if phase == "Succeeded":
        return TaskStatus.SUCCEEDED
    if phase == "Failed":
        return TaskStatus.FAILED
    if pod.deletion_timestamp is not None and phase in ("Pending", "Running"):
        return TaskStatus.RELEASING
    if phase == "Running":
        return TaskStatus.RUNNING
    if phase == "Pending":
        if pod.node_name:
            return TaskStatus.RUNNING
        return TaskStatus.GATED if pod.scheduling_gates else TaskStatus.PENDING
    return TaskStatus.UNKNOWN


def requested_resources(pods: list[PodObject], occupants: list[PodObject]) -> set[str]:
    """The resource names the pods request (the reference of
    ``kai._fast.build.requested_resources``)."""
    return set().union(*map(attrgetter("requests"), pods + occupants))


def _resource_table(objects: ClusterObjects) -> ResourceTable:
    declared: set[str] = set()
    for node in objects.nodes:
        declared.update(node.allocatable)
    compiled = _fast.module("build")
    requested = (requested_resources if compiled is None else compiled.requested_resources)(
        objects.pods, objects.occupants
    )
    extended = {
        name for name in declared | requested if ResourceTable.schedulable_resource(name, declared)
    }
    return ResourceTable(extended)


def _build_queues(objects: ClusterObjects) -> dict[str, QueueInfo]:
    queues: dict[str, QueueInfo] = {}
    for q in objects.queues:
        deserved, limit, weight = queue_arrays(q.resources)
        queues[q.name] = QueueInfo(
            name=q.name,
            parent=q.parent,
            priority=q.priority,
            deserved=deserved,
            limit=limit,
            over_quota_weight=weight,
            creation_timestamp=q.creation_timestamp,
            obj=q,
            preempt_min_runtime=q.preempt_min_runtime,
            reclaim_min_runtime=q.reclaim_min_runtime,
        )
    for info in queues.values():
        if info.parent in queues:
            queues[info.parent].children.append(info.name)
    for info in queues.values():
        info.children.sort()
    return queues


def _queue_problem(queue: str | None, queues: dict[str, QueueInfo]) -> str | None:
    if queue is None:
        return (
            "QueueDoesNotExist: the job names no queue (PodGroup spec.queue or pod label "
            f"{QUEUE_LABEL})"
        )
    if queue not in queues:
        return f"QueueDoesNotExist: queue {queue!r} does not exist"
    if not queues[queue].is_leaf:
        return f"queue {queue!r} is not a leaf queue; jobs may only be submitted to leaf queues"
    return None


def _owner_index(others: list[GenericObject]) -> dict[str, dict]:
    by_uid = {o.uid: o for o in others if o.uid}
    by_name = {(o.namespace, o.kind, o.name): o for o in others}
    return {"uid": by_uid, "name": by_name}


def _pod_name(pod: PodObject) -> str:
    return pod.name


class _TaskMaker:
    """Makes the tasks of one state: ``maker(pod, job)``.

    Pods of one workload ask for the same resources, so request vectors are shared
    between them; they are read-only so that sharing stays safe.
    """

    def __init__(self, state: ClusterState, other_pool_nodes: frozenset[str]) -> None:
        self.state = state
        self.vectors = state.request_vectors
        self.node_index = state.nodes.index
        self.other_pool_nodes = other_pool_nodes
        # The vector of each requests map seen (the loader shares equal maps between
        # pods): keyed by identity, valid while the pods, and so the maps, are alive.
        self.by_map: dict[int, np.ndarray] = {}

    def request_vector(self, requests: dict[str, float]) -> np.ndarray:
        """The pod's request vector (one ``pods`` unit included)."""
        key = tuple(requests.items())
        vec = self.vectors.get(key)
        if vec is None:
            vec = self.state.resources.vector(requests)
            vec[PODS] = 1.0
            vec.flags.writeable = False
            self.vectors[key] = vec
        return vec

    def __call__(self, pod: PodObject, job: Job | None) -> Task:
        request = self.by_map.get(id(pod.requests))
        if request is None:
            request = self.by_map[id(pod.requests)] = self.request_vector(pod.requests)
        phase = pod.phase
        node = -1
        if pod.deletion_timestamp is not None:
            status = pod_status(pod)
        elif phase == "Running":
            status = TaskStatus.RUNNING  # pod_status's common cases, without the call
        elif phase == "Pending" and not pod.node_name and not pod.scheduling_gates:
            status = TaskStatus.PENDING
        else:
            status = pod_status(pod)
        if pod.node_name is not None and status in ON_NODE:
            node = self.node_index.get(pod.node_name, -1)
            if node < 0 and pod.node_name not in self.other_pool_nodes:
                self.state.warnings.append(f"pod {pod.key} is on unknown node {pod.node_name!r}")
        fraction = memory_mib = 0.0
        gpu_group = None
        annotations = pod.annotations
        if GPU_FRACTION_ANNOTATION in annotations or GPU_MEMORY_ANNOTATION in annotations:
            request, fraction, memory_mib, gpu_group = _shared_gpu_request(pod, job, request, node)
        # Positional (uid, name, namespace, job, request, status, pod, node, gpu_fraction,
        # gpu_memory_mib, gpu_group, creation_timestamp): cheaper for 100k pods.
        return Task(
            pod.uid or pod.key,
            pod.name,
            pod.namespace,
            job,  # type: ignore[arg-type]
            request,
            status,
            pod,
            node,
            fraction,
            memory_mib,
            gpu_group,
            pod.creation_timestamp,
        )


def _shared_gpu_request(
    pod: PodObject, job: Job | None, request: np.ndarray, node: int
) -> tuple[np.ndarray, float, float, str | None]:
    """(request, gpu_fraction, gpu_memory_mib, gpu_group) of a pod that asks for a
    fraction of a GPU or for GPU memory (a bad annotation invalidates ``job``)."""
    annotations = pod.annotations
    fraction = 0.0
    memory_mib = 0.0
    gpu_group = None
    raw_fraction = annotations.get(GPU_FRACTION_ANNOTATION)
    raw_memory = annotations.get(GPU_MEMORY_ANNOTATION)
    if raw_fraction:
        try:
            fraction = float(raw_fraction)
        except ValueError:
            fraction = 0.0
        if not 0 < fraction <= 1:
            if job is not None:
                job.invalid_reason = (
                    f"pod {pod.key}: annotation {GPU_FRACTION_ANNOTATION}={raw_fraction!r} "
                    "is not a number in (0, 1]"
                )
            fraction = 0.0
    elif raw_memory:
        try:
            memory_mib = float(raw_memory)
        except ValueError:
            memory_mib = 0.0
        if memory_mib <= 0 and job is not None:
            job.invalid_reason = (
                f"pod {pod.key}: annotation {GPU_MEMORY_ANNOTATION}={raw_memory!r} "
                "is not a positive number of MiB"
            )
    if fraction >= 1.0:  # a whole device is an ordinary GPU request
        request = request.copy()
        request[GPU] = max(request[GPU], 1.0)
        fraction = 0.0
    elif fraction > 0 or memory_mib > 0:
        request = request.copy()
        request[GPU] = 0.0
        gpu_group = gpu_group_of(pod, node)
    return request, fraction, memory_mib, gpu_group


def gpu_group_of(pod: PodObject, node: int) -> str | None:
    """The shared GPU device a pod uses, from its gpu-group label."""
    group = pod.labels.get(GPU_GROUP_LABEL)
    if group is None:
        group = next(
            (v for k, v in pod.labels.items() if k.startswith(GPU_GROUP_LABEL + "/")), None
        )
    if node >= 0 and group is None:
        group = f"{pod.node_name}/{pod.key}"  # running without a known device
    return group


def _add_foreign(state: ClusterState, task: Task) -> None:
    """A pod of another scheduler: it holds capacity only while on a node."""
    if task.node >= 0:
        state.foreign_tasks.append(task)
    else:
        state.passive_tasks.append(task)


def earliest(stamps: list[datetime | None]) -> datetime | None:
    """The earliest of the timestamps that are set, or None."""
    present = [s for s in stamps if s is not None]
    return min(present) if present else None
