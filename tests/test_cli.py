"""``kai simulate``: output formats and exit codes."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from kai.cli import main
from tests.factory import gang, node, pod, queue

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "cluster.yaml"


def write(tmp_path: Path, objs, name="cluster.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(objs))
    return str(path)


def invoke(*args):
    return CliRunner().invoke(main, list(args))


def test_a_pod_on_a_node_the_snapshot_lacks_is_a_warning_on_stderr(tmp_path):
    objs = [node("n1"), queue("q"), pod("a", gpus=1, queue="q")]
    objs.append(pod("lost", gpus=1, queue="q", node="gone", phase="Running"))
    path = write(tmp_path, objs)
    result = invoke("simulate", path, "--now", "2026-11-22T12:00:00Z")
    assert result.exit_code == 0, result.output
    assert result.stderr == "kai: warning: pod default/lost is on unknown node 'gone'\n"
    out = json.loads(result.stdout)  # the document alone on stdout
    assert out["pods"]["default/lost"] == {"status": "Running", "node": "gone"}
    assert out["pods"]["default/a"] == {"status": "Binding", "node": "n1"}


def test_json_output_is_one_document_with_every_section(tmp_path):
    path = write(tmp_path, [node("n1"), queue("q"), pod("a", gpus=1, queue="q")])
    result = invoke("simulate", path, "--now", "2026-11-22T12:00:00Z")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert set(out) == {"decisions", "pods", "podGroups", "queues"}
    assert out["pods"]["default/a"] == {"status": "Binding", "node": "n1"}
    assert out["podGroups"]["default/a"]["preemptible"] is True
    assert out["queues"]["q"]["allocated"] == {"gpu": 1.0, "cpu": 1000.0, "memory": 1e9}


def test_the_bundled_example_runs_in_table_mode_with_explain():
    result = invoke(
        "simulate", str(EXAMPLE), "--output", "table", "--explain", "--now", "2026-11-22T12:00:00Z"
    )
    assert result.exit_code == 0, result.output
    assert "DECISIONS" in result.output and "WHY PENDING" in result.output
    assert "QueueDoesNotExist" in result.output


def test_explain_in_json_lists_the_reasons(tmp_path):
    path = write(tmp_path, [node("n1", gpus=8), queue("q"), *gang("big", 2, gpus=8)])
    out = json.loads(invoke("simulate", path, "--explain").stdout)
    explain = out["podGroups"]["default/big"]["explain"]
    assert any("gang" in line and "1 insufficient resources" in line for line in explain)


def test_actions_override_and_single_action(tmp_path):
    path = write(tmp_path, [node("n1"), queue("q"), pod("a", gpus=1, queue="q")])
    out = json.loads(invoke("simulate", path, "--actions", "backfill").stdout)
    assert out["pods"]["default/a"]["status"] == "Pending"  # not best-effort
    assert invoke("simulate", path, "--actions", "allocate").exit_code == 0


def test_bad_inputs_exit_2_with_a_message_and_no_traceback(tmp_path):
    good = write(tmp_path, [node("n1")])
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("kind: Node\n  metadata: [\n")
    cycle = write(tmp_path, [queue("a", parent="b"), queue("b", parent="a")], "cycle.yaml")
    orphan = write(tmp_path, [queue("a", parent="ghost")], "orphan.yaml")
    neg = write(tmp_path, [pod("a", cpu="-1")], "neg.yaml")
    dup = write(tmp_path, [node("n1"), node("n1")], "dup.yaml")
    cases = [
        (("simulate", str(bad_yaml)), "bad.yaml"),
        (("simulate", cycle), "cycle"),
        (("simulate", orphan), "ghost"),
        (("simulate", neg), "requests"),
        (("simulate", dup), "n1"),
        (("simulate", good, "--actions", "allocate,teleport"), "teleport"),
        (("simulate", good, "--now", "yesterday"), "--now"),
        (("simulate", str(tmp_path / "missing.yaml")), "missing.yaml"),
        (("simulate", good, "--output", "xml"), "xml"),
    ]
    for args, needle in cases:
        result = invoke(*args)
        assert result.exit_code == 2, (args, result.output)
        assert needle in result.output, (args, result.output)
        assert "Traceback" not in result.output


def test_config_file_option(tmp_path):
    path = write(
        tmp_path,
        [
            node("n1"),
            node("n2"),
            queue("q"),
            pod("busy", gpus=4, node="n1", queue="q"),
            pod("a", gpus=1, queue="q"),
        ],
    )
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "actions": "allocate",
                "tiers": [
                    {
                        "plugins": [
                            {"name": "predicates"},
                            {"name": "proportion"},
                            {"name": "nodeplacement", "arguments": {"gpu": "spread"}},
                        ]
                    }
                ],
            }
        )
    )
    out = json.loads(invoke("simulate", path, "--config", str(config)).stdout)
    assert out["pods"]["default/a"]["node"] == "n2"


CONFIG_HEADER = "apiVersion: kai.scheduler/v1\nkind: SchedulerConfiguration\n"


@pytest.mark.parametrize(
    ("body", "field", "needle"),
    [
        ("actions: allocate, teleport\n", "field actions", "teleport"),
        ("actions: 5\n", "field actions", "a comma-separated string or a list"),
        (
            "tiers:\n- plugins:\n  - name: predicates\n  - name: nope\n",
            "field tiers[0].plugins[1].name",
            "unknown plugin 'nope'",
        ),
        (
            "tiers:\n- plugins: [predicates]\n- plugins:\n  - name: proportion\n"
            "    arguments: {kValue: lots}\n",
            "field tiers[1].plugins[0].arguments.kValue",
            "'lots' is not a number",
        ),
        (
            "tiers:\n- plugins:\n  - name: nodeplacement\n    arguments: {gpux: spread}\n",
            "field tiers[0].plugins[0].arguments",
            "unknown argument(s) gpux",
        ),
        ("queueDepthPerAction: {dance: 3}\n", "field queueDepthPerAction.dance", "dance"),
        (
            "scenarioSearchBudgets:\n  maxActionSearchDuration: {dance: 1s}\n",
            "field scenarioSearchBudgets.maxActionSearchDuration",
            "dance",
        ),
        ("reclaimMinRuntime: soon\n", "field reclaimMinRuntime", "soon"),
    ],
    ids=[
        "unknown-action",
        "actions-not-a-list",
        "unknown-plugin",
        "bad-argument-value",
        "unknown-argument",
        "depth-of-unknown-action",
        "unknown-budget-key",
        "bad-duration",
    ],
)
@pytest.mark.parametrize("form", ["object", "bare"])
def test_config_file_errors_name_the_file_and_the_field(tmp_path, body, field, needle, form):
    cluster = write(tmp_path, [node("n1"), queue("q")])
    config = tmp_path / "my-config.yaml"
    config.write_text((CONFIG_HEADER if form == "object" else "") + body)
    for args in (
        ("simulate", cluster, "--config", str(config)),
        ("run", "--once", "--scheduler-conf", str(config), "--kubeconfig", "/nonexistent"),
    ):
        result = invoke(*args)
        assert result.exit_code == 2, (args, result.output)
        message = result.output.strip()
        assert message.startswith(f"kai: error: {config}, document 0, "), message
        assert field in message and needle in message, message
        assert "Traceback" not in result.output


def test_actions_option_errors_name_the_option_not_a_file(tmp_path):
    cluster = write(tmp_path, [node("n1")])
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG_HEADER + "actions: allocate\n")
    result = invoke("simulate", cluster, "--config", str(config), "--actions", "allocate,dance")
    assert result.exit_code == 2
    assert result.output.startswith("kai: error: --actions: unknown action 'dance'")


def test_version_attribute_matches_the_command_line():
    import importlib.metadata

    import kai

    assert kai.__version__ == importlib.metadata.version("kai")
    result = invoke("--version")
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"kai, version {kai.__version__}"


KAI = [sys.executable, "-m", "kai.cli"]


@pytest.mark.parametrize("output", ["json", "table"])
def test_a_simulation_in_a_process_of_its_own_prints_its_whole_result(tmp_path, output):
    # The command leaves without freeing the snapshot and the result: what it buffered
    # for stdout is still written, all of it, and the status is 0.
    path = write(
        tmp_path, [node("n1"), queue("q")] + [pod(f"p{i}", queue="q") for i in range(3000)]
    )
    args = ["simulate", path, "--output", output, "--now", "2026-01-01T00:00:00Z"]
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    proc = subprocess.run([*KAI, *args], capture_output=True, timeout=120, env=buffered)
    assert proc.returncode == 0
    assert proc.stderr == b""
    in_process = CliRunner().invoke(main, args)
    assert in_process.exit_code == 0
    assert proc.stdout.decode() == in_process.output


def test_json_written_to_a_text_stream_without_bytes_beneath(monkeypatch):
    # kai simulate embedded where stdout is a text object only (no .buffer to write
    # bytes to) prints the same JSON.
    args = ["simulate", str(EXAMPLE), "--now", "2026-01-01T00:00:00Z"]
    text = io.StringIO()
    monkeypatch.setattr(sys, "stdout", text)
    with pytest.raises(SystemExit) as exited:
        main(args)
    monkeypatch.undo()
    assert exited.value.code == 0
    assert text.getvalue() == CliRunner().invoke(main, args).output
    assert json.loads(text.getvalue())["decisions"]


def test_the_command_loads_numpy_late_and_starts_no_blas_threads():
    # Importing the command line loads no numpy; the command then loads it with
    # OpenBLAS on one thread (kai calls no BLAS routine), unless the user chose.
    code = (
        "import os, sys\n"
        "import kai.cli as cli\n"
        "assert 'numpy' not in sys.modules\n"
        "def main():\n"
        "    import numpy\n"
        "    print(len(os.listdir('/proc/self/task')), os.environ['OPENBLAS_NUM_THREADS'])\n"
        "cli.main = main\n"
        "cli.entry()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [b"1", b"1"]
    env["OPENBLAS_NUM_THREADS"] = "2"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, timeout=60)
    assert proc.stdout.split()[1] == b"2"


def test_a_reader_that_closed_first_ends_the_command_quietly_with_141():
    read_end, write_end = os.pipe()
    os.close(read_end)  # nobody will read: the first write fails
    try:
        proc = subprocess.run(
            [*KAI, "simulate", str(EXAMPLE)], stdout=write_end, stderr=subprocess.PIPE, timeout=120
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 141
    assert proc.stderr == b""


def test_piped_into_head_exits_quietly(tmp_path):
    # More output than a pipe holds, so the command is still writing when head exits.
    path = write(
        tmp_path, [node("n1"), queue("q")] + [pod(f"p{i}", queue="q") for i in range(3000)]
    )
    proc = subprocess.Popen(
        [*KAI, "simulate", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    head = [proc.stdout.readline() for _ in range(3)]
    proc.stdout.close()
    stderr = proc.stderr.read()
    assert proc.wait(timeout=120) == 141
    assert head[0] == b"{\n"
    assert stderr == b""
