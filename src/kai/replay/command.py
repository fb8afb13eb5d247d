"""``kai replay``: the command's work, apart from its option parsing (in ``kai.cli``)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

from kai.api.errors import InputError
from kai.replay.simulator import Replay, ReplayResult
from kai.replay.trace import Trace, TraceJob

SYNTHETIC = "synthetic"


def synthetic_trace(text: str, objects: Any, seed: int) -> list[TraceJob]:
    """Jobs for ``--trace synthetic[:jobs=N,span=DURATION,load=F]`` on the cluster.

    Jobs go to the cluster's leaf queues; training jobs take its lowest priority class
    and inference jobs its highest.
    """
    from kai.api.quantity import parse_duration
    from kai.replay.synthetic import WorkloadSpec, generate
    from kai.snapshot.builder import build_state

    options: dict[str, str] = {}
    _, _, rest = text.partition(":")
    for part in filter(None, rest.split(",")):
        key, sep, value = part.partition("=")
        if not sep or key not in ("jobs", "span", "load"):
            raise InputError(
                f"{part!r}: expected jobs=N, span=DURATION or load=FRACTION", obj="--trace"
            )
        options[key] = value
    state = build_state(objects)
    leaves = [q.name for q in state.queues.values() if q.is_leaf]
    classes = sorted(objects.priority_classes, key=lambda pc: pc.value)
    if not leaves or not classes:
        raise InputError(
            "a synthetic trace needs the cluster to have queues and priority classes",
            obj="--trace",
        )
    try:
        spec = WorkloadSpec(
            jobs=int(options.get("jobs", "1000")),
            span=parse_duration(options.get("span", "1d")),
            load=float(options.get("load", "0.85")),
            total_gpus=float(state.nodes.allocatable[:, 2].sum()),
            queues=sorted(leaves),
            train_class=classes[0].name,
            inference_class=classes[-1].name,
        )
    except ValueError as err:
        raise InputError(str(err), obj="--trace") from None
    return generate(spec, seed=seed)


def last_submit_time(path: str) -> float | None:
    """The last row's submit time of a CSV trace (rows are in submit order), cheaply."""
    try:
        with open(path, encoding="utf-8") as fh:
            header = fh.readline().strip().split(",")
            last = None
            for line in fh:
                if line.strip():
                    last = line
        if last is None or "submit_time" not in header:
            return None
        return float(last.split(",")[header.index("submit_time")])
    except (OSError, ValueError, IndexError):
        return None


class ReplayProgress:
    """A rich progress bar on a terminal's stderr: simulated time, wall time, ETA."""

    def __init__(self, total: float | None, stream: TextIO | None = None) -> None:
        self.total = total
        self._progress: Any = None
        self._task: Any = None
        self._last = 0.0
        stream = sys.stderr if stream is None else stream
        try:
            interactive = stream.isatty() and os.environ.get("TERM") != "dumb"
        except (AttributeError, ValueError):
            interactive = False
        if not interactive:
            return
        try:
            from rich import progress as rp
            from rich.console import Console
        except ImportError:
            return
        self._progress = rp.Progress(
            rp.TextColumn("kai replay"),
            rp.BarColumn(),
            rp.TextColumn("{task.fields[simulated]}"),
            rp.TextColumn("wall"),
            rp.TimeElapsedColumn(),
            rp.TextColumn("ETA"),
            rp.TimeRemainingColumn(),
            rp.TextColumn("{task.fields[sessions]} sessions"),
            console=Console(file=stream, force_terminal=True),
            transient=True,
        )
        self._progress.start()
        self._task = self._progress.add_task("replay", total=total, simulated="0s", sessions=0)

    def __call__(self, now: float, result: ReplayResult) -> None:
        if self._progress is None:
            return
        wall = time.monotonic()
        if wall - self._last < 0.1:
            return  # redraws cost more than sessions
        self._last = wall
        done = now if self.total is None else min(now, self.total)
        total_text = "" if self.total is None else f" / {_clock(self.total)}"
        self._progress.update(
            self._task,
            completed=done,
            simulated=f"{_clock(now)}{total_text} simulated",
            sessions=result.sessions,
        )

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}d {text}" if days else text


def run_replay(
    cluster_files: Sequence[str],
    trace_arg: str,
    out_dir: str,
    *,
    config_file: str | None = None,
    period: float = 10.0,
    until: float | None = None,
    html: bool = False,
    seed: int = 0,
    backend: str | None = None,
    table_format: str = "auto",
    sweep: Sequence[str] = (),
    workers: int | None = None,
    executor: str = "local",
    echo: Any = print,
) -> int:
    """Run a replay and write its outputs; returns the exit code.

    Ctrl-C stops the replay and writes what was simulated so far (exit code 130); a
    malformed trace row stops it the same way and reports the row (exit code 2).
    """
    from kai.replay.report import write_outputs
    from kai.snapshot.loader import load_config_file, load_files

    objects = load_files(list(cluster_files))
    config = objects.config
    if config_file:
        config = load_config_file(config_file)
    trace: Any
    total = until
    if trace_arg == SYNTHETIC or trace_arg.startswith(SYNTHETIC + ":"):
        trace = synthetic_trace(trace_arg, objects, seed)
        if total is None and trace:
            total = trace[-1].submit_time
    else:
        leaves = sorted(q.name for q in objects.queues)
        trace = Trace(trace_arg, queues=leaves)
        if total is None:
            total = last_submit_time(trace_arg)
    if sweep:
        from kai.replay.sweep import run_sweep

        jobs = trace if isinstance(trace, list) else trace.validate()
        rows = run_sweep(
            objects,
            jobs,
            config,
            sweep,
            out_dir,
            period=period,
            until=until,
            html=html,
            table_format=table_format,
            backend=backend,
            workers=workers,
            executor=executor,
            echo=echo,
        )
        for row in rows:
            echo(
                f"kai replay: {row['run']} ({row['settings']}): {row['jobs_finished']} jobs "
                f"finished, JCT p50 {row['jct_p50']} s, utilization {row['gpu_utilization']}, "
                f"{row['evictions']} evictions"
            )
        echo(f"kai replay: wrote comparison.csv, comparison.json and plots/ in {out_dir}")
        return 0
    replay = Replay(
        objects,
        trace,
        config=config,
        period=period,
        until=until,
        backend=backend,
    )
    progress = ReplayProgress(total)
    code = 0
    failure: InputError | None = None
    try:
        replay.run(progress)
    except KeyboardInterrupt:
        replay.result.stopped = "interrupted (Ctrl-C)"
        code = 130
    except InputError as err:  # a malformed trace row: what was simulated is kept
        replay.result.stopped = f"input error: {err}"
        failure = err
        code = 2
    finally:
        progress.close()
    result = replay.result
    written = write_outputs(result, out_dir, html=html, table_format=table_format)
    finished = sum(1 for r in result.records.values() if r.finish is not None)
    state = "complete" if result.complete else f"stopped: {result.stopped}"
    echo(
        f"kai replay: {result.sessions} sessions over {_clock(result.end)} simulated "
        f"({result.periods} periods, {result.wall_seconds:.1f} s wall), {finished}/"
        f"{len(result.records)} jobs finished, {len(result.evictions)} evictions; {state}"
    )
    echo(
        f"kai replay: wrote {', '.join(os.path.relpath(p, out_dir) for p in written)} in {out_dir}"
    )
    if failure is not None:
        raise failure
    return code
