"""Plugins and their registry.

A plugin is built by name from the scheduler configuration with its ``arguments``
(the builder pattern), and in :meth:`Plugin.on_session_open` registers functions at
the session's extension points.  Users register their own plugins with
:func:`register_plugin`; the built-in ones are registered by
:func:`kai.plugins.register_builtins`, which the configuration calls before it looks a
name up (this module never imports the plugins).
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kai.api.errors import ConfigError

if TYPE_CHECKING:
    from kai.framework.session import Session


class Plugin:
    """Base class of scheduler plugins.

    Subclasses set :attr:`name`, may declare the argument names they accept in
    :attr:`arguments` (anything else is a configuration error) and override the
    session hooks.
    """

    name: str = ""
    #: Accepted argument names; None accepts anything.
    arguments: tuple[str, ...] | None = ()
    #: Built-in plugins whose allocate-time behaviour the native allocate loop reproduces
    #: (kai.actions.fast_allocate); a session with any other plugin takes the slow path.
    native_allocate: bool = False

    def __init__(self, args: Mapping[str, Any] | None = None) -> None:
        self.args: dict[str, Any] = dict(args or {})
        if self.arguments is not None:
            unknown = sorted(set(self.args) - set(self.arguments))
            if unknown:
                accepted = ", ".join(self.arguments) or "none"
                raise ConfigError(
                    f"unknown argument(s) {', '.join(unknown)} (accepted: {accepted})",
                    obj=f"plugin {self.name}",
                    field="arguments",
                )

    def on_session_open(self, ssn: Session) -> None:
        """Register extension-point functions; called once per session."""

    def on_session_close(self, ssn: Session) -> None:
        """Clean up or report; called once per session."""

    # Helpers for argument parsing with errors that name the plugin and argument.
    def arg_float(self, key: str, default: float) -> float:
        value = self.args.get(key, default)
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(
                f"{value!r} is not a number", obj=f"plugin {self.name}", field=f"arguments.{key}"
            ) from None

    def arg_choice(self, key: str, default: str, choices: tuple[str, ...]) -> str:
        value = str(self.args.get(key, default)).strip()
        if value not in choices:
            raise ConfigError(
                f"{value!r} is not one of {', '.join(choices)}",
                obj=f"plugin {self.name}",
                field=f"arguments.{key}",
            )
        return value


PluginBuilder = Callable[[Mapping[str, Any]], Plugin]

_REGISTRY: dict[str, PluginBuilder] = {}


def register_plugin(name: str, builder: PluginBuilder) -> None:
    """Make a plugin available to configurations under ``name``."""
    _REGISTRY[name] = builder


def get_plugin_builder(name: str) -> PluginBuilder:
    try:
        return _REGISTRY[name]
    except KeyError:
        # An error, not a skipped plugin: a misspelt name would silently drop a policy.
        close = difflib.get_close_matches(name, _REGISTRY, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ConfigError(
            f"unknown plugin {name!r} ({hint}known: {', '.join(sorted(_REGISTRY))})",
            obj=f"plugin {name}",
            field="tiers[].plugins[].name",
        ) from None


def plugin_names() -> list[str]:
    return sorted(_REGISTRY)


# Configuration messages (from the configuration and from plugins) keep the logger
# they have always had.
_log = logging.getLogger("kai.config")
_logged: set[str] = set()


def log_once(message: str) -> None:
    """Log ``message`` at info level the first time only (configurations are parsed
    again for every snapshot and every cycle of ``kai run``)."""
    if message not in _logged:
        _logged.add(message)
        _log.info(message)
