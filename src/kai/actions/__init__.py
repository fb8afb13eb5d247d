"""Actions: the mechanism of a scheduling cycle (allocate, reclaim, preempt, ...).

An action asks the session (and so the plugins) for every policy decision and
changes the cluster only through statements.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kai.framework.session import Session

ActionFn = Callable[["Session"], None]

_ACTIONS: dict[str, ActionFn] = {}


def register_action(name: str, fn: ActionFn) -> None:
    _ACTIONS[name] = fn


def get_action(name: str) -> ActionFn:
    _load_builtins()
    return _ACTIONS[name]


def action_names() -> list[str]:
    _load_builtins()
    return sorted(_ACTIONS)


_builtins_loaded = False


def _load_builtins() -> None:
    # Importing the action modules registers them; once per process.
    global _builtins_loaded
    if _builtins_loaded:
        return
    from kai.actions import (  # noqa: F401
        allocate,
        backfill,
        consolidation,
        preempt,
        reclaim,
        stalegangeviction,
    )

    _builtins_loaded = True
