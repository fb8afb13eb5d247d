"""Behavioural parity of the allocate action with KAI-Scheduler.

Every scenario below is a small cluster whose expected outcome is what KAI-Scheduler's
allocate action decides for the equivalent situation; the comment of each test names
the rule that decides it (numbers of the queue-order rules follow proportion's queue
order: 1 under-utilized first, 2 starved first, 3 queue priority, 4 zero allocatable
share last, 5 dominant share with the job, 6 without it, 7 smaller allocatable share,
8 older queue).

KAI's own unit tests rely on conventions (default gang = all pods, effectively
unlimited node CPU/memory, every queue under a ``default`` department); here they are
spelled out in the YAML: nodes get huge CPU and memory, gangs an explicit minMember,
and queues an explicit parent department.
"""

from __future__ import annotations

from typing import Any

from tests.factory import node, pod, podgroup, priority_class, queue, run, statuses

UNLIMITED = (-1, -1, 1)


def T(minute: int) -> str:
    """Job creation time: a lower minute is an older job."""
    return f"2026-11-22T10:{minute:02d}:00Z"


def QT(minute: int) -> str:
    """Queue creation time."""
    return f"2026-01-01T00:{minute:02d}:00Z"


def gnode(name: str, gpus: int = 8, **kw: Any) -> dict:
    """A node whose CPU and memory never limit anything (KAI's test convention)."""
    kw.setdefault("cpu", "20000")
    kw.setdefault("memory", "2000G")
    return node(name, gpus=gpus, **kw)


def dept(name: str = "dept", gpu: tuple = UNLIMITED, created: int = 0, **kw: Any) -> dict:
    return queue(name, gpu=gpu, created=QT(created), **kw)


def leaf(
    name: str,
    deserved: float = -1,
    limit: float = -1,
    weight: float = 1,
    parent: str | None = "dept",
    created: int = 1,
    **kw: Any,
) -> dict:
    return queue(name, parent=parent, gpu=(deserved, limit, weight), created=QT(created), **kw)


PRIORITY_CLASSES = [priority_class("train", 50), priority_class("build", 100)]


def job(
    name: str,
    q: str,
    gpus: float = 1,
    pods: list | None = None,
    min_member: int | None = None,
    pc: str = "train",
    created: int = 0,
    fraction: float | None = None,
    gpu_memory: int | None = None,
    labels: list[dict] | None = None,
    **pod_kw: Any,
) -> list[dict]:
    """A PodGroup and its pods.

    ``pods`` lists one entry per pod: None (pending), a node name (running there) or
    ("releasing", node).  minMember defaults to the number of pods, as in KAI's tests.
    """
    pods = [None] if pods is None else pods
    objs = [
        podgroup(
            name,
            queue=q,
            min_member=len(pods) if min_member is None else min_member,
            priority_class=pc,
            created=T(created),
        )
    ]
    for i, where in enumerate(pods):
        kw = dict(pod_kw)
        if isinstance(where, tuple):
            kw.update(node=where[1], deleting=True, phase="Running")
        elif where is not None:
            kw["node"] = where
        ann = {}
        if gpu_memory is not None:
            ann["gpu-memory"] = str(gpu_memory)
        shared = fraction is not None or gpu_memory is not None
        objs.append(
            pod(
                f"{name}-{i}",
                gpus=0 if shared else gpus,
                group=name,
                created=T(created),
                fraction=fraction,
                annotations=ann,
                labels=(labels[i] if labels else None),
                **kw,
            )
        )
    return objs


def allocate(objs: list[dict]) -> dict[str, tuple[str, str | None]]:
    out = run([*PRIORITY_CLASSES, *objs], ["allocate"])
    return {k.split("/", 1)[1]: v for k, v in statuses(out).items()}


def allocate_out(objs: list[dict]) -> dict:
    return run([*PRIORITY_CLASSES, *objs], ["allocate"])


BOUND = "Binding"
PENDING = ("Pending", None)


