"""Scheduler configuration: actions, plugin tiers and node-pool defaults.

Fields left out of a ``SchedulerConfiguration`` take KAI-Scheduler's defaults; a
``tiers`` list that is given replaces the default plugin list.  Every name is checked
when the configuration is built, so a typo is a clear error before any scheduling.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import field
from typing import Any

from kai._dataclasses import dataclass
from kai.actions import action_names
from kai.actions import register_builtins as register_builtin_actions
from kai.actions.solvers.budget import SearchLimits
from kai.api.errors import ConfigError
from kai.api.objects import PluginOption, SchedulerConfigObject
from kai.fairshare import UsageDBConfig
from kai.framework.plugin import get_plugin_builder, log_once, plugin_names
from kai.plugins import register_builtins as register_builtin_plugins

# KAI-Scheduler's default scenario search budgets (seconds; 0 = unlimited).
DEFAULT_ACTION_SEARCH = {"default": 300.0}
DEFAULT_JOB_SEARCH = 240.0
DEFAULT_GENERATOR_SEARCH = {"default": 120.0, "NodeLocalGreedy": 30.0, "MultiNodeGang": 120.0}
SEARCH_ACTIONS = ("default", "reclaim", "preempt", "consolidation")
SEARCH_GENERATORS = ("default", "NodeLocalGreedy", "MultiNodeGang")
# KAI-Scheduler's --max-consolidation-preemptees default.
MAX_CONSOLIDATION_PREEMPTEES = 16


def search_limits_from(budgets: dict | None) -> SearchLimits:
    """``scenarioSearchBudgets`` over KAI's defaults; unknown keys are errors."""
    budgets = budgets or {}
    actions = dict(DEFAULT_ACTION_SEARCH)
    actions.update(budgets.get("maxActionSearchDuration", {}))
    generators = dict(DEFAULT_GENERATOR_SEARCH)
    generators.update(budgets.get("maxGeneratorSearchDuration", {}))
    for key, known, what in (
        (actions, SEARCH_ACTIONS, "maxActionSearchDuration"),
        (generators, SEARCH_GENERATORS, "maxGeneratorSearchDuration"),
    ):
        unknown = sorted(set(key) - set(known))
        if unknown:
            raise ConfigError(
                f"unknown key(s) {', '.join(unknown)} (expected {', '.join(known)})",
                obj="SchedulerConfiguration",
                field=f"scenarioSearchBudgets.{what}",
            )
    return SearchLimits(
        action=actions,
        job=budgets.get("maxJobSearchDuration", DEFAULT_JOB_SEARCH),
        min_job=budgets.get("minJobSearchDuration", 0.0),
        generators=generators,
    )


# KAI-Scheduler's action order.  Actions not built into this kai are left out of the
# default list rather than faked.
KAI_DEFAULT_ACTIONS = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")

# KAI-Scheduler's default plugin list (one tier), in its order.
DEFAULT_PLUGINS: tuple[PluginOption, ...] = tuple(
    PluginOption(name)
    for name in (
        "predicates",
        "proportion",
        "priority",
        "elastic",
        "kubeflow",
        "ray",
        "nodeavailability",
        "gpusharingorder",
        "gpupack",
        "resourcetype",
        "taskorder",
        "nominatednode",
        "nodeplacement",
        "minruntime",
        "sg-nodelocalgreedy",
        "sg-multinodegang",
    )
)


# Actions that find their victims through the scenario generators, and the plugins
# that register those generators (in KAI's order).
EVICTION_ACTIONS = ("consolidation", "reclaim", "preempt")
SOLVER_PLUGINS = ("sg-nodelocalgreedy", "sg-multinodegang")


def _with_solvers(
    tiers: list[list[PluginOption]], actions: Sequence[str]
) -> list[list[PluginOption]]:
    """Both scenario generators added at the end of the last tier when the actions
    evict and the tiers name neither: without one, consolidation, reclaim and preempt
    would find no victims and silently evict nothing."""
    evicting = [a for a in actions if a in EVICTION_ACTIONS]
    if not evicting or any(p.name in SOLVER_PLUGINS for tier in tiers for p in tier):
        return tiers
    log_once(
        f"no scenario generator plugin is configured, without which {', '.join(evicting)} "
        f"would find no victims: adding {' and '.join(SOLVER_PLUGINS)} to the last tier"
    )
    last = tiers[-1] if tiers else []
    return [*tiers[:-1], [*last, *(PluginOption(name) for name in SOLVER_PLUGINS)]]


def _usage_db(raw: Any) -> UsageDBConfig | None:
    """``usageDBConfig`` checked, errors naming the field (KAI's names throughout)."""
    if raw is None:
        return None
    try:
        return UsageDBConfig.from_config(raw)
    except ConfigError as err:
        raise ConfigError(err.message, obj="SchedulerConfiguration", field=err.field) from None


def _with_shard_k_value(tiers: list[list[PluginOption]], raw: Any) -> list[list[PluginOption]]:
    """The scheduling shard's ``kValue`` given to every proportion plugin that sets none."""
    if raw is None or raw == "":
        return tiers
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = math.nan
    if isinstance(raw, bool) or not math.isfinite(value):
        raise ConfigError(f"{raw!r} is not a number", obj="SchedulerConfiguration", field="kValue")
    return [
        [
            PluginOption(p.name, {**p.arguments, "kValue": value})
            if p.name == "proportion" and "kValue" not in p.arguments
            else p
            for p in tier
        ]
        for tier in tiers
    ]


