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
    from kai.solvers.scenario import gpu_freed, node_gpu_capacity

    base = node_gpu_capacity(ssn)
    requests = state.gpu_requests
    smallest = float(requests.min()) if len(requests) else 0.0
    demand = float(requests.sum())
    order: list[int] = []  # victim-bearing nodes in first-appearance order
    for batch in state.batches:
        for task in batch.tasks:
            if task.node >= 0 and task.node not in order:
                order.append(task.node)
    capacity: dict[int, float] = {}
    for node in order:
        cap = base[node] + state.recorded_on_node.get(node, 0.0)
        for i in state.victim_nodes.get(node, []):
            cap += sum(gpu_freed(ssn, t) for t in state.batches[i].tasks if t.node == node)
        capacity[node] = cap
    candidates = [n for n in order if capacity[n] + 1e-9 >= smallest]
    if not candidates:
        return
    position = {n: i for i, n in enumerate(order)}
    candidates.sort(key=lambda n: (capacity[n], position[n]))
    victim_set = set(order)
    baseline = float(sum(base[i] for i in np.flatnonzero(feasible) if int(i) not in victim_set))
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


register_generator("NodeLocalGreedy", node_local_greedy)
register_generator("MultiNodeGang", multi_node_gang)
