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
    BoolArray,
    prep_binpack,
    prep_dominant_share,
    prep_fair_share,
    prep_fit_mask,
    prep_scores_mask,
    prep_spread,
)

NAME = "native"


def fit_mask(request: Any, idle: Any, releasing: Any) -> tuple[BoolArray, BoolArray]:
    return _native.fit_mask(*prep_fit_mask(request, idle, releasing))


def binpack_score(non_allocated: Any, allocatable: Any, candidates: Any) -> F64:
    return _native.binpack_score(*prep_binpack(non_allocated, allocatable, candidates))


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
