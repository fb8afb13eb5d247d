"""KAI-Scheduler plugins that have nothing to act on in kai's model.

A KAI configuration names them (several are in KAI's default plugin list), so they
load: each accepts any arguments, registers nothing, and says once, at info level,
why it has no effect.  A name that neither kai nor KAI knows stays an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kai.framework import Plugin, Session, register_plugin
from kai.framework.plugin import log_once

#: KAI plugin name -> why it has no effect in kai.
INERT_PLUGINS: dict[str, str] = {
    "subgrouporder": "kai has no pod subgroups (every pod group is one gang)",
    "dynamicresources": "kai does not read dynamic resource claims",
    "topology": "kai does not read Topology objects or topology constraints",
    "snapshot": "kai takes snapshots with `kubectl get -o yaml`, not over HTTP",
    "podaffinity": "kai does not score inter-pod affinity",
    "numa": "kai does not model NUMA zones",
    "reflectjoborder": "kai serves no job-order endpoint",
}


class InertPlugin(Plugin):
    """A KAI plugin accepted by name only."""

    arguments = None  # KAI's arguments for it, whatever they are
    native_allocate = True  # registers nothing

    def __init__(self, name: str, args: Mapping[str, Any] | None = None) -> None:
        self.name = name
        super().__init__(args)

    def on_session_open(self, ssn: Session) -> None:
        log_once(f"plugin {self.name} has no effect in kai: {INERT_PLUGINS[self.name]}")


def _builder(name: str):
    return lambda args: InertPlugin(name, args)


for _name in INERT_PLUGINS:
    register_plugin(_name, _builder(_name))
