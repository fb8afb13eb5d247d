"""kai: a batch and GPU scheduling engine for Kubernetes.

Embed it without any cluster connection::

    import kai

    snapshot = kai.Snapshot.from_files(["examples/cluster.yaml"])
    result = kai.run_session(snapshot, actions=["allocate"])
    for decision in result.decisions:
        print(decision.type, decision.pod, decision.node)
"""

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

__all__ = [
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
