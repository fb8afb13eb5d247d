"""Behavioural parity of reclaim, preempt, consolidation and stalegangeviction with KAI.

Every scenario is a small cluster whose expected outcome is what KAI-Scheduler decides
for the equivalent situation; the comment of each test names the rule that decides it.

KAI's own tests lean on conventions that are spelled out here in the YAML: nodes have
effectively unlimited CPU and memory, a job's gang is all of its pods unless told
otherwise, queues hang under an explicit department, CPU and memory quotas are
unlimited, and a department's GPU over-quota weight equals its deserved GPUs.
Priorities follow KAI's classes: below 100 is preemptible, 100 and above is not.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from kai.cli import main
from tests.factory import NOW, node, pod, podgroup, priority_class, queue, run, statuses

UNLIMITED = (-1, -1, 1)
START = "kai.scheduler/last-start-timestamp"
STALE = "kai.scheduler/stale-podgroup-timestamp"

PRIORITY_CLASSES = [
    priority_class("low", 40),
    priority_class("train", 50),
    priority_class("high", 80),
    priority_class("build", 100),
]


def T(minute: int) -> str:
    """Job creation time (two hours before NOW): a lower minute is an older job."""
    return f"2026-11-22T10:{minute:02d}:00Z"


def ago(minutes: float) -> str:
    """A time ``minutes`` before NOW (12:00:00)."""
    total = int(round(minutes * 60))
    h, rest = divmod(12 * 3600 - total, 3600)
    m, s = divmod(rest, 60)
    return f"2026-11-22T{h:02d}:{m:02d}:{s:02d}Z"


def QT(minute: int) -> str:
    """Queue creation time."""
    return f"2026-01-01T00:{minute:02d}:00Z"


def gnode(name: str, gpus: int = 8, **kw: Any) -> dict:
    """A node whose CPU and memory never limit anything (KAI's test convention)."""
    return node(name, gpus=gpus, cpu="20000", memory="2000G", **kw)


def dept(
    name: str = "dept",
    deserved: float = -1,
    limit: float = -1,
    weight: float | None = None,
    created: int = 0,
    **kw: Any,
) -> dict:
    """A top-level queue; its GPU over-quota weight defaults to its deserved GPUs."""
    if weight is None:
        weight = deserved if deserved >= 0 else 1
    return queue(name, gpu=(deserved, limit, weight), created=QT(created), **kw)


def leaf(
    name: str,
    deserved: float = -1,
    limit: float = -1,
    weight: float = 1,
    parent: str = "dept",
    created: int = 1,
    **kw: Any,
) -> dict:
    return queue(name, parent=parent, gpu=(deserved, limit, weight), created=QT(created), **kw)


def job(
    name: str,
    q: str,
    gpus: float = 1,
    pods: list | None = None,
    min_member: int | None = None,
    pc: str = "train",
    created: int | str = 0,
    preemptibility: str | None = None,
    annotations: dict | None = None,
    started: str | None = None,
    cpu: str = "1",
    **pg_extra: Any,
) -> list[dict]:
    """A PodGroup and its pods.

    ``pods`` lists one entry per pod: None (pending), a node name (running there),
    ("releasing", node) or "succeeded".  minMember defaults to the number of pods.
    """
    pods = [None] if pods is None else pods
    when = T(created) if isinstance(created, int) else created
    ann = dict(annotations or {})
    if started is not None:
        ann[START] = started
    objs = [
        podgroup(
            name,
            queue=q,
            min_member=len(pods) if min_member is None else min_member,
            priority_class=pc,
            preemptibility=preemptibility,
            created=when,
            annotations=ann,
            **pg_extra,
        )
    ]
    for i, where in enumerate(pods):
        kw: dict[str, Any] = {}
        if isinstance(where, tuple):
            kw.update(node=where[1], deleting=True, phase="Running")
        elif where == "succeeded":
            kw["phase"] = "Succeeded"
        elif where is not None:
            kw["node"] = where
        objs.append(pod(f"{name}-{i}", gpus=gpus, cpu=cpu, group=name, created=when, **kw))
    return objs


def config(**kw: Any) -> dict:
    return {"apiVersion": "kai.scheduler/v1", "kind": "SchedulerConfiguration", **kw}


def act(objs: list[dict], *actions: str) -> dict[str, tuple[str, str | None]]:
    out = run([*PRIORITY_CLASSES, *objs], list(actions) if actions else None)
    return {k.split("/", 1)[1]: v for k, v in statuses(out).items()}


def act_out(objs: list[dict], *actions: str) -> dict:
    return run([*PRIORITY_CLASSES, *objs], list(actions) if actions else None)


def evicted(out: dict) -> list[str]:
    return sorted(d["pod"].split("/", 1)[1] for d in out["decisions"] if d["type"] == "evict")


PENDING = ("Pending", None)


def R(n: str) -> tuple[str, str]:
    return ("Running", n)


def REL(n: str) -> tuple[str, str]:
    return ("Releasing", n)


def PIPE(n: str) -> tuple[str, str]:
    return ("Pipelined", n)


# ====================================================================== reclaim
def test_reclaim_takes_the_newest_job_of_the_over_share_queue():
    # Victim queue order is the reverse job order: equal priority -> the newest job first;
    # one victim frees enough, so the older job keeps running and the reclaimer is pipelined.
    objs = [
        gnode("n0", 2),
        dept(),
        leaf("q0", 1),
        leaf("q1", 1, created=2),
        *job("a", "q0", pods=["n0"], created=0),
        *job("b", "q0", pods=["n0"], created=1),
        *job("c", "q1", created=2),
    ]
    s = act(objs, "reclaim")
    assert s == {"a-0": R("n0"), "b-0": REL("n0"), "c-0": PIPE("n0")}


def test_reclaim_takes_the_lowest_priority_job_first_even_if_older():
    # Reverse job order: priority decides before age, so the older low-priority job goes.
    objs = [
        gnode("n0", 2),
        dept(),
        leaf("q0", 1),
        leaf("q1", 1, created=2),
        *job("a", "q0", pods=["n0"], pc="low", created=0),
        *job("b", "q0", pods=["n0"], created=1),
        *job("c", "q1", created=2),
    ]
    s = act(objs, "reclaim")
    assert s == {"a-0": REL("n0"), "b-0": R("n0"), "c-0": PIPE("n0")}


def test_reclaim_between_departments_spares_the_non_preemptible_job():
    # Departments d1/d2 deserve 1 GPU each; d1 holds 2.  Only preemptible jobs are
    # victims: the build job (priority 100) stays, the train job goes.
    objs = [
        gnode("n0", 2),
        dept("d1", 1),
        dept("d2", 1, created=1),
        leaf("q0", 1, parent="d1"),
        leaf("q1", 1, parent="d2", created=2),
        *job("r0", "q0", pods=["n0"], created=0),
        *job("r1", "q0", pods=["n0"], pc="build", created=1),
        *job("p", "q1", created=2),
    ]
    s = act(objs, "reclaim")
    assert s == {"r0-0": REL("n0"), "r1-0": R("n0"), "p-0": PIPE("n0")}


def test_reclaimer_must_stay_within_its_fair_share():
    # CanReclaimResources: q1's fair share inside d2 is 2 (deserved 1 + the GPU d2 has
    # left), it holds 1 and asks for 2 more: 3 > 2, so reclaim is not even attempted.
    objs = [
        gnode("n0", 4),
        dept("d1", 2),
        dept("d2", 2, created=1),
        leaf("q0", 1, parent="d1"),
        leaf("q1", 1, parent="d2", created=2),
        leaf("q2", 1, parent="d2", created=3),
        *job("r0", "q0", gpus=3, pods=["n0"], created=0),
        *job("r1", "q1", pods=["n0"], pc="build", created=1),
        *job("p", "q1", gpus=2, created=2),
    ]
    out = act_out(objs, "reclaim")
    assert out["decisions"] == []


def test_reclaim_the_smaller_job_to_reach_the_fair_share_across_departments():
    # Fair share: d1 and d2 get 4 GPUs each (1 deserved + 3 over quota).  d1 holds 5, one
    # chunk over its share: the 1-GPU job (newest) is enough to free room for 4 GPUs.
    objs = [
        gnode("n0", 8),
        dept("d1", 1),
        dept("d2", 1, created=1),
        leaf("q0", 1, parent="d1"),
        leaf("q1", 1, parent="d2", created=2),
        *job("r0", "q0", gpus=4, pods=["n0"], created=0),
        *job("r1", "q0", gpus=1, pods=["n0"], created=1),
        *job("p", "q1", gpus=4, created=2),
    ]
    s = act(objs, "reclaim")
    assert s == {"r0-0": R("n0"), "r1-0": REL("n0"), "p-0": PIPE("n0")}


def test_reclaim_from_another_department_and_from_a_sibling_queue():
    # d2 deserves the whole node; q2 (deserved 4) reclaims from d1 (deserves nothing) and
    # from its sibling q1 (deserves nothing): both jobs are over their queues' shares.
    objs = [
        gnode("n0", 4),
        dept("d1", 0),
        dept("d2", 4, created=1),
        leaf("q0", 1, parent="d1"),
        leaf("q1", 0, weight=0, parent="d2", created=2),
        leaf("q2", 4, weight=4, parent="d2", created=3),
        *job("r0", "q0", gpus=2, pods=["n0"], created=0),
        *job("r1", "q1", gpus=2, pods=["n0"], created=1),
        *job("p", "q2", gpus=4, created=2),
    ]
    s = act(objs, "reclaim")
    assert s == {"r0-0": REL("n0"), "r1-0": REL("n0"), "p-0": PIPE("n0")}


def test_no_reclaim_between_departments_by_leaf_fairness_alone():
    # FilterVictim at the department level: d0 would go over its deserved GPU, so d1 is a
    # victim only if it is above its own fair share (2 of 4) -- it holds exactly 2.
    objs = [
        gnode("n0", 4),
        dept("d0", 1),
        dept("d1", 1, created=1),
        leaf("q0", 3, weight=3, parent="d0"),
        leaf("q1", 1, parent="d1", created=2),
        *job("r0", "q0", gpus=2, pods=["n0"], created=0),
        *job("r1", "q1", gpus=2, pods=["n0"], created=1),
        *job("p", "q0", gpus=1, created=2),
    ]
    out = act_out(objs, "reclaim")
    assert out["decisions"] == []


def test_fair_share_strategy_reclaims_above_deserved():
    # MaintainFairShare: neither queue deserves anything, the fair shares are 1 and 1 and
    # q0 holds 2, so q1 takes one GPU back although it goes above its deserved 0.
    objs = [
        gnode("n0", 2),
        dept(),
        leaf("q0", 0),
        leaf("q1", 0, created=2),
        *job("a", "q0", pods=["n0"], created=0),
        *job("b", "q0", pods=["n0"], created=1),
        *job("c", "q1", created=2),
    ]
    s = act(objs, "reclaim")
    assert s == {"a-0": R("n0"), "b-0": REL("n0"), "c-0": PIPE("n0")}


def test_a_victim_that_fits_elsewhere_is_moved_not_reclaimed():
    # The simulation re-places victims (pipeline-only allocate); a victim that lands on
    # another node is consolidated, not preempted (allowConsolidatingReclaim).
    objs = [
        gnode("n0", 2),
        gnode("n1", 2),
        dept(),
        leaf("q0", 1),
        leaf("q1", 2, created=2),
        *job("a", "q0", pods=["n0"], created=0),
        *job("b", "q0", pods=["n1"], created=1),
        *job("c", "q1", gpus=2, created=2),
    ]
    s = act(objs, "reclaim")
    assert s == {"a-0": R("n0"), "b-0": PIPE("n0"), "c-0": PIPE("n1")}


def test_deserved_quota_strategy_reclaims_a_queue_within_its_fair_share():
    # GuaranteeDeservedQuota: q0 holds 2 = its fair share (1 deserved + the spare GPU of
    # the tainted n2), so MaintainFairShare fails; but q1 stays within its deserved 2 and
    # q0 is above its deserved 1.  b cannot move (n0 full, n2 tainted): it is reclaimed.
    objs = [
        gnode("n0", 2),
        gnode("n1", 2),
        gnode("n2", 1, taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}]),
        dept(),
        leaf("q0", 1),
        leaf("q1", 2, created=2),
        leaf("q2", 1, created=3),
        *job("a", "q0", pods=["n0"], created=0),
        *job("x", "q2", pods=["n0"], pc="build", created=0),
        *job("b", "q0", pods=["n1"], created=1),
        *job("c", "q1", gpus=2, created=2),
    ]
    s = act(objs, "reclaim")
    assert s == {"a-0": R("n0"), "x-0": R("n0"), "b-0": REL("n1"), "c-0": PIPE("n1")}


