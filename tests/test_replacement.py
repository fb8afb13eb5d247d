"""The compiled re-placement of victim-search simulations (kai.actions.solvers.replacement)
decides as the Python simulation does.

Every simulation it takes is run in Python too (``KAI_VERIFY_REPLACEMENT=1``), which
fails on the first verdict that differs; and whole sessions decide the same with and
without it.  The clusters are generated with fixed seeds: contested queues, gangs,
elastic and non-preemptible jobs, so that reclaim, preempt and consolidation simulate
scenarios that fail at the preemptor and scenarios that place it.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import kai.bench as bench
from kai import _fast
from kai.actions.solvers import job_solver, replacement, simulate
from kai.actions.solvers.replacement import VERIFY_ENV, ReplacementCheck
from kai.bench_clusters import NOW, random_cluster
from kai.engine import Snapshot, run_session

pytest.importorskip("kai._native")

SEEDS = range(40)
ACTIONS = ["allocate", "consolidation", "reclaim", "preempt", "backfill"]
SCENARIOS = [
    ("reclaim-storm", "small"),
    ("preempt-storm", "small"),
    ("kai-reclaim-many-single", "small"),
    ("kai-consolidation", "small"),
]


#: kai/simulation.hpp's outcome of a consolidation scenario that places its preemptor
#: and leaves a victim without a place.
VICTIM_LEFT = 2
#: kai/simulation.hpp's step that rolls a gang back.
ROLLBACK = 2


@pytest.fixture
def verdicts(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """The compiled verdicts given, counted; keyed ``("every victim", outcome)``, the
    core's outcomes of the simulations that must place every victim again; and keyed
    ``"gang rolled back"``, placed verdicts whose steps roll a gang back."""
    counts: Counter = Counter()
    original = ReplacementCheck._decide

    def counted(self, arrays, every_victim):
        verdict = original(self, arrays, every_victim)
        counts[verdict.placed] += 1
        if verdict.steps is not None and (verdict.steps[:, 0] == ROLLBACK).any():
            counts["gang rolled back"] += 1
        if arrays.every_victim:
            counts["every victim", self.picker.native.replace_victims(arrays)[0]] += 1
        return verdict

    monkeypatch.setattr(ReplacementCheck, "_decide", counted)
    return counts


def _session(snapshot: Snapshot, **kw) -> dict:
    return run_session(snapshot, now=NOW, backend="native", **kw).to_json(explain=True)


def _without_compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ReplacementCheck, "for_session", classmethod(lambda cls, ssn: None))


def _random(seed: int) -> Snapshot:
    builder = random_cluster(seed, nodes=6 + seed % 5, jobs=30 + seed)
    return Snapshot.from_objects(builder.dicts())


@pytest.mark.parametrize("group_from", [replacement.GROUP_NODES_FROM, 0])
def test_every_verdict_is_the_simulations(group_from: int, monkeypatch, verdicts) -> None:
    # group_from 0: every node choice through the node groups (most simulations here
    # place fewer pods than the default threshold).
    monkeypatch.setattr(replacement, "GROUP_NODES_FROM", group_from)
    monkeypatch.setenv(VERIFY_ENV, "1")
    for seed in SEEDS:
        _session(_random(seed), actions=ACTIONS)  # raises on a verdict that differs
    # Both verdicts were given, and checked (a placed one: the statement its steps make
    # is the loop's, gangs rolled back included): the clusters exercise it.
    # Consolidation's scenarios were followed past the preemptor: some re-placed every
    # victim, some left one without a place.
    assert verdicts[False] > 0 and verdicts[True] > 0, verdicts
    assert verdicts["gang rolled back"] > 0, verdicts
    assert verdicts["every victim", 1] > 0 and verdicts["every victim", VICTIM_LEFT] > 0, verdicts


@pytest.mark.parametrize("seed", SEEDS[::4])
def test_sessions_decide_the_same_without_it(seed: int, monkeypatch) -> None:
    compiled = _session(_random(seed), actions=ACTIONS)
    _without_compiled(monkeypatch)
    assert _session(_random(seed), actions=ACTIONS) == compiled


def test_a_session_without_predicates_is_re_placed_as_the_simulation(monkeypatch, verdicts) -> None:
    # No predicate plugin: every constraint set's masks are empty (P = 0), and the core
    # still tells the pods' sets apart by their slots.
    config = {
        "apiVersion": "kai.scheduler/v1",
        "kind": "SchedulerConfiguration",
        "actions": ",".join(ACTIONS),
        "tiers": [{"plugins": [{"name": "proportion"}]}],
    }

    def sessions() -> list[dict]:
        return [
            _session(Snapshot.from_objects([*random_cluster(seed).dicts(), config]))
            for seed in SEEDS[::4]
        ]

    monkeypatch.setenv(VERIFY_ENV, "1")
    decided = sessions()
    assert verdicts[False] > 0 and verdicts[True] > 0, verdicts
    _without_compiled(monkeypatch)
    assert sessions() == decided


@pytest.mark.parametrize(("name", "size"), SCENARIOS)
def test_bench_scenarios_decide_the_same(name: str, size: str, monkeypatch, verdicts) -> None:
    scenario = bench.SCENARIOS[name]
    config = bench.scenario_config(scenario)

    def session() -> dict:
        snapshot = Snapshot(scenario.build(scenario.sizes[size]).objects())
        return _session(snapshot, config=config, actions=scenario.actions)

    monkeypatch.setenv(VERIFY_ENV, "1")
    compiled = session()
    monkeypatch.setattr(replacement, "GROUP_NODES_FROM", 0)
    assert session() == compiled
    _without_compiled(monkeypatch)
    assert session() == compiled
    assert sum(verdicts.values()) > 0


@pytest.fixture
def judged(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """The judgements of placed simulations on their pods alone, counted by answer."""
    counts: Counter = Counter()
    original = simulate.judge_placements

    def counted(*args, **kw):
        answer = original(*args, **kw)
        counts[answer] += 1
        return answer

    monkeypatch.setattr(simulate, "judge_placements", counted)
    return counts


def test_placed_simulations_are_judged_on_their_pods_as_on_their_statement(
    monkeypatch, judged
) -> None:
    """A simulation the core places is judged by reclaim's and preempt's validators on
    its pods set as the steps leave them; under verification the statement is made too
    and its validation must give the same answer, valid or not (else it raises)."""
    monkeypatch.setenv(VERIFY_ENV, "1")
    for seed in SEEDS:
        _session(_random(seed), actions=ACTIONS)
    for name in ("reclaim-storm", "preempt-storm"):
        scenario = bench.SCENARIOS[name]
        snapshot = Snapshot(scenario.build(scenario.sizes["small"]).objects())
        _session(snapshot, config=bench.scenario_config(scenario), actions=scenario.actions)
    assert judged[True] > 0 and judged[False] > 0, judged


@pytest.mark.parametrize("seed", SEEDS[::4])
def test_sessions_decide_the_same_without_the_pods_only_judgement(seed: int, monkeypatch) -> None:
    """Refusing a placed simulation on its pods' judgement, without its statement, changes
    no decision: the same sessions with every placed simulation's statement made."""
    judging = _session(_random(seed), actions=ACTIONS)
    monkeypatch.setattr(simulate, "judge_placements", lambda *args, **kw: None)
    assert _session(_random(seed), actions=ACTIONS) == judging


