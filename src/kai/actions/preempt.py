"""preempt: inside one queue, a pending job evicts preemptible jobs of lower priority.

A non-preemptible preemptor must fit its queue's quota (non-preemptible usage within
deserved at every level).  Victims: preemptible jobs of the same queue with strictly
lower priority that the preempt victim filters accept; victim sets must pass the
preempt scenario validators (elastic, min-runtime).
"""

from __future__ import annotations

from kai.actions import register_action
from kai.actions._eviction import run_eviction_action
from kai.actions.solvers.scenario import Scenario
from kai.actions.solvers.simulate import PodStatusValidator, Validator
from kai.actions.solvers.victims import VictimPool
from kai.api.model import Job, Task
from kai.framework.session import Session, tasks_to_allocate


def preempt(ssn: Session) -> None:
    def within_quota(job: Job) -> bool:
        problem = ssn.is_non_preemptible_job_over_quota(job, tasks_to_allocate(ssn, job))
        if problem:
            ssn.record_fit_error(job, problem)
            return False
        return True

    def accept(preemptor: Job, job: Job) -> bool:
        """Beyond a potential victim (valid, preemptible, running, known queue)."""
        return (
            job.queue == preemptor.queue
            and job.priority < preemptor.priority
            and ssn.preempt_victim_filter(preemptor, job)
        )

    def accept_leaf(preemptor: Job, queue: str, pool: VictimPool) -> bool:
        """Only the preemptor's own leaf, while it holds a job of lower priority."""
        if queue != preemptor.queue:
            return False
        lowest = pool.lowest_priority(queue)
        return lowest is not None and lowest < preemptor.priority

    def validator(preemptor: Job) -> Validator:
        def check(scenario: Scenario, preempted: list[Task], moved: list[Task]) -> bool:
            jobs = list(dict.fromkeys(t.job for t in preempted))
            return ssn.preempt_scenario_valid(preemptor, jobs, preempted)

        if ssn.validators_read_pods_only("preempt_scenario_validator"):
            return PodStatusValidator(check)
        return check

    run_eviction_action(
        ssn,
        "preempt",
        preemptible_only=False,
        precheck=within_quota,  # a job over its quota has failed (for signatures)
        accept=accept,
        accept_leaf=accept_leaf,
        validator=validator,
    )


register_action("preempt", preempt)
