"""``kai replay --sweep``: one trace under a grid of configurations, compared.

Each ``--sweep KEY=V1,V2,...`` names a setting and its values; the runs are every
combination.  Keys:

* ``PLUGIN.ARGUMENT``: a plugin argument (``proportion.kValue``,
  ``minruntime.defaultReclaimMinRuntime``, ``nodeplacement.gpu``);
* ``reclaimMinRuntime``, ``preemptMinRuntime``: the configuration's defaults;
* ``usageParams.FIELD``: time-based fair share's usage parameters
  (``usageParams.halfLifePeriod``, ``usageParams.windowSize``).

The runs go to local worker processes (``workers``, default one per CPU), or to a Dask
cluster (``executor="dask:ADDRESS"``) when a sweep outgrows one machine.  Each run's
outputs go into ``DIR/run-NN/``, and ``DIR`` receives ``comparison.csv`` and
``comparison.json`` (one row per run: its settings and headline figures) and overlaid
plots (``plots/sweep_utilization.png``, ``plots/sweep_jct.png``).
"""

from __future__ import annotations

import copy
import csv
import itertools
import json
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from kai.api.errors import ConfigError, InputError
from kai.api.objects import ClusterObjects, PluginOption, SchedulerConfigObject
from kai.config import SchedulerConfig
from kai.replay.trace import TraceJob

TOP_LEVEL = {"reclaimMinRuntime": "reclaim_min_runtime", "preemptMinRuntime": "preempt_min_runtime"}


def parse_grid(specs: Sequence[str]) -> list[dict[str, str]]:
    """``["a=1,2", "b=x"]`` -> ``[{"a": "1", "b": "x"}, {"a": "2", "b": "x"}]``."""
    axes: list[tuple[str, list[str]]] = []
    for spec in specs:
        key, sep, values = spec.partition("=")
        key = key.strip()
        items = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not key or not items:
            raise InputError(f"{spec!r}: expected KEY=VALUE[,VALUE...]", obj="--sweep")
        if any(k == key for k, _ in axes):
            raise InputError(f"{key!r} is swept twice", obj="--sweep")
        axes.append((key, items))
    return [
        dict(zip([k for k, _ in axes], combo)) for combo in itertools.product(*[v for _, v in axes])
    ]


def with_settings(
    base: SchedulerConfigObject | None, settings: dict[str, str]
) -> SchedulerConfigObject:
    """A copy of ``base`` (KAI's defaults when None) with ``settings`` applied."""
    obj = copy.deepcopy(base) if base is not None else SchedulerConfigObject()
    for key, value in settings.items():
        if key in TOP_LEVEL:
            from kai.api.quantity import parse_duration

            try:
                setattr(obj, TOP_LEVEL[key], parse_duration(value))
            except ValueError as err:
                raise InputError(str(err), obj="--sweep", field=key) from None
        elif key.startswith("usageParams."):
            raw = copy.deepcopy(obj.usage_db) if isinstance(obj.usage_db, dict) else None
            raw = raw or {"clientType": "prometheus"}
            raw.setdefault("usageParams", {})[key.split(".", 1)[1]] = value
            obj.usage_db = raw
        elif "." in key:
            plugin, argument = key.split(".", 1)
            if obj.tiers is None:
                obj.tiers = [
                    [PluginOption(p.name, dict(p.arguments)) for p in tier]
                    for tier in SchedulerConfig.from_object(None).tiers
                ]
            options = [p for tier in obj.tiers for p in tier if p.name == plugin]
            if not options:
                raise InputError(
                    f"the configuration has no plugin {plugin!r} to set {argument!r} on",
                    obj="--sweep",
                    field=key,
                )
            for option in options:
                option.arguments[argument] = value
        else:
            raise InputError(
                f"unknown setting {key!r}: expected PLUGIN.ARGUMENT, "
                f"{', '.join(TOP_LEVEL)} or usageParams.FIELD",
                obj="--sweep",
            )
    try:
        SchedulerConfig.from_object(obj)  # a bad value is said before any run starts
    except ConfigError as err:
        raise InputError(f"{_label(settings)}: {err}", obj="--sweep") from None
    return obj


def _label(settings: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items())


def _run(args: tuple[Any, ...]) -> dict[str, Any]:
    """One run of the sweep, on a worker: replay, then hand back the figures and the
    files of its outputs (the worker may be another machine, with its own disk)."""
    import tempfile

    from kai.replay.report import summary, write_outputs
    from kai.replay.simulator import Replay

    cluster, trace, config, period, until, html, table_format, backend = args
    result = Replay(
        cluster, trace, config=config, period=period, until=until, backend=backend
    ).run()
    files: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory(prefix="kai-replay-") as tmp:
        for path in write_outputs(result, tmp, html=html, table_format=table_format):
            with open(path, "rb") as fh:
                files[os.path.relpath(path, tmp)] = fh.read()
    total = result.total_gpus or 1.0
    return {
        "summary": summary(result),
        "files": files,
        "times": [row.time / 3600 for row in result.timeline],
        "utilization": [sum(row.allocated.values()) / total for row in result.timeline],
        "jct": sorted(
            (r.finish - r.trace.submit_time) / 3600
            for r in result.records.values()
            if r.finish is not None
        ),
    }