# ------------------------------------------------------------------ queue order
def test_starved_queue_is_served_before_the_queue_over_its_deserved_share():
    # Rule 2: q1 (0 + 1 <= deserved 1) is starved, q0 (1 running + 1 > 1) is not, so q1's
    # first job goes first and bin-packs onto n0.  Then both queues sit at their fair share
    # (2 each) and the older queue (rule 8) gets the next GPU; q1 takes the last one.
    objs = [
        gnode("n0", 2),
        gnode("n1", 2),
        dept(),
        leaf("q0", deserved=1, created=1),
        leaf("q1", deserved=1, created=2),
        *job("run0", "q0", pods=["n0"], created=0),
        *job("a", "q0", created=1),
        *job("b", "q1", created=2),
        *job("c", "q1", created=3),
        *job("d", "q1", created=4),
    ]
    s = allocate(objs)
    assert s["b-0"] == (BOUND, "n0")
    assert s["a-0"] == (BOUND, "n1")
    assert s["c-0"] == (BOUND, "n1")
    assert s["d-0"] == PENDING


def test_equal_dominant_share_with_the_job_falls_back_to_the_share_without_it():
    # Rule 5 ties (q0: (2+1)/3, q1: (0+2)/2), rule 6 decides: q1 holds nothing yet.
    objs = [
        gnode("n0", 4),
        dept(),
        leaf("q0", deserved=3, created=1),
        leaf("q1", deserved=2, created=2),
        *job("run0", "q0", gpus=2, pods=["n0"], created=0),
        *job("a", "q0", created=1),
        *job("b", "q1", gpus=2, created=2),
    ]
    s = allocate(objs)
    assert s["b-0"] == (BOUND, "n0")
    assert s["a-0"] == PENDING


def test_equal_shares_prefer_the_queue_with_the_smaller_allocatable_share():
    # Rules 5 and 6 tie (4/4 vs 2/2 and 2/4 vs 1/2); rule 7: q1's allocatable share (2) is
    # smaller than q0's (4), so q1's job takes the one GPU that is left... and q0's 2-GPU job
    # no longer fits.
    objs = [
        gnode("n0", 5),
        dept(),
        leaf("q0", deserved=4, created=1),
        leaf("q1", deserved=2, created=2),
        *job("run0", "q0", gpus=2, pods=["n0"], created=0),
        *job("run1", "q1", gpus=1, pods=["n0"], created=0),
        *job("a", "q0", gpus=2, created=1),
        *job("b", "q1", gpus=1, created=2),
    ]
    s = allocate(objs)
    assert s["b-0"] == (BOUND, "n0")
    assert s["a-0"] == PENDING


def test_fair_share_remainder_goes_to_the_older_queue():
    # 1 spare GPU is split 0.5/0.5 by weight, floored to 0, and the remainder goes to the
    # older queue (q0): q0 fair share 3, q1 2.  Rule 5: q0 (2+1)/3 < q1 (2+1)/2.
    objs = [
        gnode("n0", 5),
        dept(),
        leaf("q0", deserved=2, created=1),
        leaf("q1", deserved=2, created=2),
        *job("run0", "q0", gpus=2, pods=["n0"], created=0),
        *job("run1", "q1", gpus=2, pods=["n0"], created=0),
        *job("a", "q0", created=2),
        *job("b", "q1", created=1),
    ]
    s = allocate(objs)
    assert s["a-0"] == (BOUND, "n0")
    assert s["b-0"] == PENDING


def test_queue_without_deserved_gpus_waits_for_the_starved_queue():
    # Rule 2: q1 is within its deserved GPU; q0 deserves none (its older job waits).
    objs = [
        gnode("n0", 1),
        dept(),
        leaf("q0", deserved=0, created=1),
        leaf("q1", deserved=1, created=2),
        *job("a", "q0", created=0),
        *job("b", "q1", created=1),
    ]
    s = allocate(objs)
    assert s["b-0"] == (BOUND, "n0")
    assert s["a-0"] == PENDING


def test_higher_priority_queue_first_when_neither_is_starved():
    # Rule 3: neither queue deserves anything, so the queue priority decides, not job age.
    objs = [
        gnode("n0", 1),
        dept(),
        leaf("low", deserved=0, created=1),
        leaf("high", deserved=0, created=2, priority=200),
        *job("a", "low", created=0),
        *job("b", "high", created=5),
    ]
    s = allocate(objs)
    assert s["b-0"] == (BOUND, "n0")
    assert s["a-0"] == PENDING


