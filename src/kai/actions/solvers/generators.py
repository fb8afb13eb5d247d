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

from bisect import insort
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
    seen: set[int] = set()  # the sets yielded, as bits
    seen_sets: set[frozenset[int]] | None = None  # the same, once sets come instead
    for state in accumulate(ssn, candidates, pending, recorded):
        if not state.batches:
            yield Scenario(preemptor, pending, recorded, [])
            continue
        for indices in _prefix_subsets(ssn, state, feasible):
            if isinstance(indices, int):
                if indices in seen:
                    continue
                seen.add(indices)
                chosen = _bit_indices(indices)
            else:
                if seen_sets is None:  # bits come no more (see _prefix_subsets)
                    seen_sets = {frozenset(_bit_indices(bits)) for bits in seen}
                key = frozenset(indices)
                if key in seen_sets:
                    continue
                seen_sets.add(key)
                chosen = sorted(indices)
            yield _scenario(state, preemptor, pending, chosen)


def _bit_indices(bits: int) -> list[int]:
    """The positions of the bits set in ``bits``, ascending."""
    raw = bits.to_bytes((bits.bit_length() + 7) // 8, "little")
    return np.flatnonzero(np.unpackbits(np.frombuffer(raw, np.uint8), bitorder="little")).tolist()


def _prefix_subsets(
    ssn: Session, state: AccumulatedState, feasible: np.ndarray
) -> Iterator[int | set[int]]:
    """The sets of batches the gang scenarios of ``state`` evict: those on the first k
    candidate nodes by capacity, for the smallest k that covers the demand, then k + 1,
    k + 3, k + 7, ...  As bits (bit i: batch i) while the state has at most
    ``_BITS_UP_TO`` batches: cheap to unite and to tell apart (a set is its integer);
    beyond, an integer costs more to make than a set, and a set is yielded (grown in
    place: the caller reads each before asking for the next)."""
    request = state.prefix_request
    if request is None:
        gpus = state.gpu_requests
        request = state.prefix_request = (
            float(gpus.min()) if len(gpus) else 0.0,
            float(gpus.sum()),
        )
    smallest, demand = request
    nodes = ssn.nodes
    bound = state.prefix_bound
    seen_at = bound.seen_at if bound is not None and bound.feasible is feasible else None
    if seen_at is not None and seen_at[0] is nodes and seen_at[1] == nodes.version:
        # No pod changed status since the bound's base was made or last found the same.
        base = bound.base
    else:
        # GPUs per node before the batches: idle and releasing, plus what the recorded
        # victims free on every node (also where no batch adds a victim).
        base = node_gpu_capacity(ssn)
        recorded_on_node = state.recorded_on_node
        if recorded_on_node:
            base[list(recorded_on_node)] += list(recorded_on_node.values())
        if bound is None or not bound.valid(base, feasible):
            bound = state.prefix_bound = _PrefixBound(base, feasible, smallest)
        bound.seen_at = (nodes, nodes.version)  # for this ``feasible`` (valid checks it)
    if not bound.may_cover(state, demand):
        return
    order = state.node_order  # victim-bearing nodes in first-appearance order
    capacity, node_bits, in_order = bound.take_in(state)
    # The victim-bearing nodes that can take the smallest request, in node order.
    candidates = list(in_order)
    if not candidates:
        return
    candidates.sort(key=capacity.__getitem__)  # stable: equal capacities in node order
    if bound.whole:
        baseline = bound.baseline  # whole numbers: exact in any order
    else:
        # Summed in node order, one addition at a time, as a loop would (accumulate adds
        # sequentially; sum() compensates the rounding from Python 3.12 on).
        values = base[bound.outside(order)]
        baseline = float(np.add.accumulate(values)[-1]) if len(values) else 0.0
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
    ends = _prefix_ends(start, len(candidates))
    taken = 0
    if node_bits is None:
        victim_nodes = state.victim_nodes
        members: set[int] = set()
        for k in ends:
            for node in candidates[taken:k]:
                members.update(victim_nodes.get(node, ()))
            taken = k
            yield members
        return
    chosen = 0
    for k in ends:
        # The batches on the first k candidates.
        for node in candidates[taken:k]:
            chosen |= node_bits[node]
        taken = k
        yield chosen


def _prefix_ends(start: int, m: int) -> Iterator[int]:
    """The prefix lengths of :func:`_prefix_subsets`: k, k + 1, k + 3, k + 7, ... up to m."""
    k, step = start, 1
    while True:
        yield k
        if k >= m:
            return
        k = min(m, k + step)
        step *= 2


class _PrefixBound:
    """What :func:`_prefix_subsets` reads of one state, kept across its accumulation
    steps (:meth:`take_in`), and whether it can find a prefix that covers the demand
    (:meth:`may_cover`; most states of a large gang find none).
    """

    def __init__(self, base: np.ndarray, feasible: np.ndarray, smallest: float) -> None:
        self.base = base
        self.feasible = feasible
        self.smallest = smallest
        self.whole = bool(np.array_equal(base, np.floor(base)))
        # While ``whole``: the GPUs of the feasible nodes that bear no victims, and the
        # candidates' capacity (exact integers, whatever the order of the sums).
        self.baseline = float(base[feasible].sum()) if self.whole else 0.0
        self.total = 0.0
        # Per victim-bearing node, its capacity with every batch added so far, its
        # batches as bits, and how many batches that is (see take_in).
        self._node_capacity: dict[int, float] = {}
        self._node_bits: dict[int, int] | None = {}
        self._node_batches: dict[int, int] = {}
        self._taken_in = 0  # entries of ``state.touched`` taken in there
        # The nodes whose capacity takes the smallest request, in node order (a
        # capacity only grows as batches are added), and each node's place in that order.
        self._candidates: list[int] = []
        self._position: dict[int, int] = {}
        # The node table and its version when ``base`` was last found the same.
        self.seen_at: tuple[object, int] | None = None
        # The feasible nodes that bear no victim, as a mask, and how many entries of the
        # state's node order it has taken out (see outside).
        self._outside: np.ndarray | None = None
        self._outside_taken = 0

    def outside(self, order: list[int]) -> np.ndarray:
        """The feasible nodes not in ``order`` (the state's victim-bearing nodes, which
        only grow): kept across the accumulation steps, each taking out the new ones."""
        if self._outside is None:
            self._outside = self.feasible.copy()
        mask, taken = self._outside, self._outside_taken
        if taken < len(order):
            mask[order[taken:]] = False
            self._outside_taken = len(order)
        return mask

    def take_in(
        self, state: AccumulatedState
    ) -> tuple[dict[int, float], dict[int, int] | None, list[int]]:
        """Per victim-bearing node, its base capacity plus what each of its batches
        frees there, added in batch order; its batches as bits (bit i: batch i; None once
        the state has more than ``_BITS_UP_TO`` batches); and the nodes whose capacity
        takes the smallest request, in ``state.node_order``.
        Kept across the accumulation steps, each step taking in only the new batches:
        the same additions, in the same order, as summing each node afresh (with whole
        GPUs on a whole base, the sum is exact in any order: the node's total).  The
        caller only reads them."""
        capacity = self._node_capacity
        touched = state.touched
        if self._taken_in < len(touched):
            position, order = self._position, state.node_order
            for node in order[len(position) :]:
                position[node] = len(position)
            if self._node_bits is not None and len(state.batches) > _BITS_UP_TO:
                self._node_bits = None
            totals = state.freed_total_array()
            fresh = None
            if (
                self._node_bits is None
                and totals is not None
                and len(touched) - self._taken_in >= _WHOLE_FROM
            ):
                fresh = self._take_in_whole(state, totals)
            if fresh is None:
                fresh = self._take_in_each(state, totals)
            self._taken_in = len(touched)
            if len(fresh) > _FEW_NODES:
                smallest = self.smallest
                self._candidates = [n for n in order if capacity[n] + 1e-9 >= smallest]
            else:
                for node in fresh:
                    insort(self._candidates, node, key=position.__getitem__)
        return capacity, self._node_bits, self._candidates

    def _take_in_each(self, state: AccumulatedState, totals: np.ndarray | None) -> list[int]:
        """:meth:`take_in`'s new batches node by node; the nodes that now take the
        smallest request, in the order first met."""
        capacity, counted, base = self._node_capacity, self._node_batches, self.base
        smallest, victim_nodes = self.smallest, state.victim_nodes
        freed_on_node: dict[int, list[float]] | None = None
        bits = self._node_bits
        fresh: list[int] = []
        for node in state.touched[self._taken_in :]:
            batches = victim_nodes[node]
            done = counted.get(node, 0)
            if done == len(batches):
                continue
            old = capacity.get(node)
            value = float(base[node])
            if totals is not None and value.is_integer():
                value += float(totals[node])
            else:
                if freed_on_node is None:
                    freed_on_node = state.freed_on_node
                if old is not None:
                    value = old
                for gpus in freed_on_node[node][done:]:
                    value += gpus
            if bits is not None:
                mask = bits.get(node, 0)
                for batch in batches[done:]:
                    mask |= 1 << batch
                bits[node] = mask
            if old is None:
                if self.feasible[node]:
                    self.baseline -= float(base[node])
            elif old + 1e-9 >= smallest:
                self.total -= old
            if value + 1e-9 >= smallest:
                self.total += value
                if old is None or old + 1e-9 < smallest:
                    fresh.append(node)
            capacity[node] = value
            counted[node] = len(batches)
        return fresh

    def _take_in_whole(self, state: AccumulatedState, totals: np.ndarray) -> list[int] | None:
        """:meth:`_take_in_each` for states whose every amount is a whole number of GPUs
        (their batches not kept as bits), with arrays over the nodes the new batches
        touch: each node's capacity is its base plus all its batches free there, and
        every sum is of whole numbers, exact in any order.  None where a base is not
        whole (then node by node)."""
        new = np.asarray(state.touched[self._taken_in :], dtype=np.intp)
        distinct, first = np.unique(new, return_index=True)
        nodes = distinct[np.argsort(first)]  # in the order first met
        base = self.base[nodes]
        if not np.array_equal(base, np.floor(base)):
            return None
        values = base + totals[nodes]
        listed = nodes.tolist()
        capacity, smallest = self._node_capacity, self.smallest
        old = np.array([capacity.get(n, np.nan) for n in listed], dtype=np.float64)
        unseen = np.isnan(old)
        self.baseline -= float(base[unseen & self.feasible[nodes]].sum())
        self.total -= float(old[~unseen & (old + 1e-9 >= smallest)].sum())
        takes = values + 1e-9 >= smallest
        self.total += float(values[takes].sum())
        fresh = nodes[takes & (unseen | ~(old + 1e-9 >= smallest))].tolist()
        capacity.update(zip(listed, values.tolist()))
        victim_nodes = state.victim_nodes
        self._node_batches.update((n, len(victim_nodes[n])) for n in listed)
        return fresh

    def valid(self, base: np.ndarray, feasible: np.ndarray) -> bool:
        return feasible is self.feasible and np.array_equal(base, self.base)

    def may_cover(self, state: AccumulatedState, demand: float) -> bool:
        """False only when :func:`_prefix_subsets` would yield nothing.  Known only while
        every capacity is a whole number of GPUs: then the ascending running total of
        the candidates reaches the demand iff their sum does."""
        if not self.whole or state.freed_total_array() is None:
            return True
        self.take_in(state)
        return bool(self._candidates) and self.total + 1e-9 >= demand - self.baseline


#: The most batches a state may have for :func:`_prefix_subsets` to give its sets as
#: bits (an integer of B bits costs about B / 64 word operations to make and to unite).
_BITS_UP_TO = 1024

#: The fewest new batch nodes :meth:`_PrefixBound.take_in` takes in with arrays (fewer:
#: node by node, which costs less than the arrays).
_WHOLE_FROM = 64

#: The most nodes :meth:`_PrefixBound.take_in` inserts among the candidates one by one
#: (more: the candidates are listed again).
_FEW_NODES = 16


register_generator("NodeLocalGreedy", node_local_greedy)
register_generator("MultiNodeGang", multi_node_gang)
