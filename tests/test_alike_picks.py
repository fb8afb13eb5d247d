"""Node choices for many pods placed one after another (kai.actions.fast_allocate.AlikePicks)
are the single picks' choices.

A probe that places a large job's pods picks through node groups kept by the compiled
chooser, told after each placement which nodes changed.  On random clusters (fixed
seeds) every pick is compared with the picker's single pick on the same matrices, with
pods evicted behind its back now and then; and whole sessions whose simulations place
every probe's pods through the groups decide as they do without them.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

import kai
import kai.bench as bench
from kai.actions import fast_allocate
from kai.actions.fast_allocate import AlikePicks, NodePicker
from kai.actions.solvers.simulate import _nodes_of
from kai.bench_clusters import NOW, random_cluster
from kai.config import SchedulerConfig
from kai.engine import Snapshot, parse_now, run_session
from kai.framework.session import Session
from tests.test_fast_allocate import _cluster as plain_cluster
from tests.test_fast_allocate_shared import NO_PICKER
from tests.test_fast_allocate_shared import _cluster as shared_cluster

# Under CI the picker must be built: tests/test_fast.py fails without it.
pytestmark = pytest.mark.skipif(NO_PICKER, reason="no compiled node picker")

SEEDS = range(0, 48)


def _open(objs, monkeypatch: pytest.MonkeyPatch) -> Session:
    monkeypatch.setenv(fast_allocate.ENV_VAR, "1")
    snapshot = kai.Snapshot.from_objects(objs)
    config = SchedulerConfig.from_object(snapshot.config)
    ssn = Session(snapshot.state(), config, now=parse_now(NOW), backend="native")
    ssn.open(config.build_plugins())
    return ssn


def _place_all(seed: int, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """Pipeline every pending pod of cluster ``seed`` (three times over, rolled back in
    between) through one run of alike picks, each pick checked against a single pick;
    the picks made through the groups, and the pods placed."""
    rng = random.Random(seed)
    objs = shared_cluster(seed) if seed % 3 else plain_cluster(seed)[0]
    ssn = _open(objs, monkeypatch)
    picker = NodePicker.for_session(ssn)
    assert picker is not None
    n = len(ssn.nodes)
    pending = [t for t in ssn.state.tasks if t.status.value == "Pending"]
    running = [t for t in ssn.state.tasks if t.node >= 0 and t.status.value == "Running"]
    grouped = placed = 0
    for _ in range(3):
        within = np.array([rng.random() < 0.8 for _ in range(n)])
        alike = AlikePicks(picker, within)
        stmt = ssn.statement()
        ops = stmt.ops
        for task in rng.sample(pending, len(pending)):
            single = picker.pick(task, task.job, within)
            got = picker.pick(task, task.job, within, alike)
            assert got == single, task.key
            grouped += alike.native is not None and task.gpu_fraction <= 0
            if got is None or got[0] < 0:
                continue
            start, version = len(ops), ssn.nodes.version
            stmt.pipeline(task, got[0])
            alike.placed(_nodes_of(ops[start:]), since=version)
            placed += 1
            if running and rng.random() < 0.1:
                # A change the picks are not told of: they must start afresh.
                victim = rng.choice(running)
                if victim.status.value == "Running":
                    stmt.evict(victim, "test")
        stmt.discard()
    return grouped, placed


@pytest.mark.parametrize("seed", SEEDS)
def test_alike_picks_choose_as_single_picks(seed: int, monkeypatch) -> None:
    _place_all(seed, monkeypatch)


def test_alike_picks_checks_go_through_the_groups(monkeypatch) -> None:
    counts = [_place_all(seed, monkeypatch) for seed in SEEDS]
    assert sum(g for g, _ in counts) > 500
    assert sum(p for _, p in counts) > 500


def _sessions(group_from: int, monkeypatch: pytest.MonkeyPatch, make) -> dict:
    monkeypatch.setattr(fast_allocate, "GROUP_NODES_FROM", group_from)
    return make()


@pytest.mark.parametrize("seed", range(0, 40, 3))
def test_sessions_decide_the_same_with_grouped_probes(seed: int, monkeypatch) -> None:
    """Every probe placed through the groups (threshold 0) or none (no threshold)."""
    actions = ["allocate", "consolidation", "reclaim", "preempt", "backfill"]

    def make() -> dict:
        builder = random_cluster(seed, nodes=6 + seed % 5, jobs=30 + seed)
        snapshot = Snapshot.from_objects(builder.dicts())
        return run_session(snapshot, now=NOW, backend="native", actions=actions).to_json(
            explain=True
        )

    assert _sessions(0, monkeypatch, make) == _sessions(10**9, monkeypatch, make)


def test_large_job_reclaim_decides_the_same_with_grouped_probes(monkeypatch) -> None:
    """A job of 50 pods of 8 GPUs reclaiming 400 single-GPU pods: its larger probes
    place through the groups by default."""
    scenario = bench.SCENARIOS["kai-reclaim-large-jobs"]
    config = bench.scenario_config(scenario)

    def make() -> dict:
        snapshot = Snapshot(scenario.build(100).objects())
        result = run_session(
            snapshot, now=NOW, backend="native", config=config, actions=scenario.actions
        )
        return result.to_json(explain=True)

    grouped = _sessions(fast_allocate.GROUP_NODES_FROM, monkeypatch, make)
    assert grouped == _sessions(10**9, monkeypatch, make)
    evicted = [d for d in grouped["decisions"] if d["type"] == "evict"]
    assert len(evicted) == 400