def test_victims_only_from_queues_above_their_share():
    # q2 holds exactly its deserved/fair share: it can't be a victim even though its job
    # is the newest; the reclaimer takes the newest job of q0, which is above its share.
    objs = [
        gnode("n0", 3),
        dept(),
        leaf("q0", 1),
        leaf("q1", 1, created=2),
        leaf("q2", 1, created=3),
        *job("a", "q0", pods=["n0"], created=0),
        *job("b", "q0", pods=["n0"], created=1),
        *job("c", "q2", pods=["n0"], created=5),
        *job("p", "q1", created=3),
    ]
    s = act(objs, "reclaim")
    assert s == {"a-0": R("n0"), "b-0": REL("n0"), "c-0": R("n0"), "p-0": PIPE("n0")}


def test_higher_priority_queue_gets_over_quota_first_and_reclaims_it():
    # Fair share over-quota phase serves priority groups high to low: q-hi's fair share is
    # its whole request (3), so it reclaims three GPUs from q-lo (newest jobs first).
    objs = [
        gnode("n0", 4),
        dept(),
        leaf("lo", 0, created=1),
        leaf("hi", 0, created=2, priority=200),
        *[o for i in range(4) for o in job(f"j{i}", "lo", pods=["n0"], created=i)],
        *job("p", "hi", gpus=3, created=9),
    ]
    s = act(objs, "reclaim")
    assert s["j0-0"] == R("n0")
    assert [s[f"j{i}-0"] for i in (1, 2, 3)] == [REL("n0")] * 3
    assert s["p-0"] == PIPE("n0")


