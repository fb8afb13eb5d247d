"""kai is a typed package, and CI type-checks it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests._project import pyproject

ROOT = Path(__file__).resolve().parents[1]


def test_the_package_says_it_is_typed() -> None:
    # PEP 561: without the marker, checkers ignore kai's annotations where it is installed.
    package = ROOT / "src" / "kai"
    assert (package / "py.typed").is_file()
    # The compiled core has a stub, so that `from kai import _native` type-checks.
    assert (package / "_native.pyi").is_file()


def test_ci_type_checks_after_the_linters() -> None:
    lines = [line.split("#")[0].strip() for line in (ROOT / "ci" / "test").read_text().split("\n")]
    assert "mypy src/kai" in lines
    assert lines.index("ruff format --check .") < lines.index("mypy src/kai")
    assert lines.index("mypy src/kai") < next(i for i, x in enumerate(lines) if "pytest" in x)
    assert ".mypy_cache/" in (ROOT / ".gitignore").read_text().split()
    config = pyproject()
    assert config["tool"]["mypy"]["python_version"] == "3.10"
    assert any(r.startswith("mypy>=") for r in config["project"]["optional-dependencies"]["dev"])


def test_mypy_passes() -> None:
    pytest.importorskip("mypy")
    # Incremental: .mypy_cache makes a run after ci/test's own take under a second.
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "src/kai"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
