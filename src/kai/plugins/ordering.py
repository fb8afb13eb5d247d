"""Job and task ordering plugins: priority, elastic, taskorder, kubeflow, ray."""

from __future__ import annotations

from kai.api.model import Job, Task
from kai.framework import Plugin, Session, register_plugin

TASK_PRIORITY_LABEL = "kai.scheduler/task-priority"
KUBEFLOW_ROLE_LABEL = "training.kubeflow.org/job-role"
RAY_NODE_TYPE_LABEL = "ray.io/node-type"


def _prefer(left: bool, right: bool) -> int:
    """-1 if only the left has the property, 1 if only the right."""
    if left == right:
        return 0
    return -1 if left else 1


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

    def on_session_open(self, ssn: Session) -> None:
        def task_order(left: Task, right: Task) -> int:
            lp, rp = task_priority(left), task_priority(right)
            if lp is None or rp is None:
                return _prefer(lp is not None, rp is not None)
            return 0 if lp == rp else (-1 if lp > rp else 1)

        ssn.add_task_order_fn(task_order)


class KubeflowPlugin(Plugin):
    """Kubeflow masters and MPI launchers go before workers."""

    name = "kubeflow"
    native_allocate = True

    def on_session_open(self, ssn: Session) -> None:
        def leader(task: Task) -> bool:
            return task.pod.labels.get(KUBEFLOW_ROLE_LABEL) in ("master", "launcher")

        ssn.add_task_order_fn(lambda a, b: _prefer(leader(a), leader(b)))


class RayPlugin(Plugin):
    """The Ray head goes before workers."""

    name = "ray"
    native_allocate = True

    def on_session_open(self, ssn: Session) -> None:
        def head(task: Task) -> bool:
            return task.pod.labels.get(RAY_NODE_TYPE_LABEL) == "head"

        ssn.add_task_order_fn(lambda a, b: _prefer(head(a), head(b)))


register_plugin("priority", PriorityPlugin)
register_plugin("elastic", ElasticPlugin)
register_plugin("taskorder", TaskOrderPlugin)
register_plugin("kubeflow", KubeflowPlugin)
register_plugin("ray", RayPlugin)
