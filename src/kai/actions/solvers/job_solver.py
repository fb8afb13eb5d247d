"""The job solver: generators x probes x simulation, under a budget.

For a pending job with ``n`` tasks to place, every registered generator in turn runs
a probe progression: solve the first k = 1, 2, 4, ..., n tasks (doubling, capped at n)
until a probe fails, then binary-search between the last success and the failed k; the
victim groups a successful probe used become the *recorded victims* that later probes
start from.  As in KAI-Scheduler, a group (a batch of one victim job's pods taken
together, or a group recorded earlier) is recorded whole if the probe evicted or moved
any of its pods, and dropped if it put them all back.  A final probe at k = n follows,
from the recorded victims of the last success (unless the whole job already failed
from the very same ones, or the last success was at k = n and recorded every victim it
simulated: the final probe would simulate the same scenario again).  When every
generator failed, each whose final probe failed from recorded victims probes k = n once
more from none (a set that places the whole job may leave out victims the smaller
probes needed; KAI-Scheduler has no such last probe).  Only a successful
probe at k = n is kept; the others are rolled back.  Scenarios that failed are
fingerprinted and never simulated twice for the same job.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import field
from functools import partial

import numpy as np

from kai import _fast
from kai._dataclasses import dataclass
from kai.actions.solvers.batches import VictimBatch, gpu_freed
from kai.actions.solvers.budget import ActionBudget, JobBudget
from kai.actions.solvers.generators import GENERATORS, Generator
from kai.actions.solvers.replacement import ReplacementCheck
from kai.actions.solvers.scenario import (
    COUNT_SLACK,
    Fingerprint,
    Scenario,
    gpu_slot_needs,
    gpu_slots,
    gpu_slots_suffice,
    node_gpu_capacity,
    node_gpu_slots,
    pending_key,
)
from kai.actions.solvers.simulate import Simulation, Validator, every_victim_placed, simulate
from kai.actions.solvers.victims import VictimCandidates
from kai.api.model import ACTIVE_USED, Job, Task
from kai.api.resources import GPU
from kai.framework.session import Session, tasks_to_allocate
from kai.framework.statement import DIFFERS, Statement

log = logging.getLogger(__name__)

SOLVED = "solved"
DEADLINE_EXHAUSTED = "deadline_exhausted"
GENERATORS_EXHAUSTED = "generators_exhausted"
NO_GENERATOR = "no_generator"
NOT_ATTEMPTED = "not_attempted"
STOP_REASONS = frozenset({DEADLINE_EXHAUSTED, NOT_ATTEMPTED, NO_GENERATOR})


@dataclass
class SolveResult:
    """The outcome of one job's victim search."""

    solved: bool
    reason: str
    statement: Statement | None = None
    victims: list[Task] = field(default_factory=list)
    moved: list[Task] = field(default_factory=list)
    scenarios: int = 0


@dataclass
class _Probe:
    """What one probe of the search found: its simulation and the scenario it solved."""

    sim: Simulation | None
    reason: str
    scenario: Scenario | None = None  # the scenario ``sim`` solved


#: Recorded victims as the groups they were taken in (a victim batch, or a group an
#: earlier probe recorded): a group any of whose tasks a probe used is kept whole.
Recorded = list[list[Task]]


def flatten(recorded: Recorded) -> list[Task]:
    return list(dict.fromkeys(t for group in recorded for t in group))


def feasible_nodes(ssn: Session, tasks: list[Task]) -> np.ndarray:
    """All nodes if a task needs no GPU, else nodes with idle or releasing GPUs."""
    n = len(ssn.nodes)
    if any(not t.requests_gpu for t in tasks):
        return np.ones(n, dtype=np.bool_)
    return node_gpu_capacity(ssn) > 1e-9


