"""Reclaim rules of the proportion plugin (who may reclaim, and from whom)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from kai.api.model import Job

if TYPE_CHECKING:
    from kai.framework import Session
    from kai.plugins.proportion import ProportionPlugin


def register_reclaim_rules(plugin: ProportionPlugin, ssn: Session) -> None:
    from kai.actions.common import tasks_to_allocate
    from kai.plugins.proportion import UNLIMITED

    def can_reclaim(job: Job) -> bool:
        """The reclaimer's queue stays within its fair share (and quota if non-preemptible)."""
        share = plugin.shares.get(job.queue or "")
        if share is None:
            return False
        request = plugin.request_of(tasks_to_allocate(ssn, job))
        within = (share.allocated + request <= share.fair_share + 1e-9) | (
            share.fair_share == UNLIMITED
        )
        if not np.all(within):
            return False
        return plugin.non_preemptible_over_quota(job, tasks_to_allocate(ssn, job)) is None

    ssn.add_can_reclaim_resources_fn(can_reclaim)
