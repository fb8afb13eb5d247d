"""Built-in plugins.

Each module registers its plugins with :func:`kai.framework.register_plugin` when it is
imported, as a user's plugin module does; :func:`register_builtins` imports them all.
The configuration (:mod:`kai.config`) calls it before it looks a plugin name up.
"""


def register_builtins() -> None:
    """Register every built-in plugin.

    The first call imports the plugin modules (so ``import kai`` does not load them);
    later calls change nothing, and a user plugin registered afterwards under a
    built-in name replaces the built-in one.
    """
    from kai.plugins import (  # noqa: F401
        examples,
        generators,
        inert,
        loadaware,
        minruntime,
        ordering,
        predicates,
        proportion,
        scoring,
        volcano,
    )
