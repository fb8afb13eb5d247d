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

from kai.api.model import Job, Task
from kai.framework.session import Session
from kai.solvers.scenario import AccumulatedState, Scenario, accumulate

Generator = Callable[
    [Session, Job, list[Task], list[Task], list[Job], np.ndarray], Iterator[Scenario]
]

GENERATORS: dict[str, Generator] = {}


def register_generator(name: str, fn: Generator) -> None:
    GENERATORS[name] = fn


def _scenario(
    state: AccumulatedState, preemptor: Job, pending: list[Task], indices: list[int]
) -> Scenario:
    return Scenario(preemptor, pending, state.recorded, [state.batches[i] for i in indices])


def node_local_greedy(
    ssn: Session,
    preemptor: Job,
    pending: list[Task],
    recorded: list[Task],
    candidates: list[Job],
    feasible: np.ndarray,
) -> Iterator[Scenario]:
    seen: set[frozenset[int]] = set()
    names = ssn.nodes.names
    for state in accumulate(ssn, candidates, pending, recorded):
        if not state.batches:
            yield Scenario(preemptor, pending, recorded, [])
            continue
        latest = state.batches[-1]
        for node in sorted(latest.nodes, key=lambda i: names[i]):
            indices = state.victim_nodes.get(node, [])
            key = frozenset(indices)
            if key in seen:
                continue
            seen.add(key)
            yield _scenario(state, preemptor, pending, list(indices))


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
    from kai.solvers.scenario import node_gpu_capacity

    base = node_gpu_capacity(ssn)
    requests = state.gpu_requests
    smallest = float(requests.min()) if len(requests) else 0.0
    demand = float(requests.sum())
    bound = getattr(state, "prefix_bound", None)
    if bound is None or not bound.valid(base, feasible):
        bound = state.prefix_bound = _PrefixBound(base, feasible, smallest)
    if not bound.may_cover(state, demand):
        return
    order = state.node_order  # victim-bearing nodes in first-appearance order
    capacity: dict[int, float] = {}
    recorded_on_node = state.recorded_on_node
    index = np.array(order, dtype=np.intp)
    totals = state.freed_totals(order)
    if totals is not None and np.array_equal(base[index], np.floor(base[index])):
        # Whole GPUs only: every partial sum is an exact integer, so summing the batch
        # totals at once gives the same values as adding batch by batch.
        recorded = np.array([recorded_on_node.get(n, 0.0) for n in order], dtype=np.float64)
        capacity = dict(zip(order, (base[index] + recorded) + totals))
    else:
        for node in order:
            cap = base[node] + recorded_on_node.get(node, 0.0)
            for freed in state.freed_on_node[node]:  # per batch on the node, in batch order
                cap += freed
            capacity[node] = cap
    candidates = [n for n in order if capacity[n] + 1e-9 >= smallest]
    if not candidates:
        return
    position = {n: i for i, n in enumerate(order)}
    candidates.sort(key=lambda n: (capacity[n], position[n]))
    outside = feasible.copy()
    outside[order] = False
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
    while True:
        chosen: set[int] = set()
        for node in candidates[:k]:
            chosen.update(state.victim_nodes.get(node, []))
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
        self.capacity: dict[int, float] = {}  # victim-bearing node -> capacity
        self.candidates = 0  # nodes with capacity + 1e-9 >= smallest
        self.total = 0.0  # their capacity
        self.seen = 0  # entries of ``state.touched`` taken in

    def valid(self, base: np.ndarray, feasible: np.ndarray) -> bool:
        return feasible is self.feasible and np.array_equal(base, self.base)

    def may_cover(self, state: AccumulatedState, demand: float) -> bool:
        """False only when :func:`_prefix_subsets` would yield nothing."""
        totals = state._freed_total
        if not self.whole or totals is None:
            return True
        base, feasible, capacity = self.base, self.feasible, self.capacity
        recorded = state.recorded_on_node
        smallest = self.smallest
        touched = state.touched
        for node in touched[self.seen :]:
            old = capacity.get(node)
            if old is None:
                if feasible[node]:
                    self.baseline -= float(base[node])
            elif old + 1e-9 >= smallest:
                self.candidates -= 1
                self.total -= old
            new = (float(base[node]) + recorded.get(node, 0.0)) + totals.get(node, 0.0)
            capacity[node] = new
            if new + 1e-9 >= smallest:
                self.candidates += 1
                self.total += new
        self.seen = len(touched)
        if not self.candidates:
            return False
        return self.total + 1e-9 >= demand - self.baseline


register_generator("NodeLocalGreedy", node_local_greedy)
register_generator("MultiNodeGang", multi_node_gang)
