"""kai replay on the command line: outputs, a malformed trace row, Ctrl-C, seeds."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kai.cli import main
from kai.replay.simulator import Replay

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = str(ROOT / "examples" / "replay" / "cluster.yaml")
HEADER = (
    "submit_time,job,queue,priority_class,pods,min_member,gpus_per_pod,cpu_per_pod,"
    "memory_per_pod,duration\n"
)


def kai(*args: str):
    return CliRunner().invoke(main, list(args))


def trace(tmp_path: Path, rows: list[str]) -> str:
    path = tmp_path / "trace.csv"
    path.write_text(HEADER + "".join(r + "\n" for r in rows))
    return str(path)


def jobs(n: int, start: int = 0) -> list[str]:
    # 4-GPU one-hour jobs, alternating queues, one a minute.
    return [
        f"{60 * i},job-{i:03d},{'team-a' if i % 2 else 'team-b'},train,1,1,4,2,8Gi,3600"
        for i in range(start, start + n)
    ]


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_replay_writes_the_summary_tables_and_plots(tmp_path):
    out = tmp_path / "out"
    result = kai(
        "replay", CLUSTER, "--trace", trace(tmp_path, jobs(12)), "--out", str(out),
        "--format", "csv",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "12/12 jobs finished" in result.output
    doc = json.loads((out / "summary.json").read_text())
    assert doc["run"]["complete"] is True
    assert doc["overall"]["jobs_finished"] == 12
    assert set(doc["queues"]) == {"team-a", "team-b"}
    # 12 jobs of 4 GPUs for an hour each: 48 GPU-hours.
    assert doc["overall"]["gpu_hours_allocated"] == pytest.approx(48.0)
    rows = read_csv(out / "jobs.csv")
    assert len(rows) == 12 and {r["state"] for r in rows} == {"finished"}
    timeline = read_csv(out / "timeline.csv")
    assert {r["queue"] for r in timeline} == {"team-a", "team-b"}
    assert max(float(r["allocated_gpus"]) for r in timeline) <= 16
    pytest.importorskip("matplotlib")
    for name in ("allocation", "utilization", "jct", "evictions"):
        assert (out / "plots" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"


def test_html_report_and_parquet_tables(tmp_path):
    pytest.importorskip("plotly")
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "out"
    result = kai(
        "replay", CLUSTER, "--trace", trace(tmp_path, jobs(6)), "--out", str(out), "--html",
        "--period", "30s",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    html = (out / "report.html").read_text()
    assert "<script" in html and "plotly" in html.lower()
    assert '<script src="http' not in html  # self-contained: the library is inlined
    assert len(html) > 1_000_000
    table = pq.read_table(out / "jobs.parquet")
    assert table.num_rows == 6 and "jct" in table.column_names
    assert pq.read_table(out / "timeline.parquet").num_rows > 0


def test_a_malformed_row_stops_the_replay_and_keeps_what_was_simulated(tmp_path):
    rows = jobs(5) + ["400,bad,team-a,train,1,1,four,2,8Gi,3600"] + jobs(3, start=10)
    out = tmp_path / "out"
    result = kai("replay", CLUSTER, "--trace", trace(tmp_path, rows), "--out", str(out))
    assert result.exit_code == 2
    assert "line 7, field gpus_per_pod (column 7): invalid quantity 'four'" in result.output
    assert "Traceback" not in result.output
    doc = json.loads((out / "summary.json").read_text())
    assert doc["run"]["complete"] is False
    assert "line 7" in doc["run"]["stopped"]
    # The five jobs before the bad row were replayed up to the row's submit time.
    assert doc["overall"]["jobs_submitted"] == 5
    assert doc["overall"]["jobs_started"] >= 4


def test_ctrl_c_writes_what_was_computed_so_far(tmp_path, monkeypatch):
    step = Replay.step
    calls = {"n": 0}

    def interrupted(self):
        calls["n"] += 1
        if calls["n"] == 6:
            raise KeyboardInterrupt
        return step(self)

    monkeypatch.setattr(Replay, "step", interrupted)
    out = tmp_path / "out"
    result = kai(
        "replay", CLUSTER, "--trace", trace(tmp_path, jobs(20)), "--out", str(out),
        "--format", "csv",
    )  # fmt: skip
    assert result.exit_code == 130
    doc = json.loads((out / "summary.json").read_text())
    assert doc["run"]["complete"] is False
    assert doc["run"]["stopped"] == "interrupted (Ctrl-C)"
    assert 0 < doc["run"]["sessions"] <= 5
    assert 0 < len(read_csv(out / "jobs.csv")) < 20
    assert read_csv(out / "timeline.csv")


def test_synthetic_traces_are_seeded(tmp_path):
    def run(seed: int, name: str) -> dict:
        out = tmp_path / name
        result = kai(
            "replay", CLUSTER, "--trace", "synthetic:jobs=30,span=2h,load=0.9", "--out",
            str(out), "--seed", str(seed), "--until", "3h", "--format", "csv",
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        doc = json.loads((out / "summary.json").read_text())
        return {"overall": doc["overall"], "jobs": read_csv(out / "jobs.csv")}

    first = run(1, "a")
    assert first["overall"]["jobs_submitted"] == 30
    assert run(1, "b") == first
    assert run(2, "c")["jobs"] != first["jobs"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--period", "soon"), "--period"),
        (("--until", "-5m"), "--until"),
        (("--trace", "synthetic:jobs=ten"), "--trace"),
    ],
)
def test_bad_options_are_usage_errors(tmp_path, args, message):
    base = {"--trace": trace(tmp_path, jobs(1)), "--period": "10s"}
    extra = dict(zip(args[::2], args[1::2]))
    options = [x for k, v in {**base, **extra}.items() for x in (k, v)]
    result = kai("replay", CLUSTER, "--out", str(tmp_path / "out"), *options)
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_a_sweep_runs_the_grid_in_processes_and_compares(tmp_path):
    out = tmp_path / "out"
    result = kai(
        "replay", CLUSTER, "--trace", trace(tmp_path, jobs(8)), "--out", str(out),
        "--format", "csv", "--sweep", "proportion.kValue=0,2", "--sweep",
        "reclaimMinRuntime=0s,10m", "--workers", "2",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = read_csv(out / "comparison.csv")
    assert [r["settings"] for r in rows] == [
        "proportion.kValue=0, reclaimMinRuntime=0s",
        "proportion.kValue=0, reclaimMinRuntime=10m",
        "proportion.kValue=2, reclaimMinRuntime=0s",
        "proportion.kValue=2, reclaimMinRuntime=10m",
    ]
    assert {r["jobs_finished"] for r in rows} == {"8"}
    for i in range(4):
        assert json.loads((out / f"run-{i:02d}" / "summary.json").read_text())["run"]["complete"]
    pytest.importorskip("matplotlib")
    assert (out / "plots" / "sweep_utilization.png").exists()
    assert (out / "plots" / "sweep_jct.png").exists()


def test_sweep_settings_are_checked_before_any_run():
    from kai.api.errors import InputError
    from kai.replay.sweep import parse_grid, with_settings

    assert parse_grid(["a.b=1,2", "c=x"]) == [{"a.b": "1", "c": "x"}, {"a.b": "2", "c": "x"}]
    with pytest.raises(InputError, match="expected KEY=VALUE"):
        parse_grid(["kValue"])
    with pytest.raises(InputError, match="no plugin 'nope'"):
        with_settings(None, {"nope.x": "1"})
    with pytest.raises(InputError, match=r"proportion.kValue=lots.*not a number"):
        with_settings(None, {"proportion.kValue": "lots"})
    with pytest.raises(InputError, match="unknown setting 'colour'"):
        with_settings(None, {"colour": "red"})
    config = with_settings(None, {"usageParams.halfLifePeriod": "10m", "preemptMinRuntime": "1m"})
    assert config.usage_db["usageParams"]["halfLifePeriod"] == "10m"
    assert config.preempt_min_runtime == 60.0


def test_the_progress_bar_shows_simulated_time_wall_time_and_eta():
    import io

    from kai.replay.command import ReplayProgress
    from kai.replay.simulator import ReplayResult

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    progress = ReplayProgress(7200.0, screen)
    result = ReplayResult(10.0, None, 16.0, [], {}, {}, [], [], {}, {}, sessions=42)
    progress(3600.0, result)
    progress._progress.refresh()
    progress.close()
    text = screen.getvalue()
    assert "01:00:00 / 02:00:00 simulated" in text
    assert "42 sessions" in text and "ETA" in text and "wall" in text
    # Not a terminal: nothing is drawn.
    quiet = io.StringIO()
    ReplayProgress(10.0, quiet)(5.0, result)
    assert quiet.getvalue() == ""


def test_a_sweep_runs_on_a_dask_cluster(tmp_path):
    distributed = pytest.importorskip("distributed")
    out = tmp_path / "out"
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        result = kai(
            "replay", CLUSTER, "--trace", trace(tmp_path, jobs(6)), "--out", str(out),
            "--format", "csv", "--sweep", "proportion.kValue=0,1",
            "--executor", f"dask:{cluster.scheduler_address}",
        )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "2 runs on the Dask cluster" in result.output
    rows = read_csv(out / "comparison.csv")
    assert [r["jobs_finished"] for r in rows] == ["6", "6"]
    # The workers' outputs come back to this machine.
    for i in range(2):
        assert json.loads((out / f"run-{i:02d}" / "summary.json").read_text())["run"]["complete"]
        assert (out / f"run-{i:02d}" / "jobs.csv").exists()
