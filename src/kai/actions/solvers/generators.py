"""Scenario generators: turn accumulated victim states into concrete scenarios.

* ``NodeLocalGreedy``: for every new victim batch, one scenario per node (by name) the
  batch touches, evicting every accumulated batch that has a task on that node (plus
  the recorded victims).  Cheap, node-local scenarios first.
* ``MultiNodeGang``: for gangs that need several nodes, the victim-bearing nodes
  sorted by the GPUs they would offer; prefixes of that list (the smallest prefix that
  covers the demand, then K+1, K+3, K+7, ...) each evict the batches on those nodes.

Generators are registered by name; the ``sg-*`` plugins put the names on the session.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from kai.actions.solvers.scenario import AccumulatedState, Scenario, accumulate, node_gpu_capacity
from kai.api.model import Job, Task
from kai.framework.session import Session

Generator = Callable[
    [Session, Job, list[Task], list[Task], list[Job], np.ndarray], Iterator[Scenario]
]

GENERATORS: dict[str, Generator] = {}


def register_generator(name: str, fn: Generator) -> None:
    GENERATORS[name] = fn


def _scenario(
    state: AccumulatedState, preemptor: Job, pending: list[Task], indices: list[int]
) -> Scenario:
    batches = [state.batches[i] for i in indices]
    return Scenario(preemptor, pending, state.recorded, batches, state.recorded_uids)


def node_local_greedy(
    ssn: Session,
    preemptor: Job,
    pending: list[Task],
    recorded: list[Task],
    candidates: list[Job],
    feasible: np.ndarray,
) -> Iterator[Scenario]:
    # As KAI-Scheduler's NodeLocalGreedy: for each node of the latest victim's job (all
    # its placed pods, not only its latest batch), the batches of every job with a
    # batch on that node, grouped per job.
    seen: set[frozenset[int]] = set()
    names = ssn.nodes.names
    by_job: dict[Job, list[int]] = {}  # batch indices of each job, kept up to date
    indexed = 0
    for state in accumulate(ssn, candidates, pending, recorded):
        batches = state.batches
        if not batches:
            yield Scenario(preemptor, pending, recorded, [])
            continue
        if len(batches) < indexed:  # a new accumulation
            by_job, indexed = {}, 0
        for i in range(indexed, len(batches)):
            by_job.setdefault(batches[i].job, []).append(i)
        indexed = len(batches)
        latest = batches[-1]
        job_nodes = {t.node for t in latest.job.tasks if t.node >= 0}
        for node in sorted(job_nodes, key=lambda i: names[i]):
            on_node = state.victim_nodes.get(node)
            if not on_node:
                continue
            jobs: set[Job] = set()
            indices: list[int] = []
            for i in on_node:
                job = batches[i].job
                if job not in jobs:
                    jobs.add(job)
                    indices += by_job[job]
            indices.sort()
            key = frozenset(indices)
            if key in seen:
                continue
            seen.add(key)
            scenario = _scenario(state, preemptor, pending, indices)
            # KAI-Scheduler's node-local scenario holds one victim representative per
            # job, with the tasks of all its batches: a probe records it whole.
            scenario.grouped_by_job = True
            yield scenario


def multi_node_gang(
    ssn: Session,
    preemptor: Job,
    pending: list[Task],
    recorded: list[Task],
    candidates: list[Job],
    feasible: np.ndarray,
) -> Iterator[Scenario]:
    seen: set[frozenset[int]] = set()
    for state in accumulate(ssn, candidates, pending, recorded):
        if not state.batches:
            yield Scenario(preemptor, pending, recorded, [])
            continue
        for indices in _prefix_subsets(ssn, state, feasible):
            key = frozenset(indices)
            if key in seen:
                continue
            seen.add(key)
            yield _scenario(state, preemptor, pending, sorted(indices))


def _prefix_subsets(
    ssn: Session, state: AccumulatedState, feasible: np.ndarray
) -> Iterator[set[int]]:
    # GPUs per node before the batches: idle and releasing, plus what the recorded
    # victims free on every node (also where no batch adds a victim).
    base = node_gpu_capacity(ssn)
    recorded_on_node = state.recorded_on_node
    if recorded_on_node:
        base[list(recorded_on_node)] += list(recorded_on_node.values())
    requests = state.gpu_requests
    smallest = float(requests.min()) if len(requests) else 0.0
    demand = float(requests.sum())
    bound = state.prefix_bound
    if bound is None or not bound.valid(base, feasible):
        bound = state.prefix_bound = _PrefixBound(base, feasible, smallest)
    if not bound.may_cover(state, demand):
        return
    order = state.node_order  # victim-bearing nodes in first-appearance order
    capacity: dict[int, float] = {}
    index = np.array(order, dtype=np.intp)
    totals = state.freed_total_array()
    base_at = base[index]
    # Whole GPUs only: every partial sum is an exact integer, so summing the batch
    # totals at once gives the same values as adding batch by batch.
    whole = totals is not None and (bound.whole or np.array_equal(base_at, np.floor(base_at)))
    if whole:
        capacity = dict(zip(order, (base_at + totals[index]).tolist()))  # type: ignore[index]
    else:
        freed_on_node = state.freed_on_node
        for node, cap in zip(order, base_at.tolist()):
            for freed in freed_on_node[node]:  # per batch on the node, in batch order
                cap += freed
            capacity[node] = float(cap)  # a Python float: compared many times below
    candidates = [n for n in order if capacity[n] + 1e-9 >= smallest]
    if not candidates:
        return
    candidates.sort(key=capacity.__getitem__)  # stable: equal capacities in node order
    outside = feasible.copy()
    outside[index] = False
    if bound.whole:
        baseline = float(base[outside].sum())  # whole numbers: exact in any order
    else:
        baseline = float(sum(base[outside].tolist()))  # summed in node order, as a loop would
    needed = demand - baseline
    total = 0.0
    start = 0
    for k, node in enumerate(candidates, start=1):
        total += capacity[node]
        if total + 1e-9 >= needed:
            start = k
            break
    if start == 0:
        return
    m = len(candidates)
    k, step = start, 1
    victim_nodes = state.victim_nodes
    chosen: set[int] = set()
    taken = 0
    while True:
        # The batches on the first k candidates; the set grows in place (the caller
        # reads each prefix before asking for the next).
        for node in candidates[taken:k]:
            chosen.update(victim_nodes.get(node, ()))
        taken = k
        yield chosen
        if k >= m:
            return
        k = min(m, k + step)
        step *= 2


class _PrefixBound:
    """Whether :func:`_prefix_subsets` can find a prefix that covers the demand, kept
    across the accumulation steps of one state (most states of a large gang find none).

    Only while every capacity is a whole number of GPUs: then the candidates' capacities
    and the baseline are exact integers, their sums do not depend on the order, and the
    ascending running total of the candidates reaches the demand iff their sum does.
    """

    def __init__(self, base: np.ndarray, feasible: np.ndarray, smallest: float) -> None:
        self.base = base
        self.feasible = feasible
        self.smallest = smallest
        self.whole = bool(np.array_equal(base, np.floor(base)))
        self.baseline = float(base[feasible].sum()) if self.whole else 0.0
        # Per node its capacity once it bears victims (NaN before).
        self.capacity = np.full(len(base), np.nan)
        self.candidates = 0  # nodes with capacity + 1e-9 >= smallest
        self.total = 0.0  # their capacity
        self.seen = 0  # entries of ``state.touched`` taken in

    def valid(self, base: np.ndarray, feasible: np.ndarray) -> bool:
        return feasible is self.feasible and np.array_equal(base, self.base)

    def may_cover(self, state: AccumulatedState, demand: float) -> bool:
        """False only when :func:`_prefix_subsets` would yield nothing."""
        totals = state.freed_total_array()
        if not self.whole or totals is None:
            return True
        # The nodes the new batches touched: all values are whole numbers, so the sums
        # are exact in any order (and a node's capacity depends only on the totals,
        # however often it was touched).
        base, capacity, smallest = self.base, self.capacity, self.smallest
        touched = state.touched
        if len(touched) - self.seen > _FEW_NODES:
            nodes = np.unique(np.array(touched[self.seen :], dtype=np.intp))
            old = capacity[nodes]
            fresh = np.isnan(old)
            self.baseline -= float(base[nodes[fresh & self.feasible[nodes]]].sum())
            was = ~fresh & (old + 1e-9 >= smallest)
            self.candidates -= int(np.count_nonzero(was))
            self.total -= float(old[was].sum())
            new = base[nodes] + totals[nodes]
            capacity[nodes] = new
            now = new + 1e-9 >= smallest
            self.candidates += int(np.count_nonzero(now))
            self.total += float(new[now].sum())
        else:
            for node in touched[self.seen :]:
                before = float(capacity[node])
                if before != before:  # NaN: the node bore no victims yet
                    if self.feasible[node]:
                        self.baseline -= float(base[node])
                elif before + 1e-9 >= smallest:
                    self.candidates -= 1
                    self.total -= before
                after = float(base[node]) + float(totals[node])
                capacity[node] = after
                if after + 1e-9 >= smallest:
                    self.candidates += 1
                    self.total += after
        self.seen = len(touched)
        if not self.candidates:
            return False
        return self.total + 1e-9 >= demand - self.baseline


#: New victim-bearing nodes :meth:`_PrefixBound.may_cover` takes in one by one (more:
#: as arrays).
_FEW_NODES = 16


register_generator("NodeLocalGreedy", node_local_greedy)
register_generator("MultiNodeGang", multi_node_gang)
