"""Build small clusters the way KAI-Scheduler's own tests describe them.

Conventions (KAI ``test_utils``): nodes have effectively unlimited CPU and memory;
tasks request 1 CPU and 1G of memory plus their GPUs; a job's gang is all its tasks
unless ``min_member`` is given; jobs earlier in the list (after a stable sort by
priority descending) are older; queues hang under a department ``default`` with
unlimited quota unless a parent is named; CPU and memory quotas are unlimited.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import kai

NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


def ts(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class T:
    """A task: state Running (needs node), Pending, Releasing, Succeeded."""

    state: str = "Pending"
    node: str | None = None
    gpus: float | None = None  # overrides the job's per-task GPUs


@dataclass
class J:
    name: str
    queue: str
    tasks: list[T]
    gpus: float = 1.0
    priority: int = 50
    min_member: int | None = None
    preemptibility: str | None = None
    pg_spec: dict[str, Any] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    cpu: str = "1"


def queue(
    name: str,
    gpus: float = 0,
    *,
    limit: float = -1,
    weight: float = 1,
    parent: str | None = "default",
    priority: int | None = None,
    created: datetime | None = None,
) -> dict:
    """A Queue manifest (GPU quota, limit and over-quota weight; CPU and memory
    unlimited); ``created`` orders queues of equal standing as their age does."""
    spec: dict[str, Any] = {
        "resources": {
            "gpu": {"quota": gpus, "limit": limit, "overQuotaWeight": weight},
            "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
            "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
        }
    }
    if parent:
        spec["parentQueue"] = parent
    if priority is not None:
        spec["priority"] = priority
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name, **({"creationTimestamp": ts(created)} if created else {})},
        "spec": spec,
    }


def build(
    nodes: dict[str, float],
    queues: list[dict],
    jobs: list[J],
    *,
    departments: list[dict] | None = None,
    config: dict | None = None,
    devices: dict[str, str] | None = None,
) -> kai.Snapshot:
    """``devices``: pod name -> the shared GPU device (gpu-group) a fractional pod runs on."""
    objs: list[dict] = []
    for name, gpus in nodes.items():
        objs.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {
                        "nvidia.com/gpu.count": str(int(gpus)),
                        "nvidia.com/gpu.memory": "100",
                    },
                },
                "status": {
                    "allocatable": {
                        "cpu": "20000",
                        "memory": "20G",
                        "pods": "110",
                        "nvidia.com/gpu": str(int(gpus)),
                    },
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }
        )
    if departments is None:
        departments = [queue("default", -1, parent=None)]
    objs.extend(departments)
    objs.extend(queues)
    for value in sorted({j.priority for j in jobs}):
        objs.append(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": f"p{value}"},
                "value": value,
            }
        )
    ordered = sorted(jobs, key=lambda j: -j.priority)
    for k, job in enumerate(ordered):
        created = NOW - timedelta(minutes=len(ordered) - k)
        spec: dict[str, Any] = {
            "minMember": job.min_member if job.min_member is not None else len(job.tasks),
            "queue": job.queue,
            "priorityClassName": f"p{job.priority}",
        }
        if job.preemptibility:
            spec["preemptibility"] = job.preemptibility
        spec.update(job.pg_spec)
        annotations = dict(job.annotations)
        if any(t.state == "Running" for t in job.tasks):
            annotations.setdefault(
                "kai.scheduler/last-start-timestamp", ts(NOW - timedelta(minutes=1))
            )
        objs.append(
            {
                "apiVersion": "scheduling.run.ai/v2alpha2",
                "kind": "PodGroup",
                "metadata": {
                    "name": job.name,
                    "namespace": "ns",
                    "uid": job.name,
                    "creationTimestamp": ts(created),
                    "annotations": annotations,
                },
                "spec": spec,
            }
        )
        for i, task in enumerate(job.tasks):
            gpus = job.gpus if task.gpus is None else task.gpus
            requests: dict[str, Any] = {"cpu": job.cpu, "memory": "1G"}
            pod_ann = {"pod-group-name": job.name}
            if gpus and gpus < 1:
                pod_ann["gpu-fraction"] = str(gpus)
            elif gpus:
                requests["nvidia.com/gpu"] = str(int(gpus))
            pod: dict[str, Any] = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{job.name}-{i}",
                    "namespace": "ns",
                    "uid": f"{job.name}-{i}",
                    "annotations": pod_ann,
                    "creationTimestamp": ts(created + timedelta(seconds=i)),
                },
                "spec": {
                    "schedulerName": "kai-scheduler",
                    "containers": [{"name": "c", "resources": {"requests": requests}}],
                },
                "status": {"phase": "Pending"},
            }
            if devices and pod["metadata"]["name"] in devices:
                pod["metadata"]["labels"] = {"runai-gpu-group": devices[pod["metadata"]["name"]]}
            if task.state in ("Running", "Releasing"):
                pod["spec"]["nodeName"] = task.node
                pod["status"]["phase"] = "Running"
                if task.state == "Releasing":
                    pod["metadata"]["deletionTimestamp"] = ts(NOW)
            elif task.state == "Succeeded":
                pod["status"]["phase"] = "Succeeded"
            objs.append(pod)
    if config is not None:
        objs.append(config)
    return kai.Snapshot.from_objects(objs)


def run(snapshot: kai.Snapshot, actions: list[str], now: datetime = NOW) -> kai.SessionResult:
    return kai.run_session(snapshot, actions=actions, now=now)


def statuses(result) -> dict[str, tuple[str, str | None]]:
    """pod name (without namespace) -> (status, node)."""
    return {k.split("/", 1)[1]: (p.status, p.node) for k, p in result.pods.items()}


def decisions(result, kind: str | None = None) -> list[tuple[str, str, str | None]]:
    return [
        (d.type, d.pod.split("/", 1)[1], d.node)
        for d in result.decisions
        if kind is None or d.type == kind
    ]