def _map_local(jobs: list[tuple[Any, ...]], workers: int | None) -> list[dict[str, Any]]:
    workers = max(1, min(workers or os.cpu_count() or 1, len(jobs)))
    if workers == 1:
        return [_run(j) for j in jobs]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(_run, jobs))


def _map_dask(jobs: list[tuple[Any, ...]], address: str) -> list[dict[str, Any]]:
    """The runs as tasks of a Dask cluster (its scheduler at ``address``)."""
    try:
        from distributed import Client
    except ImportError:
        raise InputError(
            "running a sweep on Dask needs the distributed package: pip install 'kai[dask]'",
            obj="--executor",
        ) from None
    with Client(address) as client:
        futures = client.map(_run, jobs, pure=False)
        return client.gather(futures)


COMPARISON_COLUMNS = (
    "run",
    "settings",
    "jobs_finished",
    "jct_p50",
    "jct_p90",
    "jct_p99",
    "delay_p50",
    "delay_p99",
    "slowdown_p50",
    "gpu_utilization",
    "gpu_hours_lost",
    "evictions",
)


def run_sweep(
    cluster: ClusterObjects,
    trace: list[TraceJob],
    base: SchedulerConfigObject | None,
    specs: Sequence[str],
    out_dir: str,
    *,
    period: float,
    until: float | None,
    html: bool = False,
    table_format: str = "auto",
    backend: str | None = None,
    workers: int | None = None,
    executor: str = "local",
    echo: Callable[[str], Any] = print,
) -> list[dict[str, Any]]:
    """Run the grid and write every run's outputs and the comparison.

    ``executor``: ``"local"`` (``workers`` processes, default one per CPU) or
    ``"dask:ADDRESS"``, the scheduler of a Dask cluster (``tcp://host:8786``) that
    runs them as tasks.
    """
    grid = parse_grid(specs)
    configs = [with_settings(base, settings) for settings in grid]
    jobs = [(cluster, trace, cfg, period, until, html, table_format, backend) for cfg in configs]
    if executor == "local":
        echo(f"kai replay: {len(jobs)} runs in local processes")
        results = _map_local(jobs, workers)
    elif executor.startswith("dask:"):
        echo(f"kai replay: {len(jobs)} runs on the Dask cluster at {executor[5:]}")
        results = _map_dask(jobs, executor[5:])
    else:
        raise InputError(
            f"{executor!r}: expected 'local' or 'dask:SCHEDULER_ADDRESS'", obj="--executor"
        )
    os.makedirs(out_dir, exist_ok=True)
    for i, res in enumerate(results):
        for name, data in res.pop("files").items():
            path = os.path.join(out_dir, f"run-{i:02d}", name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as fh:
                fh.write(data)
    rows = []
    for i, (settings, res) in enumerate(zip(grid, results)):
        overall = res["summary"]["overall"]
        rows.append(
            {
                "run": f"run-{i:02d}",
                "settings": _label(settings),
                "jobs_finished": overall["jobs_finished"],
                "jct_p50": overall["jct_seconds"]["p50"],
                "jct_p90": overall["jct_seconds"]["p90"],
                "jct_p99": overall["jct_seconds"]["p99"],
                "delay_p50": overall["queueing_delay_seconds"]["p50"],
                "delay_p99": overall["queueing_delay_seconds"]["p99"],
                "slowdown_p50": overall["slowdown"]["p50"],
                "gpu_utilization": overall["gpu_utilization"],
                "gpu_hours_lost": overall["gpu_hours_lost_to_eviction"],
                "evictions": overall["evictions"],
            }
        )
    with open(os.path.join(out_dir, "comparison.csv"), "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(COMPARISON_COLUMNS))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if v is None else v for k, v in row.items()})
    with open(os.path.join(out_dir, "comparison.json"), "w", encoding="utf-8") as fh:
        json.dump([{**row, "settings": s} for row, s in zip(rows, grid)], fh, indent=2)
        fh.write("\n")
    try:
        _overlays(grid, results, os.path.join(out_dir, "plots"))
    except ImportError:
        echo("kai replay: overlaid plots skipped: matplotlib is not installed")
    return rows


def _overlays(grid: list[dict[str, str]], results: list[dict[str, Any]], out_dir: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kai.replay.plots import save_figure

    os.makedirs(out_dir, exist_ok=True)
    fig, ax = plt.subplots(figsize=(11, 4.5))
    for settings, res in zip(grid, results):
        ax.step(
            res["times"],
            [100 * u for u in res["utilization"]],
            where="post",
            label=_label(settings),
        )
    ax.set_xlabel("simulated time (hours)")
    ax.set_ylabel("GPUs allocated (%)")
    ax.set_ylim(0, 105)
    ax.set_title("GPU utilization per configuration")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    save_figure(fig, out_dir, "sweep_utilization.png")

    fig, ax = plt.subplots(figsize=(8, 5))
    for settings, res in zip(grid, results):
        values = res["jct"]
        if values:
            n = len(values)
            ax.step(values, [(k + 1) / n for k in range(n)], where="post", label=_label(settings))
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours, log scale)")
    ax.set_ylabel("fraction of finished jobs")
    ax.set_title("JCT distribution per configuration")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    save_figure(fig, out_dir, "sweep_jct.png")
