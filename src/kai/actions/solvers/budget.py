"""Search budgets: wall-clock limits per action, per job and per generator.

Deadlines are checked between scenarios only, so one scenario's simulation always
finishes.  A limit of 0 means unlimited.  ``max_scenarios`` is an extra, deterministic
cap on the simulated scenarios of one job (0 = unlimited).
"""

from __future__ import annotations

import time
from dataclasses import field

from kai._dataclasses import dataclass

# Defaults of the batch-scheduling model (seconds).
DEFAULT_GENERATOR_LIMITS = {"NodeLocalGreedy": 30.0, "MultiNodeGang": 120.0}


@dataclass
class SearchLimits:
    """Time and scenario limits of the victim search, per action, job and generator."""

    action: dict[str, float] = field(default_factory=dict)  # action name or "default"
    job: float = 0.0
    min_job: float = 0.0
    generators: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_GENERATOR_LIMITS))
    max_scenarios: int = 0

    @classmethod
    def for_session(cls, ssn) -> SearchLimits:
        """The configured limits, unless overridden through ``ssn.cache['solver.limits']``."""
        limits = ssn.cache.get("solver.limits")
        if isinstance(limits, SearchLimits):
            return limits
        configured = getattr(ssn.config, "search_limits", None)
        return configured if isinstance(configured, SearchLimits) else cls()


def _deadline(seconds: float, now: float) -> float:
    return now + seconds if seconds > 0 else float("inf")


class ActionBudget:
    """One per action execution."""

    def __init__(self, action: str, limits: SearchLimits, clock=time.perf_counter) -> None:
        self.limits = limits
        self.clock = clock
        limit = limits.action.get(action, limits.action.get("default", 0.0))
        self.deadline = _deadline(limit, clock())

    def exhausted(self) -> bool:
        return self.clock() >= self.deadline

    def begin_job(self) -> JobBudget:
        now = self.clock()
        deadline = self.deadline
        if self.limits.job > 0:
            deadline = min(deadline, now + self.limits.job)
        if self.limits.min_job > 0:
            deadline = max(deadline, now + self.limits.min_job)
        return JobBudget(self, deadline)


class JobBudget:
    def __init__(self, action: ActionBudget, deadline: float) -> None:
        self.action = action
        self.deadline = deadline
        self.scenarios = 0

    def exhausted(self) -> bool:
        cap = self.action.limits.max_scenarios
        if cap and self.scenarios >= cap:
            return True
        return self.action.clock() >= self.deadline

    def generator_deadline(self, name: str) -> float:
        limits = self.action.limits.generators
        limit = limits.get(name, limits.get("default", 0.0))
        return min(self.deadline, _deadline(limit, self.action.clock()))