def test_probes_judged_valid_on_their_pods_decide_as_with_their_statement(monkeypatch) -> None:
    """A probe short of the whole job that the core places and the validator accepts on
    its pods alone makes no statement (the search would discard it at once): the same
    sessions decide the same with every such statement made, and the probes' victims
    are the same (under verification, each judgement's preempted and moved victims are
    compared with its statement's)."""
    made: Counter = Counter()
    original = simulate.simulate

    def counted(*args, **kw):
        sim = original(*args, **kw)
        if sim.solved:
            made[sim.statement is not None] += 1
        return sim

    monkeypatch.setattr(job_solver, "simulate", counted)
    seeds = SEEDS[::2]
    without = [_session(_random(seed), actions=ACTIONS) for seed in seeds]
    assert made[False] > 0, made

    def with_statement(*args, **kw):
        return counted(*args, **{**kw, "need_statement": True})

    made.clear()
    monkeypatch.setattr(job_solver, "simulate", with_statement)
    assert [_session(_random(seed), actions=ACTIONS) for seed in seeds] == without
    assert made[False] == 0, made
    monkeypatch.setattr(job_solver, "simulate", counted)
    monkeypatch.setenv(VERIFY_ENV, "1")
    assert [_session(_random(seed), actions=ACTIONS) for seed in seeds] == without


