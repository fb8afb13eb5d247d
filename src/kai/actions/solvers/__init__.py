"""Victim search: which running pods to evict so that a pending job can run.

Used by reclaim, preempt and consolidation.  The search follows the batch-scheduling
model: candidate victim jobs are popped from the queue tree in reverse order (the job
that would be served last goes first), accumulated into ever larger victim sets that
cheap capacity filters (native kernels) prune, turned into concrete scenarios by the
registered scenario generators, and each surviving scenario is simulated exactly
through a statement (evict, re-place victims and the pending job, validate).  A
scenario that fails is rolled back completely.  Probes over a growing part of the gang
(k = 1, 2, 4, ... then binary search) keep the search logarithmic in the gang size, and
time budgets keep one job from eating the cycle.

Public entry point: :class:`JobSolver`.
"""

from kai.actions.solvers.batches import VictimBatch, tasks_to_evict
from kai.actions.solvers.budget import ActionBudget, SearchLimits
from kai.actions.solvers.generators import GENERATORS, register_generator
from kai.actions.solvers.job_solver import JobSolver, SolveResult
from kai.actions.solvers.scenario import Scenario

__all__ = [
    "GENERATORS",
    "ActionBudget",
    "JobSolver",
    "Scenario",
    "SearchLimits",
    "SolveResult",
    "VictimBatch",
    "register_generator",
    "tasks_to_evict",
]
