"""Plots of a replay: PNG files with matplotlib, an interactive report with plotly.

Four views, in both forms: each queue's GPU allocation against its fair share over
time, cluster GPU utilization over time, the distribution of job completion times per
queue, and evictions over time per action.
"""

from __future__ import annotations

import html as html_lib
import json
import os
from collections import defaultdict
from typing import Any

from kai.replay.simulator import ReplayResult

# Interactive charts stay light: long timelines are thinned to this many points.
MAX_HTML_POINTS = 4000


def _hours(seconds: float) -> float:
    return seconds / 3600.0


def _series(result: ReplayResult) -> dict[str, Any]:
    """The plotted data: times in hours, per queue allocation and fair share."""
    rows = result.timeline
    times = [_hours(r.time) for r in rows]
    allocated = {q: [r.allocated.get(q, 0.0) for r in rows] for q in result.queues}
    fair = {q: [r.fair_share.get(q, 0.0) for r in rows] for q in result.queues}
    total = result.total_gpus or 1.0
    used = [sum(r.allocated.values()) / total for r in rows]
    jct: dict[str, list[float]] = defaultdict(list)
    for rec in result.records.values():
        if rec.finish is not None:
            jct[rec.trace.queue].append(_hours(rec.finish - rec.trace.submit_time))
    bucket = max(result.period, _bucket_seconds(result.end))
    evictions: dict[str, dict[float, int]] = defaultdict(lambda: defaultdict(int))
    for e in result.evictions:
        evictions[e.action][_hours(e.time // bucket * bucket)] += 1
    return {
        "times": times,
        "allocated": allocated,
        "fair": fair,
        "utilization": used,
        "jct": dict(jct),
        "evictions": {a: dict(sorted(v.items())) for a, v in evictions.items()},
        "bucket_hours": _hours(bucket),
    }


def _bucket_seconds(span: float) -> float:
    """Eviction histogram buckets: about 100 over the span, at whole minutes or hours."""
    raw = max(span / 100.0, 60.0)
    for step in (60, 300, 600, 1800, 3600, 6 * 3600, 86400):
        if raw <= step:
            return float(step)
    return 86400.0


def write_pngs(result: ReplayResult, out_dir: str) -> list[str]:
    """allocation.png, utilization.png, jct.png and evictions.png in ``out_dir``."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    data = _series(result)
    written = []
    times = data["times"]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]

    fig, ax = plt.subplots(figsize=(11, 5))
    for i, q in enumerate(result.queues):
        color = colors[i % len(colors)]
        ax.step(times, data["allocated"][q], where="post", color=color, label=f"{q} allocated")
        ax.step(
            times,
            data["fair"][q],
            where="post",
            color=color,
            linestyle="--",
            alpha=0.8,
            label=f"{q} fair share",
        )
    ax.set_xlabel("simulated time (hours)")
    ax.set_ylabel("GPUs")
    ax.set_title("Queue GPU allocation against fair share")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    ax.grid(alpha=0.3)
    written.append(save_figure(fig, out_dir, "allocation.png"))

    fig, ax = plt.subplots(figsize=(11, 4))
    ax.step(times, [100 * u for u in data["utilization"]], where="post")
    ax.set_ylim(0, 105)
    ax.set_xlabel("simulated time (hours)")
    ax.set_ylabel("GPUs allocated (%)")
    ax.set_title(f"Cluster GPU utilization ({result.total_gpus:g} GPUs)")
    ax.grid(alpha=0.3)
    written.append(save_figure(fig, out_dir, "utilization.png"))

    fig, ax = plt.subplots(figsize=(8, 5))
    for q, values in sorted(data["jct"].items()):
        values = sorted(values)
        n = len(values)
        ax.step(values, [(k + 1) / n for k in range(n)], where="post", label=f"{q} ({n} jobs)")
    if data["jct"]:
        ax.set_xscale("log")
        ax.legend(loc="lower right", fontsize="small")
    ax.set_xlabel("job completion time (hours, log scale)")
    ax.set_ylabel("fraction of finished jobs")
    ax.set_title("JCT distribution per queue")
    ax.grid(alpha=0.3)
    written.append(save_figure(fig, out_dir, "jct.png"))

    fig, ax = plt.subplots(figsize=(11, 4))
    width = data["bucket_hours"]
    bottom: dict[float, int] = defaultdict(int)
    for action, counts in sorted(data["evictions"].items()):
        xs = list(counts)
        ax.bar(
            xs,
            [counts[x] for x in xs],
            width=width,
            align="edge",
            bottom=[bottom[x] for x in xs],
            label=action,
        )
        for x in xs:
            bottom[x] += counts[x]
    ax.set_xlim(0, max(_hours(result.end), width))
    ax.set_xlabel("simulated time (hours)")
    ax.set_ylabel(f"evicted jobs per {width:g} h")
    ax.set_title(f"Evictions over time ({len(result.evictions)} in all)")
    if data["evictions"]:
        ax.legend(loc="upper right", fontsize="small")
    ax.grid(alpha=0.3)
    written.append(save_figure(fig, out_dir, "evictions.png"))
    return written


def save_figure(fig: Any, out_dir: str, name: str) -> str:
    """Lay ``fig`` out, write it as ``out_dir/name`` and free it; returns the path."""
    import matplotlib.pyplot as plt

    path = os.path.join(out_dir, name)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _thin(times: list[float], *columns: list[float]) -> tuple[list[float], ...]:
    step = max(1, len(times) // MAX_HTML_POINTS)
    if step == 1:
        return (times, *columns)
    return (times[::step], *(c[::step] for c in columns))


def write_html(result: ReplayResult, summary: dict[str, Any], path: str) -> str:
    """A self-contained report.html: plotly's JavaScript inlined, no network needed."""
    import plotly.graph_objects as go
    import plotly.io as pio

    data = _series(result)
    figures = []

    fig = go.Figure()
    for q in result.queues:
        t, alloc, fair = _thin(data["times"], data["allocated"][q], data["fair"][q])
        fig.add_trace(go.Scatter(x=t, y=alloc, name=f"{q} allocated", line_shape="hv"))
        fig.add_trace(
            go.Scatter(x=t, y=fair, name=f"{q} fair share", line_shape="hv", line_dash="dash")
        )
    fig.update_layout(
        title="Queue GPU allocation against fair share",
        xaxis_title="simulated time (hours)",
        yaxis_title="GPUs",
    )
    figures.append(fig)

    t, util = _thin(data["times"], [100 * u for u in data["utilization"]])
    fig = go.Figure(go.Scatter(x=t, y=util, line_shape="hv", name="utilization"))
    fig.update_layout(
        title="Cluster GPU utilization",
        xaxis_title="simulated time (hours)",
        yaxis_title="GPUs allocated (%)",
        yaxis_range=[0, 105],
    )
    figures.append(fig)

    fig = go.Figure()
    for q, values in sorted(data["jct"].items()):
        values = sorted(values)
        n = len(values)
        fig.add_trace(
            go.Scatter(x=values, y=[(k + 1) / n for k in range(n)], name=q, line_shape="hv")
        )
    fig.update_layout(
        title="JCT distribution per queue",
        xaxis_title="job completion time (hours)",
        xaxis_type="log",
        yaxis_title="fraction of finished jobs",
    )
    figures.append(fig)

    fig = go.Figure()
    for action, counts in sorted(data["evictions"].items()):
        fig.add_trace(go.Bar(x=list(counts), y=list(counts.values()), name=action))
    fig.update_layout(
        barmode="stack",
        title=f"Evictions over time ({len(result.evictions)} in all)",
        xaxis_title="simulated time (hours)",
        yaxis_title=f"evicted jobs per {data['bucket_hours']:g} h",
    )
    figures.append(fig)

    parts = [
        pio.to_html(f, full_html=False, include_plotlyjs=(i == 0)) for i, f in enumerate(figures)
    ]
    overall = summary["overall"]
    stopped = (
        "" if result.complete else f"<b>Stopped early: {html_lib.escape(str(result.stopped))}</b>"
    )
    rows = "".join(
        f"<tr><td>{html_lib.escape(q)}</td><td>{s['jobs_finished']}/{s['jobs_submitted']}</td>"
        f"<td>{_fmt(s['jct_seconds']['p50'])}</td><td>{_fmt(s['jct_seconds']['p99'])}</td>"
        f"<td>{_fmt(s['queueing_delay_seconds']['p50'])}</td>"
        f"<td>{_fmt(s['queueing_delay_seconds']['p99'])}</td>"
        f"<td>{s['gpu_hours_allocated']:.1f}</td><td>{s['gpu_hours_lost_to_eviction']:.1f}</td>"
        f"<td>{s['evictions']}</td></tr>"
        for q, s in summary["queues"].items()
    )
    document = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>kai replay report</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}</style></head>
<body><h1>kai replay</h1>
<p>{result.sessions} sessions over {_hours(result.end):.1f} simulated hours
({result.total_gpus:g} GPUs); GPU utilization {_pct(overall.get("gpu_utilization"))};
{overall["evictions"]} evictions, {overall["gpu_hours_lost_to_eviction"]:.1f} GPU-hours lost.
{stopped}</p>
<table><tr><th>queue</th><th>finished</th><th>JCT p50 (s)</th><th>JCT p99 (s)</th>
<th>delay p50 (s)</th><th>delay p99 (s)</th><th>GPU-h</th><th>GPU-h lost</th>
<th>evictions</th></tr>{rows}</table>
{"".join(parts)}
<details><summary>summary.json</summary><pre>{html_lib.escape(json.dumps(summary, indent=2))}</pre>
</details></body></html>
"""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(document)
    return path


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"