def test_starved_department_is_served_first():
    # Rule 2 at the department level: dept-b holds nothing and deserves 2, dept-a already
    # holds 3 of its 2 deserved GPUs; the best job of each subtree is compared.
    objs = [
        gnode("n0", 4),
        dept("dept-a", gpu=(2, -1, 1), created=0),
        dept("dept-b", gpu=(2, -1, 1), created=1),
        leaf("qa", parent="dept-a", created=2),
        leaf("qb", parent="dept-b", created=3),
        *job("run", "qa", gpus=3, pods=["n0"]),
        *job("a", "qa", created=0),
        *job("b", "qb", created=9),
    ]
    s = allocate(objs)
    assert s["b-0"] == (BOUND, "n0")
    assert s["a-0"] == PENDING


# ------------------------------------------------------------------ job order
def test_higher_priority_job_goes_first_inside_a_queue():
    # Job order: priority (build 100 > train 50) before creation time.  The build job is
    # within the queue's deserved 2 GPUs, so it is not over quota.
    objs = [
        gnode("n0", 4),
        dept(),
        leaf("q", deserved=2),
        *job("run0", "q", gpus=2, pods=["n0"]),
        *job("big", "q", gpus=4, created=1),
        *job("t", "q", gpus=2, created=2),
        *job("b", "q", gpus=2, pc="build", created=3),
    ]
    s = allocate(objs)
    assert s["b-0"] == (BOUND, "n0")
    assert s["t-0"] == PENDING
    assert s["big-0"] == PENDING


def test_non_preemptible_job_beyond_deserved_quota_is_skipped():
    # Capacity policy: a non-preemptible (build) job may only use in-quota resources
    # (deserved 1 < 2 requested); the older train job behind it gets the GPUs.
    objs = [
        gnode("n0", 4),
        dept(),
        leaf("q", deserved=1),
        *job("run0", "q", gpus=2, pods=["n0"]),
        *job("t", "q", gpus=2, created=2),
        *job("b", "q", gpus=2, pc="build", created=3),
    ]
    out = allocate_out(objs)
    s = {k.split("/", 1)[1]: v for k, v in statuses(out).items()}
    assert s["b-0"] == PENDING
    assert s["t-0"] == (BOUND, "n0")
    assert "NonPreemptibleOverQuota" in out["podGroups"]["default/b"]["reason"]


def test_older_job_first_at_equal_priority():
    objs = [
        gnode("n0", 1),
        dept(),
        leaf("q"),
        *job("young", "q", created=5),
        *job("old", "q", created=1),
    ]
    s = allocate(objs)
    assert s["old-0"] == (BOUND, "n0")
    assert s["young-0"] == PENDING


def test_elastic_jobs_take_turns_one_pod_at_a_time():
    # Elastic job order: below minMember first, then exactly at it, then above it; ties by
    # age.  job0 gets its gang, job1 its gang, then extras alternate: job0, job1, job0.
    objs = [
        gnode("n0", 5),
        dept(),
        leaf("q", deserved=5),
        *job("job0", "q", pods=[None] * 3, min_member=1, created=0),
        *job("job1", "q", pods=[None] * 3, min_member=1, created=1),
    ]
    s = allocate(objs)
    assert [s[f"job0-{i}"][0] for i in range(3)] == [BOUND] * 3
    assert sorted(s[f"job1-{i}"][0] for i in range(3)) == [BOUND, BOUND, "Pending"]


def test_elastic_pods_follow_task_priority():
    # Task order: the kai.scheduler/task-priority label, higher first.
    objs = [
        gnode("n0", 1),
        dept(),
        leaf("q"),
        *job(
            "e",
            "q",
            pods=[None, None],
            min_member=1,
            labels=[{"kai.scheduler/task-priority": "1"}, {"kai.scheduler/task-priority": "2"}],
        ),
    ]
    s = allocate(objs)
    assert s["e-1"] == (BOUND, "n0")
    assert s["e-0"] == PENDING


# ------------------------------------------------------------------ gangs
def test_gang_is_all_or_nothing_and_does_not_block_others():
    objs = [
        gnode("n0", 2),
        dept(),
        leaf("q"),
        *job("gang", "q", gpus=2, pods=[None, None], created=0),
        *job("single", "q", gpus=1, created=1),
    ]
    s = allocate(objs)
    assert s["gang-0"] == PENDING and s["gang-1"] == PENDING
    assert s["single-0"] == (BOUND, "n0")


def test_gang_spans_nodes():
    objs = [gnode("n0", 1), gnode("n1", 1), dept(), leaf("q"), *job("g", "q", pods=[None, None])]
    s = allocate(objs)
    assert {s["g-0"], s["g-1"]} == {(BOUND, "n0"), (BOUND, "n1")}


