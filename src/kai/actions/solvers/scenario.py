"""Scenarios and their accumulation from the victim queue.

A :class:`Scenario` is one concrete question for the simulator: evict these tasks,
can the pending tasks then be placed?  Scenarios are built from an *accumulated
state*: victim jobs popped one by one from the victim queue (the queue tree in reverse
order), each adding a :class:`VictimBatch` (a whole gang, or one elastic pod peeled off
a job).  Every accumulated state must pass the accumulated filters (pure capacity
arithmetic, native kernels) before a generator turns it into scenarios.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import field
from typing import Any

import numpy as np

from kai import _fast
from kai._dataclasses import dataclass
from kai.actions.common import JobQueue
from kai.actions.solvers.batches import (
    PreparedBatch,
    VictimBatch,
    gpu_freed,
    job_view,
    tasks_to_evict,
)
from kai.actions.solvers.victims import VictimCandidates
from kai.api.model import Job, Task
from kai.api.resources import GPU
from kai.backends._common import EPS, IncrementalFit
from kai.framework.session import Session


@dataclass
class Scenario:
    """A preemptor, its pending pods and the victims a probe would evict."""

    preemptor: Job
    pending: list[Task]
    recorded: list[Task]  # victims of earlier successful probes
    batches: list[VictimBatch] = field(default_factory=list)
    recorded_uids: frozenset[str] | None = None  # of ``recorded``, when known
    # Whether a successful probe records the victims one group per job (node-local
    # scenarios, as KAI-Scheduler's victim job representatives) or one per batch.
    grouped_by_job: bool = False

    def victim_groups(self) -> list[list[Task]]:
        """The scenario's potential victims in the groups a probe records whole: its
        batches, or with :attr:`grouped_by_job` the tasks of all the batches of each
        job (in the order the jobs' first batches come)."""
        if not self.grouped_by_job:
            return [batch.tasks for batch in self.batches]
        per_job: dict[Job, list[Task]] = {}
        for batch in self.batches:
            per_job.setdefault(batch.job, []).extend(batch.tasks)
        return list(per_job.values())

    def victim_tasks(self) -> list[Task]:
        out = list(self.recorded)
        seen = set(out)
        for batch in self.batches:
            for task in batch.tasks:
                if task not in seen:
                    seen.add(task)
                    out.append(task)
        return out

    def victims_within(self, feasible: np.ndarray) -> tuple[list[Task], np.ndarray, list[Job]]:
        """The scenario's victims (:meth:`victim_tasks`), the nodes its simulation may
        use (``feasible`` and the victims'), and the victims' jobs in order."""
        victims = self.victim_tasks()
        within = feasible.copy()
        within[[task.node for task in victims]] = True
        return victims, within, list(dict.fromkeys(task.job for task in victims))

    def fingerprint(self, pending_key: frozenset[str] | None = None) -> Fingerprint:
        """Preemptor, pending tasks and victims (equal exactly for equal scenarios);
        ``pending_key`` is :func:`pending_key` of ``self.pending`` when known."""
        if pending_key is None:
            pending_key = frozenset(t.uid for t in self.pending)
        recorded = self.recorded_uids
        victims = set(recorded) if recorded is not None else {t.uid for t in self.recorded}
        for batch in self.batches:
            victims.update(batch.uids())
        return (self.preemptor.uid, pending_key, frozenset(victims))


#: A scenario's identity: preemptor uid, pending task uids, victim task uids.
Fingerprint = tuple[str, frozenset[str], frozenset[str]]


def pending_key(pending: list[Task]) -> frozenset[str]:
    return frozenset(t.uid for t in pending)


def gpu_need(ssn: Session, task: Task) -> float:
    """GPUs (or the fraction of one device) a task occupies, for capacity filters."""
    if task.gpu_fraction > 0:
        return task.gpu_fraction
    if task.gpu_memory_mib > 0:
        mem = ssn.nodes.gpu_memory_mib
        known = mem[mem > 0]
        return task.gpu_memory_mib / float(known.min()) if known.size else 0.0
    return float(task.request[GPU])


#: Slack of the counting bounds (a node of capacity c holds at most
#: floor((c + COUNT_SLACK) / v) tasks of >= v GPUs when every fit is ``r <= rem + EPS``);
#: larger than EPS, so the bounds only ever reject what the exact checks reject.
COUNT_SLACK = 1e-6


def gpu_slot_needs(requests: list[float]) -> list[tuple[float, int]]:
    """Per request size v (descending), how many of ``requests`` ask for >= v GPUs."""
    return [(v, sum(1 for r in requests if r >= v)) for v in sorted(set(requests), reverse=True)]


def node_gpu_slots(capacity: np.ndarray, size: float, slack: float = COUNT_SLACK) -> np.ndarray:
    """Per node of ``capacity`` GPUs, how many pods of ``size`` GPUs or more it can hold
    at most (``slack``: the counting bounds' slack, or more for sums made in another
    order)."""
    return np.floor((capacity + slack) / size)


def gpu_slots(capacity: np.ndarray, size: float) -> int:
    """How many pods of ``size`` GPUs or more nodes of ``capacity`` GPUs can hold at most."""
    return int(node_gpu_slots(capacity, size).sum())


def gpu_slots_suffice(
    capacity: np.ndarray, requests: list[float], needs: list[tuple[float, int]] | None = None
) -> bool:
    """A necessary condition for placing whole-GPU ``requests`` on nodes of ``capacity``
    GPUs: for every request size v, the requests of >= v GPUs fit the v-sized slots.
    ``needs``: :func:`gpu_slot_needs` of ``requests``, when known."""
    for v, need in gpu_slot_needs(requests) if needs is None else needs:
        if gpu_slots(capacity, v) < need:
            return False
    return True


def node_gpu_capacity(ssn: Session) -> np.ndarray:
    """Idle + releasing GPUs per node, shared devices counted by their free portion.

    A fresh array (callers may change it); computed once per version of the node table.
    """
    nodes = ssn.nodes
    cached = ssn.cache.get("solver.gpu_capacity")
    if cached is not None and cached[0] is nodes and cached[1] == nodes.version:
        return cached[2].copy()
    cap = nodes.idle[:, GPU] + nodes.releasing[:, GPU]
    table = nodes.gpu_groups
    for i in nodes.shared_nodes:  # the nodes with shared devices (and a few without)
        for group in table[i].values():
            if group.state() == "busy":
                cap[i] += max(0.0, group.free_counting_releasing())
    cap = np.maximum(cap, 0.0)
    ssn.cache["solver.gpu_capacity"] = (nodes, nodes.version, cap)
    return cap.copy()


def _extend_by_runs(out: list, source: list, at: np.ndarray) -> None:
    """``out.extend(source[i] for i in at)`` for ascending ``at``, a slice per run of
    consecutive indices (a search's recorded victims, left out, leave few gaps)."""
    if not at.size:
        return
    cuts = np.flatnonzero(np.diff(at) != 1) + 1
    if len(cuts) * 8 > len(at):
        out.extend(map(source.__getitem__, at.tolist()))
        return
    starts = at[np.r_[0, cuts]].tolist()
    ends = (at[np.r_[cuts - 1, len(at) - 1]] + 1).tolist()
    for lo, hi in zip(starts, ends):
        out.extend(source[lo:hi])


def _pending_rows(ssn: Session, pending: list[Task]) -> tuple[list[float], list[np.ndarray]]:
    """Per pending task, :func:`gpu_need` and the resource row the filters check (a
    shared-GPU task's without its GPU: the device fraction is checked by the GPU
    filter); each task's kept for the session (a search's probes take prefixes of one
    job's pending tasks again and again)."""
    known: dict[Task, tuple[float, np.ndarray]] = ssn.cache.setdefault("solver.pending_rows", {})
    needs, rows = [], []
    for task in pending:
        got = known.get(task)
        if got is None:
            row = task.request
            if task.is_shared_gpu:
                row = row.copy()
                row[GPU] = 0.0
            got = known[task] = (gpu_need(ssn, task), row)
        needs.append(got[0])
        rows.append(got[1])
    return needs, rows


class AccumulatedState:
    """Victim batches accumulated so far, with incremental capacity arrays.

    Updates of the capacity arrays are deferred (per-node Python floats, rows to add)
    until a kernel reads them: the same additions in the same order, so the same values.
    """

    def __init__(self, ssn: Session, pending: list[Task], recorded: list[Task]) -> None:
        self.ssn = ssn
        self.pending = pending
        self.recorded = recorded
        self.recorded_uids = frozenset(t.uid for t in recorded)
        self.batches: list[VictimBatch] = []
        nodes = ssn.nodes
        self._gpu_capacity = node_gpu_capacity(ssn)
        self._available = (nodes.idle + nodes.releasing).copy()
        # The GPU column as the GPU filter counts it (shared devices by their free
        # portion, each evicted tenant adding its portion): a device freed by evicting
        # its fractional tenants takes a whole-GPU request here too.
        self._available[:, GPU] = self._gpu_capacity
        self._cap: dict[int, float] = {}  # node -> GPU capacity not yet written back
        self._row_nodes: list[int] = []  # rows not yet added to ``_available``
        self._rows: list[np.ndarray] = []
        self._unit_sizes: list[float] = []
        self._fit: IncrementalFit | None = None  # made at the third kernel check
        self._checks = 0
        self.victim_nodes: dict[int, list[int]] = {}  # node -> indices of batches on it
        self.touched: list[int] = []  # the nodes of each batch, in batch order
        # Victim-bearing nodes in order of first appearance in the batches' tasks.
        self.node_order: list[int] = []
        self._seen: set[int] = set()  # the nodes of ``node_order``
        self._freed_by_node: tuple[int, dict[int, list[float]]] = (0, {})  # batches read
        self.recorded_on_node: dict[int, float] = {}
        # Per node the GPUs all batches free there (made at the first batch), kept while
        # every amount freed is a whole number of GPUs (then exact in any order).
        self._totals: np.ndarray | None = None
        self._whole = True
        # Kept by the prefix generator (kai.actions.solvers.generators): its bound, and
        # the smallest and the summed GPU request of ``pending``.
        self.prefix_bound: Any = None
        self.prefix_request: tuple[float, float] | None = None
        self._free_recorded()
        needs, rows = _pending_rows(ssn, pending)
        self.gpu_requests = np.array(needs, dtype=np.float64)
        r = len(ssn.state.resources)
        self.requests = np.array(rows, dtype=np.float64).reshape(len(pending), r)
        # A counting bound of AccumulatedIdleGpus, kept incrementally: per distinct GPU
        # request v, the tasks asking >= v cannot outnumber the v-sized slots of all nodes.
        positive = self.gpu_requests[self.gpu_requests > 0]
        sizes = sorted({float(v) for v in positive}, reverse=True)
        self._unit_need = [int(np.count_nonzero(positive >= v)) for v in sizes]
        capacity = self.gpu_capacity
        self._units = [gpu_slots(capacity, v) for v in sizes]
        self._unit_sizes = sizes

    def _free_recorded(self) -> None:
        """What :meth:`_free` of every recorded victim in order does, at once (the
        capacity arrays get the same additions in the same order)."""
        ssn = self.ssn
        live = [t for t in self.recorded if t.node >= 0]
        if not live:
            return
        nodes = np.fromiter((t.node for t in live), dtype=np.intp, count=len(live))
        rows = np.array([t.request for t in live], dtype=np.float64)
        freed = rows[:, GPU].copy()
        for i, task in enumerate(live):
            if task.is_shared_gpu:
                freed[i] = rows[i, GPU] = gpu_freed(ssn, task)
        add_at = _fast.add_at_function()
        add_at(self._gpu_capacity, nodes, freed)
        add_at(self._available, nodes, rows)
        if not np.array_equal(freed, np.floor(freed)):
            self._whole = False
        on_node = self.recorded_on_node
        for node, value in zip(nodes.tolist(), freed.tolist()):
            on_node[node] = on_node.get(node, 0.0) + value

    @property
    def gpu_capacity(self) -> np.ndarray:
        self._flush()
        return self._gpu_capacity

    @property
    def available(self) -> np.ndarray:
        self._flush()
        if self._fit is not None:
            return self._fit.available()
        return self._available

    @property
    def freed_on_node(self) -> dict[int, list[float]]:
        """Per victim-bearing node, the GPUs each of its batches frees there (in batch
        order): the sums :meth:`add` makes, made again when asked for."""
        done, out = self._freed_by_node
        for batch in self.batches[done:]:
            sums: dict[int, float] = {}
            for task in batch.tasks:
                if task.node >= 0:
                    sums[task.node] = sums.get(task.node, 0) + gpu_freed(self.ssn, task)
            for node in batch.nodes:
                out.setdefault(node, []).append(sums[node])
        self._freed_by_node = (len(self.batches), out)
        return out

    def freed_totals(self, nodes: list[int]) -> np.ndarray | None:
        """Per node of ``nodes``, the GPUs all batches free there, if all are whole."""
        return self._totals_array()[nodes] if self._whole else None

    def freed_total_array(self) -> np.ndarray | None:
        """Per node, the GPUs all batches free there (read-only use), if all are whole."""
        return self._totals_array() if self._whole else None

    def _totals_array(self) -> np.ndarray:
        if self._totals is None:
            self._totals = np.zeros(len(self._gpu_capacity), dtype=np.float64)
        return self._totals

    def _flush(self) -> None:
        """Write the deferred updates back (into the kernels' state once it exists)."""
        fit = self._fit
        if self._cap:
            nodes = list(self._cap)
            values = list(self._cap.values())
            self._gpu_capacity[nodes] = values
            if fit is not None:
                fit.set_capacity(nodes, values)
            self._cap.clear()
        if self._rows:
            if fit is None:
                _fast.add_at_function()(
                    self._available, np.array(self._row_nodes, dtype=np.intp), np.array(self._rows)
                )
            else:
                fit.add_available(self._row_nodes, np.array(self._rows))
            self._row_nodes.clear()
            self._rows.clear()

    def _free(self, task: Task, freed: float | None = None) -> None:
        node = task.node
        if node < 0:
            return
        if freed is None:
            freed = gpu_freed(self.ssn, task)
        old = self._cap.get(node)
        if old is None:
            old = float(self._gpu_capacity[node])
        new = old + freed
        self._cap[node] = new
        if self._unit_sizes:
            self._count_slots(old, new)
        vec = task.request
        if task.is_shared_gpu:
            vec = vec.copy()
            vec[GPU] = freed  # its portion of the device, as in the GPU capacity
        self._row_nodes.append(node)
        self._rows.append(vec)

    def _note_node(self, node: int) -> None:
        if node not in self._seen:
            self._seen.add(node)
            self.node_order.append(node)

    def _note_freed(self, node: int, index: int, value: float, whole: bool) -> None:
        """Batch ``index`` frees ``value`` GPUs on ``node``."""
        got = self.victim_nodes.get(node)
        if got is None:
            self.victim_nodes[node] = [index]
        else:
            got.append(index)
        if self._whole:
            if whole:
                self._totals_array()[node] += value
            else:
                self._whole = False

    def add(self, batch: VictimBatch) -> None:
        index = len(self.batches)
        self.batches.append(batch)
        sums: dict[int, float] = {}
        for task in batch.tasks:
            node = task.node
            if node < 0:
                continue
            freed = gpu_freed(self.ssn, task)
            self._free(task, freed)
            self._note_node(node)
            sums[node] = sums.get(node, 0) + freed
        self.touched.extend(batch.nodes)
        for node in batch.nodes:
            value = sums[node]
            self._note_freed(node, index, value, float(value).is_integer())

    def add_prepared(self, batch: VictimBatch, prepared: PreparedBatch) -> None:
        """:meth:`add` with the per-task work done beforehand (:func:`prepare_batch`):
        the same updates, in the same order, with the same values."""
        index = len(self.batches)
        self.batches.append(batch)
        cap = self._cap
        sizes, count_slots = self._unit_sizes, self._count_slots
        row_nodes, rows = self._row_nodes, self._rows
        for node, freed, vec in prepared.items:
            old = cap.get(node)
            if old is None:
                old = float(self._gpu_capacity[node])
            new = old + freed
            cap[node] = new
            if sizes:
                count_slots(old, new)
            row_nodes.append(node)
            rows.append(vec)
            self._note_node(node)
        self.touched.extend(prepared.nodes)
        for node, value, whole in prepared.sums:
            self._note_freed(node, index, value, whole)

    def _count_slots(self, old: float, new: float) -> None:
        """A node's GPU capacity went from ``old`` to ``new``: the counting bound's
        slots of each request size change by as many as the node's do."""
        units = self._units
        for i, v in enumerate(self._unit_sizes):
            units[i] += math.floor((new + COUNT_SLACK) / v) - math.floor((old + COUNT_SLACK) / v)

    def add_steps(
        self, steps: Any, pos: int, recorded: set[Task], *, single: bool = False
    ) -> tuple[bool, int]:
        """Add whole-job batches read from a victim leaf (``steps``, a
        :class:`~kai.actions.solvers.victims._LeafSteps`) from position ``pos`` down while the
        counting bound fails (``single``: one batch): the loop of
        :meth:`PoolVictimQueue.fast_forward`.  Returns (whether it stopped because the
        bound holds or, if ``single``, a batch was added; the leaf position to go on from).

        With one GPU request size, long runs of simple steps are added at once
        (:meth:`_add_run`); once this call has walked that many steps, the leaf is read
        ahead by as many as were walked.
        """
        positions, gots = steps.positions, steps.gots
        ssn = self.ssn
        i = steps.at_or_below(pos)
        bulk = len(self._unit_sizes) == 1 and not single
        retry = 0  # no run of simple steps starts before this index
        walked = 0
        while True:
            if i == len(positions):
                if bulk and walked >= _BULK_STEPS:
                    steps.read(ssn, walked)
                if i == len(positions) and not steps.extend(ssn):
                    return False, -1  # only jobs the filter rejects are left
            if bulk and i >= retry and len(positions) - i >= _BULK_STEPS and positions[i] <= pos:
                simple = steps.arrays().simple[: len(positions)]
                head = simple[i : i + _BULK_STEPS]
                if not head.all():
                    retry = i + int(np.argmin(head)) + 1  # no run before the next break
                else:
                    breaks = np.flatnonzero(~simple[i + _BULK_STEPS :])
                    end = i + _BULK_STEPS + int(breaks[0]) if breaks.size else len(positions)
                    ran = self._add_run(steps, i, end, recorded)
                    if ran is None:
                        bulk = False  # fractional capacities: step by step
                    else:
                        done, pos = ran
                        walked += end - i
                        if done:
                            return True, pos
                        i = end
                        continue
            p = positions[i]
            tasks, more, batch, prepared = gots[i]
            i += 1
            walked += 1
            if p > pos:
                continue  # read before, but already popped by the queue
            if not tasks:
                pos = p - 1  # popped and dropped, as accumulate does
                continue
            if recorded and not recorded.isdisjoint(tasks):
                if more or not recorded.issuperset(steps.entries[p][2].tasks):
                    return False, p
                # accumulate pops it, finds it recorded and, nothing else of the job
                # being left, drops it
                pos = p - 1
                continue
            if more:
                return False, p
            pos = p - 1
            if prepared is None:
                self.add(batch)
            else:
                self.add_prepared(batch, prepared)
            if single or not self.short():
                return True, pos

    def _add_run(
        self, steps: Any, start: int, end: int, recorded: set[Task]
    ) -> tuple[bool, int] | None:
        """:meth:`add_steps` over the simple steps [start, end) of ``steps`` at once:
        recorded ones are dropped, the others added up to the first after which the
        counting bound (of one GPU request size) holds.  Returns (whether it holds, the
        leaf position to go on from), or None when a node's GPU capacity is fractional.

        Every amount is a whole number of GPUs, so the running capacities (and their
        sums) are exact whatever the order of the additions, and so is every counting
        step; the rows are added to the resource arrays in step order.
        """
        positions = steps.positions
        columns = steps.arrays()
        self._flush()
        gpu_capacity = self._gpu_capacity
        nodes = columns.node[start:end]
        caps = gpu_capacity[nodes]
        if not np.array_equal(caps, np.floor(caps)):
            return None
        keep = np.arange(start, end)
        if recorded:  # a simple step's task is recorded: the step is dropped
            simple_at = steps.simple_at
            recorded_at = np.asarray([simple_at.get(task, -1) for task in recorded], dtype=np.intp)
            recorded_at = recorded_at[(recorded_at >= start) & (recorded_at < end)]
            dropped = np.zeros(end - start, dtype=np.bool_)
            dropped[recorded_at - start] = True
            keep = keep[~dropped]
        if not keep.size:
            return False, positions[end - 1] - 1
        nodes = columns.node[keep]
        freed = columns.freed[keep]
        # The capacity of each step's node before and after the step.
        order = np.argsort(nodes, kind="stable")
        by_node, freed_by_node = nodes[order], freed[order]
        running = np.cumsum(freed_by_node)
        first = np.flatnonzero(np.r_[True, by_node[1:] != by_node[:-1]])
        earlier = np.repeat(
            running[first] - freed_by_node[first], np.diff(np.r_[first, len(by_node)])
        )
        after = gpu_capacity[by_node] + (running - earlier)
        before = after - freed_by_node
        v = self._unit_sizes[0]
        gained = node_gpu_slots(after, v) - node_gpu_slots(before, v)
        gains = np.empty_like(gained)
        gains[order] = gained
        units = self._units[0] + np.cumsum(gains)
        hits = np.flatnonzero(units >= self._unit_need[0])
        done = bool(hits.size)
        taken = int(hits[0]) + 1 if done else len(keep)
        keep, nodes, freed = keep[:taken], nodes[:taken], freed[:taken]
        self._units[0] = int(units[taken - 1])
        # Capacity and resource rows.
        add_at = _fast.add_at_function()
        add_at(gpu_capacity, nodes, freed)
        rows = columns.rows[keep]
        fit = self._fit
        if fit is None:
            add_at(self._available, nodes, rows)
        else:
            changed = np.unique(nodes)
            fit.set_capacity(changed, gpu_capacity[changed])
            fit.add_available(nodes, rows)
        # Batches and their bookkeeping.
        index = len(self.batches)
        _extend_by_runs(self.batches, steps.batches, keep)
        self.touched.extend(nodes.tolist())  # a simple step's one node
        if self._whole:
            add_at(self._totals_array(), nodes, freed)
        # The steps per node, in step order (a stable sort), and each node's first step.
        order = np.argsort(nodes, kind="stable")
        by_node = nodes[order]
        cuts = np.flatnonzero(by_node[1:] != by_node[:-1]) + 1
        starts = np.r_[0, cuts]
        distinct = by_node[starts]
        seen = self._seen
        fresh = [n for n in distinct[np.argsort(order[starts])].tolist() if n not in seen]
        seen.update(fresh)
        self.node_order.extend(fresh)
        victim_nodes = self.victim_nodes
        ids = (order + index).tolist()
        lo = 0
        for node, hi in zip(distinct.tolist(), [*cuts.tolist(), len(ids)]):
            got = victim_nodes.get(node)
            if got is None:
                victim_nodes[node] = ids[lo:hi]
            else:
                got.extend(ids[lo:hi])
            lo = hi
        return done, positions[int(keep[-1]) if done else end - 1] - 1

    def short(self) -> bool:
        """Whether the counting bound already fails AccumulatedIdleGpus."""
        for have, need in zip(self._units, self._unit_need):
            if have < need:
                return True
        return False

    def passes_filters(self) -> bool:
        """AccumulatedIdleGpus and the resource-vector check (both native kernels).

        From the third check of a state on, the kernels keep their nodes sorted across
        its accumulation steps (:meth:`~kai.backends._common.Backend.incremental_fit`):
        each check only moves the nodes the new victims changed, with the same results
        as the stateless kernels (which the first checks use: most states of small jobs
        are checked once or twice, and the stateless kernels sort fewer nodes).
        """
        if self.short():
            return False  # the kernel's greedy matching cannot succeed either
        self._flush()
        fit = self._fit
        if fit is None:
            self._checks += 1
            if self._checks <= _STATELESS_CHECKS:
                return self._stateless_filters()
            fit = self._fit = self.ssn.backend.incremental_fit(
                self._gpu_capacity, self._available, self.gpu_requests, self.requests
            )
        if len(self.gpu_requests) and not fit.idle_gpus_fit():
            return False
        # scenario_fit leaves out the nodes without the GPUs of the smallest GPU request:
        # they fit no task now, nor later (the kernel only takes from nodes).
        return bool(fit.scenario_fit())

    def _stateless_filters(self) -> bool:
        backend = self.ssn.backend
        if len(self.gpu_requests) and not backend.idle_gpus_fit(
            self._gpu_capacity, self.gpu_requests
        ):
            return False
        available = self._available
        if len(self.requests):
            smallest = float(self.requests[:, GPU].min())
            if smallest > 0:
                available = available[available[:, GPU] + EPS >= smallest]
        return bool(backend.scenario_fit(available, self.requests))


#: Checks of a state by the stateless kernels before it gets an incremental one.
_STATELESS_CHECKS = 2

#: The shortest run of simple steps :meth:`AccumulatedState.add_steps` adds at once (a
#: few dozen array operations cost about as much as that many steps one by one).
_BULK_STEPS = 64


def accumulate(
    ssn: Session,
    candidates: list[Job],
    pending: list[Task],
    recorded: list[Task],
) -> Iterator[AccumulatedState]:
    """Yield the filter-valid accumulated states, one victim batch more each time.

    The first state yielded (before any batch) is the recorded-victims-only state, and
    only when recorded victims exist.

    Every generator of a probe accumulates the same states (the same candidates,
    pending tasks and recorded victims, on the same session state: each simulation is
    undone before the next).  An accumulation read to its end is kept
    (:class:`_Accumulation`), and the next one of the same probe, while no pod has
    changed status since, adds the same batches and yields at the same points without
    popping the victim queue or running the filters again.
    """
    key = (tuple(pending), tuple(recorded))
    kept = _kept_accumulations(ssn, candidates)
    earlier = kept.get(key)
    stamp = state_stamp(ssn)
    if earlier is not None and same_state(earlier.stamp, stamp):
        yield from earlier.replay(ssn, pending, recorded)
        return
    trace = _Accumulation(stamp)
    last: AccumulatedState | None = None
    for last in _accumulate(ssn, candidates, pending, recorded):
        trace.yields.append(len(last.batches))
        yield last
    if not same_state(state_stamp(ssn), stamp):
        return  # a simulation changed statuses (and changed them back) meanwhile
    if last is not None:
        trace.batches = last.batches  # no longer added to
    kept[key] = trace


class _Accumulation:
    """An accumulation read to its end: the batches it added, in order, and how many
    it had added at each state it yielded; valid while the session state is the one
    of ``stamp`` (:func:`state_stamp`)."""

    __slots__ = ("stamp", "batches", "yields")

    def __init__(self, stamp: StateStamp) -> None:
        self.stamp = stamp
        self.batches: list[VictimBatch] = []
        self.yields: list[int] = []

    def replay(
        self, ssn: Session, pending: list[Task], recorded: list[Task]
    ) -> Iterator[AccumulatedState]:
        """The same states, made by adding the same batches (the filters passed them)."""
        if not self.yields:
            return
        state = AccumulatedState(ssn, pending, recorded)
        batches = self.batches
        for count in self.yields:
            for i in range(len(state.batches), count):
                state.add(batches[i])
            yield state


#: A session state's stamp (:func:`state_stamp`).
StateStamp = tuple[object, int, int]


def state_stamp(ssn: Session) -> StateStamp:
    """Changes whenever a pod changes status (its node table's rows and its queues'
    versions move with it): what a search keeps across its simulations holds while
    the stamp is the same (:func:`same_state`)."""
    nodes = ssn.nodes
    return (nodes, nodes.version, ssn.queue_epoch)


def same_state(a: StateStamp, b: StateStamp) -> bool:
    """Whether two stamps are of one session state: the same node table, versions."""
    return a[0] is b[0] and a[1:] == b[1:]


def _kept_accumulations(
    ssn: Session, candidates: list[Job]
) -> dict[tuple[tuple[Task, ...], tuple[Task, ...]], _Accumulation]:
    """The accumulations kept for the probes of ``candidates`` (one job's search)."""
    cache_key = ("solver.accumulations", id(candidates))
    got = ssn.cache.get(cache_key)
    if got is None or got[0] is not candidates:
        got = ssn.cache[cache_key] = (candidates, {})
    return got[1]


def _accumulate(
    ssn: Session,
    candidates: list[Job],
    pending: list[Task],
    recorded: list[Task],
) -> Iterator[AccumulatedState]:
    """:func:`accumulate`, from the victim queue (read through its :class:`_PopLog`
    while it has one and no recorded victim is met)."""
    state = AccumulatedState(ssn, pending, recorded)
    if recorded and state.passes_filters():
        yield state
    recorded_set = set(recorded)
    log = _pop_log(ssn, candidates)
    queue = None
    if log is None:
        queue = _victim_queue(ssn, candidates)
    else:
        read = 0
        while (event := log.event(read)) is not None:
            _, tasks, _ = event
            if tasks and not recorded_set.isdisjoint(tasks):
                queue = log.queue_after(read)  # this accumulation goes its own way
                break
            read += 1
            if tasks:
                state.add(VictimBatch(tasks[0].job, tasks, _nodes_of(tasks)))
                if state.passes_filters():
                    yield state
        if queue is None:
            return
    fast = getattr(queue, "fast_forward", None)
    while True:
        # Whole-job batches are added without the queue machinery (same jobs, same
        # order): while the counting bound fails (no state is yielded) all at once, then
        # one at a time.
        if fast is not None and fast(state, recorded_set, single=not state.short()):
            if state.passes_filters():
                yield state
            continue
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
            queue.push(_rest_of(view, tasks))
        state.add(VictimBatch(tasks[0].job, tasks, _nodes_of(tasks)))
        if state.passes_filters():
            yield state


def _nodes_of(tasks: list[Task]) -> frozenset[int]:
    return frozenset(t.node for t in tasks if t.node >= 0)


def _rest_of(view: Job, taken: list[Task]) -> Job:
    """What a victim queue gets back of ``view`` once its chunk ``taken`` is evicted."""
    chunk = set(taken)
    return job_view(view, [t for t in view.tasks if t not in chunk])


class _PopLog:
    """What a victim queue pops on one session state, read by every accumulation of
    its candidates until it meets a recorded victim.

    The pops do not depend on the probe: its pending tasks decide only which states are
    yielded, and its recorded victims change the queue only where a popped job holds one
    (the rest of the job goes back instead of its next chunk).  So the queue is popped
    once, the rest of a job evicted in chunks pushed back as an accumulation would push
    it, and each pop kept (the job, its tasks to evict, the rest pushed back); an
    accumulation that meets a recorded victim goes on from a queue that made the same
    pops before it (:meth:`queue_after`).  Not for a queue with a fast path
    (``fast_forward``), whose steps depend on the probe.
    """

    __slots__ = ("ssn", "candidates", "stamp", "queue", "events", "ended")

    def __init__(self, ssn: Session, candidates: list[Job], stamp: StateStamp) -> None:
        self.ssn = ssn
        self.candidates = candidates
        self.stamp = stamp
        self.queue = _victim_queue(ssn, candidates)
        self.events: list[tuple[Job, list[Task], Job | None]] = []
        self.ended = False

    def event(self, i: int) -> tuple[Job, list[Task], Job | None] | None:
        """The ``i``-th pop (None past the last)."""
        events = self.events
        while len(events) <= i and not self.ended:
            view = self.queue.pop()
            if view is None:
                self.ended = True
                break
            tasks, more = tasks_to_evict(self.ssn, view)
            rest = None
            if tasks and more:
                rest = _rest_of(view, tasks)
                self.queue.push(rest)
            events.append((view, tasks, rest))
        return events[i] if i < len(events) else None

    def queue_after(self, count: int) -> JobQueue:
        """A victim queue that made the first ``count`` pops (and pushed their rests
        back), as the logged one had then."""
        queue = _victim_queue(self.ssn, self.candidates)
        for view, _, rest in self.events[:count]:
            popped = queue.pop()
            assert popped is not None and popped.key == view.key
            if rest is not None:
                queue.push(rest)
        return queue


def _pop_log(ssn: Session, candidates: list[Job]) -> _PopLog | None:
    """The pop log of ``candidates``' victim queue on the session's current state (made
    anew after a change), or None when the queue has a fast path."""
    if isinstance(candidates, VictimCandidates) and len(candidates.leaves) == 1:
        return None  # a single leaf is read through PoolVictimQueue.fast_forward
    key = ("solver.pop_log", id(candidates))
    stamp = state_stamp(ssn)
    log = ssn.cache.get(key)
    if log is None or log.candidates is not candidates or not same_state(log.stamp, stamp):
        log = ssn.cache[key] = _PopLog(ssn, candidates, stamp)
    return log


def _victim_queue(ssn: Session, candidates: list[Job]):
    """A victim-mode job queue over ``candidates``.

    Ordering thousands of candidates is the costly part, and every probe and generator
    of a job starts from the same candidates: the sorted leaf heaps (a sorted list is a
    heap) are built once per candidate list and copied.
    """
    if isinstance(candidates, VictimCandidates):
        return candidates.queue(ssn)
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
