"""Cluster generators for kai's benchmarks (``kai bench`` and ``benchmarks/``).

Every generator fills a :class:`ClusterBuilder`, a compact description of nodes,
queues and jobs, which is then emitted in one of two forms:

* ``builder.dicts()``: Kubernetes objects as Python dicts, exactly what a YAML or JSON
  snapshot gives; ``Snapshot.from_objects(builder.dicts())`` then parses them (this is
  the realistic snapshot cost: building and parsing the manifests);
* ``builder.objects()``: parsed :class:`kai.api.objects.ClusterObjects` built directly,
  skipping the manifest layer (fast, for very large clusters).

Both give the same scheduling state.  Scenarios:

* ``kai_topology``: KAI-Scheduler's ``pkg/scheduler/actions/benchmark_test.go``
  topologies (small/medium/large; pending, running or mixed jobs; many queues; gangs);
* ``kai_reclaim_large_jobs``: ``BenchmarkReclaimLargeJobs_<N>Node``;
* ``kai_reclaim_many_single_gpu``: ``BenchmarkReclaimManySingleGPUJobsFullCycle_<N>Node``;
* ``cluster_fill``: N nodes x 8 GPUs, single-GPU jobs and 8-64 pod gangs across a
  three-level queue tree;
* ``storm``: a full cluster with pending jobs that must evict (reclaim/preempt storms);
* ``fractional``: fractional-GPU packing.

KAI's test defaults (reference section 10): nodes have 20,000 CPU cores, 20G memory,
110 pods, labels ``nvidia.com/gpu.count`` and ``nvidia.com/gpu.memory=100``; tasks
request 1 CPU and 1G memory besides their GPUs; job k of n (after a stable sort by
priority, highest first) is created ``n - k`` minutes before now; queue k is created
``k`` minutes after now; jobs with running tasks started one minute before now;
departments get a GPU over-quota weight equal to their deserved GPUs.
"""

from __future__ import annotations

import math
import random
from dataclasses import field
from datetime import datetime, timedelta, timezone
from typing import Any

from kai._dataclasses import dataclass
from kai.api.objects import (
    ClusterObjects,
    NodeObject,
    PodGroupObject,
    PodObject,
    PriorityClassObject,
    QueueObject,
    QueueResource,
)

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
NOW_TEXT = "2026-01-01T12:00:00Z"

GPU = "nvidia.com/gpu"
NODE_CPU_MILLI = 20_000 * 1000.0  # "20000" cores
NODE_MEMORY = 20e9  # "20G"
TASK_CPU_MILLI = 1000.0  # "1"
TASK_MEMORY = 1e9  # "1G"
MB = 1_000_000.0

PRIORITY_CLASSES = {"train": 50, "build": 100, "inference": 125}


def _ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class NodeSpec:
    name: str
    gpus: int = 8
    cpu_milli: float = NODE_CPU_MILLI
    memory: float = NODE_MEMORY
    pods: int = 110
    gpu_memory: int = 100
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class QueueSpec:
    name: str
    parent: str | None = None
    gpu_quota: float = 0.0
    gpu_limit: float = -1.0
    gpu_weight: float = 1.0
    cpu: tuple[float, float, float] = (-1.0, -1.0, 1.0)  # quota, limit, weight (cores)
    memory: tuple[float, float, float] = (-1.0, -1.0, 1.0)  # quota, limit, weight (MB)
    priority: int = 100
    created: datetime | None = None
    reclaim_min_runtime: float | None = None


@dataclass
class TaskSpec:
    gpus: float = 1.0  # a value in (0, 1) is a gpu-fraction
    node: str | None = None  # running on this node when set
    cpu_milli: float = TASK_CPU_MILLI
    memory: float = TASK_MEMORY


@dataclass
class JobSpec:
    name: str
    queue: str
    tasks: list[TaskSpec]
    priority_class: str = "train"
    min_member: int | None = None  # default: all tasks (KAI's test default gang)
    namespace: str = "default"
    created: datetime | None = None
    last_start: datetime | None = None


