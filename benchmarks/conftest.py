"""Shared fixtures of the pytest-benchmark suites.

Sizes are small by default so ``pytest benchmarks/ --benchmark-only`` takes a few
minutes; ``KAI_BENCH_SIZE=medium`` or ``large`` (or a node count) runs the big ones.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kai.actions import action_names, register_builtins  # noqa: E402
from kai.bench import SCENARIOS  # noqa: E402
from kai.bench_clusters import NOW  # noqa: E402
from kai.engine import Snapshot, run_session  # noqa: E402
from kai.memory import retain_memory  # noqa: E402

# As ``kai bench`` and the live scheduler run: freed session memory is kept for reuse.
retain_memory()

SIZE = os.environ.get("KAI_BENCH_SIZE", "small")


def size_arg(scenario: str, size: str = SIZE):
    sizes = SCENARIOS[scenario].sizes
    return sizes[size] if size in sizes else int(size)


def require_actions(*names: str) -> None:
    register_builtins()
    missing = [n for n in names if n not in action_names()]
    if missing:
        pytest.skip(f"action(s) not registered yet: {', '.join(missing)}")


def bench_session(benchmark, builder, actions, *, backend=None, config=None, rounds=3):
    """Time whole sessions (state build + plugins + actions) on a prebuilt snapshot."""
    snap = Snapshot(builder.objects())
    benchmark.extra_info.update(
        nodes=len(builder.nodes), pods=builder.pod_count, pending=builder.pending_pod_count
    )
    result = benchmark.pedantic(
        lambda: run_session(snap, config=config, actions=actions, now=NOW, backend=backend),
        rounds=rounds,
        iterations=1,
        warmup_rounds=1,
    )
    benchmark.extra_info["placed"] = sum(
        1 for d in result.decisions if d.type in ("bind", "pipeline")
    )
    benchmark.extra_info["evicted"] = sum(1 for d in result.decisions if d.type == "evict")
    return result


@pytest.fixture
def size() -> str:
    return SIZE
