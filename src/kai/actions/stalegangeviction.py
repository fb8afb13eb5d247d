"""stalegangeviction: evict a running gang that has fallen below its minimum.

A job is stale when it has no succeeded pod, at least one pod holding resources, and
fewer such pods than minMember.  The first session that sees it stale stamps it (the
PodGroup annotation ``kai.scheduler/stale-podgroup-timestamp``); once it has been stale
for its grace period (``spec.stalenessGracePeriod``, default 60 s, negative = never)
all its running pods are evicted.  A job that is no longer stale loses its stamp.
"""

from __future__ import annotations

from kai.actions import register_action
from kai.api.model import ACTIVE_ALLOCATED, ACTIVE_USED, Job, TaskStatus
from kai.framework.session import Session

DEFAULT_STALENESS_GRACE_PERIOD = 60.0  # seconds


def is_stale(job: Job) -> bool:
    used = 0
    for task in job.tasks:
        status = task.status
        if status is TaskStatus.SUCCEEDED:
            return False
        if status in ACTIVE_USED:
            used += 1
    return 0 < used < job.min_member


def stale_gang_eviction(ssn: Session) -> None:
    default = ssn.cache.get("stalegangeviction.grace_period", DEFAULT_STALENESS_GRACE_PERIOD)
    # A job that is not stale loses its stamp (in any order: staleness reads the job's
    # own pods, which no other job's eviction changes); the stale ones are taken in
    # name order.  A job with minMember <= 1 is never stale (0 < used < minMember).
    stale = []
    for job in ssn.jobs.values():
        if job.invalid_reason and not job.tasks:
            continue
        if job.min_member > 1 and is_stale(job):
            stale.append(job)
        else:
            job.stale_timestamp = None
            job.stale_since_set = None
    for job in sorted(stale, key=lambda j: j.key):
        if job.stale_timestamp is None:
            job.stale_timestamp = ssn.now
            job.stale_since_set = ssn.now
        grace = job.staleness_grace_period
        if grace is None:
            grace = default
        if grace < 0:
            continue
        if (ssn.now - job.stale_timestamp).total_seconds() < grace:
            continue
        stmt = ssn.statement()
        reason = (
            f"stale gang: {job.count(ACTIVE_USED)} of minMember {job.min_member} pods "
            f"running for at least {grace:g}s"
        )
        for task in ssn.sorted_tasks(t for t in job.tasks if t.status in ACTIVE_ALLOCATED):
            stmt.evict(task, reason)
        stmt.commit()


register_action("stalegangeviction", stale_gang_eviction)
