"""kai's scale scenarios: cluster fill, reclaim/preempt storms, load-aware scoring and
fractional packing.  Small by default; ``KAI_BENCH_SIZE=large`` gives the sizes of the
targets (10,000-node fill, 100,000 pods, 5,000-node storms, 10,000-node load-aware).
"""

from __future__ import annotations

import pytest

from conftest import bench_session, require_actions, size_arg
from kai.bench import SCENARIOS, scenario_config
from kai.bench_clusters import cluster_fill, fractional, storm
from kai.framework.plugin import plugin_names
from kai.plugins import register_builtins


def test_cluster_fill(benchmark):
    bench_session(benchmark, cluster_fill(size_arg("fill")), ["allocate"], rounds=1)


def test_fill_100k(benchmark):
    n = size_arg("fill-100k")
    bench_session(
        benchmark, cluster_fill(n, pods=n * 10, gang_fraction=0.0), ["allocate"], rounds=1
    )


@pytest.mark.parametrize("kind", ["reclaim", "preempt"])
def test_storm(benchmark, kind):
    require_actions(kind)
    bench_session(
        benchmark, storm(size_arg(f"{kind}-storm"), 1000, kind=kind), ["allocate", kind], rounds=1
    )


def test_loadaware(benchmark):
    register_builtins()
    if "loadaware" not in plugin_names():
        pytest.skip("plugin loadaware not registered yet")
    n = size_arg("loadaware")
    bench_session(
        benchmark,
        cluster_fill(n, pods=n, gang_fraction=0.0),
        ["allocate"],
        config=scenario_config(SCENARIOS["loadaware"]),
        rounds=1,
    )


def test_fractional(benchmark):
    bench_session(benchmark, fractional(size_arg("fractional")), ["allocate"])