class JobSolver:
    def __init__(
        self,
        ssn: Session,
        budget: ActionBudget,
        validator: Validator,
        action: str,
        candidates: Callable[[], list[Job]],
    ) -> None:
        self.ssn = ssn
        self.budget = budget
        self.validator = validator
        self.action = action
        self.candidates = candidates
        # Generators whose final probe failed from recorded victims (see :meth:`solve`).
        self._afresh: list[tuple[str, Generator]] = []
        # Per generator, its bound on a probe's scenarios (made once per search).
        self._bounds: dict[str, NodeLocalBound] = {}

    def solve(self, job: Job) -> SolveResult:
        ssn = self.ssn
        tasks = tasks_to_allocate(ssn, job)
        if not tasks:
            return SolveResult(False, NOT_ATTEMPTED)
        job_budget = self.budget.begin_job()
        if job_budget.exhausted():
            return SolveResult(False, NOT_ATTEMPTED)
        names = [reg.fn for reg in ssn.registered("scenario_generator")]
        generators = [(name, GENERATORS[name]) for name in names if name in GENERATORS]
        if not generators:
            return SolveResult(False, NO_GENERATOR)
        victims = self.candidates()
        if not (victims.leaves if isinstance(victims, VictimCandidates) else victims):
            # No candidate at all: no generator has a scenario to give (a probe's first
            # scenarios come from its recorded victims, and there are none yet).
            return SolveResult(False, GENERATORS_EXHAUSTED, scenarios=job_budget.scenarios)
        active_before = job.count(ACTIVE_USED)
        failed: set[Fingerprint] = set()
        feasible = feasible_nodes(ssn, tasks)
        if (
            self.validator is every_victim_placed
            and isinstance(victims, list)
            and not victims_may_ever_fit(ssn, tasks, victims, feasible)
        ):
            # No set of these victims leaves room for the job and every victim again:
            # every scenario of a probe of the whole job would fail.  Only for a list
            # the caller made (consolidation's first candidates): reading a pool's
            # candidates would run the victim filters on all of them, which a search
            # that succeeds early never does.  Told to the compiled re-placement's
            # credit as a failed simulation (see CREDIT_START).
            check = ReplacementCheck.for_session(ssn)
            if check is not None:
                check.account(False)
            return SolveResult(False, GENERATORS_EXHAUSTED, scenarios=job_budget.scenarios)
        self._afresh = []
        self._bounds = {}
        for name, gen in generators:
            result = self._search(job, tasks, name, gen, victims, feasible, failed, job_budget)
            if result.reason in STOP_REASONS:
                return result
            if result.statement is not None:
                if job.is_gang_satisfied() and job.count(ACTIVE_USED) > active_before:
                    return result
                result.statement.discard()
        # Last, the whole job from no recorded victims, by each generator whose final
        # probe failed from them: they are victims of smaller probes, and every set
        # that places the whole job may leave some of them out.
        for name, gen in self._afresh:
            got = self._probe(
                job, tasks, [], name, gen, victims, feasible, failed, job_budget, keep=True
            )
            if got.reason == DEADLINE_EXHAUSTED:
                return self._stopped(job_budget)
            if got.sim is not None:
                if job.is_gang_satisfied() and job.count(ACTIVE_USED) > active_before:
                    log.debug(
                        "%s: solved by the last probe from no recorded victims",
                        job.key,
                        extra={DIFFERS: "last_probe"},  # KAI stops before it
                    )
                    return self._solved(got.sim, job_budget)
                assert got.sim.statement is not None
                got.sim.statement.discard()
        return SolveResult(False, GENERATORS_EXHAUSTED, scenarios=job_budget.scenarios)

    def _search(
        self,
        job: Job,
        tasks: list[Task],
        name: str,
        gen,
        victims: list[Job],
        feasible: np.ndarray,
        failed: set[Fingerprint],
        job_budget: JobBudget,
    ) -> SolveResult:
        n = len(tasks)
        recorded: Recorded = []

        def probe(k: int) -> _Probe:
            return self._probe(
                job,
                tasks[:k],
                flatten(recorded),
                name,
                gen,
                victims,
                feasible,
                failed,
                job_budget,
                keep=k == n,
            )

        def finish(tried: bool) -> SolveResult:
            """The final probe from the recorded victims, unless ``tried`` (it already
            failed from them).  A failure from recorded victims is noted for a last
            probe from none (see :meth:`solve`)."""
            if tried:
                result = SolveResult(False, GENERATORS_EXHAUSTED, scenarios=job_budget.scenarios)
            else:
                result = self._final(lambda: probe(n), job_budget)
            if not result.solved and result.reason != DEADLINE_EXHAUSTED and recorded:
                self._afresh.append((name, gen))
            return result

        # Doubling, capped at n so that the whole job is one of the probes.
        best, k = 0, 1
        while True:
            got = probe(k)
            if got.reason == DEADLINE_EXHAUSTED:
                return self._stopped(job_budget)
            if got.sim is None:
                break
            used = self._used(got, recorded)
            if k == n and self._same_victims(got, used):
                return self._solved(got.sim, job_budget)  # the final probe would repeat it
            best, recorded = k, used
            if k == n:
                assert got.sim.statement is not None
                got.sim.statement.discard()  # probed again from the victims it used
                return finish(False)
            k = min(2 * k, n)
        if best == 0:
            return SolveResult(False, GENERATORS_EXHAUSTED, scenarios=job_budget.scenarios)
        # Binary search between the last success and the failed probe; each success
        # starts the later probes from its victims.
        worst, last = k, best
        while worst - best > 1:
            mid = (best + worst) // 2
            got = probe(mid)
            if got.reason == DEADLINE_EXHAUSTED:
                return self._stopped(job_budget)
            if got.sim is None:
                worst = mid
            else:
                best, recorded = mid, self._used(got, recorded)
        # Unless the whole job already failed from these very recorded victims.
        return finish(k == n and best == last)

    def _final(self, probe: Callable[[], _Probe], job_budget: JobBudget) -> SolveResult:
        final = probe()
        if final.reason == DEADLINE_EXHAUSTED:
            return self._stopped(job_budget)
        if final.sim is None:
            return SolveResult(False, GENERATORS_EXHAUSTED, scenarios=job_budget.scenarios)
        return self._solved(final.sim, job_budget)

    @staticmethod
    def _stopped(job_budget: JobBudget) -> SolveResult:
        return SolveResult(False, DEADLINE_EXHAUSTED, scenarios=job_budget.scenarios)

    @staticmethod
    def _solved(sim: Simulation, job_budget: JobBudget) -> SolveResult:
        return SolveResult(
            True,
            SOLVED,
            sim.statement,
            sim.preempted or [],
            sim.moved or [],
            job_budget.scenarios,
        )

    @staticmethod
    def _used(got: _Probe, recorded: Recorded) -> Recorded:
        """The victim groups a successful probe used, as KAI records them: each recorded
        group and each victim group of its scenario (:meth:`Scenario.victim_groups`) of
        which it evicted or moved any task, whole (a task of such a group it put back is
        evicted again by the next probe); groups it put back entirely are no longer
        recorded."""
        sim, scenario = got.sim, got.scenario
        assert sim is not None and scenario is not None
        used = {*(sim.preempted or ()), *(sim.moved or ())}
        groups = [*recorded, *scenario.victim_groups()]
        return [group for group in groups if not used.isdisjoint(group)]

    @staticmethod
    def _same_victims(got: _Probe, used: Recorded) -> bool:
        """Whether a probe from the ``used`` victims alone simulates ``got``'s scenario."""
        assert got.scenario is not None
        return set(flatten(used)) == set(got.scenario.victim_tasks())

    def _probe_bound(self, name: str, victims: list[Job] | VictimCandidates) -> NodeLocalBound:
        """Generator ``name``'s bound on its scenarios (PROBE_BOUNDS), made once per
        search."""
        made = self._bounds.get(name)
        if made is None:
            made = self._bounds[name] = PROBE_BOUNDS[name](self.ssn, victims)
        return made

    def _probe(
        self,
        job: Job,
        pending: list[Task],
        recorded: list[Task],
        name: str,
        gen,
        victims: list[Job],
        feasible: np.ndarray,
        failed: set[Fingerprint],
        job_budget: JobBudget,
        *,
        keep: bool = False,
    ) -> _Probe:
        ssn = self.ssn
        within = feasible.copy()
        for task in recorded:
            if task.node >= 0:
                within[task.node] = True
        deadline = job_budget.generator_deadline(name)
        clock = self.budget.clock
        bound = _PlacementBound(
            ssn, pending, within, recorded, every_victim=self.validator is every_victim_placed
        )
        pending_ids = pending_key(pending)
        check = ReplacementCheck.for_session(ssn) if bound.every_victim else None
        # Whether any scenario the generator may give passes the bound (see
        # PROBE_BOUNDS): only where the scenarios are not counted against a cap
        # (skipping them then changes nothing but time).
        ask_bound = name in PROBE_BOUNDS and not self.budget.limits.max_scenarios
        if ask_bound and _mostly_read(victims):
            if not self._probe_bound(name, victims).may_fit(bound):
                return _Probe(None, GENERATORS_EXHAUSTED)
            ask_bound = False
        refused = 0
        for scenario in gen(ssn, job, pending, recorded, victims, within):
            if job_budget.exhausted():
                return _Probe(None, DEADLINE_EXHAUSTED)
            if clock() >= deadline:
                return _Probe(None, GENERATORS_EXHAUSTED)  # this generator's share is spent
            key = scenario.fingerprint(pending_ids if scenario.pending is pending else None)
            if key in failed:
                continue
            job_budget.scenarios += 1
            if not bound.may_fit(scenario):
                failed.add(key)  # the simulation could not place the pending tasks
                refused += 1
                if ask_bound and refused == REFUSALS_BEFORE_PROBE_BOUND:
                    if not self._probe_bound(name, victims).may_fit(bound):
                        return _Probe(None, GENERATORS_EXHAUSTED)
                    ask_bound = False
                continue
            refused = 0
            if not bound.victims_may_fit(scenario):
                # Nor every victim again: the simulation would fail, and is told to the
                # compiled re-placement's credit as a failure (see CREDIT_START).
                failed.add(key)
                if check is not None:
                    check.account(False)
                continue
            sim = simulate(ssn, scenario, within, self.validator, self.action, need_statement=keep)
            if not sim.solved:
                failed.add(key)
                continue
            if not keep and sim.statement is not None:
                sim.statement.discard()
            return _Probe(sim, SOLVED, scenario)
        return _Probe(None, GENERATORS_EXHAUSTED)


