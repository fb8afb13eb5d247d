"""Test helper: record whether each allocate took the compiled loop."""

from __future__ import annotations

import pytest

import kai
from kai.actions import fast_allocate
from tests.factory import NOW


def record_fast_path(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """A list that gets, for every allocate action run from now on, whether it ran on
    the compiled loop (fast_allocate.run's answer)."""
    taken: list[bool] = []
    real_run = fast_allocate.run

    def run(ssn, jobs):
        done = real_run(ssn, jobs)
        taken.append(done)
        return done

    monkeypatch.setattr(fast_allocate, "run", run)
    return taken


def session_json(objs, actions, backend: str, fast: bool, monkeypatch) -> dict:
    """The explained JSON result of one session on ``objs``, on the compiled loop
    (``fast``) or the general path."""
    monkeypatch.setenv(fast_allocate.ENV_VAR, "1" if fast else "0")
    snapshot = kai.Snapshot.from_objects(objs)
    return kai.run_session(snapshot, actions=actions, now=NOW, backend=backend).to_json(
        explain=True
    )