def test_equal_priority_queues_split_the_over_quota_and_nothing_is_reclaimed():
    # Same cluster with equal queue priorities: fair shares are 2 and 2, the 3-GPU job is
    # above its queue's fair share, so CanReclaimResources refuses.
    objs = [
        gnode("n0", 4),
        dept(),
        leaf("lo", 0, created=1),
        leaf("hi", 0, created=2),
        *[o for i in range(4) for o in job(f"j{i}", "lo", pods=["n0"], created=i)],
        *job("p", "hi", gpus=3, created=9),
    ]
    out = act_out(objs, "reclaim")
    assert out["decisions"] == []


def test_non_preemptible_reclaimer_must_fit_its_deserved_quota():
    # CanReclaimResources for a non-preemptible reclaimer also needs
    # allocatedNonPreemptible + request <= deserved (1): a build job of 2 GPUs is refused
    # although its fair share (2) would allow it.
    objs = [
        gnode("n0", 4),
        dept(),
        leaf("q0", 1),
        leaf("q1", 1, created=2),
        *[o for i in range(4) for o in job(f"j{i}", "q0", pods=["n0"], created=i)],
        *job("p", "q1", gpus=2, pc="build", created=9),
    ]
    out = act_out(objs, "reclaim")
    assert out["decisions"] == []


def test_preemptible_reclaimer_of_the_same_size_reclaims():
    # The counterpart of the test above: a preemptible reclaimer only needs its fair share.
    objs = [
        gnode("n0", 4),
        dept(),
        leaf("q0", 1),
        leaf("q1", 1, created=2),
        *[o for i in range(4) for o in job(f"j{i}", "q0", pods=["n0"], created=i)],
        *job("p", "q1", gpus=2, created=9),
    ]
    s = act(objs, "reclaim")
    assert [s[f"j{i}-0"] for i in range(4)] == [R("n0"), R("n0"), REL("n0"), REL("n0")]
    assert s["p-0"] == PIPE("n0")


def test_saturation_check_refuses_a_reclaimer_department_above_its_fair_share():
    # d2 (weight 1) has fair share 2, d1 (weight 2) 5.  q2 deserves 3 so the leaf may
    # reclaim, and d1 is above its share for the victim chunk; but afterwards d2 would
    # hold 3/2 of its share while d1 holds 4/5: ratio 1.5 >= 0.8, the scenario is refused.
    objs = [
        gnode("n0", 7),
        dept("d1", 0, weight=2),
        dept("d2", 0, weight=1, created=1),
        leaf("q1", 0, parent="d1"),
        leaf("q2", 3, parent="d2", created=2),
        *[o for i in range(3) for o in job(f"j{i}", "q1", gpus=2, pods=["n0"], created=i)],
        *job("p", "q2", gpus=3, created=9),
    ]
    out = act_out(objs, "reclaim")
    assert out["decisions"] == []


def test_each_over_share_queue_gives_one_victim():
    # Victim queue order is the reversed queue order, re-evaluated with the victims already
    # taken: after the newer queue q2 gives one job, q0 (now the larger share) gives the
    # next; two victims from one queue would push it below its fair share (2).
    objs = [
        gnode("n0", 6),
        dept(),
        leaf("q0", 0, created=1),
        leaf("q1", 0, created=2),
        leaf("q2", 0, created=3),
        *[o for i in range(3) for o in job(f"a{i}", "q0", pods=["n0"], created=i)],
        *[o for i in range(3) for o in job(f"b{i}", "q2", pods=["n0"], created=i + 3)],
        *job("p", "q1", gpus=2, created=20),
    ]
    out = act_out(objs, "reclaim")
    assert evicted(out) == ["a2-0", "b2-0"]
    assert out["pods"]["default/p-0"] == {"status": "Pipelined", "node": "n0"}


def test_reclaim_uses_releasing_capacity_and_evicts_only_the_rest():
    # A pod already being deleted frees its GPU for the pipeline; one more victim is enough.
    objs = [
        gnode("n0", 2),
        dept(),
        leaf("q0", 0),
        leaf("q1", 2, created=2),
        *job("x", "q0", pods=[("releasing", "n0")], created=0),
        *job("a", "q0", pods=["n0"], created=1),
        *job("p", "q1", gpus=2, created=3),
    ]
    out = act_out(objs, "reclaim")
    assert evicted(out) == ["a-0"]
    assert out["pods"]["default/p-0"] == {"status": "Pipelined", "node": "n0"}


