"""The same session on each kernel backend (native, numba, plain Python).

numba's kernels are compiled (or loaded from its cache) in the warm-up round, so the
timed rounds compare steady states; ``kai bench`` reports the warm-up apart.
"""

from __future__ import annotations

import pytest

from conftest import bench_session, size_arg
from kai.backends import available_backends
from kai.bench_clusters import cluster_fill


@pytest.mark.parametrize("backend", available_backends())
def test_fill_by_backend(benchmark, backend):
    bench_session(
        benchmark, cluster_fill(size_arg("fill")), ["allocate"], backend=backend, rounds=2
    )
