"""kai: a batch and GPU scheduling engine for Kubernetes.

Embed it without any cluster connection::

    import kai

    snapshot = kai.Snapshot.from_files(["examples/cluster.yaml"])
    result = kai.run_session(snapshot, actions=["allocate"])
    for decision in result.decisions:
        print(decision.type, decision.pod, decision.node)
"""

import importlib.metadata as _metadata

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

try:
    # The one source of the version is pyproject.toml, read from the installed metadata.
    __version__: str = _metadata.version("kai")
except _metadata.PackageNotFoundError:  # imported from a source tree never installed
    __version__ = "0+unknown"

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