def test_gang_reclaimer_takes_victims_on_two_nodes():
    # No single node can host the 2 x 2-GPU gang: the multi-node generator frees both.
    objs = [
        gnode("n0", 2),
        gnode("n1", 2),
        dept(),
        leaf("q0", 0),
        leaf("q1", 4, created=2),
        *[
            o
            for i in range(4)
            for o in job(f"a{i}", "q0", pods=["n0" if i % 2 else "n1"], created=i)
        ],
        *job("p", "q1", gpus=2, pods=[None, None], created=9),
    ]
    s = act(objs, "reclaim")
    assert [s[f"a{i}-0"][0] for i in range(4)] == ["Releasing"] * 4
    assert {s["p-0"], s["p-1"]} == {PIPE("n0"), PIPE("n1")}


def test_elastic_reclaimer_gets_one_gang_chunk_per_cycle():
    # GetTasksToAllocate of an elastic job below minMember 1: one pod; reclaim solves it
    # once and does not push the job back, so a single victim goes this cycle.
    objs = [
        gnode("n0", 3),
        dept(),
        leaf("q0", 0),
        leaf("q1", 3, created=2),
        *[o for i in range(3) for o in job(f"a{i}", "q0", pods=["n0"], created=i)],
        *job("p", "q1", pods=[None] * 3, min_member=1, created=5),
    ]
    s = act(objs, "reclaim")
    assert evicted(act_out(objs, "reclaim")) == ["a2-0"]
    assert [s[f"p-{i}"] for i in range(3)] == [PIPE("n0"), PENDING, PENDING]


SIG_BASE = [
    gnode("n0", 4),
    dept("d1", 0, weight=1),
    dept("d2", 1, weight=1, created=1),
    leaf("q0", 0, parent="d1"),
    leaf("q1", 2, parent="d2", created=2),
    *[o for i in range(4) for o in job(f"a{i}", "q0", pods=["n0"], created=i)],
]


def test_non_preemptible_reclaimer_must_fit_deserved_at_every_level():
    # The validator checks allocatedNonPreemptible + request <= deserved up the tree: q1
    # deserves 2, but its department d2 only 1, so the 2-GPU build job reclaims nothing.
    objs = [*SIG_BASE, *job("p", "q1", gpus=2, pc="build", created=9)]
    assert act_out(objs, "reclaim")["decisions"] == []


def test_reclaim_skips_a_job_equivalent_to_a_failed_one_in_the_same_queue():
    # p (build, pops first) fails in the solver and becomes its queue's representative;
    # r has identical pods (priority classes sit on the PodGroups) and as many pending
    # pods, so KAI does not try it although, being preemptible, it would succeed.
    objs = [
        *SIG_BASE,
        *job("p", "q1", gpus=2, pc="build", created=9),
        *job("r", "q1", gpus=2, created=10),
    ]
    assert act_out(objs, "reclaim")["decisions"] == []


# ------------------------------------------------------------------ gangs, elastic
def test_gang_victim_is_evicted_whole():
    # GetTasksToEvict: a job at its minMember gives all its tasks at once, so reclaiming
    # one GPU evicts the three pods of the gang.
    objs = [
        gnode("n0", 3),
        dept(),
        leaf("q0", 1),
        leaf("q1", 2, created=2),
        *job("g", "q0", pods=["n0", "n0", "n0"], created=0),
        *job("p", "q1", created=2),
    ]
    s = act(objs, "reclaim")
    assert [s[f"g-{i}"] for i in range(3)] == [REL("n0")] * 3
    assert s["p-0"] == PIPE("n0")


def test_elastic_victim_is_peeled_down_to_min_member():
    # Elastic surplus is evicted one pod at a time, last pods first; two surplus pods
    # are enough, the gang core (minMember 2) keeps running.
    objs = [
        gnode("n0", 4),
        dept(),
        leaf("q0", 2),
        leaf("q1", 2, created=2),
        *job("e", "q0", pods=["n0"] * 4, min_member=2, created=0),
        *job("p", "q1", pods=[None, None], created=2),
    ]
    s = act(objs, "reclaim")
    assert [s[f"e-{i}"] for i in range(4)] == [R("n0"), R("n0"), REL("n0"), REL("n0")]
    assert [s["p-0"], s["p-1"]] == [PIPE("n0")] * 2


def test_elastic_surplus_is_taken_before_an_older_whole_job():
    # Elastic job order: a job above minMember sorts after one at it, so in victim order
    # its surplus pod comes first, even ahead of a newer job at its minMember.
    objs = [
        gnode("n0", 3),
        dept(),
        leaf("q0", 0, weight=0),
        leaf("q1", 3, created=2),
        *job("e", "q0", pods=["n0", "n0"], min_member=1, created=0),
        *job("j", "q0", pods=["n0"], created=1),
        *job("p", "q1", created=5),
    ]
    assert evicted(act_out(objs, "reclaim")) == ["e-1"]


def test_elastic_surplus_pod_with_the_lowest_task_priority_goes_first():
    # Reversed task order: the kai.scheduler/task-priority label, lowest first.
    e = job("e", "q0", pods=["n0", "n0"], min_member=1, created=0)
    e[1]["metadata"]["labels"]["kai.scheduler/task-priority"] = "1"
    e[2]["metadata"]["labels"]["kai.scheduler/task-priority"] = "2"
    objs = [
        gnode("n0", 3),
        dept(),
        leaf("q0", 0, weight=0),
        leaf("q1", 3, created=2),
        *e,
        *job("j", "q0", pods=["n0"], created=1),
        *job("p", "q1", created=5),
    ]
    assert evicted(act_out(objs, "reclaim")) == ["e-0"]


def test_elastic_victim_inside_min_runtime_keeps_its_core():
    # minruntime: a protected elastic victim passes the filter, but the validator keeps
    # its minMember pods; 3 GPUs would need one core pod, so nothing is reclaimed.
    objs = [
        gnode("n0", 4),
        dept(),
        leaf("q0", 1, reclaimMinRuntime="10m"),
        leaf("q1", 3, created=2),
        *job("e", "q0", pods=["n0"] * 4, min_member=2, created=0, started=ago(1)),
        *job("p", "q1", pods=[None] * 3, created=2),
    ]
    out = act_out(objs, "reclaim")
    assert out["decisions"] == []


