"""allocate: place pending jobs on free (or releasing) capacity, gang by gang.

Jobs come out of the queue tree in fair-share order.  A job's next chunk (its gang
up to minMember, then one elastic pod at a time) is placed task by task in a
statement; if any task finds no node the statement is rolled back and nothing of the
job stays allocated.  A gang with a pod on releasing capacity is pipelined whole.
An elastic job that still has pods to place goes back into the queue so its next pod
competes again by fairness.
"""

from __future__ import annotations

from kai.actions import fast_allocate, register_action
from kai.actions.common import (
    JobQueue,
    allocate_job,
    schedulable_jobs,
    should_pipeline_job,
)
from kai.api.model import ALLOCATED, TaskStatus
from kai.framework.session import Session, tasks_to_allocate


def allocate(ssn: Session) -> None:
    jobs = schedulable_jobs(ssn)
    if fast_allocate.run(ssn, jobs):
        return
    queue = JobQueue(
        ssn,
        jobs,
        max_depth=ssn.config.queue_depth_per_action.get("allocate"),
        reuse_comparisons=True,
    )
    while not queue.empty():
        job = queue.pop()
        if job is None:
            break
        stmt = ssn.statement()
        had_allocated = any(t.status in ALLOCATED for t in job.tasks)
        if not allocate_job(ssn, stmt, job):
            stmt.discard()
            continue
        if should_pipeline_job(job):
            stmt.convert_allocated_to_pipelined(set(job.tasks))
        pipelined = any(t.status is TaskStatus.PIPELINED for t in job.tasks)
        stmt.commit()
        if not pipelined and not had_allocated:
            job.last_start_timestamp = ssn.now
            job.new_start_timestamp = ssn.now
        if tasks_to_allocate(ssn, job):
            queue.push(job)


register_action("allocate", allocate)