def test_partially_running_gang_needs_room_for_the_rest_of_its_minimum():
    # minMember 3 with one pod running: the two missing pods are one all-or-nothing chunk.
    tight = [
        gnode("n0", 2),
        dept(),
        leaf("q"),
        *job("g", "q", pods=["n0", None, None], min_member=3),
    ]
    s = allocate(tight)
    assert s["g-1"] == PENDING and s["g-2"] == PENDING
    roomy = [gnode("n0", 3), *tight[1:]]
    s = allocate(roomy)
    assert s["g-1"] == (BOUND, "n0") and s["g-2"] == (BOUND, "n0")


def test_min_member_below_pod_count_places_the_gang_then_extras():
    objs = [
        gnode("n0", 3),
        dept(),
        leaf("q"),
        *job("g", "q", pods=[None] * 4, min_member=2),
    ]
    s = allocate(objs)
    assert sorted(v[0] for v in s.values()) == [BOUND, BOUND, BOUND, "Pending"]


def test_gang_with_too_few_pods_is_not_tried():
    # A job whose alive pods are fewer than minMember is not ready.
    objs = [gnode("n0", 4), dept(), leaf("q"), *job("g", "q", pods=[None, None], min_member=3)]
    s = allocate(objs)
    assert s["g-0"] == PENDING and s["g-1"] == PENDING


# ------------------------------------------------------------------ pipelining
def test_gang_is_pipelined_together_onto_a_releasing_pod():
    # First pod fits idle GPUs, the second needs the releasing GPU: the whole gang is
    # pipelined (bound together or pipelined together).
    objs = [
        gnode("n0", 4),
        dept(),
        leaf("q", deserved=3),
        *job("old", "q", pods=[("releasing", "n0")]),
        *job("g", "q", gpus=2, pods=[None, None], created=1),
    ]
    s = allocate(objs)
    assert s["g-0"] == ("Pipelined", "n0") and s["g-1"] == ("Pipelined", "n0")
    assert s["old-0"] == ("Releasing", "n0")


def test_idle_node_is_preferred_to_pipelining():
    # nodeavailability: fitting on idle resources outweighs bin-packing.
    objs = [
        gnode("n0", 2),
        gnode("n1", 4),
        dept(),
        leaf("q"),
        *job("old", "q", gpus=2, pods=[("releasing", "n0")]),
        *job("p", "q", gpus=1, created=1),
        *job("r", "q", gpus=4, pods=["n1"], created=0),
    ]
    s = allocate(objs)
    assert s["p-0"] == ("Pipelined", "n0")  # n1 is full: only releasing capacity is left
    objs = [gnode("n2", 2), *objs]
    s = allocate(objs)
    assert s["p-0"] == (BOUND, "n2")


# ------------------------------------------------------------------ GPU sharing
def test_fraction_joins_an_existing_shared_gpu():
    objs = [
        gnode("n0", 2),
        gnode("n1", 2),
        dept(),
        leaf("q"),
        *job("f0", "q", fraction=0.5, pods=["n1"], labels=[{"runai-gpu-group": "1"}]),
        *job("f1", "q", fraction=0.5, created=1),
    ]
    out = allocate_out(objs)
    s = statuses(out)
    # gpusharingorder: the node with a shared GPU that has room wins over the tie on n0.
    assert s["default/f1-0"] == (BOUND, "n1")
    bind = next(d for d in out["decisions"] if d["pod"] == "default/f1-0")
    assert bind["gpuGroups"] == ["1"]


def test_fraction_that_does_not_fit_the_shared_gpu_opens_a_new_device():
    objs = [
        gnode("n0", 2),
        dept(),
        leaf("q"),
        *job("f0", "q", fraction=0.6, pods=["n0"], labels=[{"runai-gpu-group": "0"}]),
        *job("f1", "q", fraction=0.5, created=1),
    ]
    out = allocate_out(objs)
    assert statuses(out)["default/f1-0"] == (BOUND, "n0")
    bind = next(d for d in out["decisions"] if d["pod"] == "default/f1-0")
    assert bind["gpuGroups"] != ["0"]


