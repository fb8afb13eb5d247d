"""kai without its extras: ``kai[k8s]`` (kai run) and ``kai[numba]`` (the numba backend).

Each command runs in a fresh interpreter where the extras' modules cannot be imported,
as after a plain ``pip install kai``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests._project import pyproject

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "cluster.yaml"
K8S = ("kubernetes", "prometheus_client")
NUMBA = ("numba", "llvmlite")

# Makes the modules named in argv[1] unimportable, logs at debug level, then runs the
# command line with the remaining arguments.
WRAPPER = """
import importlib.abc, logging, sys

blocked = [n for n in sys.argv[1].split(",") if n]

class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in blocked):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Missing())
logging.basicConfig(level=logging.DEBUG, format="%(levelname)s %(name)s: %(message)s")
sys.argv = ["kai", *sys.argv[2:]]
from kai.cli import main
main()
"""


def kai(*args: str, blocked=(*K8S, *NUMBA), env=None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("KAI_BACKEND", "KAI_DEBUG")}
    return subprocess.run(
        [sys.executable, "-c", WRAPPER, ",".join(blocked), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**environ, **(env or {})},
    )


def _backend_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("DEBUG kai.backends:")]


def test_simulate_needs_neither_extra() -> None:
    proc = kai("simulate", str(EXAMPLE))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["decisions"]
    (line,) = _backend_lines(proc.stderr)  # said once, though each node pool has a session
    assert "'native' by default" in line or "'python' by default" in line, line


def test_without_the_native_core_or_numba_the_python_backend_schedules() -> None:
    # A fixed clock: the two runs must not straddle a second (start-time annotations).
    now = ("--now", "2026-11-22T12:00:00Z")
    reference = kai("simulate", str(EXAMPLE), *now, "--backend", "python")
    proc = kai("simulate", str(EXAMPLE), *now, blocked=(*K8S, *NUMBA, "kai._native"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == json.loads(reference.stdout)
    (line,) = _backend_lines(proc.stderr)
    assert "kai backend 'python' by default" in line, line
    assert "pip install 'kai[numba]'" in line, line


def test_run_without_the_kubernetes_client_says_which_extra() -> None:
    proc = kai("run", "--once", "--kubeconfig", "/nonexistent")
    assert proc.returncode == 2, proc.stderr
    message = "kai run needs the Kubernetes client: pip install 'kai[k8s]'"
    assert proc.stderr == f"kai: error: {message}\n"
    assert proc.stdout == ""


def test_run_without_prometheus_client_says_which_extra() -> None:
    proc = kai("run", "--once", "--kubeconfig", "/nonexistent", blocked=("prometheus_client",))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == "kai: error: kai run needs prometheus-client: pip install 'kai[k8s]'\n"


@pytest.mark.parametrize(
    ("args", "env", "where"),
    [
        (("--backend", "numba"), {}, "--backend"),
        ((), {"KAI_BACKEND": "numba"}, "$KAI_BACKEND"),
    ],
    ids=["option", "environment"],
)
def test_the_numba_backend_without_numba_names_the_extra(args, env, where) -> None:
    proc = kai("simulate", str(EXAMPLE), *args, env=env)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        f"kai: error: {where}: kai backend 'numba' needs numba: pip install 'kai[numba]'"
    )
    assert proc.stdout == ""


def test_the_extras_hold_the_heavy_dependencies_and_dev_installs_them() -> None:
    project = pyproject()["project"]
    core = " ".join(project["dependencies"])
    for heavy in ("kubernetes", "numba", "prometheus", "matplotlib", "pyarrow", "distributed"):
        assert heavy not in core, heavy
    extras = project["optional-dependencies"]
    assert any(r.startswith("kubernetes") for r in extras["k8s"])
    assert any(r.startswith("prometheus-client") for r in extras["k8s"])
    assert any(r.startswith("numba") for r in extras["numba"])
    assert {r.split(">")[0] for r in extras["replay"]} >= {"matplotlib", "pyarrow", "plotly"}
    assert any(r.startswith("distributed") for r in extras["dask"])
    assert extras["all"] == ["kai[k8s,numba,replay,dask]"]
    assert any(r.startswith("kai[") and "all" in r for r in extras["dev"])


def test_the_image_installs_the_kubernetes_extra() -> None:
    # The image's entry point is kai run.
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert "[k8s]" in dockerfile
