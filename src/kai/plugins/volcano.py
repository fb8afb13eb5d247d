"""Plugins of the kube-batch/Volcano family: gang, drf and conformance.

KAI-Scheduler folds gang semantics into its job model and DRF into proportion's
queue order; these plugins offer the classic forms for configurations that name them.
"""

from __future__ import annotations

import numpy as np

from kai.api.model import ACTIVE_ALLOCATED, ALIVE, Job, Task
from kai.api.resources import CPU, GPU, MEMORY
from kai.framework import Plugin, Session, register_plugin

CRITICAL_PRIORITY_CLASSES = ("system-cluster-critical", "system-node-critical")
SYSTEM_NAMESPACE = "kube-system"


class GangPlugin(Plugin):
    """All-or-nothing: a job is ready once minMember of its pods are placed."""

    name = "gang"

    def on_session_open(self, ssn: Session) -> None:
        def job_valid(job: Job) -> str | None:
            alive = job.count(ALIVE)
            if alive < job.min_member:
                return f"gang: {alive} pod(s) exist but minMember is {job.min_member}"
            return None

        def job_ready(job: Job) -> bool:
            return job.active_allocated_count() >= job.min_member

        def job_order(left: Job, right: Job) -> int:
            lr, rr = job_ready(left), job_ready(right)
            return 0 if lr == rr else (1 if lr else -1)  # not-yet-ready jobs first

        def victims(actor: Task, candidates: list[Task]) -> list[Task]:
            # A victim job may lose pods only down to its minimum, unless it goes whole.
            out: list[Task] = []
            budget: dict[Job, int] = {}
            for task in candidates:
                job = task.job
                spare = budget.setdefault(job, job.active_allocated_count() - job.min_member)
                if spare > 0 or job.min_member <= 1:
                    out.append(task)
                    budget[job] = spare - 1
            return out

        ssn.add_job_valid_fn(job_valid)
        ssn.add_job_ready_fn(job_ready)
        ssn.add_job_pipelined_fn(lambda job: job.count(ACTIVE_ALLOCATED) >= job.min_member)
        ssn.add_job_starving_fn(lambda job: job.active_allocated_count() < job.min_member)
        ssn.add_job_order_fn(job_order)
        ssn.add_preemptable_fn(victims)
        ssn.add_reclaimable_fn(victims)


class DrfPlugin(Plugin):
    """Dominant resource fairness between jobs: the smaller dominant share goes first."""

    name = "drf"

    def on_session_open(self, ssn: Session) -> None:
        nodes = ssn.nodes
        total = nodes.allocatable[:, [CPU, MEMORY, GPU]].sum(axis=0)
        backend = ssn.backend

        def share(job: Job) -> float:
            allocated = np.zeros((1, 3))
            for task in job.tasks:
                if task.status in ACTIVE_ALLOCATED:
                    allocated[0] += task.request[[CPU, MEMORY, GPU]]
                    allocated[0, 2] += task.gpu_fraction
            return float(backend.dominant_share(allocated, total)[0])

        def job_order(left: Job, right: Job) -> int:
            ls, rs = share(left), share(right)
            return 0 if ls == rs else (-1 if ls < rs else 1)

        ssn.add_job_order_fn(job_order)


def is_critical(task: Task) -> bool:
    pod = task.pod
    return pod.priority_class_name in CRITICAL_PRIORITY_CLASSES or (
        pod.namespace == SYSTEM_NAMESPACE
    )


class ConformancePlugin(Plugin):
    """Critical system pods are never victims."""

    name = "conformance"

    def on_session_open(self, ssn: Session) -> None:
        def victims(actor: Task, candidates: list[Task]) -> list[Task]:
            return [t for t in candidates if not is_critical(t)]

        ssn.add_preemptable_fn(victims)
        ssn.add_reclaimable_fn(victims)
        ssn.add_reclaim_victim_filter_fn(
            lambda reclaimer, victim: not any(is_critical(t) for t in victim.tasks)
        )
        ssn.add_preempt_victim_filter_fn(
            lambda preemptor, victim: not any(is_critical(t) for t in victim.tasks)
        )


register_plugin("gang", GangPlugin)
register_plugin("drf", DrfPlugin)
register_plugin("conformance", ConformancePlugin)