def test_fraction_is_never_split_across_devices():
    # Two devices with 0.4 free each cannot hold a 0.5 fraction.
    objs = [
        gnode("n0", 2),
        dept(),
        leaf("q"),
        *job("a", "q", fraction=0.6, pods=["n0"], labels=[{"runai-gpu-group": "0"}]),
        *job("b", "q", fraction=0.6, pods=["n0"], labels=[{"runai-gpu-group": "1"}]),
        *job("f", "q", fraction=0.5, created=1),
    ]
    s = allocate(objs)
    assert s["f-0"] == PENDING


def test_gpupack_fills_the_fullest_shared_device_first():
    objs = [
        gnode("n0", 4),
        dept(),
        leaf("q"),
        *job("a", "q", fraction=0.3, pods=["n0"], labels=[{"runai-gpu-group": "0"}]),
        *job("b", "q", fraction=0.6, pods=["n0"], labels=[{"runai-gpu-group": "1"}]),
        *job("f", "q", fraction=0.3, created=1),
    ]
    out = allocate_out(objs)
    bind = next(d for d in out["decisions"] if d["pod"] == "default/f-0")
    assert bind["node"] == "n0" and bind["gpuGroups"] == ["1"]


def test_whole_gpu_job_fits_next_to_a_shared_device():
    objs = [
        gnode("n0", 2),
        dept(),
        leaf("q", deserved=2),
        *job("f0", "q", fraction=0.5, pc="build", pods=["n0"], labels=[{"runai-gpu-group": "1"}]),
        *job("w", "q", gpus=1, created=1),
    ]
    s = allocate(objs)
    assert s["w-0"] == (BOUND, "n0")


def test_gpu_memory_request_needs_a_node_with_known_gpu_memory():
    # GPU-memory requests are rejected on nodes whose GPU memory label is missing.
    objs = [
        gnode("a-unlabelled", 1),
        gnode("b-labelled", 1, gpu_memory=40000),
        dept(),
        leaf("q"),
        *job("m", "q", gpu_memory=20000),
    ]
    s = allocate(objs)
    assert s["m-0"] == (BOUND, "b-labelled")


def test_gpu_memory_requests_share_one_device():
    objs = [
        gnode("n0", 1, gpu_memory=40000),
        dept(),
        leaf("q"),
        *job("m0", "q", gpu_memory=20000, pods=["n0"], labels=[{"runai-gpu-group": "0"}]),
        *job("m1", "q", gpu_memory=20000, created=1),
        *job("m2", "q", gpu_memory=20000, created=2),
    ]
    s = allocate(objs)
    assert s["m1-0"] == (BOUND, "n0")
    assert s["m2-0"] == PENDING


def test_fraction_gang_over_the_queue_limit_is_refused():
    # OverLimit: 3 x 0.5 GPU > limit 1, at the leaf and (second cluster) at the department.
    objs = [
        gnode("n0", 4),
        dept("dept-a", gpu=(1, 1, 1)),
        leaf("q", deserved=1, limit=1, parent="dept-a"),
        *job("f", "q", fraction=0.5, pods=[None] * 3),
    ]
    s = allocate(objs)
    assert all(v == PENDING for v in s.values())
    objs[2] = leaf("q", deserved=1, parent="dept-a")
    s = allocate(objs)
    assert all(v == PENDING for v in s.values())


def test_non_preemptible_fraction_stays_within_quota():
    # NonPreemptibleOverQuota: 0.6 + 0.5 > deserved 1 for build (non-preemptible) jobs.
    objs = [
        gnode("n0", 2),
        dept(),
        leaf("q", deserved=1),
        *job("f0", "q", fraction=0.6, pc="build", pods=["n0"], labels=[{"runai-gpu-group": "0"}]),
        *job("f1", "q", fraction=0.5, pc="build", created=1),
    ]
    s = allocate(objs)
    assert s["f1-0"] == PENDING


# ------------------------------------------------------------------ placement
def test_whole_gpus_binpack_onto_the_node_with_fewest_free_gpus():
    objs = [
        gnode("n0", 4),
        gnode("n1", 4),
        dept(),
        leaf("q"),
        *job("r", "q", gpus=1, pods=["n1"]),
        *job("p", "q", gpus=1, created=1),
    ]
    s = allocate(objs)
    assert s["p-0"] == (BOUND, "n1")


