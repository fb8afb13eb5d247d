"""reclaim: a job of a queue below its fair share takes resources back from queues
above theirs.

Only jobs whose queue would stay within its fair share may reclaim
(``can_reclaim_resources``).  Victims are preemptible jobs of *other* queues that the
plugins' reclaim victim filters accept; victim sets must pass the reclaim scenario
validators (proportion's strategies and saturation check, elastic, min-runtime).
Victims are evicted (Releasing) and the reclaimer is pipelined onto what they free.
"""

from __future__ import annotations

from collections.abc import Callable

from kai.actions import register_action
from kai.actions._eviction import run_eviction_action
from kai.actions.solvers.scenario import Scenario
from kai.actions.solvers.simulate import PodStatusValidator, Validator
from kai.api.model import Job, Task
from kai.framework.session import Session


def reclaim(ssn: Session) -> None:
    def accept(reclaimer: Job, job: Job) -> bool:
        """Beyond a potential victim (valid, preemptible, running, known queue)."""
        return job.queue != reclaimer.queue and ssn.reclaim_victim_filter(reclaimer, job)

    def accept_in(reclaimer: Job, queue: str) -> Callable[[Job], bool]:
        """``accept`` for the jobs of leaf queue ``queue``."""
        if queue == reclaimer.queue:
            return lambda job: False
        return ssn.reclaim_victim_filter_in(reclaimer, queue)

    def validator(reclaimer: Job) -> Validator:
        def check(scenario: Scenario, preempted: list[Task], moved: list[Task]) -> bool:
            jobs = list(dict.fromkeys(t.job for t in preempted))
            return ssn.reclaim_scenario_valid(reclaimer, jobs, preempted)

        if ssn.validators_read_pods_only("reclaim_scenario_validator"):
            return PodStatusValidator(check)
        return check

    def refuse(job: Job) -> str | None:
        if ssn.can_reclaim_resources(job):
            return None
        return (
            f"Reclaim: not attempted, queue {job.queue!r} would exceed its fair share "
            "(or, for a non-preemptible job, its quota) with this job"
        )

    run_eviction_action(
        ssn,
        "reclaim",
        preemptible_only=False,
        refuse=refuse,
        accept=accept,
        # Leaf queues whose every job the filters refuse (by queue) are left out whole.
        accept_leaf=lambda reclaimer, queue, pool: (
            queue != reclaimer.queue and not ssn.reclaim_victim_queue_refused(reclaimer, queue)
        ),
        accept_in=accept_in,
        validator=validator,
    )


register_action("reclaim", reclaim)