def _mostly_read(candidates: list[Job] | VictimCandidates) -> bool:
    """Whether the search has read many of its candidates (``PROBE_BOUND_READ``): its
    probes accumulate long, and each is worth checking first.  (A list the caller made
    is short: its probes are checked after the refusals only.)"""
    return isinstance(candidates, VictimCandidates) and len(candidates.memo) >= PROBE_BOUND_READ


class _PlacementBound:
    """A sound pre-check of a scenario's simulation (which places whole-GPU pending tasks
    only where ``request <= idle + releasing`` after the evictions, on the probe's nodes
    plus the victims' nodes): if even the GPU slots of those nodes cannot take the
    pending tasks, the simulation would fail, and is skipped.  A shared device counts
    its free portion, and each evicted tenant adds its portion: a device all of whose
    tenants go counts whole (the capacity may only be overestimated).

    The probe's scenarios share its recorded victims: their part (capacities, nodes and
    slots) is computed once, and each scenario only adds its batches' nodes.

    With ``every_victim`` (a simulation that must place every victim again, as
    consolidation's) the victims' whole-GPU pods must fit those slots too, beside the
    pending tasks: a simulation only ever places pods on what its evictions and the
    nodes' idle and releasing GPUs leave.
    """

    def __init__(
        self,
        ssn: Session,
        pending: list[Task],
        within: np.ndarray,
        recorded: list[Task],
        *,
        every_victim: bool = False,
    ) -> None:
        self.requests = _whole_gpu_requests(pending)
        self.every_victim = every_victim
        if self.requests or every_victim:
            self.needs = gpu_slot_needs(self.requests)
            self.ssn = ssn
            # Shared devices counted by their free portion: evicting (or moving) every
            # tenant of one frees the whole device, as the simulation sees it.
            self.base = node_gpu_capacity(ssn)
            self.within = within
            self.recorded = recorded
            # The recorded victims' part, made at the first check (the session's state
            # is the same at every check of the probe: each simulation is undone before
            # the next scenario).
            self._shared: SlotBound | None = None
            self._base_slots: dict[float, int] = {}  # per size (victims_may_fit)

    def _capacity(self, victims: list[Task]) -> tuple[np.ndarray, np.ndarray]:
        """GPUs per node once ``victims`` are evicted, and the nodes the simulation uses."""
        return _after_evictions(self.ssn, self.base, self.within, victims)

    def may_fit(self, scenario: Scenario) -> bool:
        """Whether the pending tasks may fit."""
        if not self.requests:
            return True
        if scenario.recorded is not self.recorded:
            capacity, mask = self._capacity(scenario.victim_tasks())
            return gpu_slots_suffice(capacity[mask], self.requests, self.needs)
        shared = self._shared
        if shared is None:
            capacity, mask = self._capacity(self.recorded)
            slots = [gpu_slots(capacity[mask], v) for v, _ in self.needs]
            fast = _fast.module("bounds")
            bound = fast.SlotBound if fast is not None else SlotBound
            shared = self._shared = bound(capacity, mask, self.needs, slots, COUNT_SLACK)
        # A scenario's batches share no pod with each other or with the recorded victims
        # (an accumulation never takes a pod twice and leaves the recorded ones out), so
        # each batch's own sums are what it adds.
        return shared.fits(scenario.batches, self.ssn)

    def victims_may_fit(self, scenario: Scenario) -> bool:
        """With ``every_victim``: whether the victims may fit again beside the pending
        tasks (:meth:`may_fit` said those may).  The slots of the probe's nodes are
        counted once per size, and each scenario only recounts the nodes its victims
        free GPUs on (the same sums, in the same order, as evicting them on an array)."""
        if not self.every_victim:
            return True
        victims = scenario.victim_tasks()
        moved = _whole_gpu_requests(victims)
        if not moved:
            return True
        ssn, base, within = self.ssn, self.base, self.within
        freed_to: dict[int, float] = {}
        for task in victims:
            node = task.node
            if node >= 0:
                freed_to[node] = freed_to.get(node, float(base[node])) + gpu_freed(ssn, task)
        for v, need in gpu_slot_needs(self.requests + moved):
            have = self._slots_of(v)
            for node, gpus in freed_to.items():
                if within[node]:
                    have -= math.floor((float(base[node]) + COUNT_SLACK) / v)
                have += math.floor((gpus + COUNT_SLACK) / v)
            if have < need:
                return False
        return True

    def _slots_of(self, size: float) -> int:
        """The ``size``-GPU slots of the probe's nodes before any eviction."""
        slots = self._base_slots.get(size)
        if slots is None:
            slots = self._base_slots[size] = gpu_slots(self.base[self.within], size)
        return slots


