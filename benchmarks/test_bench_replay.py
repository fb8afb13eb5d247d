"""kai replay: a day of a synthetic workload, at 10-second periods.

Small by default (20 nodes); ``KAI_BENCH_SIZE=medium`` (100 nodes) or ``large``
(1,000 nodes, the scale of ``replay_week.py``), or a node count.  The timed figure is
the whole replay; ``extra_info`` has the sessions and the cost per session.
"""

from __future__ import annotations

import os

from replay_week import QUEUES, cluster

from kai.replay import Replay, WorkloadSpec, generate
from kai.snapshot.loader import load_objects

NODES = {"small": 20, "medium": 100, "large": 1000}
SIZE = os.environ.get("KAI_BENCH_SIZE", "small")


def test_replay_day(benchmark):
    nodes = NODES[SIZE] if SIZE in NODES else int(SIZE)
    objects = load_objects(cluster(nodes).dicts())
    spec = WorkloadSpec(
        jobs=50 * nodes // 7,  # a day of replay_week.py's rate
        span=86400.0,
        total_gpus=nodes * 8,
        queues=QUEUES,
        load=0.7,
        cpu_per_gpu=1000.0,
        memory_per_gpu=1e9,
    )
    trace = generate(spec, seed=1)

    def replay():
        return Replay(objects, trace, period=10.0).run()

    result = benchmark.pedantic(replay, rounds=1, iterations=1)
    benchmark.extra_info["sessions"] = result.sessions
    benchmark.extra_info["periods"] = result.periods
    benchmark.extra_info["ms_per_session"] = round(
        1000 * result.wall_seconds / max(result.sessions, 1), 3
    )
