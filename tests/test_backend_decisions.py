"""Every kernel backend makes the same scheduling decisions.

Small randomized clusters (fixed seeds: running, pending, gang, elastic and
fractional jobs over a queue tree) are scheduled with each available backend; the
whole session result (decisions, pod states, pod-group reasons, queue shares) must be
identical.
"""

from __future__ import annotations

import pytest

from kai.actions import action_names, register_builtins
from kai.backends import available_backends
from kai.bench_clusters import NOW, random_cluster
from kai.engine import Snapshot, run_session

BACKENDS = available_backends()
SEEDS = range(12)
FULL = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction", "backfill")


def _actions() -> list[str]:
    register_builtins()
    known = set(action_names())
    return [a for a in FULL if a in known]


def _result(seed: int, backend: str, actions: list[str]) -> dict:
    builder = random_cluster(seed, nodes=10 + seed % 5, jobs=25 + seed)
    snap = Snapshot.from_objects(builder.dicts())
    return run_session(snap, actions=actions, now=NOW, backend=backend).to_json(explain=True)


@pytest.mark.skipif(len(BACKENDS) < 2, reason="only one backend available")
@pytest.mark.parametrize("seed", SEEDS)
def test_backends_make_identical_decisions(seed: int) -> None:
    actions = _actions()
    reference = _result(seed, "python", actions)
    for backend in BACKENDS:
        if backend == "python":
            continue
        assert _result(seed, backend, actions) == reference, f"backend {backend}, seed {seed}"


@pytest.mark.parametrize("seed", [0, 5])
def test_allocate_only_identical_and_nontrivial(seed: int) -> None:
    results = {b: _result(seed, b, ["allocate"]) for b in BACKENDS}
    reference = results["python"]
    assert any(d["type"] == "bind" for d in reference["decisions"])  # the cluster is not trivial
    for backend, result in results.items():
        assert result == reference, backend


def test_env_var_selects_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    builder = random_cluster(3)
    snap = Snapshot(builder.objects())
    outs = []
    for backend in BACKENDS:
        monkeypatch.setenv("KAI_BACKEND", backend)
        outs.append(run_session(snap, actions=["allocate"], now=NOW).to_json())
    assert all(o == outs[0] for o in outs)


def test_dict_and_object_snapshots_agree() -> None:
    """The benchmark generators' two emitters describe the same cluster."""
    builder = random_cluster(7)
    a = run_session(Snapshot.from_objects(builder.dicts()), actions=_actions(), now=NOW)
    b = run_session(Snapshot(builder.objects()), actions=_actions(), now=NOW)
    assert a.to_json() == b.to_json()
