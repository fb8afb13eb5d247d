"""Freed session memory is kept for the next session (``kai.memory``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from kai.api.errors import InputError
from kai.cli import main
from kai.memory import DEFAULT_MIB, ENV_VAR, budget_mib, retain_memory

native = pytest.importorskip("kai._native")
if os.environ.get("PYTHONMALLOC"):
    pytest.skip("another object allocator than pymalloc is in use", allow_module_level=True)


# Runs in a fresh interpreter, whose heap holds no free space left by other tests: there
# a batch of small objects (as a session's tasks and jobs are) fills new arenas, and
# freeing it empties them.
_SECOND_BATCH_FAULTS = """
import resource, sys
from kai.memory import retain_memory
retain_memory(int(sys.argv[1]))
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
batch = [[i] for i in range(600_000)]  # about 60 MiB of small objects
del batch
before = faults()
batch = [[i] for i in range(600_000)]
print(faults() - before)
"""


def _faults_of_a_second_batch(budget_mib: int) -> int:
    out = subprocess.run(
        [sys.executable, "-c", _SECOND_BATCH_FAULTS, str(budget_mib)],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout)


def _objects(n: int) -> list:
    return [[i] for i in range(n)]


@pytest.fixture
def budget():
    """Restore the default budget after a test changed it."""
    yield
    retain_memory(DEFAULT_MIB)


def test_freed_arenas_are_reused_without_new_page_faults():
    without = _faults_of_a_second_batch(0)
    with_cache = _faults_of_a_second_batch(256)
    assert without > 5_000  # every arena of the second batch was mapped afresh
    assert with_cache < without / 10


def test_the_cache_never_holds_more_than_its_budget(budget):
    retain_memory(8)
    batch = _objects(600_000)
    del batch
    assert native.cached_arena_bytes() <= 8 << 20
    retain_memory(0)
    assert native.cached_arena_bytes() == 0


def test_retain_memory_says_which_allocators_took_it(budget):
    taken = retain_memory(64)
    assert taken["arenas"] is True
    assert set(taken) == {"arenas", "malloc"}
    with pytest.raises(ValueError, match="max_mib"):
        retain_memory(-1)


def test_the_budget_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert budget_mib() == 1024
    monkeypatch.setenv(ENV_VAR, "0")
    assert budget_mib() == 0
    monkeypatch.setenv(ENV_VAR, "lots")
    with pytest.raises(InputError, match=ENV_VAR):
        budget_mib()


def test_a_bad_budget_is_a_user_error_of_the_cli(monkeypatch, budget):
    monkeypatch.setenv(ENV_VAR, "-5")
    result = CliRunner().invoke(main, ["bench", "--list"])
    assert result.exit_code == 2
    assert ENV_VAR in result.output
    assert "Traceback" not in result.output
