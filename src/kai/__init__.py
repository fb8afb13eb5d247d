"""kai: a batch and GPU scheduling engine for Kubernetes.

Embed it without any cluster connection::

    import kai

    snapshot = kai.Snapshot.from_files(["examples/cluster.yaml"])
    result = kai.run_session(snapshot, actions=["allocate"])
    for decision in result.decisions:
        print(decision.type, decision.pod, decision.node)
"""

from typing import Any

from kai.api.errors import ConfigError, InputError, KaiError
from kai.config import SchedulerConfig
from kai.engine import (
    DecisionRecord,
    PodGroupResult,
    PodResult,
    QueueResult,
    SessionResult,
    Snapshot,
    run_session,
)
from kai.framework import Event, EventHandler, NodeInfo, Plugin, Session, register_plugin


def __getattr__(name: str) -> Any:
    # __version__ is read on first use: importlib.metadata costs a fifth of kai's import.
    if name == "__version__":
        import importlib.metadata

        try:
            # The one source of the version is pyproject.toml, in the installed metadata.
            version = importlib.metadata.version("kai")
        except importlib.metadata.PackageNotFoundError:  # a source tree never installed
            version = "0+unknown"
        globals()["__version__"] = version
        return version
    raise AttributeError(f"module 'kai' has no attribute {name!r}")


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
    "QueueResult",
    "SchedulerConfig",
    "Session",
    "SessionResult",
    "Snapshot",
    "register_plugin",
    "run_session",
]
