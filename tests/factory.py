"""Builders of Kubernetes objects (as dicts) for tests, with KAI-like defaults."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import kai

NOW = "2026-11-22T12:00:00Z"


def node(
    name: str,
    gpus: int = 8,
    cpu: str = "64",
    memory: str = "512Gi",
    pods: int = 110,
    labels: dict | None = None,
    taints: list | None = None,
    ready: bool = True,
    unschedulable: bool = False,
    annotations: dict | None = None,
    gpu_memory: int | None = None,
) -> dict[str, Any]:
    all_labels = dict(labels or {})
    if gpu_memory is not None:
        all_labels["nvidia.com/gpu.memory"] = str(gpu_memory)
    allocatable = {"cpu": cpu, "memory": memory, "pods": str(pods)}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": all_labels, "annotations": annotations or {}},
        "spec": spec,
        "status": {
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def queue(
    name: str,
    parent: str | None = None,
    gpu: tuple = (-1, -1, 1),
    cpu: tuple = (-1, -1, 1),
    memory: tuple = (-1, -1, 1),
    priority: int | None = None,
    created: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """gpu/cpu/memory: (quota, limit, overQuotaWeight)."""

    def res(t: tuple) -> dict:
        return {"quota": t[0], "limit": t[1], "overQuotaWeight": t[2]}

    spec: dict[str, Any] = {"resources": {"gpu": res(gpu), "cpu": res(cpu), "memory": res(memory)}}
    if parent:
        spec["parentQueue"] = parent
    if priority is not None:
        spec["priority"] = priority
    spec.update(extra)
    meta: dict[str, Any] = {"name": name}
    if created:
        meta["creationTimestamp"] = created
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": meta, "spec": spec}


def pod(
    name: str,
    namespace: str = "default",
    gpus: float = 0,
    cpu: str = "1",
    memory: str = "1G",
    group: str | None = None,
    queue: str | None = None,
    node: str | None = None,
    phase: str | None = None,
    priority: int | None = None,
    priority_class: str | None = None,
    created: str = "2026-11-22T10:00:00Z",
    labels: dict | None = None,
    annotations: dict | None = None,
    scheduler: str = "kai-scheduler",
    deleting: bool = False,
    node_selector: dict | None = None,
    tolerations: list | None = None,
    affinity: dict | None = None,
    fraction: float | None = None,
) -> dict[str, Any]:
    ann = dict(annotations or {})
    if group:
        ann["pod-group-name"] = group
    if fraction is not None:
        ann["gpu-fraction"] = str(fraction)
    lab = dict(labels or {})
    if queue:
        lab["kai.scheduler/queue"] = queue
    requests: dict[str, Any] = {"cpu": cpu, "memory": memory}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"{namespace}-{name}",
        "labels": lab,
        "annotations": ann,
        "creationTimestamp": created,
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-11-22T11:59:00Z"
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [{"name": "c", "resources": {"requests": requests}}],
    }
    if node:
        spec["nodeName"] = node
    if priority is not None:
        spec["priority"] = priority
    if priority_class:
        spec["priorityClassName"] = priority_class
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations:
        spec["tolerations"] = tolerations
    if affinity:
        spec["affinity"] = affinity
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": phase or ("Running" if node else "Pending")},
    }


def podgroup(
    name: str,
    namespace: str = "default",
    queue: str | None = "q",
    min_member: int | None = 1,
    priority_class: str | None = None,
    preemptibility: str | None = None,
    created: str = "2026-11-22T10:00:00Z",
    annotations: dict | None = None,
    **spec_extra: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if min_member is not None:
        spec["minMember"] = min_member
    if queue is not None:
        spec["queue"] = queue
    if priority_class:
        spec["priorityClassName"] = priority_class
    if preemptibility:
        spec["preemptibility"] = preemptibility
    spec.update(spec_extra)
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "creationTimestamp": created,
            "annotations": annotations or {},
        },
        "spec": spec,
    }


def gang(
    name: str,
    size: int,
    gpus: float = 1,
    namespace: str = "default",
    queue: str = "q",
    min_member: int | None = None,
    created: str = "2026-11-22T10:00:00Z",
    nodes: list[str] | None = None,
    **pod_kwargs: Any,
) -> list[dict[str, Any]]:
    """A PodGroup and its pods (running on ``nodes`` if given)."""
    objs = [
        podgroup(
            name, namespace, queue, size if min_member is None else min_member, created=created
        )
    ]
    for i in range(size):
        node_name = nodes[i] if nodes else None
        objs.append(
            pod(
                f"{name}-{i}",
                namespace,
                gpus=gpus,
                group=name,
                node=node_name,
                created=created,
                **pod_kwargs,
            )
        )
    return objs


def priority_class(name: str, value: int, global_default: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "globalDefault": global_default,
    }


def run(
    objects: list[dict],
    actions: list[str] | None = None,
    now: str = NOW,
    config: dict | None = None,
    backend: str | None = None,
) -> dict[str, Any]:
    """Run one session and return the JSON output as a dict."""
    objs = list(objects)
    if config is not None:
        objs.append({"apiVersion": "kai.scheduler/v1", "kind": "SchedulerConfiguration", **config})
    snapshot = kai.Snapshot.from_objects(objs)
    result = kai.run_session(snapshot, actions=actions, now=now, backend=backend)
    return result.to_json(explain=True)


def statuses(out: dict) -> dict[str, tuple[str, str | None]]:
    return {k: (v["status"], v["node"]) for k, v in out["pods"].items()}


@contextmanager
def counted_queue_comparisons(ssn: Any) -> Iterator[list[int]]:
    """Count the session's queue comparisons while inside: yields a one-item list that
    holds the count."""
    count = [0]
    compare = ssn.queue_order

    def counting(*args: Any) -> int:
        count[0] += 1
        return compare(*args)

    ssn.queue_order = counting
    try:
        yield count
    finally:
        del ssn.queue_order