def check_action_names(
    names: Sequence[str], *, obj: str = "SchedulerConfiguration", field: str | None = "actions"
) -> None:
    """Raise a ConfigError for the first name that is not a registered action."""
    register_builtin_actions()
    known = action_names()
    for name in names:
        if name not in known:
            raise ConfigError(
                f"unknown action {name!r} (known: {', '.join(sorted(known))})",
                obj=obj,
                field=field,
            )


@dataclass
class SchedulerConfig:
    """A parsed scheduler configuration: actions, plugin tiers and the search settings."""

    actions: list[str]
    tiers: list[list[PluginOption]]
    queue_depth_per_action: dict[str, int] = field(default_factory=dict)
    reclaim_min_runtime: float = 0.0  # seconds, node-pool default
    preempt_min_runtime: float = 0.0
    search_limits: SearchLimits = field(default_factory=lambda: search_limits_from(None))
    # --use-scheduling-signatures: eviction actions skip jobs equivalent to failed ones.
    use_scheduling_signatures: bool = True
    # --max-consolidation-preemptees: victim jobs one consolidation may move; 0 turns
    # consolidation off, -1 lifts the limit (as KAI's own tests do).
    max_consolidation_preemptees: int = MAX_CONSOLIDATION_PREEMPTEES
    # usageDBConfig: where a live scheduler reads queues' historical usage (None: all 0).
    usage_db: UsageDBConfig | None = None

    @classmethod
    def default(cls) -> SchedulerConfig:
        return cls.from_object(None)

    @classmethod
    def from_object(
        cls, obj: SchedulerConfigObject | None, *, actions: Sequence[str] | None = None
    ) -> SchedulerConfig:
        """Build and check a configuration; what ``obj`` leaves out takes KAI's defaults.

        ``actions`` replaces the configured actions.  An error in ``obj`` names the field
        and, when ``obj`` was loaded from a file, the file and document.
        """
        if actions is not None:
            check_action_names(actions)  # not from the file: reported without it
        try:
            return cls._from_object(obj, actions)
        except ConfigError as err:
            source = obj.source if obj is not None else None
            if source is None:
                raise
            raise err.located(file=source.file, document=source.document) from None

    @classmethod
    def _from_object(
        cls, obj: SchedulerConfigObject | None, actions: Sequence[str] | None
    ) -> SchedulerConfig:
        register_builtin_actions()
        known = action_names()
        if actions is not None:
            chosen = list(actions)
        elif obj is not None and obj.actions:
            chosen = list(obj.actions)
            check_action_names(chosen)
        else:
            chosen = [a for a in KAI_DEFAULT_ACTIONS if a in known]
        if obj is not None and obj.tiers:
            tiers = [list(t) for t in obj.tiers]
        else:
            register_builtin_plugins()
            registered = set(plugin_names())
            tiers = [[p for p in DEFAULT_PLUGINS if p.name in registered]]
        tiers = _with_shard_k_value(tiers, obj.k_value if obj is not None else None)
        tiers = _with_solvers(tiers, chosen)
        depth = dict(obj.queue_depth_per_action) if obj is not None else {}
        for action, value in depth.items():
            if action not in known:
                raise ConfigError(
                    f"unknown action {action!r}",
                    obj="SchedulerConfiguration",
                    field=f"queueDepthPerAction.{action}",
                )
            if value < 0:
                raise ConfigError(
                    f"negative depth {value}",
                    obj="SchedulerConfiguration",
                    field=f"queueDepthPerAction.{action}",
                )
        config = cls(
            actions=chosen,
            tiers=tiers,
            queue_depth_per_action=depth,
            reclaim_min_runtime=(obj.reclaim_min_runtime or 0.0) if obj else 0.0,
            preempt_min_runtime=(obj.preempt_min_runtime or 0.0) if obj else 0.0,
            search_limits=search_limits_from(obj.scenario_search_budgets if obj else None),
            usage_db=_usage_db(obj.usage_db if obj is not None else None),
        )
        if obj is not None and obj.max_consolidation_preemptees is not None:
            config.max_consolidation_preemptees = obj.max_consolidation_preemptees
        config.build_plugins()  # validate names and arguments now
        return config

    def build_plugins(self) -> list[tuple[int, Any]]:
        """Instantiate the configured plugins as (tier index, plugin) pairs.

        An unknown plugin or a bad argument is a ConfigError whose field says which
        plugin of which tier (``tiers[0].plugins[2].arguments.kValue``).
        """
        register_builtin_plugins()
        built = []
        for tier_index, tier in enumerate(self.tiers):
            for index, option in enumerate(tier):
                where = f"tiers[{tier_index}].plugins[{index}]"
                try:
                    builder = get_plugin_builder(option.name)
                except ConfigError as err:
                    raise ConfigError(err.message, obj=err.obj, field=f"{where}.name") from None
                try:
                    built.append((tier_index, builder(option.arguments)))
                except ConfigError as err:
                    raise err.located(field_prefix=where) from None
        return built

    @property
    def k_value(self) -> float:
        """The proportion plugin's ``kValue`` (KAI's default 1.0 when unset)."""
        args = self.plugin_arguments("proportion") or {}
        try:
            return max(0.0, float(args.get("kValue", 1.0)))
        except (TypeError, ValueError):
            return 1.0  # build_plugins reports it

    def plugin_arguments(self, name: str) -> dict[str, Any] | None:
        for tier in self.tiers:
            for option in tier:
                if option.name == name:
                    return option.arguments
        return None
