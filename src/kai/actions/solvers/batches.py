"""What evicting one victim job takes: its next tasks, as a batch, with the per-task
sums the accumulated state adds, computed once per job and search.

These are read per victim job as a search walks a victim leaf
(:class:`~kai.actions.solvers.victims.VictimPool`), and per batch as scenarios are
accumulated (:mod:`kai.actions.solvers.scenario`).
"""

from __future__ import annotations

from dataclasses import field

import numpy as np

from kai._dataclasses import dataclass
from kai.api.model import ACTIVE_ALLOCATED, Job, Task
from kai.api.resources import GPU
from kai.framework.session import Session


@dataclass(slots=True)
class VictimBatch:
    """Tasks of one victim job that are evicted together (a batch is never changed)."""

    job: Job  # the real job
    tasks: list[Task]
    nodes: frozenset[int]
    _uids: frozenset[str] | None = field(default=None, compare=False, repr=False)
    _freed: list[tuple[int, float]] | None = field(default=None, compare=False, repr=False)

    def uids(self) -> frozenset[str]:
        """The uids of :attr:`tasks` (a scenario's fingerprint reads them often)."""
        if self._uids is None:
            self._uids = frozenset(t.uid for t in self.tasks)
        return self._uids

    def freed_per_node(self, ssn: Session) -> list[tuple[int, float]]:
        """Per node the batch has a placed task on (in the order they first come), the
        GPUs its tasks there free (:func:`gpu_freed`, which reads nothing a simulation
        changes): counted once, read by every scenario bound the batch is part of."""
        if self._freed is None:
            sums: dict[int, float] = {}
            for task in self.tasks:
                if task.node >= 0:
                    sums[task.node] = sums.get(task.node, 0.0) + gpu_freed(ssn, task)
            self._freed = list(sums.items())
        return self._freed


def gpu_freed(ssn: Session, task: Task) -> float:
    """GPUs a running task gives back when evicted."""
    if task.is_shared_gpu and task.node >= 0:
        return ssn.nodes.portion_on(task, task.node)
    return float(task.request[GPU])


@dataclass(slots=True, eq=False)  # arrays: compared by identity
class PreparedBatch:
    """What :meth:`AccumulatedState.add` computes per task of a batch, computed once."""

    items: list[tuple[int, float, np.ndarray]]  # (node, GPUs freed, resource row) per task
    nodes: list[int]  # ``batch.nodes`` in its iteration order
    sums: list[tuple[int, float, bool]]  # per node: GPUs freed there, whether whole


def prepare_batch(ssn: Session, batch: VictimBatch) -> PreparedBatch | None:
    """The per-task work of adding ``batch`` (None for shared-GPU tasks, whose freed
    portion depends on the device state: those batches are added by ``add``)."""
    items = []
    sums: dict[int, float] = {}
    for task in batch.tasks:
        node = task.node
        if node < 0:
            continue
        if task.is_shared_gpu:
            return None
        freed = gpu_freed(ssn, task)
        items.append((node, freed, task.request))
        sums[node] = sums.get(node, 0) + freed
    nodes = list(batch.nodes)
    return PreparedBatch(items, nodes, [(n, sums[n], float(sums[n]).is_integer()) for n in nodes])


def tasks_to_evict(ssn: Session, view: Job) -> tuple[list[Task], bool]:
    """The next tasks of a (partial) victim job to evict, and whether more remain.

    Reverse task order: while the job holds more pods than its minimum, one elastic pod
    at a time; then the whole remaining gang.  Only tasks the preemptibility resolver
    allows are returned (a semi-preemptible job never loses its core).
    """
    active = [t for t in view.tasks if t.status in ACTIVE_ALLOCATED]
    if not active:
        return [], False
    ordered = ssn.sorted_tasks(active) if len(active) > 1 else active
    ordered.reverse()
    job = ordered[0].job
    if len(active) > view.min_member:
        for task in ordered:
            if job.is_task_preemptible(task):
                return [task], len(active) > 1
        return [], False
    chosen = [t for t in ordered if job.is_task_preemptible(t)]
    if len(chosen) != len(ordered):
        return [], False  # the core of a semi-preemptible job stays
    return chosen, False


#: What a victim leaf keeps per job: :func:`tasks_to_evict`, and when they are the whole
#: job, its batch and :func:`prepare_batch` of it.
Eviction = tuple[list[Task], bool, VictimBatch | None, PreparedBatch | None]


def whole_job_eviction(ssn: Session, job: Job) -> Eviction:
    """:func:`tasks_to_evict` of ``job`` with, when it is evicted whole, its batch and
    prepared additions; a one-pod job on whole GPUs directly (what the general code
    gives it: the pod if it is active and preemptible, evicted alone)."""
    if len(job.tasks) == 1:
        task = job.tasks[0]
        if task.status not in ACTIVE_ALLOCATED or not task.job.is_task_preemptible(task):
            return [], False, None, None
        node = task.node
        if node >= 0 and not task.is_shared_gpu:
            freed = float(task.request[GPU])  # gpu_freed of a whole-GPU task
            tasks = [task]
            one = VictimBatch(task.job, tasks, frozenset((node,)))
            sums = [(node, freed, freed.is_integer())]
            return tasks, False, one, PreparedBatch([(node, freed, task.request)], [node], sums)
    tasks, more = tasks_to_evict(ssn, job)
    batch = prepared = None
    if tasks and not more:
        nodes = frozenset(t.node for t in tasks if t.node >= 0)
        batch = VictimBatch(tasks[0].job, tasks, nodes)
        prepared = prepare_batch(ssn, batch)
    return tasks, more, batch, prepared


def job_view(job: Job, tasks: list[Task]) -> Job:
    """A shallow copy of ``job`` holding only ``tasks`` (victim-queue bookkeeping)."""
    return job.with_tasks(tasks)