def test_a_judgement_leaves_the_queue_versions_as_they_were(monkeypatch) -> None:
    """Judged on its pods, a placed simulation sets them back exactly: the queue versions
    and the search's state stamp come back too, so what the search kept across its
    simulations still holds.  While the validator runs, the changed queues' versions are
    ones no state had before, so no memo kept by them is read across the change."""
    from kai.actions.solvers.scenario import same_state, state_stamp

    seen: list[bool] = []
    original = simulate.judge_placements

    def checked(ssn, placed, victims, scenario, validator, **kw):
        before = dict(ssn.queue_versions), state_stamp(ssn)
        pods = {*victims, *placed}
        states = {task: (task.status, task.node, task.virtually_evicted) for task in pods}
        during: list[tuple[dict, set]] = []

        def watching(*args):
            moved = {
                task.job.queue
                for task in pods
                if states[task] != (task.status, task.node, task.virtually_evicted)
            }
            during.append((dict(ssn.queue_versions), moved))
            return validator(*args)

        answer = original(ssn, placed, victims, scenario, watching, **kw)
        assert dict(ssn.queue_versions) == before[0]
        assert same_state(state_stamp(ssn), before[1])
        versions, moved = during[0]
        changed = {name for name, v in versions.items() if v != before[0].get(name, 0)}
        assert moved and changed >= moved
        assert all(versions[name] < 0 for name in changed)  # never a state's version
        seen.append(answer)
        return answer

    monkeypatch.setattr(simulate, "judge_placements", checked)
    for seed in SEEDS[::2]:
        _session(_random(seed), actions=ACTIONS)
    assert set(seen) == {True, False}, seen


def test_bad_arrays_are_refused(monkeypatch) -> None:
    """The binding checks the indices the kernel trusts."""
    captured: list = []
    original = ReplacementCheck._arrays

    def capture(self, *args):
        arrays = original(self, *args)
        captured.append((self.picker.native, arrays))
        return arrays

    monkeypatch.setattr(ReplacementCheck, "_arrays", capture)
    for seed in SEEDS:
        _session(_random(seed), actions=ACTIONS)
        if captured:
            break
    native, arrays = captured[0]
    # Arrays in another form (not contiguous, another integer type) are converted.
    outcome, steps = native.replace_victims(arrays)[:2]
    arrays.idle = np.repeat(arrays.idle, 2, axis=0)[::2]
    arrays.t_nominated = arrays.t_nominated.astype(np.int32)
    again, again_steps = native.replace_victims(arrays)[:2]
    assert again == outcome and (steps is None) == (again_steps is None)
    if steps is not None:
        np.testing.assert_array_equal(again_steps, steps)
    arrays.t_evicted_from = np.full_like(arrays.t_evicted_from, len(arrays.within))
    with pytest.raises(ValueError, match="t_evicted_from out of range"):
        native.replace_victims(arrays)
    arrays.t_evicted_from = arrays.t_evicted_from[:0]
    with pytest.raises(ValueError, match="t_evicted_from: expected"):
        native.replace_victims(arrays)


def test_pods_bound_in_the_session_evicted_and_put_back(monkeypatch, verdicts) -> None:
    """Contested clusters (tests/test_eviction_properties.py): allocate binds pods that
    reclaim and preempt then pick as victims; the compiled re-placement evicts them to
    pending and puts them back on their vacated places as the statement does."""
    from hypothesis import given

    from tests._kai_cluster import run
    from tests.test_eviction_properties import SETTINGS, clusters

    monkeypatch.setenv(VERIFY_ENV, "1")
    bound_in_session: list[int] = []
    original = ReplacementCheck._victims

    def counted(self, victims):
        arrays = original(self, victims)
        bound_in_session.append(sum(t.status.name == "BINDING" for t in victims))
        return arrays

    monkeypatch.setattr(ReplacementCheck, "_victims", counted)
    # Placed simulations with such victims are judged on their pods too (and verified).
    judged_binding: Counter = Counter()
    judge = simulate.judge_placements

    def judged(ssn, placed, victims, scenario, validator, **kw):
        answer = judge(ssn, placed, victims, scenario, validator, **kw)
        if any(t.status.name == "BINDING" for t in victims):
            judged_binding[answer] += 1
        return answer

    monkeypatch.setattr(simulate, "judge_placements", judged)

    @SETTINGS
    @given(clusters(contested=True))
    def check(case) -> None:
        snap, _ = case
        run(snap, ["allocate", "reclaim", "preempt"])  # raises on a verdict that differs

    check()
    assert sum(bound_in_session) > 0, (bound_in_session, verdicts)  # each one verified
    assert judged_binding[None] == 0 and sum(judged_binding.values()) > 0, judged_binding


