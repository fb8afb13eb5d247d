"""Actions: the mechanism of a scheduling cycle (allocate, reclaim, preempt, ...).

An action asks the session (and so the plugins) for every policy decision and
changes the cluster only through statements.  Each action module registers its
action when imported; :func:`register_builtins` imports them all, and the
configuration and the engine call it before they look an action name up.
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
    return _ACTIONS[name]


def action_names() -> list[str]:
    return sorted(_ACTIONS)


_builtins_loaded = False


def register_builtins() -> None:
    """Register every built-in action.

    The first call imports the action modules (so ``import kai`` does not load them);
    later calls change nothing, and an action registered afterwards under a built-in
    name replaces the built-in one.
    """
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
