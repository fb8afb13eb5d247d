"""What a replay writes: summary.json, the job and timeline tables, plots, report.html.

* ``summary.json``: per queue, per priority class and overall: jobs submitted, started
  and finished; job completion time (JCT), queueing delay and slowdown percentiles
  (p50/p90/p99); GPU-hours allocated and lost to eviction; evictions per action and
  reason; min-runtime protections used; the mean GPU utilization; how the run went
  (sessions, periods jumped over, wall time, cost per session, complete or not).
* ``jobs.csv`` (``jobs.parquet`` with pyarrow): one row per job.
* ``timeline.csv`` (``timeline.parquet``): one row per session and leaf queue: the GPUs
  allocated to the queue and its GPU fair share from then until the next session.
* ``evictions.csv``: one row per evicted job.
* ``plots/*.png`` (with matplotlib) and ``report.html`` (with plotly, on request).
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from kai.replay.simulator import JobRecord, ReplayResult

PERCENTILES = (50, 90, 99)


def percentiles(values: Sequence[float]) -> dict[str, float | None]:
    """p50/p90/p99 by linear interpolation between closest ranks (None when empty)."""
    if not values:
        return {f"p{p}": None for p in PERCENTILES}
    ordered = sorted(values)
    out: dict[str, float | None] = {}
    for p in PERCENTILES:
        pos = (len(ordered) - 1) * p / 100
        lo = math.floor(pos)
        hi = min(lo + 1, len(ordered) - 1)
        value = ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)
        out[f"p{p}"] = round(value, 3)
    return out


def _group_stats(records: Iterable[JobRecord], evictions: list[Any]) -> dict[str, Any]:
    records = list(records)
    finished = [r for r in records if r.finish is not None]
    started = [r for r in records if r.first_start is not None]
    jct = [r.finish - r.trace.submit_time for r in finished]  # type: ignore[operator]
    delay = [r.first_start - r.trace.submit_time for r in started]  # type: ignore[operator]
    slowdown = [
        (r.finish - r.trace.submit_time) / r.trace.duration  # type: ignore[operator]
        for r in finished
        if r.trace.duration > 0
    ]
    by_action: dict[str, int] = defaultdict(int)
    by_reason: dict[str, int] = defaultdict(int)
    for e in evictions:
        by_action[e.action] += 1
        if e.reason:
            by_reason[e.reason] += 1
    return {
        "jobs_submitted": len(records),
        "jobs_started": len(started),
        "jobs_finished": len(finished),
        "jct_seconds": percentiles(jct),
        "queueing_delay_seconds": percentiles(delay),
        "slowdown": percentiles(slowdown),
        "gpu_hours_allocated": round(sum(r.gpu_seconds for r in records) / 3600, 3),
        "gpu_hours_lost_to_eviction": round(sum(r.lost_gpu_seconds for r in records) / 3600, 3),
        "evictions": len(evictions),
        "evictions_by_action": dict(sorted(by_action.items())),
        "evictions_by_reason": dict(sorted(by_reason.items())),
    }


def summary(result: ReplayResult) -> dict[str, Any]:
    """The summary document (what ``summary.json`` holds)."""
    records = list(result.records.values())
    by_queue: dict[str, list[JobRecord]] = defaultdict(list)
    by_class: dict[str, list[JobRecord]] = defaultdict(list)
    for r in records:
        by_queue[r.trace.queue].append(r)
        by_class[r.trace.priority_class].append(r)
    ev_queue: dict[str, list[Any]] = defaultdict(list)
    ev_class: dict[str, list[Any]] = defaultdict(list)
    classes = {r.trace.key: r.trace.priority_class for r in records}
    for e in result.evictions:
        ev_queue[e.queue].append(e)
        ev_class[classes.get(e.job, "")].append(e)
    overall = _group_stats(records, result.evictions)
    span = result.end
    capacity_hours = result.total_gpus * span / 3600
    overall["gpu_utilization"] = (
        round(overall["gpu_hours_allocated"] / capacity_hours, 4) if capacity_hours > 0 else None
    )
    overall["min_runtime_protections"] = {
        kind: {"victim_sessions": result.protections[kind], "jobs": len(jobs)}
        for kind, jobs in result.protected_jobs.items()
    }
    queues = {}
    for q in result.queues:
        stats = _group_stats(by_queue.get(q, []), ev_queue.get(q, []))
        stats["min_runtime_protected_jobs"] = {
            kind: sum(1 for key in jobs if key in {r.trace.key for r in by_queue.get(q, [])})
            for kind, jobs in result.protected_jobs.items()
        }
        stats["mean_allocated_gpus"] = (
            round(stats["gpu_hours_allocated"] * 3600 / span, 3) if span else 0
        )
        stats["mean_fair_share_gpus"] = _mean_fair_share(result, q)
        queues[q] = stats
    run = {
        "simulated_seconds": span,
        "period_seconds": result.period,
        "sessions": result.sessions,
        "periods": result.periods,
        "periods_jumped_over": max(result.periods - result.sessions, 0),
        "wall_seconds": round(result.wall_seconds, 3),
        "session_seconds": round(result.session_seconds, 3),
        "ms_per_session": round(1000 * result.wall_seconds / result.sessions, 3)
        if result.sessions
        else None,
        "complete": result.complete,
        "stopped": result.stopped,
        "total_gpus": result.total_gpus,
        "time_based_fair_share_usage": result.usage_source,
        "start": result.start.isoformat(),
    }
    return {
        "run": run,
        "overall": overall,
        "queues": queues,
        "priority_classes": {
            name: _group_stats(by_class[name], ev_class.get(name, [])) for name in sorted(by_class)
        },
    }


def _mean_fair_share(result: ReplayResult, queue: str) -> float:
    """The queue's GPU fair share averaged over simulated time."""
    rows = result.timeline
    if not rows or result.end <= 0:
        return 0.0
    total = 0.0
    for row, nxt in zip(rows, rows[1:] + [None]):
        end = nxt.time if nxt is not None else max(result.end, row.time + result.period)
        total += row.fair_share.get(queue, 0.0) * (end - row.time)
    span = max(result.end, rows[-1].time + result.period) - rows[0].time
    return round(total / span, 3) if span > 0 else 0.0