def test_elastic_victim_inside_min_runtime_still_gives_its_surplus():
    # Same protection, a 2-pod reclaimer: the two surplus pods are enough.
    objs = [
        gnode("n0", 4),
        dept(),
        leaf("q0", 1, reclaimMinRuntime="10m"),
        leaf("q1", 3, created=2),
        *job("e", "q0", pods=["n0"] * 4, min_member=2, created=0, started=ago(1)),
        *job("p", "q1", pods=[None] * 2, created=2),
    ]
    s = act(objs, "reclaim")
    assert [s[f"e-{i}"] for i in range(4)] == [R("n0"), R("n0"), REL("n0"), REL("n0")]


def test_elastic_victim_without_min_runtime_is_evicted_whole_if_needed():
    # Without protection, after the surplus the core goes as one chunk: all four pods.
    objs = [
        gnode("n0", 4),
        dept(),
        leaf("q0", 1),
        leaf("q1", 3, created=2),
        *job("e", "q0", pods=["n0"] * 4, min_member=2, created=0, started=ago(1)),
        *job("p", "q1", pods=[None] * 3, created=2),
    ]
    s = act(objs, "reclaim")
    assert [s[f"e-{i}"] for i in range(4)] == [REL("n0")] * 4
    assert [s[f"p-{i}"] for i in range(3)] == [PIPE("n0")] * 3


# ------------------------------------------------------------------ min runtime
def test_reclaim_skips_a_victim_inside_its_min_runtime():
    # Non-elastic victims still inside reclaimMinRuntime (10m default) are filtered out:
    # the newer job started a minute ago, so the older one, started an hour ago, goes.
    objs = [
        config(reclaimMinRuntime="10m"),
        gnode("n0", 2),
        dept(),
        leaf("q0", 1),
        leaf("q1", 1, created=2),
        *job("a", "q0", pods=["n0"], created=0, started=ago(60)),
        *job("b", "q0", pods=["n0"], created=1, started=ago(1)),
        *job("c", "q1", created=2),
    ]
    s = act(objs, "reclaim")
    assert s == {"a-0": REL("n0"), "b-0": R("n0"), "c-0": PIPE("n0")}


def test_reclaim_min_runtime_across_departments_uses_the_victim_department():
    # LCA resolution: reclaimer and victim under different top-level queues -> the
    # victim's top-level value (unset -> default 0).  The leaf's own 10m is not used.
    objs = [
        gnode("n0", 1),
        dept("d1", 0),
        dept("d2", 1, created=1),
        leaf("q0", 0, parent="d1", reclaimMinRuntime="10m"),
        leaf("q1", 1, parent="d2", created=2),
        *job("a", "q0", pods=["n0"], created=0, started=ago(1)),
        *job("c", "q1", created=2),
    ]
    s = act(objs, "reclaim")
    assert s == {"a-0": REL("n0"), "c-0": PIPE("n0")}


def test_reclaim_min_runtime_inside_a_department_uses_the_victim_side_child():
    # LCA resolution: same department -> one level below the LCA towards the victim (q0,
    # 10m): the victim started a minute ago and is protected.
    objs = [
        gnode("n0", 1),
        dept("d", -1),
        leaf("q0", 0, parent="d", reclaimMinRuntime="10m"),
        leaf("q1", 1, parent="d", created=2),
        *job("a", "q0", pods=["n0"], created=0, started=ago(1)),
        *job("c", "q1", created=2),
    ]
    out = act_out(objs, "reclaim")
    assert out["decisions"] == []


def test_preempt_min_runtime_is_read_from_the_victim_leaf_first():
    # Preempt min runtime: walk up from the victim's leaf; the leaf's 10m wins over the
    # department's 0s, so the victim started 1 minute ago is protected.
    objs = [
        gnode("n0", 1),
        dept("d", -1, preemptMinRuntime="0s"),
        leaf("q0", -1, parent="d", preemptMinRuntime="10m"),
        *job("a", "q0", pods=["n0"], pc="low", created=0, started=ago(1)),
        *job("h", "q0", pc="high", created=2),
    ]
    out = act_out(objs, "preempt")
    assert out["decisions"] == []


def test_preempt_min_runtime_elapsed_allows_preemption():
    # Same queues, the victim started 20 minutes ago: its 10m are over.
    objs = [
        gnode("n0", 1),
        dept("d", -1, preemptMinRuntime="0s"),
        leaf("q0", -1, parent="d", preemptMinRuntime="10m"),
        *job("a", "q0", pods=["n0"], pc="low", created=0, started=ago(20)),
        *job("h", "q0", pc="high", created=2),
    ]
    s = act(objs, "preempt")
    assert s == {"a-0": REL("n0"), "h-0": PIPE("n0")}


# ====================================================================== preempt
def test_preempt_needs_a_strictly_lower_priority_victim():
    # Preempt victims: priority < preemptor priority (strict); equal priority is no victim.
    objs = [
        gnode("n0", 1),
        dept(),
        leaf("q0"),
        *job("a", "q0", pods=["n0"], created=0),
        *job("p", "q0", created=2),
    ]
    out = act_out(objs, "preempt")
    assert out["decisions"] == []


def test_preempt_takes_the_lowest_priority_victim_first():
    # Reverse job order inside the queue: the low job (older) goes before the train job.
    objs = [
        gnode("n0", 2),
        dept(),
        leaf("q0"),
        *job("a", "q0", pods=["n0"], pc="low", created=0),
        *job("b", "q0", pods=["n0"], created=1),
        *job("h", "q0", pc="high", created=2),
    ]
    s = act(objs, "preempt")
    assert s == {"a-0": REL("n0"), "b-0": R("n0"), "h-0": PIPE("n0")}


def test_preempt_stays_inside_the_queue():
    # Preempt victims come from the preemptor's own queue only.
    objs = [
        gnode("n0", 1),
        dept(),
        leaf("q0"),
        leaf("q1", created=2),
        *job("a", "q1", pods=["n0"], pc="low", created=0),
        *job("h", "q0", pc="high", created=2),
    ]
    out = act_out(objs, "preempt")
    assert out["decisions"] == []


def test_preempt_never_takes_a_non_preemptible_job():
    # Only preemptible jobs are victims: a build job (priority 100) is safe from a
    # higher-priority preemptible preemptor.
    objs = [
        priority_class("urgent", 150),
        gnode("n0", 1),
        dept(),
        leaf("q0"),
        *job("a", "q0", pods=["n0"], pc="build", created=0),
        *job("h", "q0", pc="urgent", preemptibility="preemptible", created=2),
    ]
    out = act_out(objs, "preempt")
    assert out["decisions"] == []