@dataclass(eq=False)  # arrays: compared by identity
class NodePods:
    """Where some jobs' pods are: per node, the GPUs evicting all of them would free
    (``freed``) and whether one is there (``held``); per node, the other nodes of the
    jobs on several nodes with a pod there (``spread``)."""

    freed: np.ndarray
    held: np.ndarray
    spread: dict[int, set[int]]

    @classmethod
    def of(cls, ssn: Session, jobs: Iterable[Job]) -> NodePods:
        at: list[int] = []  # every pod's node, and the GPUs it frees
        gpus: list[float] = []
        spread: dict[int, set[int]] = {}
        for job in jobs:
            first, several = -1, False
            for task in job.tasks:
                node = task.node
                if node < 0:
                    continue
                at.append(node)
                gpus.append(gpu_freed(ssn, task))
                if first < 0:
                    first = node
                elif node != first:
                    several = True
            if several:
                nodes = {t.node for t in job.tasks if t.node >= 0}
                for node in nodes:
                    spread.setdefault(node, set()).update(nodes)
        index = np.asarray(at, dtype=np.intp)
        freed = np.zeros(len(ssn.nodes))
        _fast.add_at_function()(freed, index, np.asarray(gpus, dtype=np.float64))
        held = np.zeros(len(ssn.nodes), dtype=np.bool_)
        held[index] = True
        return cls(freed, held, spread)


