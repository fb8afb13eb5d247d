"""Cluster generators of the benchmarks.

The code lives in :mod:`kai.bench_clusters` so that ``kai bench`` works from an
installed wheel too; this module re-exports it for the pytest-benchmark suites.
"""

from kai.bench_clusters import *  # noqa: F401,F403
from kai.bench_clusters import (  # noqa: F401
    KAI_SIZES,
    NOW,
    ClusterBuilder,
    cluster_fill,
    fractional,
    kai_reclaim_large_jobs,
    kai_reclaim_many_single_gpu,
    kai_topology,
    random_cluster,
    storm,
)