def test_preemption_delay_not_elapsed_blocks_preempt():
    # FilterWithinPreemptionDelay: created 2 minutes ago with a 10m delay -> skipped.
    objs = [
        gnode("n0", 1),
        dept(),
        leaf("q0"),
        *job("a", "q0", pods=["n0"], pc="low", created=0),
        *job("h", "q0", pc="high", created=ago(2), preemptionDelay="10m"),
    ]
    out = act_out(objs, "preempt")
    assert out["decisions"] == []


def test_preemption_delay_elapsed_allows_preempt():
    # Same delay, created 30 minutes ago: the delay is over.
    objs = [
        gnode("n0", 1),
        dept(),
        leaf("q0"),
        *job("a", "q0", pods=["n0"], pc="low", created=0),
        *job("h", "q0", pc="high", created=ago(30), preemptionDelay="10m"),
    ]
    s = act(objs, "preempt")
    assert s == {"a-0": REL("n0"), "h-0": PIPE("n0")}


def test_preemption_delay_also_applies_to_reclaim():
    # The same input filter runs for reclaim.
    objs = [
        gnode("n0", 2),
        dept(),
        leaf("q0", 1),
        leaf("q1", 1, created=2),
        *job("a", "q0", pods=["n0"], created=0),
        *job("b", "q0", pods=["n0"], created=1),
        *job("c", "q1", created=ago(2), preemptionDelay="10m"),
    ]
    out = act_out(objs, "reclaim")
    assert out["decisions"] == []


def test_preempt_peels_an_elastic_victim():
    # Elastic victims lose surplus pods one at a time (last pod first).
    objs = [
        gnode("n0", 3),
        dept(),
        leaf("q0"),
        *job("e", "q0", pods=["n0"] * 3, min_member=1, pc="low", created=0),
        *job("h", "q0", pc="high", created=2),
    ]
    s = act(objs, "preempt")
    assert [s[f"e-{i}"] for i in range(3)] == [R("n0"), R("n0"), REL("n0")]
    assert s["h-0"] == PIPE("n0")


def test_semi_preemptible_victim_gives_only_pods_above_its_core():
    # semi-preemptible: pods above minMember are preemptible, the core is not; the
    # surplus pod is taken.
    objs = [
        gnode("n0", 3),
        dept(),
        leaf("q0"),
        *job(
            "s",
            "q0",
            pods=["n0"] * 3,
            min_member=2,
            pc="low",
            preemptibility="semi-preemptible",
            created=0,
        ),
        *job("h", "q0", pc="high", created=2),
    ]
    s = act(objs, "preempt")
    assert [s[f"s-{i}"] for i in range(3)] == [R("n0"), R("n0"), REL("n0")]
    assert s["h-0"] == PIPE("n0")


def test_semi_preemptible_core_is_never_a_victim():
    # Needing two GPUs would take a core pod: nothing is preempted.
    objs = [
        gnode("n0", 3),
        dept(),
        leaf("q0"),
        *job(
            "s",
            "q0",
            pods=["n0"] * 3,
            min_member=2,
            pc="low",
            preemptibility="semi-preemptible",
            created=0,
        ),
        *job("h", "q0", gpus=2, pc="high", created=2),
    ]
    out = act_out(objs, "preempt")
    assert out["decisions"] == []


def test_cheapest_node_local_scenario_first():
    # Victims are accumulated newest first (b on n0, then c on n1); the node-local
    # generator tries each node of the latest victim: n1 with c alone frees 2 GPUs, so the
    # single victim wins over the two single-GPU jobs on n0.
    objs = [
        gnode("n0", 2),
        gnode("n1", 2),
        dept(),
        leaf("q0"),
        *job("a", "q0", pods=["n0"], pc="low", created=0),
        *job("c", "q0", gpus=2, pods=["n1"], pc="low", created=1),
        *job("b", "q0", pods=["n0"], pc="low", created=2),
        *job("h", "q0", gpus=2, pc="high", created=3),
    ]
    s = act(objs, "preempt")
    assert s == {"a-0": R("n0"), "b-0": R("n0"), "c-0": REL("n1"), "h-0": PIPE("n1")}


def test_two_victims_on_one_node_when_they_come_first():
    # Victim order b, a (both n0), then c: the n0 scenario with a and b solves first.
    objs = [
        gnode("n0", 2),
        gnode("n1", 2),
        dept(),
        leaf("q0"),
        *job("c", "q0", gpus=2, pods=["n1"], pc="low", created=0),
        *job("a", "q0", pods=["n0"], pc="low", created=1),
        *job("b", "q0", pods=["n0"], pc="low", created=2),
        *job("h", "q0", gpus=2, pc="high", created=3),
    ]
    s = act(objs, "preempt")
    assert s == {"a-0": REL("n0"), "b-0": REL("n0"), "c-0": R("n1"), "h-0": PIPE("n0")}


# ================================================================ consolidation
def test_consolidation_moves_a_pod_to_make_room():
    # The newest running job moves next to the other one; the 2-GPU job takes the freed
    # node.  No pod is lost: the moved pod is pipelined, not just evicted.
    objs = [
        gnode("n0", 2),
        gnode("n1", 2),
        dept(),
        leaf("q0"),
        *job("a", "q0", pods=["n0"], created=0),
        *job("b", "q0", pods=["n1"], created=1),
        *job("c", "q0", gpus=2, created=2),
    ]
    out = act_out(objs, "consolidation")
    s = {k.split("/", 1)[1]: v for k, v in statuses(out).items()}
    assert s == {"a-0": R("n0"), "b-0": PIPE("n0"), "c-0": PIPE("n1")}
    assert evicted(out) == ["b-0"]


def test_consolidation_moves_pods_of_other_queues_and_priorities():
    # Consolidation victims: any preemptible job of any queue and any priority.
    objs = [
        gnode("n0", 2),
        gnode("n1", 2),
        dept(),
        leaf("q0"),
        leaf("q1", created=2),
        *job("a", "q0", pods=["n0"], created=0),
        *job("b", "q1", pods=["n1"], pc="high", created=1),
        *job("c", "q0", gpus=2, pc="low", created=2),
    ]
    s = act(objs, "consolidation")
    assert s == {"a-0": R("n0"), "b-0": PIPE("n0"), "c-0": PIPE("n1")}


