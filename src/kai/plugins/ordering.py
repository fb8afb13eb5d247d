"""Job and task ordering plugins: priority, elastic, taskorder, kubeflow, ray."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kai.api.model import Job, Task
from kai.framework import Plugin, Session, register_plugin

TASK_PRIORITY_LABEL = "kai.scheduler/task-priority"
KUBEFLOW_ROLE_LABEL = "training.kubeflow.org/job-role"
RAY_NODE_TYPE_LABEL = "ray.io/node-type"


def _task_order_by_key(key: Callable[[Task], Any], label: str) -> Callable[[Task, Task], int]:
    """A task-order function that orders by ``key`` (lower first).

    It carries the key as ``order_key`` and the one pod label the key reads as
    ``order_labels``: a pod without that label gets the same key as any other, which
    the allocate loop uses to sort a gang's pods by key instead of by comparisons.
    """

    def task_order(left: Task, right: Task) -> int:
        a, b = key(left), key(right)
        return 0 if a == b else (-1 if a < b else 1)

    task_order.order_key = key  # type: ignore[attr-defined]
    task_order.order_labels = frozenset({label})  # type: ignore[attr-defined]
    return task_order


class PriorityPlugin(Plugin):
    """Higher-priority jobs are considered first."""

    name = "priority"
    native_allocate = True

    def on_session_open(self, ssn: Session) -> None:
        def job_order(left: Job, right: Job) -> int:
            if left.priority == right.priority:
                return 0
            return -1 if left.priority > right.priority else 1

        # A sort key equivalent to the comparison (kai.actions.solvers.order): lower first.
        job_order.order_key = lambda job: -job.priority  # type: ignore[attr-defined]
        ssn.add_job_order_fn(job_order)


class ElasticPlugin(Plugin):
    """Jobs below their gang minimum come first, then jobs exactly at it."""

    name = "elastic"
    native_allocate = True

    def on_session_open(self, ssn: Session) -> None:
        def state(job: Job) -> int:
            allocated = job.active_allocated_count()
            if allocated < job.min_member:
                return 0
            return 1 if allocated == job.min_member else 2

        def job_order(left: Job, right: Job) -> int:
            ls, rs = state(left), state(right)
            return 0 if ls == rs else (-1 if ls < rs else 1)

        job_order.order_key = state  # type: ignore[attr-defined]
        ssn.add_job_order_fn(job_order)


def task_priority(task: Task) -> int | None:
    raw = task.pod.labels.get(TASK_PRIORITY_LABEL)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


class TaskOrderPlugin(Plugin):
    """Tasks with a higher ``kai.scheduler/task-priority`` label go first."""

    name = "taskorder"
    native_allocate = True

    @staticmethod
    def order_key(task: Task) -> tuple[int, int]:
        """Labelled tasks first, the highest priority first."""
        p = task_priority(task)
        return (1, 0) if p is None else (0, -p)

    def on_session_open(self, ssn: Session) -> None:
        ssn.add_task_order_fn(_task_order_by_key(self.order_key, TASK_PRIORITY_LABEL))


class KubeflowPlugin(Plugin):
    """Kubeflow masters and MPI launchers go before workers."""

    name = "kubeflow"
    native_allocate = True

    @staticmethod
    def order_key(task: Task) -> int:
        return 0 if task.pod.labels.get(KUBEFLOW_ROLE_LABEL) in ("master", "launcher") else 1

    def on_session_open(self, ssn: Session) -> None:
        ssn.add_task_order_fn(_task_order_by_key(self.order_key, KUBEFLOW_ROLE_LABEL))


class RayPlugin(Plugin):
    """The Ray head goes before workers."""

    name = "ray"
    native_allocate = True

    @staticmethod
    def order_key(task: Task) -> int:
        return 0 if task.pod.labels.get(RAY_NODE_TYPE_LABEL) == "head" else 1

    def on_session_open(self, ssn: Session) -> None:
        ssn.add_task_order_fn(_task_order_by_key(self.order_key, RAY_NODE_TYPE_LABEL))


register_plugin("priority", PriorityPlugin)
register_plugin("elastic", ElasticPlugin)
register_plugin("taskorder", TaskOrderPlugin)
register_plugin("kubeflow", KubeflowPlugin)
register_plugin("ray", RayPlugin)