class ClusterBuilder:
    """A cluster description that can be emitted as manifests or as parsed objects."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.nodes: list[NodeSpec] = []
        self.queues: list[QueueSpec] = []
        self.jobs: list[JobSpec] = []

    # ------------------------------------------------------------------ building
    def add_nodes(self, count: int, gpus: int = 8, prefix: str = "node-", **kw: Any) -> None:
        for i in range(count):
            self.nodes.append(NodeSpec(f"{prefix}{i}", gpus=gpus, **kw))

    def finish_defaults(self) -> ClusterBuilder:
        """Apply KAI's implicit test defaults: job and queue creation times, last start."""
        order = sorted(
            range(len(self.jobs)),
            key=lambda k: -PRIORITY_CLASSES.get(self.jobs[k].priority_class, 50),
        )
        n = len(order)
        for rank, k in enumerate(order):
            job = self.jobs[k]
            if job.created is None:
                job.created = NOW - timedelta(minutes=n - rank)
            if job.last_start is None and any(t.node for t in job.tasks):
                job.last_start = NOW - timedelta(minutes=1)
        for k, q in enumerate(self.queues):
            if q.created is None:
                q.created = NOW + timedelta(minutes=k)
        return self

    @property
    def pod_count(self) -> int:
        return sum(len(j.tasks) for j in self.jobs)

    @property
    def pending_pod_count(self) -> int:
        return sum(1 for j in self.jobs for t in j.tasks if t.node is None)

    # ------------------------------------------------------------------ manifests
    def dicts(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for name, value in PRIORITY_CLASSES.items():
            out.append(
                {
                    "apiVersion": "scheduling.k8s.io/v1",
                    "kind": "PriorityClass",
                    "metadata": {"name": name},
                    "value": value,
                }
            )
        for q in self.queues:
            spec: dict[str, Any] = {
                "priority": q.priority,
                "resources": {
                    "gpu": {
                        "quota": q.gpu_quota,
                        "limit": q.gpu_limit,
                        "overQuotaWeight": q.gpu_weight,
                    },
                    "cpu": dict(zip(("quota", "limit", "overQuotaWeight"), q.cpu)),
                    "memory": dict(zip(("quota", "limit", "overQuotaWeight"), q.memory)),
                },
            }
            if q.parent:
                spec["parentQueue"] = q.parent
            if q.reclaim_min_runtime is not None:
                spec["reclaimMinRuntime"] = f"{q.reclaim_min_runtime:g}s"
            meta: dict[str, Any] = {"name": q.name}
            if q.created is not None:
                meta["creationTimestamp"] = _ts(q.created)
            out.append(
                {
                    "apiVersion": "scheduling.run.ai/v2",
                    "kind": "Queue",
                    "metadata": meta,
                    "spec": spec,
                }
            )
        for n in self.nodes:
            labels = {
                "nvidia.com/gpu.count": str(n.gpus),
                "nvidia.com/gpu.memory": str(n.gpu_memory),
                **n.labels,
            }
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": n.name, "labels": labels},
                    "spec": {},
                    "status": {
                        "allocatable": {
                            "cpu": f"{int(n.cpu_milli)}m",
                            "memory": str(int(n.memory)),
                            "pods": str(n.pods),
                            GPU: str(n.gpus),
                        },
                        "conditions": [{"type": "Ready", "status": "True"}],
                    },
                }
            )
        for job in self.jobs:
            pg_meta: dict[str, Any] = {"name": job.name, "namespace": job.namespace}
            if job.created is not None:
                pg_meta["creationTimestamp"] = _ts(job.created)
            if job.last_start is not None:
                pg_meta["annotations"] = {"kai.scheduler/last-start-timestamp": _ts(job.last_start)}
            out.append(
                {
                    "apiVersion": "scheduling.run.ai/v2alpha2",
                    "kind": "PodGroup",
                    "metadata": pg_meta,
                    "spec": {
                        "minMember": len(job.tasks) if job.min_member is None else job.min_member,
                        "queue": job.queue,
                        "priorityClassName": job.priority_class,
                    },
                }
            )
            for i, t in enumerate(job.tasks):
                annotations = {"pod-group-name": job.name}
                requests: dict[str, str] = {
                    "cpu": f"{int(t.cpu_milli)}m",
                    "memory": str(int(t.memory)),
                }
                if 0 < t.gpus < 1:
                    annotations["gpu-fraction"] = repr(float(t.gpus))
                elif t.gpus:
                    requests[GPU] = str(int(t.gpus))
                meta = {
                    "name": f"{job.name}-{i}",
                    "namespace": job.namespace,
                    "uid": f"{job.namespace}-{job.name}-{i}",
                    "annotations": annotations,
                }
                if job.created is not None:
                    meta["creationTimestamp"] = _ts(job.created)
                spec = {
                    "schedulerName": "kai-scheduler",
                    "priorityClassName": job.priority_class,
                    "containers": [{"name": "main", "resources": {"requests": requests}}],
                }
                if t.node:
                    spec["nodeName"] = t.node
                out.append(
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": meta,
                        "spec": spec,
                        "status": {"phase": "Running" if t.node else "Pending"},
                    }
                )
        return out

    # ------------------------------------------------------------------ objects
    def objects(self) -> ClusterObjects:
        objs = ClusterObjects()
        shared_requests: dict[tuple, dict[str, float]] = {}
        objs.priority_classes = [PriorityClassObject(n, v) for n, v in PRIORITY_CLASSES.items()]
        for q in self.queues:
            objs.queues.append(
                QueueObject(
                    name=q.name,
                    parent=q.parent,
                    priority=q.priority,
                    resources={
                        "gpu": QueueResource(q.gpu_quota, q.gpu_limit, q.gpu_weight),
                        "cpu": QueueResource(
                            _scale(q.cpu[0], 1.0), _scale(q.cpu[1], 1.0), q.cpu[2]
                        ),
                        "memory": QueueResource(
                            _scale(q.memory[0], MB), _scale(q.memory[1], MB), q.memory[2]
                        ),
                    },
                    reclaim_min_runtime=q.reclaim_min_runtime,
                    creation_timestamp=q.created,
                )
            )
        for n in self.nodes:
            objs.nodes.append(
                NodeObject(
                    name=n.name,
                    labels={
                        "nvidia.com/gpu.count": str(n.gpus),
                        "nvidia.com/gpu.memory": str(n.gpu_memory),
                        **n.labels,
                    },
                    allocatable={
                        "cpu": n.cpu_milli,
                        "memory": n.memory,
                        "pods": float(n.pods),
                        GPU: float(n.gpus),
                    },
                )
            )
        for job in self.jobs:
            objs.pod_groups.append(
                PodGroupObject(
                    name=job.name,
                    namespace=job.namespace,
                    creation_timestamp=job.created,
                    min_member=len(job.tasks) if job.min_member is None else job.min_member,
                    queue=job.queue,
                    priority_class_name=job.priority_class,
                    last_start_timestamp=job.last_start,
                    annotations=(
                        {"kai.scheduler/last-start-timestamp": _ts(job.last_start)}
                        if job.last_start
                        else {}
                    ),
                )
            )
            for i, t in enumerate(job.tasks):
                annotations = {"pod-group-name": job.name}
                requests = {"cpu": t.cpu_milli, "memory": t.memory}
                if 0 < t.gpus < 1:
                    annotations["gpu-fraction"] = repr(float(t.gpus))
                elif t.gpus:
                    requests[GPU] = float(int(t.gpus))
                # Shared between equal pods, as the loader does.
                requests = shared_requests.setdefault(tuple(requests.items()), requests)
                objs.pods.append(
                    PodObject(
                        name=f"{job.name}-{i}",
                        namespace=job.namespace,
                        uid=f"{job.namespace}-{job.name}-{i}",
                        annotations=annotations,
                        creation_timestamp=job.created,
                        scheduler_name="kai-scheduler",
                        node_name=t.node,
                        priority_class_name=job.priority_class,
                        requests=requests,
                        phase="Running" if t.node else "Pending",
                    )
                )
        return objs


