"""Progress of long commands: rich bars on a terminal's stderr, nothing anywhere else."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from kai import bench
from kai.cli import main
from kai.output import LARGE_SIMULATION_PODS, Progress, SimulateProgress
from tests.factory import node, pod, queue


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def use_every_step(progress: Progress) -> None:
    with progress:
        bar = progress.bar("work", total=3)
        bar.phase("one")
        bar.phase("two")
        bar.advance()
        bar.finish()


def test_nothing_is_drawn_when_stderr_is_not_a_terminal() -> None:
    stream = io.StringIO()  # CI logs, pipes, files
    use_every_step(Progress(stream))
    assert stream.getvalue() == ""


def test_without_rich_a_terminal_gets_no_bars_and_no_error(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "rich", None)  # import rich fails
    stream = Terminal()
    use_every_step(Progress(stream))
    assert stream.getvalue() == ""


def test_a_dumb_terminal_gets_no_bars(monkeypatch) -> None:
    monkeypatch.setenv("TERM", "dumb")
    stream = Terminal()
    use_every_step(Progress(stream))
    assert stream.getvalue() == ""


def test_a_terminal_gets_rich_bars_that_are_erased_at_the_end() -> None:
    pytest.importorskip("rich")
    stream = Terminal()
    use_every_step(Progress(stream))
    drawn = stream.getvalue()
    assert "work" in drawn and "0/3" in drawn
    # Stopped and erased: the cursor is back and the last line drawn is cleared.
    assert drawn.index("\x1b[?25h") > drawn.rindex("0/3") and "\x1b[2K" in drawn[-12:]


def test_simulate_shows_its_phases_once_it_has_read_many_pods() -> None:
    pytest.importorskip("rich")
    stream = Terminal()
    with SimulateProgress([], Progress(stream)) as phases:
        phases.phase("loading")
        phases.loaded(LARGE_SIMULATION_PODS)
        phases.phase("scheduling")
        phases.phase("output")
    assert "kai simulate: output" in stream.getvalue()
    assert "2/3" in stream.getvalue()  # loading and scheduling done


def test_a_small_simulation_shows_nothing_even_on_a_terminal() -> None:
    stream = Terminal()
    with SimulateProgress([], Progress(stream)) as phases:
        phases.phase("loading")
        phases.loaded(LARGE_SIMULATION_PODS - 1)
        phases.phase("scheduling")
    assert stream.getvalue() == ""


def test_bench_tells_each_step_of_each_scenario() -> None:
    steps: list[str] = []
    (result,) = bench.run_bench(["kai-allocate"], "10", repeat=2, memory=False)
    assert not result.skipped
    bench.run_scenario(
        bench.SCENARIOS["kai-allocate"], "10", repeat=2, memory=True, step=steps.append
    )
    assert steps == [
        "building the cluster",
        "warm-up session",
        "session 1/2",
        "session 2/2",
        "memory",
    ]
    assert len(steps) == bench.scenario_steps(2, memory=True)


def test_cli_bench_and_simulate_write_no_progress_to_a_pipe(tmp_path: Path) -> None:
    runner = CliRunner()
    out = runner.invoke(
        main,
        ["bench", "--scenario", "kai-allocate", "--size", "10", "--repeat", "1", "--no-memory"],
    )
    assert out.exit_code == 0, out.output
    assert out.stderr == "" and "kai-allocate" in out.stdout
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all([node("n1"), queue("q"), pod("a", gpus=1, queue="q")]))
    out = runner.invoke(main, ["simulate", str(path), "--output", "table"])
    assert out.exit_code == 0, out.output
    assert out.stderr == "" and out.stdout.startswith("DECISIONS")
