"""Scenarios and their accumulation from the victim queue.

A :class:`Scenario` is one concrete question for the simulator: evict these tasks,
can the pending tasks then be placed?  Scenarios are built from an *accumulated
state*: victim jobs popped one by one from the victim queue (the queue tree in reverse
order), each adding a :class:`VictimBatch` (a whole gang, or one elastic pod peeled off
a job).  Every accumulated state must pass the accumulated filters (pure capacity
arithmetic, native kernels) before a generator turns it into scenarios.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from kai.api.model import ACTIVE_ALLOCATED, Job, Task
from kai.api.resources import GPU
from kai.framework.session import Session


@dataclass
class VictimBatch:
    """Tasks of one victim job that are evicted together."""

    job: Job  # the real job
    tasks: list[Task]
    nodes: frozenset[int]


@dataclass
class Scenario:
    preemptor: Job
    pending: list[Task]
    recorded: list[Task]  # victims of earlier successful probes
    batches: list[VictimBatch] = field(default_factory=list)

    def victim_tasks(self) -> list[Task]:
        out = list(self.recorded)
        seen = set(out)
        for batch in self.batches:
            for task in batch.tasks:
                if task not in seen:
                    seen.add(task)
                    out.append(task)
        return out

    def fingerprint(self) -> frozenset[str]:
        ids = {"p:" + self.preemptor.uid}
        ids.update("t:" + t.uid for t in self.pending)
        ids.update("v:" + t.uid for t in self.victim_tasks())
        return frozenset(ids)


def gpu_need(ssn: Session, task: Task) -> float:
    """GPUs (or the fraction of one device) a task occupies, for capacity filters."""
    if task.gpu_fraction > 0:
        return task.gpu_fraction
    if task.gpu_memory_mib > 0:
        mem = ssn.nodes.gpu_memory_mib
        known = mem[mem > 0]
        return task.gpu_memory_mib / float(known.min()) if known.size else 0.0
    return float(task.request[GPU])


def gpu_freed(ssn: Session, task: Task) -> float:
    """GPUs a running task gives back when evicted."""
    if task.is_shared_gpu and task.node >= 0:
        return ssn.nodes.portion_on(task, task.node)
    return float(task.request[GPU])


def node_gpu_capacity(ssn: Session) -> np.ndarray:
    """Idle + releasing GPUs per node, shared devices counted by their free portion."""
    nodes = ssn.nodes
    cap = nodes.idle[:, GPU] + nodes.releasing[:, GPU]
    cap = cap.copy()
    for i, groups in enumerate(nodes.gpu_groups):
        for group in groups.values():
            if group.state() == "busy":
                cap[i] += max(0.0, group.free_counting_releasing())
    return np.maximum(cap, 0.0)


def tasks_to_evict(ssn: Session, view: Job) -> tuple[list[Task], bool]:
    """The next tasks of a (partial) victim job to evict, and whether more remain.

    Reverse task order: while the job holds more pods than its minimum, one elastic pod
    at a time; then the whole remaining gang.  Only tasks the preemptibility resolver
    allows are returned (a semi-preemptible job never loses its core).
    """
    active = [t for t in view.tasks if t.status in ACTIVE_ALLOCATED]
    if not active:
        return [], False
    ordered = ssn.sorted_tasks(active)
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


def job_view(job: Job, tasks: list[Task]) -> Job:
    """A shallow copy of ``job`` holding only ``tasks`` (victim-queue bookkeeping)."""
    view = copy.copy(job)
    view.tasks = list(tasks)
    return view


class AccumulatedState:
    """Victim batches accumulated so far, with incremental capacity arrays."""

    def __init__(self, ssn: Session, pending: list[Task], recorded: list[Task]) -> None:
        self.ssn = ssn
        self.pending = pending
        self.recorded = recorded
        self.batches: list[VictimBatch] = []
        nodes = ssn.nodes
        self.gpu_capacity = node_gpu_capacity(ssn)
        self.available = (nodes.idle + nodes.releasing).copy()
        self.victim_nodes: dict[int, list[int]] = {}  # node -> indices of batches on it
        self.recorded_on_node: dict[int, float] = {}
        for task in recorded:
            self._free(task)
            if task.node >= 0:
                self.recorded_on_node[task.node] = self.recorded_on_node.get(
                    task.node, 0.0
                ) + gpu_freed(ssn, task)
        self.gpu_requests = np.array([gpu_need(ssn, t) for t in pending], dtype=np.float64)
        reqs = [t.request.copy() for t in pending]
        for vec, task in zip(reqs, pending):
            if task.is_shared_gpu:
                vec[GPU] = 0.0  # the device fraction is checked by the GPU filter
        r = len(ssn.state.resources)
        self.requests = np.array(reqs, dtype=np.float64).reshape(len(pending), r)

    def _free(self, task: Task) -> None:
        if task.node < 0:
            return
        self.gpu_capacity[task.node] += gpu_freed(self.ssn, task)
        vec = task.request
        if task.is_shared_gpu:
            vec = vec.copy()
            vec[GPU] = 0.0
        self.available[task.node] += vec

    def add(self, batch: VictimBatch) -> None:
        index = len(self.batches)
        self.batches.append(batch)
        for task in batch.tasks:
            self._free(task)
        for node in batch.nodes:
            self.victim_nodes.setdefault(node, []).append(index)

    def passes_filters(self) -> bool:
        """AccumulatedIdleGpus and the resource-vector check (both native kernels)."""
        backend = self.ssn.backend
        if len(self.gpu_requests) and not backend.idle_gpus_fit(
            self.gpu_capacity, self.gpu_requests
        ):
            return False
        return bool(backend.scenario_fit(self.available, self.requests))


def accumulate(
    ssn: Session,
    candidates: list[Job],
    pending: list[Task],
    recorded: list[Task],
) -> Iterator[AccumulatedState]:
    """Yield the filter-valid accumulated states, one victim batch more each time.

    The first state yielded (before any batch) is the recorded-victims-only state, and
    only when recorded victims exist.
    """

    state = AccumulatedState(ssn, pending, recorded)
    if recorded and state.passes_filters():
        yield state
    recorded_set = set(recorded)
    queue = _victim_queue(ssn, candidates)
    while True:
        view = queue.pop()
        if view is None:
            return
        tasks, more = tasks_to_evict(ssn, view)
        if not tasks:
            continue
        if any(t in recorded_set for t in tasks):
            rest = [t for t in view.tasks if t not in recorded_set]
            if rest:
                queue.push(job_view(view, rest))
            continue
        if more:
            taken = set(tasks)
            queue.push(job_view(view, [t for t in view.tasks if t not in taken]))
        nodes = frozenset(t.node for t in tasks if t.node >= 0)
        state.add(VictimBatch(tasks[0].job, tasks, nodes))
        if state.passes_filters():
            yield state


def _victim_queue(ssn: Session, candidates: list[Job]):
    """A victim-mode job queue over ``candidates``.

    Ordering thousands of candidates is the costly part, and every probe and generator
    of a job starts from the same candidates: the sorted leaf heaps (a sorted list is a
    heap) are built once per candidate list and copied.
    """
    from kai.actions.common import JobQueue

    key = ("solver.victim_heaps", id(candidates))
    cached = ssn.cache.get(key)
    if cached is None or cached[0] is not candidates:
        seed = JobQueue(ssn, [job_view(job, job.tasks) for job in candidates], victim_mode=True)
        heaps = {}
        for leaf, heap in seed.heaps.items():
            ordered = list(heap)
            ordered.sort()
            heaps[leaf] = ordered
        cached = (candidates, heaps)
        ssn.cache[key] = cached
    queue = JobQueue(ssn, [], victim_mode=True)
    for leaf, ordered in cached[1].items():
        queue.heaps[leaf] = list(ordered)
        queue._link(leaf)
    return queue