def test_the_credit_follows_every_simulations_outcome(monkeypatch) -> None:
    """Out of credit after accepted simulations, the check is asked only now and then; a
    simulation that fails (here one the check refuses) gives the credit back, and the
    check is asked again.  Sessions tell it every outcome."""
    from types import SimpleNamespace

    check = ReplacementCheck.__new__(ReplacementCheck)
    check.ssn = SimpleNamespace(cache={})  # no pending pool: an asked check cannot decide
    check.verify = False
    check._credit, check._passed = replacement.CREDIT_START, 0
    for _ in range(replacement.CREDIT_START):
        check.account(True)  # accepted
    assert check.verdict(None, None).placed is None
    assert check._passed == 1  # skipped
    check.account(False)  # failed: the check would have paid off
    check.verdict(None, None)
    assert check._passed == 1  # asked

    told: Counter = Counter()
    original = ReplacementCheck.account

    def account(self, accepted: bool) -> None:
        told[accepted] += 1
        original(self, accepted)

    monkeypatch.setattr(ReplacementCheck, "account", account)
    for seed in SEEDS[:10]:
        _session(_random(seed), actions=ACTIONS)
    assert told[True] > 0 and told[False] > 0, told


def _generated_and_contested_sessions() -> None:
    """Sessions on the generated clusters, then on contested ones (allocate binds pods
    that reclaim and preempt then pick as victims)."""
    from hypothesis import given

    from tests._kai_cluster import run
    from tests.test_eviction_properties import SETTINGS, clusters

    for seed in SEEDS:
        _session(_random(seed), actions=ACTIONS)

    @SETTINGS
    @given(clusters(contested=True))
    def contested(case) -> None:
        run(case[0], ["allocate", "reclaim", "preempt"])

    contested()


def _same_arrays(got: tuple | None, want: tuple | None) -> None:
    assert (got is None) == (want is None)
    for a, b in zip(got or (), want or (), strict=True):
        if isinstance(b, np.ndarray):
            assert a.dtype == b.dtype and a.shape == b.shape, (a, b)
            assert np.array_equal(a, b) and a.flags.c_contiguous, (a, b)
        else:
            assert a == b


@pytest.mark.skipif(_fast.module("layout") is None, reason="kai._fast.layout is not built")
def test_compiled_layout_is_the_reference(monkeypatch) -> None:
    """kai._fast.layout lays every simulation's participants and victims out in the very
    arrays the Python reference does, and refuses the same victims."""

    layout = _fast.module("layout")
    compiled_lay_out, compiled_victims = layout.lay_out, layout.victims
    seen: Counter = Counter()

    def lay_out(*args):
        got = compiled_lay_out(*args)
        _same_arrays(got, replacement.lay_out(*args))
        seen["layouts"] += 1
        return got

    def victims(tasks, kinds, *rest):
        want = replacement.victim_arrays(tasks, dict(kinds), *rest)
        got = compiled_victims(tasks, kinds, *rest)
        _same_arrays(got, want)
        seen["refused" if got is None else "victims"] += 1
        return got

    compiled_gather = layout.gather

    def gather(*args):
        got = compiled_gather(*args)  # makes the slots the reference then finds
        want = replacement.gather(*args)
        if got is None or got is args[-1]:
            assert got is want
            seen["gathered whole" if got is None else "gathered refused"] += 1
            return got
        parts, skipped, *arrays = got
        assert parts == want[0] and all(a is b for a, b in zip(parts, want[0]))
        assert sorted(skipped) == sorted(want[1])
        _same_arrays(tuple(arrays), tuple(want[2:]))
        seen["gathered"] += 1
        return got

    monkeypatch.setattr(layout, "lay_out", lay_out)
    monkeypatch.setattr(layout, "victims", victims)
    compiled_pack = layout.pack_victims

    def pack_victims(arrays):
        got = compiled_pack(arrays)
        _same_arrays((got,), (replacement.pack_victims(arrays),))
        seen["packed"] += 1
        return got

    monkeypatch.setattr(layout, "gather", gather)
    monkeypatch.setattr(layout, "pack_victims", pack_victims)
    _generated_and_contested_sessions()
    assert seen["layouts"] > 100 and seen["victims"] > 100 and seen["refused"] > 0, seen
    assert seen["gathered"] > 100 and seen["gathered whole"] > 0 and seen["packed"] > 100, seen


@pytest.mark.parametrize("seed", SEEDS[::8])
def test_sessions_decide_the_same_with_the_python_layout(seed: int) -> None:
    compiled = _session(_random(seed), actions=ACTIONS)
    with _fast.pure_python():
        assert _session(_random(seed), actions=ACTIONS) == compiled


