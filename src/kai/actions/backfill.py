"""backfill: place best-effort pods (no resource requests) wherever predicates allow.

Such pods take no capacity that other jobs compete for, so they are placed outside
the fair-share order; a gang of them is still placed whole or not at all.
"""

from __future__ import annotations

import numpy as np

from kai.actions import register_action
from kai.actions.common import allocate_task, schedulable_jobs
from kai.api.model import Task
from kai.api.resources import PODS
from kai.framework.session import Session


def is_best_effort(task: Task) -> bool:
    request = task.request.copy()
    request[PODS] = 0.0
    return not task.is_shared_gpu and not np.any(request > 0)


def backfill(ssn: Session) -> None:
    for job in ssn.sorted_jobs(schedulable_jobs(ssn)):
        tasks = [t for t in ssn.sorted_tasks(job.pending_tasks()) if is_best_effort(t)]
        if not tasks:
            continue
        stmt = ssn.statement()
        failed = None
        for task in tasks:
            failed = allocate_task(ssn, stmt, task, job)
            if failed:
                break
        if failed or not ssn.job_ready(job):
            stmt.discard()
            if failed:
                ssn.record_fit_error(job, f"backfill: {failed}")
            continue
        stmt.commit()


register_action("backfill", backfill)
