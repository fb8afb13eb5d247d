"""Native backend: thin wrapper over the compiled extension :mod:`kai._native` (C++).

Arguments are validated/converted by the same helpers as the other backends, so error
messages match; the C++ side re-checks shapes and releases the GIL while computing.
Importing this module raises ImportError when the extension is not built.
"""

from __future__ import annotations

from typing import Any

from kai import _native
from kai.backends._common import (
    F64,
    I64,
    SOLVER_GPU_COLUMN,
    BoolArray,
    f64_1d,
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

NAME = "native"


#: The fused allocate loop (native/src/allocate.cpp).
allocate_loop = getattr(_native, "allocate_loop", None)
#: The loop's node choice for one task at a time (kai.actions.fast_allocate.NodePicker).
node_picker = getattr(_native, "NodePicker", None)
#: Plugins besides the default set whose kernel form that loop consumes.
ALLOCATE_LOOP_FEATURES = ("loadaware", "shared-gpu") if allocate_loop is not None else ()


def fit_mask(request: Any, idle: Any, releasing: Any) -> tuple[BoolArray, BoolArray]:
    return _native.fit_mask(*prep_fit_mask(request, idle, releasing))


def binpack_score(non_allocated: Any, allocatable: Any, candidates: Any, max_score: float) -> F64:
    return _native.binpack_score(
        *prep_binpack(non_allocated, allocatable, candidates), float(max_score)
    )


def spread_score(non_allocated: Any, capacity: Any) -> F64:
    return _native.spread_score(*prep_spread(non_allocated, capacity))


def best_node(scores: Any, mask: Any) -> int:
    return _native.best_node(*prep_scores_mask(scores, mask))


def ordered_nodes(scores: Any, mask: Any) -> I64:
    return _native.ordered_nodes(*prep_scores_mask(scores, mask))


def dominant_share(allocated: Any, total: Any) -> F64:
    return _native.dominant_share(*prep_dominant_share(allocated, total))


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
    return _native.divide_fair_share(
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
    return _native.divide_fair_share_tree(
        *prep_fair_share_tree(
            total, parent, deserved, limit, weight, request, priority, rank, k_value, usage
        )
    )


def loadaware_filter(
    existing: Any, incoming: Any, allocatable: Any, thresholds: Any, state: Any
) -> tuple[BoolArray, I64]:
    return _native.loadaware_filter(
        *prep_loadaware_filter(existing, incoming, allocatable, thresholds, state)
    )


def loadaware_score(
    existing: Any, incoming: Any, allocatable: Any, weights: Any, dominant_weight: Any, valid: Any
) -> I64:
    return _native.loadaware_score(
        *prep_loadaware_score(existing, incoming, allocatable, weights, dominant_weight, valid)
    )


def idle_gpus_fit(capacity: Any, requests: Any) -> bool:
    return bool(_native.idle_gpus_fit(*prep_idle_gpus_fit(capacity, requests)))


def scenario_fit(available: Any, requests: Any) -> bool:
    avail, req = prep_scenario_fit(available, requests)
    return bool(_native.scenario_fit(avail, req, SOLVER_GPU_COLUMN))


def incremental_fit(capacity: Any, available: Any, gpu_requests: Any, requests: Any) -> Any:
    avail, req = prep_scenario_fit(available, requests)
    return _native.IncrementalFit(
        f64_1d(capacity, "capacity"),
        avail,
        f64_1d(gpu_requests, "gpu_requests"),
        req,
        SOLVER_GPU_COLUMN,
    )
