"""The victim solver: kernels (identical on every backend), eviction chunks, rollback."""

from __future__ import annotations

import numpy as np
import pytest

import kai
from kai.backends import available_backends, get_backend
from kai.solvers import SearchLimits
from tests._kai_cluster import J, T, build, decisions, queue, statuses

BACKENDS = available_backends()


def _ref_cases(seed: int, count: int):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        n = int(rng.integers(0, 12))
        k = int(rng.integers(0, 6))
        cap = rng.choice([0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 8.0], size=n)
        req = rng.choice([0.0, 0.5, 1.0, 2.0, 4.0], size=k)
        avail = rng.choice([0.0, 1.0, 2.0, 4.0, 8.0], size=(n, 5))
        reqs = rng.choice([0.0, 1.0, 2.0, 4.0], size=(k, 5))
        yield cap, req, avail, reqs


@pytest.mark.parametrize("backend", BACKENDS)
def test_kernels_match_python_reference(backend: str) -> None:
    ref, be = get_backend("python"), get_backend(backend)
    for cap, req, avail, reqs in _ref_cases(7, 300):
        assert be.idle_gpus_fit(cap, req) == ref.idle_gpus_fit(cap, req)
        assert be.scenario_fit(avail, reqs) == ref.scenario_fit(avail, reqs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_idle_gpus_fit_semantics(backend: str) -> None:
    be = get_backend(backend)
    assert be.idle_gpus_fit(np.array([1.0, 4.0, 2.0]), np.array([2.0, 2.0]))
    # only the top-2 nodes count: 3 + 3 do not take 4 + 2 + ... but 4 fits on none
    assert not be.idle_gpus_fit(np.array([3.0, 3.0, 1.0]), np.array([4.0, 1.0]))
    assert be.idle_gpus_fit(np.zeros(3), np.array([0.0]))  # a 0-GPU task always passes
    assert be.idle_gpus_fit(np.zeros(0), np.zeros(0))
    assert be.idle_gpus_fit(np.array([8.0]), np.array([4.0, 4.0]))
    assert not be.idle_gpus_fit(np.array([8.0, 1.0]), np.array([4.0, 4.0, 2.0]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_scenario_fit_semantics(backend: str) -> None:
    be = get_backend(backend)
    avail = np.array([[4.0, 4.0, 2.0, 10.0], [4.0, 4.0, 2.0, 10.0]])
    assert be.scenario_fit(avail, np.array([[1.0, 1.0, 2.0, 1.0], [1.0, 1.0, 2.0, 1.0]]))
    assert not be.scenario_fit(avail, np.array([[1.0, 1.0, 3.0, 1.0]]))
    assert not be.scenario_fit(avail, np.array([[5.0, 0.0, 0.0, 1.0]]))  # cpu binds
    with pytest.raises(ValueError):
        be.scenario_fit(avail, np.array([1.0, 2.0]))


def _session(snap):
    from kai.config import SchedulerConfig
    from kai.engine import parse_now
    from kai.framework.session import Session
    from tests._kai_cluster import NOW

    config = SchedulerConfig.from_object(None, actions=["reclaim"])
    ssn = Session(snap.state(), config, now=parse_now(NOW))
    ssn.open(config.build_plugins())
    return ssn


def test_tasks_to_evict_peels_elastic_then_core() -> None:
    from kai.solvers.scenario import job_view, tasks_to_evict

    snap = build(
        {"n0": 4},
        [queue("q0", 4)],
        [J("e", "q0", [T("Running", "n0") for _ in range(4)], min_member=2)],
    )
    ssn = _session(snap)
    job = ssn.jobs["ns/e"]
    view = job_view(job, job.tasks)
    seen = []
    while True:
        tasks, more = tasks_to_evict(ssn, view)
        if not tasks:
            break
        seen.append(sorted(t.name for t in tasks))
        view = job_view(view, [t for t in view.tasks if t not in tasks])
        if not more:
            break
    assert seen == [["e-3"], ["e-2"], ["e-0", "e-1"]]


def test_semi_preemptible_core_is_never_a_victim() -> None:
    from kai.solvers.scenario import job_view, tasks_to_evict

    snap = build(
        {"n0": 4},
        [queue("q0", 4)],
        [
            J(
                "s",
                "q0",
                [T("Running", "n0") for _ in range(3)],
                min_member=2,
                preemptibility="semi-preemptible",
            )
        ],
    )
    ssn = _session(snap)
    job = ssn.jobs["ns/s"]
    tasks, _ = tasks_to_evict(ssn, job_view(job, job.tasks))
    assert [t.name for t in tasks] == ["s-2"]
    rest = job_view(job, [t for t in job.tasks if t not in tasks])
    assert tasks_to_evict(ssn, rest) == ([], False)


def test_failed_scenario_leaves_nothing_behind() -> None:
    from kai.solvers.scenario import Scenario, VictimBatch
    from kai.solvers.simulate import simulate

    snap = build(
        {"n0": 2},
        [queue("q0", 1), queue("q1", 1)],
        [J("a", "q0", [T("Running", "n0")]), J("big", "q1", [T()], gpus=2)],
    )
    ssn = _session(snap)
    before = (ssn.nodes.idle.copy(), ssn.nodes.releasing.copy())
    statuses_before = {t.key: (t.status, t.node) for t in ssn.state.tasks}
    victim = ssn.jobs["ns/a"]
    pending = ssn.jobs["ns/big"]
    sc = Scenario(
        pending, list(pending.tasks), [], [VictimBatch(victim, list(victim.tasks), frozenset({0}))]
    )
    sim = simulate(ssn, sc, np.ones(1, dtype=bool), lambda *a: True, "reclaim")
    assert not sim.solved
    assert np.array_equal(ssn.nodes.idle, before[0])
    assert np.array_equal(ssn.nodes.releasing, before[1])
    assert {t.key: (t.status, t.node) for t in ssn.state.tasks} == statuses_before
    share = ssn.cache["proportion"].shares["q0"]
    assert share.allocated[2] == 1.0


def test_statement_rollback_restores_unevicted_victims() -> None:
    snap = build({"n0": 2}, [queue("q0", 2)], [J("a", "q0", [T("Running", "n0")])])
    ssn = _session(snap)
    task = ssn.jobs["ns/a"].tasks[0]
    stmt = ssn.statement()
    stmt.evict(task, "test")
    cp = stmt.checkpoint()
    stmt.pipeline(task, task.node)  # back where it was: un-evicted
    assert task.status.value == "Running"
    stmt.rollback(cp)
    assert task.status.value == "Releasing"
    stmt.discard()
    assert task.status.value == "Running" and ssn.nodes.releasing[0, 2] == 0


def test_no_generator_means_no_eviction() -> None:
    import kai
    from kai.api.objects import PluginOption
    from kai.config import SchedulerConfig

    snap = build(
        {"n0": 1},
        [queue("q0", 1)],
        [J("low", "q0", [T("Running", "n0")], priority=10), J("high", "q0", [T()], priority=90)],
    )
    base = SchedulerConfig.from_object(None, actions=["preempt"])
    tiers = [[p for p in base.tiers[0] if not p.name.startswith("sg-")]]
    config = SchedulerConfig(["preempt"], tiers)
    assert decisions(kai.run_session(snap, config=config)) == []
    tiers = [[*tiers[0], PluginOption("sg-multinodegang")]]
    config = SchedulerConfig(["preempt"], tiers)
    assert len(decisions(kai.run_session(snap, config=config))) == 2


def test_scenario_budget_stops_search() -> None:
    from kai.actions.preempt import preempt

    snap = build(
        {"n0": 1},
        [queue("q0", 1)],
        [J("low", "q0", [T("Running", "n0")], priority=10), J("high", "q0", [T()], priority=90)],
    )
    ssn = _session(snap)
    ssn.cache["solver.limits"] = SearchLimits(max_scenarios=0)
    ssn.current_action = "preempt"
    preempt(ssn)
    assert [d.type for d in ssn.decisions] == ["evict", "pipeline"]
    ssn = _session(snap)
    limits = SearchLimits(generators={"default": 1e-12})
    ssn.cache["solver.limits"] = limits
    preempt(ssn)
    assert ssn.decisions == []


def test_multi_node_gang_reclaim_spans_nodes() -> None:
    snap = build(
        {"n0": 2, "n1": 2, "n2": 2},
        [queue("q0", 2), queue("q1", 4)],
        [J(f"r{i}", "q0", [T("Running", f"n{i % 3}")]) for i in range(6)]
        + [J("g", "q1", [T(), T()], gpus=2)],
    )
    import kai

    result = kai.run_session(snap, actions=["reclaim"])
    st = statuses(result)
    assert st["g-0"][0] == st["g-1"][0] == "Pipelined"
    assert st["g-0"][1] != st["g-1"][1]
    assert len(decisions(result, "evict")) == 4


def test_scenario_search_budgets_come_from_the_configuration():
    from kai.api.errors import ConfigError
    from kai.snapshot.loader import load_objects

    def config(budgets):
        objs = load_objects(
            [
                {
                    "apiVersion": "kai.scheduler/v1",
                    "kind": "SchedulerConfiguration",
                    "scenarioSearchBudgets": budgets,
                }
            ]
        )
        return kai.SchedulerConfig.from_object(objs.config)

    limits = config(
        {
            "maxActionSearchDuration": {"reclaim": "10s"},
            "maxJobSearchDuration": "2s",
            "maxGeneratorSearchDuration": {"NodeLocalGreedy": "1s"},
        }
    ).search_limits
    assert limits.action == {"default": 300.0, "reclaim": 10.0}
    assert limits.job == 2.0
    assert limits.generators["NodeLocalGreedy"] == 1.0
    assert limits.generators["MultiNodeGang"] == 120.0  # KAI's default kept
    with pytest.raises(ConfigError, match="maxGeneratorSearchDuration"):
        config({"maxGeneratorSearchDuration": {"Bogus": "1s"}})
    with pytest.raises(kai.InputError, match="maxJobSearchDuration"):
        config({"maxJobSearchDuration": "-1s"})
