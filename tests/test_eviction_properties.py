"""Invariants of reclaim, preempt and consolidation on generated clusters.

* no non-preemptible pod is ever evicted;
* a gang is evicted whole (an elastic job keeps at least minMember pods or none);
* nothing is evicted unless a pending pod is pipelined in the same action;
* reclaim never pushes a victim queue below its deserved quota (1-GPU victims), and the
  reclaiming queue stays within its fair share;
* consolidation re-places every pod it evicts;
* no node ends up holding more GPUs than it has (bound, binding and pipelined pods; a
  releasing pod's place may be taken by a pipelined one), even when a pod placed earlier
  in the session is evicted again.
"""

from __future__ import annotations

from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests._kai_cluster import J, T, build, queue, run

SETTINGS = settings(
    max_examples=40,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@st.composite
def clusters(draw, *, single_gpu_victims: bool = False, contested: bool = False):
    """Running jobs on 1-3 nodes and 1-2 pending jobs.  ``contested`` adds a third queue
    and up to four more pending jobs, so that one action's reclaim or preemption can
    pick pods that an earlier job placed in the same session."""
    nodes = {f"n{i}": draw(st.sampled_from([1, 2, 4])) for i in range(draw(st.integers(1, 3)))}
    free = dict(nodes)
    names = ["q0", "q1", "q2"] if contested else ["q0", "q1"]
    queues = [queue(name, draw(st.integers(0, 3))) for name in names]
    jobs: list[J] = []
    for i in range(draw(st.integers(0, 6))):
        size = 1 if single_gpu_victims else draw(st.integers(1, 3))
        elastic = draw(st.booleans()) and size > 1
        placed = []
        for _ in range(size):
            node = next((n for n, f in free.items() if f >= 1), None)
            if node is None:
                break
            free[node] -= 1
            placed.append(T("Running", node))
        if not placed:
            break
        jobs.append(
            J(
                f"r{i}",
                draw(st.sampled_from(names)),
                placed,
                priority=draw(st.sampled_from([10, 40, 125])),
                min_member=1 if elastic else None,
            )
        )
    for i in range(draw(st.integers(1, 6 if contested else 2))):
        size = draw(st.integers(1, 3 if contested else 2))
        jobs.append(
            J(
                f"p{i}",
                draw(st.sampled_from(names)),
                [T() for _ in range(size)],
                priority=draw(st.sampled_from([20, 50, 80, 125])),
                min_member=1 if contested and size > 1 and draw(st.booleans()) else None,
            )
        )
    return build(nodes, queues, jobs), jobs


def _assert_no_node_overcommitted(snap, result) -> None:
    capacity = {n.name: n.allocatable.get("nvidia.com/gpu", 0.0) for n in snap.objects.nodes}
    gpus = {p.key: p.requests.get("nvidia.com/gpu", 0.0) for p in snap.objects.pods}
    held: dict[str, float] = defaultdict(float)
    for key, pod in result.pods.items():
        if pod.node and pod.status in ("Running", "Binding", "Pipelined"):
            held[pod.node] += gpus[key]
    for node, used in held.items():
        assert used <= capacity[node] + 1e-9, f"{node} holds {used} GPUs of {capacity[node]}"


def _common_checks(result, jobs: list[J]) -> None:
    by_name = {j.name: j for j in jobs}
    evicted = [d for d in result.decisions if d.type == "evict"]
    pipelined = [d for d in result.decisions if d.type == "pipeline"]
    pending_pods = {
        f"ns/{j.name}-{i}" for j in jobs for i, t in enumerate(j.tasks) if t.state == "Pending"
    }
    if evicted:
        assert any(d.pod in pending_pods for d in pipelined)
    per_job: dict[str, int] = defaultdict(int)
    for d in evicted:
        job = by_name[d.pod.split("/")[1].rsplit("-", 1)[0]]
        assert job.priority < 100, f"non-preemptible victim {d.pod}"
        per_job[job.name] += 1
    for name in per_job:
        job = by_name[name]
        running_after = sum(
            1
            for i in range(len(job.tasks))
            if result.pods[f"ns/{name}-{i}"].status in ("Running", "Pipelined", "Binding")
        )
        minimum = job.min_member if job.min_member is not None else len(job.tasks)
        assert running_after == 0 or running_after >= minimum


@SETTINGS
@given(clusters())
def test_preempt_invariants(case) -> None:
    snap, jobs = case
    result = run(snap, ["preempt"])
    _common_checks(result, jobs)
    _assert_no_node_overcommitted(snap, result)
    by_name = {j.name: j for j in jobs}
    for d in result.decisions:
        if d.type == "evict":
            victim = by_name[d.pod.split("/")[1].rsplit("-", 1)[0]]
            preemptors = [
                by_name[p.pod.split("/")[1].rsplit("-", 1)[0]]
                for p in result.decisions
                if p.type == "pipeline"
            ]
            assert any(p.queue == victim.queue and p.priority > victim.priority for p in preemptors)


@SETTINGS
@given(clusters(single_gpu_victims=True))
def test_reclaim_invariants(case) -> None:
    snap, jobs = case
    result = run(snap, ["reclaim"])
    _common_checks(result, jobs)
    _assert_no_node_overcommitted(snap, result)
    by_name = {j.name: j for j in jobs}
    deserved = {"q0": None, "q1": None}
    for obj in snap.objects.queues:
        if obj.name in deserved:
            deserved[obj.name] = obj.resources["gpu"].quota
    for d in result.decisions:
        job = by_name[d.pod.split("/")[1].rsplit("-", 1)[0]]
        q = result.queues[job.queue]
        if d.type == "evict":
            assert q.allocated["gpu"] >= deserved[job.queue] - 1e-9
        elif d.type == "pipeline":
            assert q.allocated["gpu"] <= q.fair_share["gpu"] + 1e-9


@SETTINGS
@given(clusters())
def test_consolidation_replaces_every_victim(case) -> None:
    snap, jobs = case
    result = run(snap, ["consolidation"])
    evicted = {d.pod for d in result.decisions if d.type == "evict"}
    pipelined = {d.pod for d in result.decisions if d.type == "pipeline"}
    assert evicted <= pipelined
    for pod in evicted:
        assert result.pods[pod].status == "Pipelined"
    _common_checks(result, jobs)
    _assert_no_node_overcommitted(snap, result)


EVICTING_ACTIONS = [["reclaim"], ["preempt"], ["reclaim", "preempt"]]


@settings(SETTINGS, max_examples=150)
@given(clusters(contested=True), st.sampled_from(EVICTING_ACTIONS))
def test_only_bound_pods_are_evicted(case, actions) -> None:
    """A pod that is not bound in the cluster never leaves the session as an eviction,
    and a placement that a later eviction undid leaves no bind or pipeline behind."""
    snap, _ = case
    bound = {p.key for p in snap.objects.pods if p.node_name}
    result = run(snap, actions)
    for d in result.decisions:
        if d.type == "evict":
            assert d.pod in bound, f"evicted {d.pod}, which no node runs"
    placed = [d.pod for d in result.decisions if d.type in ("bind", "pipeline")]
    assert len(placed) == len(set(placed))
    _assert_no_node_overcommitted(snap, result)
    for pod in placed:
        assert result.pods[pod].status in ("Binding", "Pipelined"), pod