def test_probe_layout_gives_the_scenarios_arrays_laid_out_whole(monkeypatch) -> None:
    """Each scenario put together from its probe's layout (batches laid out once per
    probe) holds the very arrays, and so gets the verdict, of the scenario laid out whole
    from its victims; scenarios it does not take (a job's two victim groups, the
    preemptor's own pods) are laid out whole."""

    seen: Counter = Counter()
    original = ReplacementCheck._probe_arrays

    def both(self, scenario, feasible, base):
        try:
            got = original(self, scenario, feasible, base)
        except replacement._Unsupported:
            got = "refused"
        try:
            want = self._whole_arrays(scenario, feasible, base)
        except replacement._Unsupported:
            want = "refused"
        if got is None:
            seen["whole"] += 1
        elif got == "refused" or want == "refused":
            assert got == want
            seen["refused"] += 1
        else:
            for name, value in vars(want).items():
                _same_arrays((getattr(got, name),), (value,))
            seen[min(len(scenario.batches), 2), bool(scenario.recorded)] += 1
        if got == "refused":
            raise replacement._Unsupported
        return got

    monkeypatch.setattr(ReplacementCheck, "_probe_arrays", both)
    monkeypatch.setenv(VERIFY_ENV, "1")  # every simulation laid out (none sat out)
    _generated_and_contested_sessions()
    # One batch and several, with recorded victims and without, each exercised.
    for key in [(0, True), (1, False), (2, False), (1, True), (2, True)]:
        assert seen[key] > 0, seen
    assert seen["refused"] > 0 and seen["whole"] > 0, seen


@pytest.mark.parametrize("order", ["ascending", "descending", "one gap", "random"])
def test_ranks_compare_as_their_pairs_in_any_order_of_arrival(order: str) -> None:
    """Participants are ordered by their ranks instead of their (leaf, key) pairs: ranks
    given in any order (pairs arriving in descending order, or many into one gap, which
    use the floats up) compare as the pairs do, and equal pairs share one."""
    rng = np.random.default_rng(7)
    pairs = [(leaf, (float(k), f"job-{k}")) for leaf in range(3) for k in range(2000)]
    if order == "descending":
        pairs.reverse()
    elif order == "one gap":  # each new pair just above the lowest, below the last one
        pairs = [pairs[0], pairs[-1], *reversed(pairs[1:-1])]
    elif order == "random":
        pairs = [pairs[i] for i in rng.permutation(len(pairs))]
    check = ReplacementCheck.__new__(ReplacementCheck)
    check._ranked, check._ranks = [], []
    ranks = {pair: check._rank(*pair) for pair in pairs}
    assert all(check._rank(*pair) is ranks[pair] for pair in pairs[:50])  # equal: shared
    values = [ranks[pair].value for pair in sorted(ranks)]
    assert all(a < b for a, b in zip(values, values[1:]))


def _as_a_replay_runs_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sessions whose running pods name no node, as a replay's (kai.replay) do: a pod
    that consolidation moves, or that allocate pipelines, then goes back to pending when
    a later action evicts it, leaving its places behind."""
    from kai.framework.session import Session

    opened = Session.open

    def open_unnamed(self, plugins):
        for job in self.jobs.values():
            for task in job.tasks:
                task.pod.node_name = None
        return opened(self, plugins)

    monkeypatch.setattr(Session, "open", open_unnamed)


def test_victims_pipelined_in_the_session_are_re_placed_as_the_statement_does(
    monkeypatch,
) -> None:
    """Victims an earlier action pipelined (moved by consolidation, holding their old
    place; or pipelined, with a vacated place behind them) are evicted back to pending
    and put back as the statement does: every simulation is checked, down to the node
    rows the core ends on; and the sessions decide the same without the core."""
    _as_a_replay_runs_them(monkeypatch)
    monkeypatch.setenv(VERIFY_ENV, "1")
    pipelined: Counter = Counter()
    original = ReplacementCheck._victims

    def counted(self, victims):
        arrays = original(self, victims)
        held, vacated = self.ssn.nodes.held, self.ssn.nodes.vacated
        for task in victims:
            if task.status.name == "PIPELINED":
                pipelined["moved" if task in held else "vacated" if task in vacated else "new"] += 1
        return arrays

    monkeypatch.setattr(ReplacementCheck, "_victims", counted)
    actions = ["allocate", "consolidation", "reclaim", "preempt"]
    compiled = [_session(_random(seed), actions=actions) for seed in SEEDS]
    assert min(pipelined["moved"], pipelined["vacated"], pipelined["new"]) > 0, pipelined
    monkeypatch.delenv(VERIFY_ENV)
    _without_compiled(monkeypatch)
    assert [_session(_random(seed), actions=actions) for seed in SEEDS] == compiled