#: Where a victim pool keeps each leaf's NodePods (VictimPool.leaf_derived).
NODE_PODS_KEY = "solver.node_pods"


class NodeLocalBound:
    """Whether some scenario NodeLocalGreedy may give a probe passes the probe's
    :meth:`_PlacementBound.may_fit`: False only when none can.

    Each of its scenarios evicts the recorded victims and the batches of the candidate
    jobs that have a batch on one node X.  Those batches free no more GPUs on any node
    than all the pods there of the jobs the candidates are drawn from, and touch no
    node but those of the jobs with a pod on X.  Freeing more GPUs, or bringing one
    more node into the simulation, never takes a slot away: so if, for every node X,
    even evicting all those pods (the recorded ones counted again, which only adds)
    leaves too few slots of some size, no scenario passes.  (The slots added are
    counted with twice the bound's slack: these sums are made in another order than
    the bound's.)

    A victim pool's candidates are bounded by every job of their leaves, whose
    :class:`NodePods` the pool keeps per leaf until one of its jobs changes; a list's
    by its jobs.  Each probe then checks every node X at once on arrays.
    """

    def __init__(self, ssn: Session, candidates: list[Job] | VictimCandidates) -> None:
        if isinstance(candidates, VictimCandidates):
            pool = candidates.pool

            def pods_of(name: str) -> NodePods:
                return NodePods.of(ssn, pool.leaf_jobs(name))

            parts = [
                pool.leaf_derived(name, NODE_PODS_KEY, partial(pods_of, name))
                for name in candidates.leaves
            ]
        else:
            parts = [NodePods.of(ssn, candidates)]
        n = len(ssn.nodes)
        self.freed = sum((part.freed for part in parts), np.zeros(n))
        held = np.zeros(n, dtype=np.bool_)
        spread: dict[int, set[int]] = {}
        for part in parts:
            held |= part.held
            for node, nodes in part.spread.items():
                spread.setdefault(node, set()).update(nodes)
        xs = np.flatnonzero(held)
        if not spread:
            self.starts, self.nodes = np.arange(len(xs), dtype=np.intp), xs
            return
        groups = [[x, *(spread.get(x, set()) - {x})] for x in xs.tolist()]
        self.starts = np.cumsum([0, *(len(g) for g in groups[:-1])], dtype=np.intp)
        self.nodes = np.fromiter((n for g in groups for n in g), dtype=np.intp)

    def may_fit(self, bound: _PlacementBound) -> bool:
        if not bound.requests:
            return True  # the placement bound passes every scenario
        capacity, inside = bound._capacity(bound.recorded)
        alive = np.ones(len(self.starts), dtype=np.bool_)
        for v, need in bound.needs:
            slots = gpu_slots(capacity[inside], v)
            if not len(self.nodes):
                if slots < need:  # only the recorded victims' scenario
                    return False
                continue
            gained = node_gpu_slots(capacity + self.freed, v, 2 * COUNT_SLACK)
            gained[inside] -= node_gpu_slots(capacity[inside], v)
            alive &= slots + np.add.reduceat(gained[self.nodes], self.starts) >= need
            if not alive.any():
                return False
        return True


