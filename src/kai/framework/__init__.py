"""Sessions, statements and the plugin mechanism."""

from kai.framework.plugin import Plugin, get_plugin_builder, plugin_names, register_plugin
from kai.framework.session import Decision, Event, EventHandler, NodeInfo, Session
from kai.framework.statement import Statement

__all__ = [
    "Decision",
    "Event",
    "EventHandler",
    "NodeInfo",
    "Plugin",
    "Session",
    "Statement",
    "get_plugin_builder",
    "plugin_names",
    "register_plugin",
]
