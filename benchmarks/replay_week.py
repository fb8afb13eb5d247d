"""A week of a 1,000-node, 8,000-GPU cluster with 50,000 jobs, replayed at a 10 s period.

    python benchmarks/replay_week.py                     # the whole week
    python benchmarks/replay_week.py --until 1d --json out.json
    python benchmarks/replay_week.py --nodes 100 --jobs 5000   # a tenth of it

Prints the sessions run, the periods (those jumped over included), wall and CPU time,
the cost per simulated session, the pods a session saw on average and the peak memory.
The workload is kai.replay.synthetic's default shape at the load given.  On a shared
machine CPU seconds are the figure to compare: wall time counts other processes too.
"""

from __future__ import annotations

import argparse
import json
import operator
import resource
import sys
import time

from kai.api.quantity import parse_duration
from kai.bench_clusters import ClusterBuilder, QueueSpec
from kai.replay import Replay, WorkloadSpec, generate
from kai.replay.synthetic import WEEK
from kai.snapshot.loader import load_objects

QUEUES = ("research", "training", "product", "inference")

_tasks_of = operator.attrgetter("tasks")


def cluster(nodes: int, *, reclaim_min_runtime: float | None = None) -> ClusterBuilder:
    """``nodes`` 8-GPU nodes and four queues under one department, each deserving a
    sixth of the GPUs (the rest is over-quota, divided by weight)."""
    b = ClusterBuilder(f"replay-{nodes}")
    b.add_nodes(nodes, gpus=8)
    total = nodes * 8
    b.queues.append(QueueSpec("company", gpu_quota=total, gpu_weight=1.0))
    for name in QUEUES:
        b.queues.append(
            QueueSpec(
                name,
                parent="company",
                gpu_quota=total / 6,
                gpu_weight=1.0,
                reclaim_min_runtime=reclaim_min_runtime,
            )
        )
    return b


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=50_000)
    ap.add_argument("--span", default="1w", help="submission span (default 1w)")
    ap.add_argument("--until", default=None, help="stop the replay here (default: span)")
    ap.add_argument("--period", type=float, default=10.0)
    ap.add_argument("--load", type=float, default=0.7, help="GPU demand / capacity")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--backend", default=None)
    ap.add_argument("--json", dest="json_file", default=None)
    args = ap.parse_args(argv)
    span = parse_duration(args.span)
    until = parse_duration(args.until) if args.until else span
    started = time.perf_counter()
    objects = load_objects(cluster(args.nodes).dicts())
    spec = WorkloadSpec(
        jobs=round(args.jobs * min(1.0, span / WEEK)) if span < WEEK else args.jobs,
        span=span,
        total_gpus=args.nodes * 8,
        queues=QUEUES,
        load=args.load,
        cpu_per_gpu=1000.0,
        memory_per_gpu=1e9,
    )
    trace = generate(spec, seed=args.seed)
    setup = time.perf_counter() - started
    replay = Replay(objects, trace, period=args.period, until=until, backend=args.backend)
    live = {"pods": 0, "pending_jobs": 0}

    marks = {"next": 6 * 3600.0}

    def sample(r: Replay) -> None:
        # Counted in C (map over the jobs): this runs after every session and its time is
        # part of the figures.
        live["pods"] += sum(map(len, map(_tasks_of, r.state.jobs.values())))
        live["pending_jobs"] += len(r._pending_jobs)
        if r.now >= marks["next"]:  # a line every 6 simulated hours: where the time goes
            marks["next"] += 6 * 3600.0
            print(
                f"{r.now / 3600:6.0f} h  {r.result.sessions:6d} sessions  "
                f"{time.process_time() - cpu:8.1f} CPU s  {len(r.state.jobs):5d} jobs "
                f"({len(r._pending_jobs)} pending)",
                file=sys.stderr,
                flush=True,
            )

    cpu = time.process_time()
    replay.on_session = sample
    result = replay.run()
    cpu = time.process_time() - cpu
    finished = sum(1 for r in result.records.values() if r.finish is not None)
    out = {
        "nodes": args.nodes,
        "gpus": args.nodes * 8,
        "jobs": len(trace),
        "simulated_seconds": result.end,
        "period": args.period,
        "load": args.load,
        "sessions": result.sessions,
        "periods": result.periods,
        "setup_seconds": round(setup, 2),
        "wall_seconds": round(result.wall_seconds, 2),
        "session_seconds": round(result.session_seconds, 2),
        "cpu_seconds": round(cpu, 2),
        "ms_per_session": round(1000 * result.wall_seconds / max(result.sessions, 1), 3),
        "cpu_ms_per_session": round(1000 * cpu / max(result.sessions, 1), 3),
        "mean_pods_in_session": round(live["pods"] / max(result.sessions, 1)),
        "mean_pending_jobs": round(live["pending_jobs"] / max(result.sessions, 1)),
        "ms_per_period": round(1000 * result.wall_seconds / max(result.periods, 1), 3),
        "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "jobs_finished": finished,
        "evictions": len(result.evictions),
    }
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")
    if args.json_file:
        with open(args.json_file, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