# ------------------------------------------------------------------ tables
JOB_COLUMNS = (
    "job",
    "namespace",
    "queue",
    "priority_class",
    "pods",
    "gpus",
    "submit_time",
    "first_start",
    "finish",
    "duration",
    "queueing_delay",
    "jct",
    "slowdown",
    "evictions",
    "gpu_hours",
    "gpu_hours_lost",
    "state",
)


def job_rows(result: ReplayResult) -> list[dict[str, Any]]:
    rows = []
    for r in result.records.values():
        t = r.trace
        jct = None if r.finish is None else r.finish - t.submit_time
        rows.append(
            {
                "job": t.job,
                "namespace": t.namespace,
                "queue": t.queue,
                "priority_class": t.priority_class,
                "pods": t.pods,
                "gpus": t.gpus,
                "submit_time": t.submit_time,
                "first_start": r.first_start,
                "finish": r.finish,
                "duration": t.duration,
                "queueing_delay": None
                if r.first_start is None
                else round(r.first_start - t.submit_time, 3),
                "jct": None if jct is None else round(jct, 3),
                "slowdown": None if jct is None or t.duration <= 0 else round(jct / t.duration, 4),
                "evictions": r.evictions,
                "gpu_hours": round(r.gpu_seconds / 3600, 6),
                "gpu_hours_lost": round(r.lost_gpu_seconds / 3600, 6),
                "state": "finished"
                if r.finish is not None
                else ("running" if r.run_start is not None else "pending"),
            }
        )
    return rows


TIMELINE_COLUMNS = (
    "time",
    "queue",
    "allocated_gpus",
    "fair_share_gpus",
    "pending_jobs",
    "running_jobs",
)


def timeline_rows(result: ReplayResult) -> list[dict[str, Any]]:
    rows = []
    for row in result.timeline:
        for q in result.queues:
            rows.append(
                {
                    "time": row.time,
                    "queue": q,
                    "allocated_gpus": row.allocated.get(q, 0.0),
                    "fair_share_gpus": round(row.fair_share.get(q, 0.0), 6),
                    "pending_jobs": row.pending.get(q, 0),
                    "running_jobs": row.running.get(q, 0),
                }
            )
    return rows


EVICTION_COLUMNS = ("time", "job", "queue", "action", "reason", "pods", "gpu_hours_lost")


def eviction_rows(result: ReplayResult) -> list[dict[str, Any]]:
    return [
        {
            "time": e.time,
            "job": e.job,
            "queue": e.queue,
            "action": e.action,
            "reason": e.reason,
            "pods": e.pods,
            "gpu_hours_lost": round(e.lost_gpu_hours, 6),
        }
        for e in result.evictions
    ]


def _have_pyarrow() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def write_table(
    rows: list[dict[str, Any]], columns: Sequence[str], path_stem: str, *, parquet: bool
) -> str:
    """Write ``rows`` as ``STEM.parquet`` (pyarrow) or ``STEM.csv``; returns the path."""
    if parquet:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.table({c: [r[c] for r in rows] for c in columns})
        path = f"{path_stem}.parquet"
        pq.write_table(table, path)
        return path
    path = f"{path_stem}.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(columns))
        writer.writeheader()
        for r in rows:
            writer.writerow({k: "" if v is None else v for k, v in r.items()})
    return path


# ------------------------------------------------------------------ all outputs
def write_outputs(
    result: ReplayResult,
    out_dir: str,
    *,
    html: bool = False,
    plots: bool = True,
    table_format: str = "auto",
) -> list[str]:
    """Write every output into ``out_dir``; returns the paths written.

    ``table_format``: ``csv``, ``parquet`` or ``auto`` (Parquet when pyarrow is
    installed).  Plots need matplotlib and the HTML report plotly; without them those
    files are skipped and ``summary.json`` says so.
    """
    os.makedirs(out_dir, exist_ok=True)
    parquet = table_format == "parquet" or (table_format == "auto" and _have_pyarrow())
    written = []
    doc = summary(result)
    notes: list[str] = []
    written.append(
        write_table(job_rows(result), JOB_COLUMNS, os.path.join(out_dir, "jobs"), parquet=parquet)
    )
    written.append(
        write_table(
            timeline_rows(result),
            TIMELINE_COLUMNS,
            os.path.join(out_dir, "timeline"),
            parquet=parquet,
        )
    )
    written.append(
        write_table(
            eviction_rows(result),
            EVICTION_COLUMNS,
            os.path.join(out_dir, "evictions"),
            parquet=False,
        )
    )
    if plots:
        from kai.replay import plots as plotting

        try:
            written.extend(plotting.write_pngs(result, os.path.join(out_dir, "plots")))
        except ImportError:
            notes.append("plots skipped: matplotlib is not installed (pip install 'kai[replay]')")
    if html:
        from kai.replay import plots as plotting

        try:
            written.append(plotting.write_html(result, doc, os.path.join(out_dir, "report.html")))
        except ImportError:
            notes.append("report.html skipped: plotly is not installed (pip install 'kai[replay]')")
    if notes:
        doc["notes"] = notes
    path = os.path.join(out_dir, "summary.json")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=2)
        fh.write("\n")
    written.insert(0, path)
    return written
