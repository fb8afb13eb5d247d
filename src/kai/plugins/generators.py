"""Scenario generator plugins: ``sg-nodelocalgreedy`` and ``sg-multinodegang``.

Each puts its generator's name on the session; the victim solver runs the registered
generators in that order (see :mod:`kai.actions.solvers.generators`).  A name registered twice
is kept once.
"""

from __future__ import annotations

from kai.framework import Plugin, Session, register_plugin


class _GeneratorPlugin(Plugin):
    generator = ""
    native_allocate = True  # no role in allocate

    def on_session_open(self, ssn: Session) -> None:
        if any(reg.fn == self.generator for reg in ssn.registered("scenario_generator")):
            return
        ssn.add_scenario_generator(self.generator)


class NodeLocalGreedyPlugin(_GeneratorPlugin):
    name = "sg-nodelocalgreedy"
    generator = "NodeLocalGreedy"


class MultiNodeGangPlugin(_GeneratorPlugin):
    name = "sg-multinodegang"
    generator = "MultiNodeGang"


register_plugin("sg-nodelocalgreedy", NodeLocalGreedyPlugin)
register_plugin("sg-multinodegang", MultiNodeGangPlugin)