def _scale(v: float, unit: float) -> float:
    return v if v == -1 else v * unit


# ====================================================================== KAI topologies
#: benchmark_test.go sizes: (nodes, jobs)
KAI_SIZES = {"small": (10, 50), "medium": (50, 200), "large": (100, 500)}


def _kai_queues(b: ClusterBuilder, total_gpus: int, queues: int = 4, departments: int = 2) -> None:
    for d in range(departments):
        deserved = total_gpus / departments
        b.queues.append(
            QueueSpec(
                f"dept-{chr(ord('a') + d)}" if departments <= 26 else f"dept-{d}",
                gpu_quota=deserved,
                gpu_weight=deserved,
            )
        )
    per_dept = math.ceil(queues / departments)
    for q in range(queues):
        dept = (q // per_dept) if departments == 2 else (q % departments)
        b.queues.append(
            QueueSpec(
                f"queue-{q}",
                parent=b.queues[dept].name,
                gpu_quota=total_gpus / queues,
                gpu_weight=1.0,
            )
        )


def kai_topology(
    size: str | int = "large", mode: str = "pending", *, queues: int = 4, gang: int = 1
) -> ClusterBuilder:
    """A topology of KAI's ``benchmark_test.go``.

    ``size``: small (10 nodes, 50 jobs), medium (50, 200), large (100, 500) or a node
    count (5 jobs per node).  ``mode``: ``pending`` (allocate), ``running`` (job i on
    ``node-(i % nodes)``, reclaim) or ``mixed`` (even jobs running, odd pending).
    ``queues=20`` gives ManyQueues (5 departments), ``gang=4`` GangScheduling (half the
    jobs, each with 4 pending tasks).
    """
    nodes, jobs = KAI_SIZES[size] if isinstance(size, str) else (int(size), 5 * int(size))
    if gang > 1:
        jobs //= 2
    b = ClusterBuilder(f"kai-{size}-{mode}")
    b.add_nodes(nodes, gpus=8)
    total = nodes * 8
    departments = 2 if queues == 4 else math.ceil(queues / 4)
    _kai_queues(b, total, queues, departments)
    for i in range(jobs):
        running = mode == "running" or (mode == "mixed" and i % 2 == 0)
        node = f"node-{i % nodes}" if running else None
        b.jobs.append(
            JobSpec(
                f"job-{i}",
                f"queue-{i % queues}",
                [TaskSpec(1.0, node) for _ in range(gang)],
            )
        )
    return b.finish_defaults()


def kai_reclaim_large_jobs(nodes: int) -> ClusterBuilder:
    """``BenchmarkReclaimLargeJobs_<N>Node``: a job of N/2 x 8 GPUs must evict N/2*8 pods."""
    b = ClusterBuilder(f"reclaim-large-jobs-{nodes}")
    b.add_nodes(nodes, gpus=8)
    b.queues.append(QueueSpec("default", gpu_quota=-1, gpu_weight=0.0))
    b.queues.append(QueueSpec("queue-0", parent="default", gpu_quota=0, gpu_weight=0.0))
    b.queues.append(QueueSpec("queue-1", parent="default", gpu_quota=nodes * 8, gpu_weight=0.0))
    for i in range(nodes * 8):
        b.jobs.append(JobSpec(f"running-job-{i}", "queue-0", [TaskSpec(1.0, f"node-{i % nodes}")]))
    b.jobs.append(
        JobSpec("very-large-job", "queue-1", [TaskSpec(8.0) for _ in range(max(nodes // 2, 1))])
    )
    return b.finish_defaults()


def kai_reclaim_many_single_gpu(nodes: int, min_runtime: float | None = None) -> ClusterBuilder:
    """``BenchmarkReclaimManySingleGPUJobsFullCycle_<N>Node``."""
    b = ClusterBuilder(f"reclaim-many-single-{nodes}")
    b.add_nodes(nodes, gpus=8)
    b.queues.append(QueueSpec("default", gpu_quota=-1, gpu_weight=0.0))
    b.queues.append(
        QueueSpec(
            "many-single-gpu-running-queue",
            parent="default",
            gpu_quota=0,
            gpu_weight=0.0,
            reclaim_min_runtime=min_runtime,
        )
    )
    b.queues.append(
        QueueSpec(
            "many-single-gpu-pending-queue", parent="default", gpu_quota=nodes * 8, gpu_weight=0.0
        )
    )
    for i in range(nodes * 8):
        b.jobs.append(
            JobSpec(
                f"running-job-{i}",
                "many-single-gpu-running-queue",
                [TaskSpec(1.0, f"node-{i % nodes}")],
            )
        )
    for i in range(nodes * 8):
        b.jobs.append(JobSpec(f"pending-job-{i}", "many-single-gpu-pending-queue", [TaskSpec(1.0)]))
    return b.finish_defaults()


# ====================================================================== kai's own scenarios
def _three_level_queues(b: ClusterBuilder, total_gpus: int) -> list[str]:
    """2 departments x 2 projects x 3 leaf queues = 12 leaves (3 levels)."""
    leaves = []
    b.queues.append(QueueSpec("dept-0", gpu_quota=total_gpus / 2, gpu_weight=1.0))
    b.queues.append(QueueSpec("dept-1", gpu_quota=total_gpus / 2, gpu_weight=1.0))
    for d in range(2):
        for p in range(2):
            proj = f"proj-{d}-{p}"
            b.queues.append(QueueSpec(proj, parent=f"dept-{d}", gpu_quota=total_gpus / 4))
            for leaf in range(3):
                name = f"team-{d}-{p}-{leaf}"
                b.queues.append(
                    QueueSpec(name, parent=proj, gpu_quota=total_gpus / 12, gpu_weight=1 + leaf)
                )
                leaves.append(name)
    return leaves


def cluster_fill(
    nodes: int,
    pods: int | None = None,
    *,
    gang_fraction: float = 0.5,
    seed: int = 1,
) -> ClusterBuilder:
    """Fill an empty cluster: single-GPU jobs and 8-64 pod gangs over a 3-level tree.

    ``pods`` pending single-GPU pods in total (default: exactly the cluster's GPUs);
    about ``gang_fraction`` of them belong to gangs of 8 to 64 pods.
    """
    rng = random.Random(seed)
    total_gpus = nodes * 8
    pods = total_gpus if pods is None else pods
    b = ClusterBuilder(f"fill-{nodes}")
    b.add_nodes(nodes, gpus=8)
    leaves = _three_level_queues(b, total_gpus)
    gang_pods = int(pods * gang_fraction)
    made = 0
    j = 0
    while made < gang_pods:
        size = min(rng.choice((8, 16, 32, 64)), gang_pods - made)
        b.jobs.append(JobSpec(f"gang-{j}", rng.choice(leaves), [TaskSpec(1.0)] * size))
        made += size
        j += 1
    for i in range(pods - made):
        b.jobs.append(JobSpec(f"single-{i}", leaves[i % len(leaves)], [TaskSpec(1.0)]))
    return b.finish_defaults()


def storm(nodes: int, pending_jobs: int = 1000, *, kind: str = "reclaim") -> ClusterBuilder:
    """A full cluster and ``pending_jobs`` single-GPU jobs that can only run by evicting.

    ``reclaim``: the cluster is filled by an over-quota queue (deserved 0) and the
    pending jobs belong to a queue whose quota they are under.  ``preempt``: the
    cluster is filled by low-priority (train) jobs of the same queue the pending
    high-priority (build, non-preemptible) jobs are in.
    """
    b = ClusterBuilder(f"{kind}-storm-{nodes}")
    b.add_nodes(nodes, gpus=8)
    total = nodes * 8
    b.queues.append(QueueSpec("default", gpu_quota=-1, gpu_weight=1.0))
    if kind == "reclaim":
        b.queues.append(QueueSpec("filler", parent="default", gpu_quota=0, gpu_weight=1.0))
        b.queues.append(QueueSpec("claimer", parent="default", gpu_quota=total, gpu_weight=1.0))
        run_q, pend_q, pend_pc = "filler", "claimer", "train"
    else:
        b.queues.append(QueueSpec("shared", parent="default", gpu_quota=total, gpu_weight=1.0))
        run_q, pend_q, pend_pc = "shared", "shared", "build"
    for i in range(total):
        b.jobs.append(JobSpec(f"running-{i}", run_q, [TaskSpec(1.0, f"node-{i % nodes}")]))
    for i in range(pending_jobs):
        b.jobs.append(JobSpec(f"pending-{i}", pend_q, [TaskSpec(1.0)], priority_class=pend_pc))
    return b.finish_defaults()


def fractional(nodes: int, pods: int | None = None, *, seed: int = 2) -> ClusterBuilder:
    """Fractional GPU packing: pods asking 0.1-0.5 of a device onto empty nodes."""
    rng = random.Random(seed)
    pods = nodes * 8 * 2 if pods is None else pods
    b = ClusterBuilder(f"fractional-{nodes}")
    b.add_nodes(nodes, gpus=8)
    b.queues.append(QueueSpec("default", gpu_quota=-1, gpu_weight=1.0))
    for q in range(4):
        b.queues.append(QueueSpec(f"queue-{q}", parent="default", gpu_quota=nodes * 2))
    for i in range(pods):
        frac = rng.choice((0.1, 0.25, 0.5))
        b.jobs.append(JobSpec(f"frac-{i}", f"queue-{i % 4}", [TaskSpec(frac)]))
    return b.finish_defaults()


def random_cluster(seed: int, nodes: int = 12, jobs: int = 30) -> ClusterBuilder:
    """A small random cluster mixing running, pending, gang and fractional jobs."""
    rng = random.Random(seed)
    b = ClusterBuilder(f"random-{seed}")
    for i in range(nodes):
        b.nodes.append(
            NodeSpec(
                f"node-{i}",
                gpus=rng.choice((0, 2, 4, 8)),
                cpu_milli=rng.choice((16, 32, 64)) * 1000.0,
                memory=rng.choice((64, 128, 256)) * 1e9,
                labels={"pool": rng.choice(("a", "b"))},
            )
        )
    total = sum(n.gpus for n in b.nodes)
    b.queues.append(QueueSpec("root", gpu_quota=total, gpu_weight=1.0))
    for q in range(3):
        b.queues.append(
            QueueSpec(
                f"q{q}",
                parent="root",
                gpu_quota=rng.choice((0, total / 4, total / 2)),
                gpu_weight=rng.choice((0.0, 1.0, 2.0)),
            )
        )
    free: dict[str, tuple[float, float]] = {n.name: (n.gpus, n.cpu_milli) for n in b.nodes}
    for j in range(jobs):
        ntasks = rng.choice((1, 1, 1, 2, 4))
        gpus = rng.choice((0.0, 0.5, 1.0, 1.0, 2.0, 0.25))
        if ntasks > 1 and 0 < gpus < 1:
            gpus = 1.0
        cpu = rng.choice((1, 2, 4, 8)) * 1000.0
        tasks = []
        running = rng.random() < 0.4
        for _ in range(ntasks):
            node = None
            if running:
                cands = [k for k, (g, c) in free.items() if g >= math.ceil(gpus) and c >= cpu]
                if cands and not (0 < gpus < 1):
                    node = rng.choice(cands)
                    g, c = free[node]
                    free[node] = (g - gpus, c - cpu)
            tasks.append(TaskSpec(gpus, node, cpu_milli=cpu, memory=rng.choice((1, 4, 16)) * 1e9))
        if running and any(t.node is None for t in tasks):
            # A gang that did not fit whole stays pending (its capacity is not given back:
            # the cluster just ends up a little less full).
            tasks = [TaskSpec(t.gpus, None, t.cpu_milli, t.memory) for t in tasks]
        b.jobs.append(
            JobSpec(
                f"job-{j}",
                f"q{rng.randrange(3)}",
                tasks,
                priority_class=rng.choice(("train", "train", "build", "inference")),
                min_member=rng.choice((None, 1)),
            )
        )
    return b.finish_defaults()