def test_consolidation_refuses_when_a_pod_cannot_be_re_placed():
    # allPodsReallocated: freeing 2 GPUs on one node would leave a pod without a place.
    objs = [
        gnode("n0", 2),
        gnode("n1", 2),
        dept(),
        leaf("q0"),
        *job("a", "q0", pods=["n0"], created=0),
        *job("b", "q0", pods=["n0"], created=1),
        *job("d", "q0", pods=["n1"], created=2),
        *job("c", "q0", gpus=2, created=3),
    ]
    out = act_out(objs, "consolidation")
    assert out["decisions"] == []


def test_consolidation_is_only_for_preemptible_pending_jobs():
    # FilterNonPreemptible: a non-preemptible pending job is not consolidated for.
    objs = [
        gnode("n0", 2),
        gnode("n1", 2),
        dept(),
        leaf("q0"),
        *job("a", "q0", pods=["n0"], created=0),
        *job("b", "q0", pods=["n1"], created=1),
        *job("c", "q0", gpus=2, pc="build", created=2),
    ]
    out = act_out(objs, "consolidation")
    assert out["decisions"] == []


def test_consolidation_never_moves_non_preemptible_pods():
    # Only preemptible jobs are consolidation victims.
    objs = [
        gnode("n0", 2),
        gnode("n1", 2),
        dept(),
        leaf("q0"),
        *job("a", "q0", pods=["n0"], pc="build", created=0),
        *job("b", "q0", pods=["n1"], pc="build", created=1),
        *job("c", "q0", gpus=2, created=2),
    ]
    out = act_out(objs, "consolidation")
    assert out["decisions"] == []


@pytest.mark.parametrize(
    ("limit", "moved", "freed"),
    [(0, None, None), (1, None, None), (2, "b", "n1"), (None, "c", "n2")],
)
def test_consolidation_considers_at_most_the_limit_plus_one_victim_jobs(limit, moved, freed):
    # maxNumberConsolidationPreemptees (KAI's --max-consolidation-preemptees, default 16):
    # one job's search considers at most limit + 1 preemptible running jobs (KAI takes
    # them in map order, kai in the snapshot's order of jobs); 0 turns consolidation
    # off.  Moving a1 or a2 frees nothing useful; moving b or c frees a node for e, and
    # with every job a candidate the newest, c, is moved.
    objs = [
        gnode("n0", 2),
        gnode("n1", 2),
        gnode("n2", 2),
        gnode("n3", 1),
        gnode("n4", 1),
        dept(),
        leaf("q0"),
        *job("z", "q0", gpus=2, pods=["n0"], pc="build", created=0),
        *job("a1", "q0", pods=["n3"], created=1),
        *job("a2", "q0", pods=["n4"], created=2),
        *job("b", "q0", pods=["n1"], created=3),
        *job("c", "q0", pods=["n2"], created=4),
        *job("e", "q0", gpus=2, created=5),
    ]
    if limit is not None:
        objs.append(
            {
                "apiVersion": "kai.scheduler/v1",
                "kind": "SchedulerConfiguration",
                "maxNumberConsolidationPreemptees": limit,
            }
        )
    out = act_out(objs, "consolidation")
    assert evicted(out) == ([] if moved is None else [f"{moved}-0"])
    placed = {k.split("/", 1)[1]: v for k, v in statuses(out).items()}["e-0"]
    assert placed == (PENDING if freed is None else PIPE(freed))


def test_consolidation_skips_a_job_equivalent_to_one_that_already_failed():
    # q0 is starved and goes first: c0 fails (q0's limit 3 < 2 + 2) and becomes the
    # representative of its signature (pods only -- the queue is not part of it).  c1 in
    # q1 has identical pods and as many pending pods, so KAI does not try it.
    objs = [
        gnode("n0", 2),
        gnode("n1", 2),
        dept(),
        leaf("q0", 4, limit=3),
        leaf("q1", 0, created=2),
        *job("a", "q0", pods=["n0"], created=0),
        *job("b", "q0", pods=["n1"], created=1),
        *job("c0", "q0", gpus=2, created=2),
        *job("c1", "q1", gpus=2, created=3),
    ]
    out = act_out(objs, "consolidation")
    assert out["decisions"] == []


def test_consolidation_tries_a_different_job_after_a_failure():
    # Same cluster, but c1's pod asks for less CPU: a strictly smaller pending-task vector
    # than the failed representative's, so KAI tries it, and it is consolidated.
    objs = [
        gnode("n0", 2),
        gnode("n1", 2),
        dept(),
        leaf("q0", 4, limit=3),
        leaf("q1", 0, created=2),
        *job("a", "q0", pods=["n0"], created=0),
        *job("b", "q0", pods=["n1"], created=1),
        *job("c0", "q0", gpus=2, created=2),
        *job("c1", "q1", gpus=2, created=3, cpu="500m"),
    ]
    s = act(objs, "consolidation")
    assert s["c1-0"] == PIPE("n1") and s["b-0"] == PIPE("n0") and s["c0-0"] == PENDING


# ======================================================================= stale
def stale_gang(name: str = "g", stale_since: str | None = None, **kw: Any) -> list[dict]:
    """A gang of 3 (minMember 3) with 2 pods running and 1 pending."""
    ann = {STALE: stale_since} if stale_since else None
    return job(name, "q0", pods=["n0", "n0", None], annotations=ann, created=0, **kw)


def test_stale_gang_past_the_default_grace_is_evicted():
    # Stale = activeUsed (2) < minAvailable (3); stale for 5m >= default grace 60s.
    objs = [gnode("n0", 2), dept(), leaf("q0"), *stale_gang(stale_since=ago(5))]
    s = act(objs, "stalegangeviction")
    assert s == {"g-0": REL("n0"), "g-1": REL("n0"), "g-2": PENDING}


def test_stale_gang_exactly_at_the_grace_is_evicted():
    # Evicted once stale for >= grace (60s exactly).
    objs = [gnode("n0", 2), dept(), leaf("q0"), *stale_gang(stale_since=ago(1))]
    assert evicted(act_out(objs, "stalegangeviction")) == ["g-0", "g-1"]