def test_cpu_only_job_prefers_a_cpu_only_node():
    # resourcetype (+10) outweighs CPU bin-packing (at most 9).
    objs = [
        node("gpu-node", gpus=8, cpu="16"),
        node("x-cpu-node", gpus=0, cpu="64"),
        dept(),
        leaf("q"),
        *job("c", "q", gpus=0, cpu="2"),
    ]
    s = allocate(objs)
    assert s["c-0"] == (BOUND, "x-cpu-node")


def test_cpu_only_jobs_binpack_by_cpu():
    objs = [
        node("c0", gpus=0, cpu="16"),
        node("c1", gpus=0, cpu="16"),
        dept(),
        leaf("q"),
        *job("r", "q", gpus=0, cpu="10", pods=["c1"]),
        *job("c", "q", gpus=0, cpu="2", created=1),
    ]
    s = allocate(objs)
    assert s["c-0"] == (BOUND, "c1")


# ------------------------------------------------------------------ limits
def test_queue_without_resources_may_allocate_nothing_limited():
    # A queue whose spec leaves resources out has limit 0 for every resource: even a
    # CPU-only job is over its limit.
    bare = {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": "bare", "creationTimestamp": QT(5)},
        "spec": {"parentQueue": "dept"},
    }
    objs = [gnode("n0", 2), dept(), bare, *job("g", "bare"), *job("c", "bare", gpus=0)]
    s = allocate(objs)
    assert s["g-0"] == PENDING and s["c-0"] == PENDING


def test_zero_gpu_limit_blocks_gpu_jobs_but_not_cpu_jobs():
    # OverLimit only counts resources the job requests.
    objs = [
        gnode("n0", 2),
        dept(),
        leaf("q", deserved=0, limit=0),
        *job("g", "q", created=0),
        *job("c", "q", gpus=0, created=1),
    ]
    out = allocate_out(objs)
    s = statuses(out)
    assert s["default/g-0"] == PENDING
    assert s["default/c-0"] == (BOUND, "n0")
    assert "OverLimit" in out["podGroups"]["default/g"]["reason"]


def test_department_limit_caps_its_queues():
    objs = [
        gnode("n0", 8),
        dept("d", gpu=(-1, 2, 1)),
        leaf("q1", parent="d", created=1),
        leaf("q2", parent="d", created=2),
        *job("a", "q1", created=0),
        *job("b", "q2", created=1),
        *job("c", "q1", created=2),
    ]
    s = allocate(objs)
    assert sorted(v[0] for v in s.values()) == [BOUND, BOUND, "Pending"]


# ------------------------------------------------------------------ nodes
def test_not_ready_and_unschedulable_nodes_are_skipped():
    objs = [
        gnode("a", 8, ready=False),
        gnode("b", 8, unschedulable=True),
        gnode("c", 1),
        dept(),
        leaf("q"),
        *job("p", "q"),
        *job("p2", "q", created=1),
    ]
    s = allocate(objs)
    assert s["p-0"] == (BOUND, "c")
    assert s["p2-0"] == PENDING


def test_taints_need_tolerations():
    taint = [{"key": "team", "value": "x", "effect": "NoSchedule"}]
    soft = [{"key": "spot", "value": "y", "effect": "PreferNoSchedule"}]
    objs = [
        gnode("a", 4, taints=taint),
        gnode("b", 8, taints=soft),
        dept(),
        leaf("q"),
        *job("r", "q", gpus=3, pods=["a"], tolerations=[{"key": "team", "operator": "Exists"}]),
        *job("p", "q", created=1),
        *job(
            "t",
            "q",
            created=2,
            tolerations=[{"key": "team", "operator": "Equal", "value": "x"}],
        ),
    ]
    s = allocate(objs)
    assert s["p-0"] == (BOUND, "b")  # untolerated NoSchedule on a; PreferNoSchedule ignored
    assert s["t-0"] == (BOUND, "a")  # tolerated, and a is the fuller node


def _affinity(*exprs: dict) -> dict:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": list(exprs)}]
            }
        }
    }


