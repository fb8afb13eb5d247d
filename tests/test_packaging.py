"""The source distribution holds what a build needs, and a wheel builds from it.

The sdist is built with scikit-build-core's PEP 517 hook (no network, no build
isolation); the wheel with ``pip wheel --no-build-isolation`` from the unpacked sdist.
The wheel's CMake build tree is kept under ``build/sdist-check/`` so that later runs
recompile only the sources whose bytes changed.
"""

from __future__ import annotations

import ast
import fcntl
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._project import pyproject

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.packaging,
    pytest.mark.skipif(
        not (ROOT / "pyproject.toml").is_file() or not (ROOT / "native").is_dir(),
        reason="needs the source tree",
    ),
]

# Top-level entries of the sdist: the package, the C++ core and its build files.
SDIST_TOP = {
    "src",
    "native",
    "CMakeLists.txt",
    "pyproject.toml",
    "README.md",
    "LICENSE",
    "PKG-INFO",
}
JUNK_SUFFIXES = (".o", ".a", ".so", ".pyc", ".pyd")


def build_sdist(source: Path, out: Path) -> Path:
    pytest.importorskip("scikit_build_core")
    out.mkdir(parents=True, exist_ok=True)
    code = "import sys; from scikit_build_core.build import build_sdist; build_sdist(sys.argv[1])"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(out)],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (archive,) = out.glob("*.tar.gz")
    return archive


def members(archive: Path) -> list[str]:
    """File paths inside the sdist, without its top directory (``kai-0.1.0/``)."""
    with tarfile.open(archive) as tar:
        names = [m.name for m in tar.getmembers() if m.isfile()]
    return sorted(name.split("/", 1)[1] for name in names)


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_sdist(ROOT, tmp_path_factory.mktemp("sdist"))


def test_sdist_holds_only_what_a_build_needs(sdist: Path) -> None:
    files = members(sdist)
    assert {f.split("/", 1)[0] for f in files} == SDIST_TOP
    assert "CMakeLists.txt" in files and "LICENSE" in files and "README.md" in files
    assert "src/kai/__init__.py" in files
    assert "src/kai/py.typed" in files and "src/kai/_native.pyi" in files
    assert any(f.startswith("native/src/") and f.endswith(".cpp") for f in files)
    junk = [f for f in files if f.endswith(JUNK_SUFFIXES) or "__pycache__" in f]
    assert junk == []
    with tarfile.open(sdist) as tar:
        (info,) = (m for m in tar.getmembers() if m.name.endswith("/PKG-INFO"))
        extracted = tar.extractfile(info)
        assert extracted is not None
        pkg_info = extracted.read().decode()
    assert "License-Expression: Apache-2.0" in pkg_info
    assert "License-File: LICENSE" in pkg_info
    assert "Description-Content-Type: text/markdown" in pkg_info


def test_sdist_leaves_out_build_outputs_wherever_they_are(tmp_path: Path) -> None:
    # A tree with the project's build configuration and the junk a working tree gathers.
    tree = tmp_path / "tree"
    for name in ("pyproject.toml", "CMakeLists.txt", "README.md", "LICENSE"):
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tree / name)
    wanted = ["src/kai/__init__.py", "native/src/fit.cpp", "native/include/kai/fit.hpp"]
    junk = [
        ".venv/lib/python3/site-packages/pkg/CMakeLists.txt",
        ".venv/lib/python3/site-packages/pkg/native/x.cpp",
        "build/cp311-cp311-linux_x86_64/CMakeFiles/_native.dir/native/src/fit.cpp.o",
        "build/cp311-cp311-linux_x86_64/CMakeCache.txt",
        "dist/kai-0.1.0.tar.gz",
        "native/src/fit.o",
        "native/CMakeFiles/x.txt",
        "src/kai/_native.cpython-311-x86_64-linux-gnu.so",
        "src/kai/__pycache__/cli.cpython-311.pyc",
        "docs/guide.md",
        "tests/test_x.py",
    ]
    for rel in wanted + junk:
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text("x\n")
    files = members(build_sdist(tree, tmp_path / "out"))
    expected = {"pyproject.toml", "CMakeLists.txt", "README.md", "LICENSE", "PKG-INFO", *wanted}
    assert set(files) == expected