def test_stale_gang_evicts_only_pods_holding_allocations():
    # Releasing pods count as used (so 2 < 3 is stale) but only activeAllocated pods are
    # evicted: the running pod, not the one already being deleted.
    objs = [
        gnode("n0", 2),
        dept(),
        leaf("q0"),
        *job("g", "q0", pods=["n0", ("releasing", "n0"), None], annotations={STALE: ago(5)}),
    ]
    assert evicted(act_out(objs, "stalegangeviction")) == ["g-0"]


def test_stale_gang_inside_the_default_grace_is_kept():
    # Stale for 30s < 60s.
    objs = [gnode("n0", 2), dept(), leaf("q0"), *stale_gang(stale_since=ago(0.5))]
    out = act_out(objs, "stalegangeviction")
    assert evicted(out) == []


def test_newly_stale_gang_only_gets_a_timestamp():
    # No stale timestamp yet: it is set to now, nothing is evicted this cycle.
    objs = [gnode("n0", 2), dept(), leaf("q0"), *stale_gang()]
    out = act_out(objs, "stalegangeviction")
    assert evicted(out) == []


def test_negative_staleness_grace_never_evicts():
    # spec.stalenessGracePeriod < 0 disables stale gang eviction for the job.
    objs = [
        gnode("n0", 2),
        dept(),
        leaf("q0"),
        *stale_gang(stale_since=ago(60), stalenessGracePeriod="-1s"),
    ]
    out = act_out(objs, "stalegangeviction")
    assert evicted(out) == []


def test_per_job_staleness_grace_overrides_the_default():
    # A 10m grace keeps a gang stale for 5m.
    objs = [
        gnode("n0", 2),
        dept(),
        leaf("q0"),
        *stale_gang(stale_since=ago(5), stalenessGracePeriod="10m"),
    ]
    out = act_out(objs, "stalegangeviction")
    assert evicted(out) == []


def test_gang_with_a_succeeded_pod_is_not_stale():
    # IsStale needs no Succeeded task.
    objs = [
        gnode("n0", 2),
        dept(),
        leaf("q0"),
        *job("g", "q0", pods=["n0", "succeeded", None], annotations={STALE: ago(5)}),
    ]
    out = act_out(objs, "stalegangeviction")
    assert evicted(out) == []


def test_satisfied_gang_is_not_stale_and_its_elastic_pending_pod_is_fine():
    # Gang of minMember 2 with 2 running and 1 more pending: not stale.
    objs = [
        gnode("n0", 2),
        dept(),
        leaf("q0"),
        *job("g", "q0", pods=["n0", "n0", None], min_member=2, annotations={STALE: ago(5)}),
    ]
    out = act_out(objs, "stalegangeviction")
    assert evicted(out) == []


# =================================================================== full cycle
def realistic_cluster() -> list[dict]:
    """3 nodes x 4 GPUs; q-a has filled n0 and n1, q-c runs a stale gang on n2."""
    objs: list[dict] = [
        gnode("n0", 4),
        gnode("n1", 4),
        gnode("n2", 4),
        dept("org", -1),
        leaf("q-a", 4, parent="org", created=1),
        leaf("q-b", 4, parent="org", created=2),
        leaf("q-c", 4, parent="org", created=3),
    ]
    for i in range(8):
        objs += job(f"a{i}", "q-a", pods=["n0" if i < 4 else "n1"], created=i, started=ago(90))
    objs += job("a-more", "q-a", created=20)
    objs += job("b", "q-b", gpus=2, created=21)
    objs += job(
        "g",
        "q-c",
        gpus=2,
        pods=["n2", "n2", None],
        created=10,
        annotations={STALE: ago(5)},
        started=ago(90),
    )
    return objs


def test_full_default_cycle_on_a_realistic_cluster():
    # allocate: nothing fits.  consolidation: every node is full, no pod can move.
    # reclaim: q-b (fair share 2) reclaims from q-a (8 > fair share 5): a7 then a6, both
    # on n1.  q-c can't reclaim (4 + 2 > 5) and is no victim (at its deserved 4).
    # preempt: equal priorities.  stalegangeviction: g (2 < 3 for 5m) is evicted.
    s = act(realistic_cluster())
    assert [s[f"a{i}-0"][0] for i in range(8)] == ["Running"] * 6 + ["Releasing"] * 2
    assert s["b-0"] == PIPE("n1")
    assert s["a-more-0"] == PENDING
    assert s["g-0"] == REL("n2") and s["g-1"] == REL("n2") and s["g-2"] == PENDING


def test_full_cycle_prefers_consolidation_over_reclaim():
    # Consolidation runs before reclaim: moving one pod makes room without losing any,
    # so q-b's job is placed by consolidation and reclaim has nothing left to do.
    objs = [gnode("n0", 4), gnode("n1", 4), dept(), leaf("qa", 2), leaf("qb", 2, created=2)]
    for i in range(6):
        objs += job(f"a{i}", "qa", pods=["n0" if i < 3 else "n1"], created=i)
    objs += job("b", "qb", gpus=2, created=9)
    out = act_out(objs)
    assert [(d["action"], d["type"], d["pod"], d["node"]) for d in out["decisions"]] == [
        ("consolidation", "evict", "default/a5-0", "n1"),
        ("consolidation", "pipeline", "default/b-0", "n1"),
        ("consolidation", "pipeline", "default/a5-0", "n0"),
    ]


def test_reclaim_action_alone_from_the_command_line(tmp_path: Path):
    # `kai simulate --actions reclaim`: only reclaim runs -- no stale eviction, no
    # allocation; the same reclaim decisions as in the full cycle.
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all([*PRIORITY_CLASSES, *realistic_cluster()]))
    result = CliRunner().invoke(main, ["simulate", str(path), "--actions", "reclaim", "--now", NOW])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert {d["action"] for d in out["decisions"]} == {"reclaim"}
    assert evicted(out) == ["a6-0", "a7-0"]
    s = {k.split("/", 1)[1]: (v["status"], v["node"]) for k, v in out["pods"].items()}
    assert s["b-0"] == PIPE("n1")
    assert s["g-0"] == R("n2")


@pytest.mark.parametrize("action", ["reclaim", "preempt", "consolidation"])
def test_actions_leave_a_cluster_without_pending_work_alone(action: str):
    # No pending job: the eviction actions have nothing to do.
    objs = [gnode("n0", 2), dept(), leaf("q0"), *job("a", "q0", pods=["n0"])]
    assert act_out(objs, action)["decisions"] == []