def test_node_affinity_operators():
    nodes = [
        gnode("n1", 1, labels={"zone": "a", "gen": "3"}),
        gnode("n2", 1, labels={"zone": "b", "gen": "5"}),
        gnode("n3", 1, labels={"gen": "7", "spot": "yes"}),
    ]
    cases = {
        "in": ({"key": "zone", "operator": "In", "values": ["b"]}, "n2"),
        "notin": ({"key": "zone", "operator": "NotIn", "values": ["a", "b"]}, "n3"),
        "exists": ({"key": "spot", "operator": "Exists"}, "n3"),
        "dne": ({"key": "zone", "operator": "DoesNotExist"}, "n3"),
        "gt": ({"key": "gen", "operator": "Gt", "values": ["6"]}, "n3"),
        "lt": ({"key": "gen", "operator": "Lt", "values": ["4"]}, "n1"),
    }
    for name, (expr, expected) in cases.items():
        objs = [*nodes, dept(), leaf("q"), *job(name, "q", affinity=_affinity(expr))]
        assert allocate(objs)[f"{name}-0"] == (BOUND, expected), name


def test_node_selector_and_affinity_terms_are_ored():
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["x"]}]},
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                ]
            }
        }
    }
    objs = [
        gnode("n1", 1, labels={"zone": "a"}),
        gnode("n2", 1, labels={"zone": "b"}),
        dept(),
        leaf("q"),
        *job("p", "q", affinity=affinity),
        *job("s", "q", created=1, node_selector={"zone": "a"}),
    ]
    s = allocate(objs)
    assert s["p-0"] == (BOUND, "n2")
    assert s["s-0"] == (BOUND, "n1")


# ------------------------------------------------------------------ regressions
def test_queue_order_sees_the_next_chunk_of_an_elastic_job():
    # Rule 2 uses the job's *current* tasks to allocate: after its gang of 3, the elastic
    # job asks for one pod at a time, so qa (3 + 1 <= 5) stays starved and keeps winning
    # rule 5 (4/5 < 2/2); qb's 2-GPU job then no longer fits.  Judging qa by its first
    # chunk (3 + 3 > 5) would have served qb first.
    objs = [
        gnode("n0", 5),
        dept(),
        leaf("qa", deserved=5, created=1),
        leaf("qb", deserved=2, created=2),
        *job("e", "qa", pods=[None] * 5, min_member=3, created=0),
        *job("j", "qb", gpus=2, created=1),
    ]
    s = allocate(objs)
    assert [s[f"e-{i}"][0] for i in range(5)] == [BOUND] * 5
    assert s["j-0"] == PENDING


def test_gated_pods_are_neither_scheduled_nor_counted_for_the_gang():
    # A pod with spec.schedulingGates is Gated: not allocated, and a gang whose
    # non-gated pods are fewer than minMember is not ready.
    def gated(objs: list[dict]) -> list[dict]:
        objs[-1]["spec"]["schedulingGates"] = [{"name": "wait"}]
        return objs

    objs = [
        gnode("n0", 4),
        dept(),
        leaf("q"),
        *gated(job("single", "q")),
        *gated(job("g", "q", pods=[None, None], min_member=2, created=1)),
        *job("e", "q", pods=[None, None], min_member=1, created=2),
    ]
    objs[-1]["spec"]["schedulingGates"] = [{"name": "wait"}]
    s = allocate(objs)
    assert s["single-0"] == PENDING
    assert s["g-0"] == PENDING and s["g-1"] == PENDING
    assert s["e-0"] == (BOUND, "n0") and s["e-1"] == PENDING


def test_gpu_memory_label_is_floored_to_a_multiple_of_100_mib():
    # 40550 MiB counts as 40500: two 20270 MiB requests (0.5005 each) no longer share a
    # device, and the second one opens the node's other GPU.
    objs = [
        gnode("n0", 2, gpu_memory=40550),
        dept(),
        leaf("q"),
        *job("m0", "q", gpu_memory=20270, pods=["n0"], labels=[{"runai-gpu-group": "0"}]),
        *job("m1", "q", gpu_memory=20270, created=1),
    ]
    out = allocate_out(objs)
    bind = next(d for d in out["decisions"] if d["pod"] == "default/m1-0")
    assert bind["gpuGroups"] != ["0"]


def test_non_preemptible_job_stays_within_every_ancestor_quota():
    # NonPreemptibleOverQuota at the department: the leaf is unlimited, the department
    # deserves 2 GPUs; a build job of 3 GPUs waits while a train job of 3 runs.
    objs = [
        gnode("n0", 8),
        dept("d", gpu=(2, -1, 1)),
        leaf("q", parent="d"),
        *job("b", "q", gpus=3, pc="build", created=0),
        *job("t", "q", gpus=3, created=1),
    ]
    s = allocate(objs)
    assert s["b-0"] == PENDING
    assert s["t-0"] == (BOUND, "n0")
