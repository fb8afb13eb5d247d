"""ci/setup says what it does on first setup and runs pip only when something changed.

The script runs in a scratch copy of the project layout against a stand-in
interpreter: ``python -m venv`` makes a fake ``.venv`` whose ``python -m pip`` only
records its arguments, and every other ``python`` call goes to the real interpreter
(the script hashes its inputs with it).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    not (ROOT / "ci" / "setup").is_file() or shutil.which("bash") is None,
    reason="needs the source tree and bash",
)

VENV_PYTHON = """#!/usr/bin/env bash
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
    echo "pip ${*:3}" >>"$FAKE_PIP_LOG"
    [ -z "${FAKE_PIP_FAIL:-}" ] || exit 1
    case " $* " in *" -e "*) printf '#!/bin/sh\\n' >"$(dirname "$0")/kai"
                           chmod +x "$(dirname "$0")/kai" ;; esac
    exit 0
fi
if [ "$1" = "-c" ]; then echo "kai backends available: fake"; exit 0; fi
exec "$REAL_PYTHON" "$@"
"""

BASE_PYTHON = """#!/usr/bin/env bash
if [ "$1" = "--version" ]; then echo "Python 3 (stand-in)"; exit 0; fi
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
    mkdir -p "$3/bin"
    echo "export PATH=\\"$(cd "$3" && pwd)/bin:\\$PATH\\"" >"$3/bin/activate"
    cp "$FAKE_VENV_PYTHON" "$3/bin/python"
    chmod +x "$3/bin/python"
    exit 0
fi
exec "$REAL_PYTHON" "$@"
"""


def _executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


class Project:
    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "project"
        (self.root / "ci").mkdir(parents=True)
        shutil.copy(ROOT / "ci" / "setup", self.root / "ci" / "setup")
        (self.root / "pyproject.toml").write_text('[project]\nname = "kai"\n')
        (self.root / "CMakeLists.txt").write_text("project(kai_native)\n")
        (self.root / "native" / "src").mkdir(parents=True)
        (self.root / "native" / "src" / "fit.cpp").write_text("int fit() { return 0; }\n")
        self.log = tmp_path / "pip.log"
        self.log.write_text("")
        tools = tmp_path / "tools"
        tools.mkdir()
        self.env = {
            **os.environ,
            "REAL_PYTHON": sys.executable,
            "FAKE_PIP_LOG": str(self.log),
            "FAKE_VENV_PYTHON": str(_executable(tools / "venv-python", VENV_PYTHON)),
            "PYTHON": str(_executable(tools / "python3", BASE_PYTHON)),
        }
        self.env.pop("VIRTUAL_ENV", None)

    def setup(self, **env: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
        """Run ci/setup; return its result and the pip commands it ran."""
        before = len(self.log.read_text().splitlines())
        proc = subprocess.run(
            ["bash", "ci/setup"],
            cwd=self.root,
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=120,
        )
        return proc, self.log.read_text().splitlines()[before:]


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path)


def test_first_setup_says_what_it_does_and_installs(project: Project) -> None:
    proc, pip = project.setup()
    assert proc.returncode == 0, proc.stderr
    for step in ("creating .venv", "installing", "building the native core"):
        assert step in proc.stderr, proc.stderr
    assert any(" -e .[dev]" in f" {cmd}" for cmd in pip), pip
    assert (project.root / ".venv" / ".kai-setup").is_file()


def test_nothing_changed_runs_no_pip_and_prints_nothing(project: Project) -> None:
    assert project.setup()[0].returncode == 0
    proc, pip = project.setup()
    assert (proc.returncode, pip, proc.stdout, proc.stderr) == (0, [], "", "")
    # Rewriting a file with the same bytes is no change.
    pyproject = project.root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text())
    assert project.setup()[1] == []


@pytest.mark.parametrize(
    "change",
    ["pyproject.toml", "CMakeLists.txt", "native/src/fit.cpp", "native/include/new.hpp"],
)
def test_a_change_to_what_the_install_depends_on_reinstalls(project: Project, change: str) -> None:
    assert project.setup()[0].returncode == 0
    path = project.root / change
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text((path.read_text() if path.exists() else "") + "// changed\n")
    proc, pip = project.setup()
    assert proc.returncode == 0, proc.stderr
    assert any(" -e .[dev]" in f" {cmd}" for cmd in pip), pip
    assert "creating .venv" not in proc.stderr
    assert project.setup()[1] == []


def test_a_failed_install_is_retried_next_time(project: Project) -> None:
    assert project.setup()[0].returncode == 0
    (project.root / "native" / "src" / "fit.cpp").write_text("int fit() { return 1; }\n")
    proc, pip = project.setup(FAKE_PIP_FAIL="1")
    assert proc.returncode != 0 and pip
    assert not (project.root / ".venv" / ".kai-setup").exists()
    proc, pip = project.setup()
    assert proc.returncode == 0 and any(" -e .[dev]" in f" {cmd}" for cmd in pip)


def test_a_missing_install_is_redone(project: Project) -> None:
    assert project.setup()[0].returncode == 0
    (project.root / ".venv" / "bin" / "kai").unlink()
    assert project.setup()[1] != []