#: Per generator, a bound on every scenario it may still give a probe (made per
#: search from the candidates; ``may_fit(bound)``: False when none passes the probe's
#: ``_PlacementBound.may_fit``).  A probe it refuses ends as it would have once the
#: generator ran dry.  It is asked at the start of a probe once the search has read
#: many of its candidates (see _mostly_read), else after
#: ``REFUSALS_BEFORE_PROBE_BOUND`` scenarios in a row failed the placement bound.
PROBE_BOUNDS: dict[str, type[NodeLocalBound]] = {"NodeLocalGreedy": NodeLocalBound}
REFUSALS_BEFORE_PROBE_BOUND = 64
PROBE_BOUND_READ = 1024


def victims_may_ever_fit(
    ssn: Session, pending: list[Task], candidates: Iterable[Job], feasible: np.ndarray
) -> bool:
    """Whether some scenario of a search whose every victim must be placed again
    (consolidation) may place the whole job: False only when none can.

    This is :meth:`_PlacementBound.victims_may_fit` with every pod of every candidate
    evicted, on the feasible nodes and every node such a pod is on (each node's GPUs
    counted from no less than zero, as :func:`node_gpu_capacity` counts them).
    Evicting one more pod never makes the count of any size v worse: it adds at least
    floor(g / v) v-sized slots on its node (a node a victim adds to the simulation's
    nodes brings at least its victims' slots) and at most one pod of >= v GPUs to
    place.  So if the slots of some size are too few with
    every candidate evicted, they are too few for every set of victims, and each
    probe of the whole job (the only probes a solution comes from) fails.
    """
    requests = _whole_gpu_requests(pending)
    if not requests:
        return True  # the victims alone always fit where they were
    victims = [task for job in candidates for task in job.tasks if task.node >= 0]
    capacity, inside = _after_evictions(ssn, node_gpu_capacity(ssn), feasible, victims)
    return gpu_slots_suffice(capacity[inside], requests + _whole_gpu_requests(victims))


