"""kai: a batch and GPU scheduling engine for Kubernetes.

Embed it without any cluster connection::

    import kai

    snapshot = kai.Snapshot.from_files(["examples/cluster.yaml"])
    result = kai.run_session(snapshot, actions=["allocate"])
    for decision in result.decisions:
        print(decision.type, decision.pod, decision.node)
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kai.api.errors import ConfigError, InputError, KaiError
    from kai.config import SchedulerConfig
    from kai.engine import (
        DecisionRecord,
        PodGroupResult,
        PodResult,
        PodResults,
        QueueResult,
        SessionResult,
        Snapshot,
        run_session,
    )
    from kai.framework import Event, EventHandler, NodeInfo, Plugin, Session, register_plugin

# What ``import kai`` exposes, and the module each name comes from.  A name's module is
# imported when the name is first read, so that ``import kai.cli`` (or any other
# submodule) does not load the engine and numpy before it needs them.
_EXPORTS = {
    "ConfigError": "kai.api.errors",
    "InputError": "kai.api.errors",
    "KaiError": "kai.api.errors",
    "SchedulerConfig": "kai.config",
    "DecisionRecord": "kai.engine",
    "PodGroupResult": "kai.engine",
    "PodResult": "kai.engine",
    "PodResults": "kai.engine",
    "QueueResult": "kai.engine",
    "SessionResult": "kai.engine",
    "Snapshot": "kai.engine",
    "run_session": "kai.engine",
    "Event": "kai.framework",
    "EventHandler": "kai.framework",
    "NodeInfo": "kai.framework",
    "Plugin": "kai.framework",
    "Session": "kai.framework",
    "register_plugin": "kai.framework",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is not None:
        value = getattr(import_module(module), name)
    elif name == "__version__":
        # Read on first use: importlib.metadata costs a fifth of kai's import.
        import importlib.metadata

        try:
            # The one source of the version is pyproject.toml, in the installed metadata.
            value = importlib.metadata.version("kai")
        except importlib.metadata.PackageNotFoundError:  # a source tree never installed
            value = "0+unknown"
    else:
        raise AttributeError(f"module 'kai' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "__version__",
    "ConfigError",
    "DecisionRecord",
    "Event",
    "EventHandler",
    "InputError",
    "KaiError",
    "NodeInfo",
    "Plugin",
    "PodGroupResult",
    "PodResult",
    "PodResults",
    "QueueResult",
    "SchedulerConfig",
    "Session",
    "SessionResult",
    "Snapshot",
    "register_plugin",
    "run_session",
]
