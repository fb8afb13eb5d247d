"""consolidation: move running preemptible pods between nodes so that a pending job
that fits nowhere (fragmentation) can run.

Only preemptible pending jobs are consolidated for.  Any preemptible running job may
be moved, but a scenario is accepted only if every pod it evicts is pipelined again
somewhere in the same scenario: consolidation never loses a pod.
"""

from __future__ import annotations

from itertools import islice

from kai.actions import register_action
from kai.actions._eviction import run_eviction_action
from kai.actions.solvers.scenario import gpu_need, node_gpu_capacity
from kai.actions.solvers.simulate import every_victim_placed
from kai.actions.solvers.victims import potential_victim
from kai.api.model import Job
from kai.framework.session import Session, tasks_to_allocate


def consolidation(ssn: Session) -> None:
    # Like KAI, a limit L lets one job's search consider up to L + 1 victim jobs.  KAI
    # takes them in Go map order (unspecified); kai takes the first in snapshot order.
    limit = ssn.config.max_consolidation_preemptees
    if limit == 0:
        return

    def enough_gpus(job: Job) -> bool:
        need = sum(gpu_need(ssn, t) for t in tasks_to_allocate(ssn, job))
        if need <= 0:
            return True
        ready = ssn.nodes.schedulable
        return float(node_gpu_capacity(ssn)[ready].sum()) + 1e-9 >= need

    def accept(preemptor: Job, job: Job) -> bool:
        return True  # any potential victim (valid, preemptible, running, known queue)

    # The last list made: the next preemptor most often gets the same victims, and the
    # search keeps what it derives from them (the victim queue's order, its pops) by the
    # list, while no pod changes status.
    last: list[Job] = []

    def candidates(preemptor: Job) -> list[Job]:
        nonlocal last
        found = (
            job
            for job in ssn.jobs.values()
            if job is not preemptor and potential_victim(ssn, job) and accept(preemptor, job)
        )
        jobs = list(islice(found, limit + 1))
        if jobs != last:
            last = jobs
        return last

    run_eviction_action(
        ssn,
        "consolidation",
        preemptible_only=True,
        precheck=enough_gpus,  # a job without enough GPUs in the cluster has failed
        accept=accept,
        candidates=candidates if limit >= 0 else None,
        validator=lambda preemptor: every_victim_placed,
        signatures_per_queue=False,
    )


register_action("consolidation", consolidation)