def _after_evictions(
    ssn: Session, base: np.ndarray, within: np.ndarray, victims: list[Task]
) -> tuple[np.ndarray, np.ndarray]:
    """GPUs per node (``base``: before any eviction) once ``victims`` are evicted, and
    the nodes a simulation of them uses (``within`` and the victims' nodes)."""
    victims = [t for t in victims if t.node >= 0]
    index = np.fromiter((t.node for t in victims), dtype=np.intp, count=len(victims))
    freed = np.fromiter((gpu_freed(ssn, t) for t in victims), dtype=np.float64, count=len(victims))
    capacity = base.copy()
    _fast.add_at_function()(capacity, index, freed)
    mask = within.copy()
    mask[index] = True
    return capacity, mask


def _whole_gpu_requests(tasks: list[Task]) -> list[float]:
    """The GPUs of ``tasks`` that ask for whole GPUs (not a shared device)."""
    return [float(t.request[GPU]) for t in tasks if not t.is_shared_gpu and t.request[GPU] > 0]


@dataclass(slots=True, eq=False)  # arrays: compared by identity
class SlotBound:
    """Whether whole-GPU pods asking for the sizes of ``needs`` could still fit the
    slots of a probe's nodes once a scenario's batches are evicted too.

    ``capacity``: per node, its GPUs once the recorded victims are gone; ``inside``: the
    nodes the simulation may use; ``needs``: per request size v (:func:`gpu_slot_needs`),
    the pods asking for >= v GPUs; ``slots``: per size, the v-sized slots of the
    ``inside`` nodes.  The reference of ``kai._fast.bounds.SlotBound``, which gives the
    same answers.
    """

    capacity: np.ndarray
    inside: np.ndarray
    needs: list[tuple[float, int]]
    slots: list[int]
    slack: float

    def fits(self, batches: list[VictimBatch], ssn: Session) -> bool:
        """Whether the slots suffice once ``batches`` (sharing no pod with each other nor
        with the recorded victims) are evicted as well: each touched node's slots are
        counted again with what the batches free there, added in their order."""
        now: dict[int, float] = {}
        for batch in batches:
            for node, freed in batch.freed_per_node(ssn):
                old = now.get(node)
                now[node] = (float(self.capacity[node]) if old is None else old) + freed
        slack = self.slack
        for (v, need), have in zip(self.needs, self.slots):
            for node, new in now.items():
                if self.inside[node]:
                    have -= math.floor((float(self.capacity[node]) + slack) / v)
                have += math.floor((new + slack) / v)
            if have < need:
                return False
        return True


def victim_jobs_of(tasks: list[Task]) -> list[Job]:
    out: list[Job] = []
    for task in tasks:
        if task.job not in out:
            out.append(task.job)
    return out


__all__ = [
    "JobSolver",
    "SolveResult",
    "Scenario",
    "feasible_nodes",
    "victim_jobs_of",
    "victims_may_ever_fit",
]
