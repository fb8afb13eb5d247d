"""Numba backend: the pure-Python fallback when the compiled extension is unavailable.

Importing this module is cheap: numba itself and the ``@njit(cache=True)`` kernels
(:mod:`kai.backends._numba_kernels`) are imported on the first kernel call, and each kernel
is compiled (or loaded from numba's on-disk cache) on its first use.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from kai.backends._common import (
    EPS,
    F64,
    I64,
    SOLVER_GPU_COLUMN,
    BoolArray,
    StatelessIncrementalFit,
    divide_tree,
    prep_binpack,
    prep_dominant_share,
    prep_fair_share,
    prep_fair_share_tree,
    prep_fit_mask,
    prep_idle_gpus_fit,
    prep_loadaware_filter,
    prep_loadaware_score,
    prep_scenario_fit,
    prep_scores_mask,
    prep_spread,
)

NAME = "numba"


@functools.cache
def _kernels() -> ModuleType:
    from kai.backends import _numba_kernels

    return _numba_kernels


def allocate_loop(inputs: dict[str, Any]) -> dict[str, Any]:
    """The fused allocate loop (:mod:`kai.backends._numba_allocate`), compiled on first use."""
    from kai.backends._numba_allocate import allocate_loop as loop

    return loop(inputs)


def fit_mask(request: Any, idle: Any, releasing: Any) -> tuple[BoolArray, BoolArray]:
    return _kernels().fit_mask(*prep_fit_mask(request, idle, releasing), EPS)


def binpack_score(non_allocated: Any, allocatable: Any, candidates: Any, max_score: float) -> F64:
    return _kernels().binpack_score(
        *prep_binpack(non_allocated, allocatable, candidates), float(max_score)
    )


def spread_score(non_allocated: Any, capacity: Any) -> F64:
    return _kernels().spread_score(*prep_spread(non_allocated, capacity))


def best_node(scores: Any, mask: Any) -> int:
    return int(_kernels().best_node(*prep_scores_mask(scores, mask)))


def ordered_nodes(scores: Any, mask: Any) -> I64:
    return _kernels().ordered_nodes(*prep_scores_mask(scores, mask))


def dominant_share(allocated: Any, total: Any) -> F64:
    return _kernels().dominant_share(*prep_dominant_share(allocated, total))


def divide_fair_share(
    total: Any,
    deserved: Any,
    limit: Any,
    weight: Any,
    request: Any,
    priority: Any,
    rank: Any,
    k_value: Any,
    usage: Any,
) -> F64:
    return _kernels().divide_fair_share(
        *prep_fair_share(total, deserved, limit, weight, request, priority, rank, k_value, usage)
    )


def divide_fair_share_tree(
    total: Any,
    parent: Any,
    deserved: Any,
    limit: Any,
    weight: Any,
    request: Any,
    priority: Any,
    rank: Any,
    k_value: Any,
    usage: Any,
) -> F64:
    return divide_tree(
        _kernels().divide_fair_share,
        *prep_fair_share_tree(
            total, parent, deserved, limit, weight, request, priority, rank, k_value, usage
        ),
    )


def loadaware_filter(
    existing: Any, incoming: Any, allocatable: Any, thresholds: Any, state: Any
) -> tuple[BoolArray, I64]:
    return _kernels().loadaware_filter(
        *prep_loadaware_filter(existing, incoming, allocatable, thresholds, state)
    )


def loadaware_score(
    existing: Any, incoming: Any, allocatable: Any, weights: Any, dominant_weight: Any, valid: Any
) -> I64:
    return _kernels().loadaware_score(
        *prep_loadaware_score(existing, incoming, allocatable, weights, dominant_weight, valid)
    )


def idle_gpus_fit(capacity: Any, requests: Any) -> bool:
    return bool(_kernels().idle_gpus_fit(*prep_idle_gpus_fit(capacity, requests), EPS))


def scenario_fit(available: Any, requests: Any) -> bool:
    avail, req = prep_scenario_fit(available, requests)
    return bool(_kernels().scenario_fit(avail, req, SOLVER_GPU_COLUMN, EPS))


def incremental_fit(capacity: Any, available: Any, gpu_requests: Any, requests: Any) -> Any:
    return StatelessIncrementalFit(
        idle_gpus_fit, scenario_fit, capacity, available, gpu_requests, requests
    )
