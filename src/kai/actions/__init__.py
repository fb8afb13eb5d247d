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


def _load_builtins() -> None:
    from kai.actions import allocate, backfill  # noqa: F401

    for optional in ("reclaim", "preempt", "consolidation", "stalegangeviction"):
        try:
            __import__(f"kai.actions.{optional}")
        except ModuleNotFoundError as err:
            if err.name != f"kai.actions.{optional}":
                raise