def _sync_tree(archive: Path, dest: Path) -> Path:
    """Make ``dest`` hold exactly the sdist's files; rewrite only those whose bytes changed.

    The sdist's timestamps are fixed (reproducible builds), so a build cache cannot go
    by them: a file is written only when its content differs, which gives it a new
    mtime, and a kept build tree recompiles exactly what changed.
    """
    wanted: dict[Path, bytes] = {}
    with tarfile.open(archive) as tar:
        for info in tar.getmembers():
            if not info.isfile():
                continue
            rel = Path(info.name.split("/", 1)[1])
            assert not rel.is_absolute() and ".." not in rel.parts, info.name
            data = tar.extractfile(info)
            assert data is not None
            wanted[rel] = data.read()
    for rel, data in wanted.items():
        path = dest / rel
        if not path.is_file() or path.read_bytes() != data:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    if dest.is_dir():
        for path in sorted(dest.rglob("*"), reverse=True):
            if path.is_file() and path.relative_to(dest) not in wanted:
                path.unlink()
            elif path.is_dir() and not any(path.iterdir()):
                path.rmdir()
    return dest


@pytest.fixture
def build_cache() -> Iterator[Path]:
    """``build/sdist-check/``, held with a lock against a concurrent test run."""
    cache = ROOT / "build" / "sdist-check"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield cache


def test_a_wheel_builds_from_the_unpacked_sdist(
    sdist: Path, build_cache: Path, tmp_path: Path
) -> None:
    pytest.importorskip("pybind11")
    source = _sync_tree(sdist, build_cache / "source")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            f"--config-settings=build-dir={build_cache / 'cmake' / '{wheel_tag}'}",
            "--wheel-dir",
            str(tmp_path),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = tmp_path.glob("kai-*.whl")
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
        (metadata,) = (n for n in names if n.endswith(".dist-info/METADATA"))
        text = whl.read(metadata).decode()
    assert any(n.startswith("kai/_native") and n.endswith(".so") for n in names)
    # Typed (PEP 561): the marker and the compiled core's stub.
    assert "kai/py.typed" in names and "kai/_native.pyi" in names
    # kai run's client and numba are extras, not requirements.
    requires = [line for line in text.splitlines() if line.startswith("Requires-Dist:")]
    assert 'Requires-Dist: kubernetes>=28; extra == "k8s"' in requires, requires
    assert 'Requires-Dist: numba>=0.59; extra == "numba"' in requires, requires
    assert not [r for r in requires if "extra ==" not in r and ("kube" in r or "numba" in r)]
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "License-Expression: Apache-2.0" in text
    assert "kai simulate" in text  # the README is the long description


def _top_level_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_cibuildwheel_runs_tests_against_the_installed_wheel() -> None:
    config = pyproject()["tool"]["cibuildwheel"]
    commands = config["test-command"]
    commands = [commands] if isinstance(commands, str) else commands
    runs = [c for c in commands if c.split()[0] == "pytest" or c.startswith("python -m pytest")]
    assert runs, commands
    files = [ROOT / p for p in re.findall(r"\{project\}/(\S+\.py)", " ".join(runs))]
    assert files and all(f.is_file() for f in files), files
    # Each test runs with the wheel's runtime dependencies, its test-extras and
    # test-requires only.
    project = pyproject()["project"]
    requirements = [*project["dependencies"], *config["test-requires"]]
    extras = list(config.get("test-extras", []))
    while extras:
        for requirement in project["optional-dependencies"][extras.pop()]:
            if requirement.startswith("kai["):  # an extra made of other extras
                extras += requirement[4:-1].split(",")
            else:
                requirements.append(requirement)
    dists = {re.split(r"[<>=!~ \[;]", r, maxsplit=1)[0].lower() for r in requirements}
    module_of = {"pyyaml": "yaml", "prometheus-client": "prometheus_client"}
    allowed = {module_of.get(d, d) for d in dists} | {"kai", "tests", "_pytest", "__future__"}
    helpers = [ROOT / "tests" / n for n in ("conftest.py", "factory.py", "_kai_cluster.py")]
    for path in files + helpers:
        missing = _top_level_imports(path) - allowed - set(sys.stdlib_module_names)
        assert not missing, (path.name, missing)
