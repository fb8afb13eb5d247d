"""Scheduling-signature skip of the eviction actions (kai.actions.signatures)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from kai.actions.signatures import (
    FailedRepresentatives,
    easier_than,
    job_signature,
    no_larger_than,
    pending_footprint,
    pod_signature,
)
from kai.api.model import Job, Task, TaskStatus
from kai.api.objects import (
    NodeSelectorTerm,
    PodObject,
    PreferredSchedulingTerm,
    SelectorRequirement,
    Toleration,
)
from tests.test_kai_parity_eviction import PIPE, SIG_BASE, act_out, job, statuses


# ------------------------------------------------------------------ model helpers
def make_job(
    name: str,
    requests: list[tuple[float, ...]],
    queue: str = "q1",
    running: int = 0,
    **pod_kw: Any,
) -> Job:
    """A job with one pending pod per request vector (cpu, memory, gpu), plus
    ``running`` running pods of the first shape."""
    j = Job(name, name, "default", queue, 50, len(requests), True, "preemptible", None)
    shapes = [(r, TaskStatus.PENDING) for r in requests]
    shapes += [(requests[0], TaskStatus.RUNNING)] * running
    for i, (req, status) in enumerate(shapes):
        pod = PodObject(f"{name}-{i}", "default", **pod_kw)
        j.tasks.append(
            Task(f"{name}-{i}", pod.name, "default", j, np.array(req, float), status, pod)
        )
    return j


def reps(per_queue: bool = True) -> FailedRepresentatives:
    state = SimpleNamespace(pod_signatures={}, tasks=[])
    return FailedRepresentatives(SimpleNamespace(cache={}, state=state), per_queue=per_queue)


# ------------------------------------------------------------------ pod signatures
def test_pod_signature_is_stable_and_ignores_names_and_requests():
    a = PodObject("a", "ns1", node_selector={"x": "1", "y": "2"}, requests={"cpu": 1})
    b = PodObject("b", "ns2", node_selector={"y": "2", "x": "1"}, requests={"cpu": 9})
    assert pod_signature(a) == pod_signature(b)


def test_different_tolerations_are_not_equivalent():
    base = PodObject("a", "ns")
    tol = PodObject("a", "ns", tolerations=(Toleration("gpu", "Exists", "", "NoSchedule"),))
    other = PodObject("a", "ns", tolerations=(Toleration("gpu", "Exists", "", "NoExecute"),))
    assert len({pod_signature(base), pod_signature(tol), pod_signature(other)}) == 3


def test_different_selectors_and_affinities_are_not_equivalent():
    term = NodeSelectorTerm((SelectorRequirement("zone", "In", ("a",)),))
    pods = [
        PodObject("a", "ns"),
        PodObject("a", "ns", node_selector={"zone": "a"}),
        PodObject("a", "ns", node_selector={"zone": "b"}),
        PodObject("a", "ns", required_node_affinity=[term]),
        PodObject("a", "ns", preferred_node_affinity=(PreferredSchedulingTerm(1, term),)),
        PodObject("a", "ns", priority=100),
        PodObject("a", "ns", priority_class_name="build"),
    ]
    assert len({pod_signature(p) for p in pods}) == len(pods)


def test_job_signature_covers_only_pods_still_to_place():
    sel = {"node_selector": {"zone": "a"}}
    one = make_job("one", [(1, 1, 1)], **sel)
    more = make_job("more", [(1, 1, 1)], running=3, **sel)  # running pods do not count
    two = make_job("two", [(1, 1, 1), (1, 1, 1)], **sel)
    plain = make_job("plain", [(1, 1, 1)])
    assert job_signature(one) == job_signature(more)
    assert job_signature(one) != job_signature(two)
    assert job_signature(one) != job_signature(plain)


def test_pending_footprint_is_sorted():
    j = make_job("j", [(2, 0, 1), (1, 5, 1), (1, 0, 2)])
    assert pending_footprint(j)[:, :3].tolist() == [[1, 0, 2], [1, 5, 1], [2, 0, 1]]


# ------------------------------------------------------------------ comparisons
def fp(*rows: tuple[float, ...]) -> np.ndarray:
    return np.array(sorted(rows), float).reshape(len(rows), 3)


def test_easier_than():
    rep = fp((1, 1, 2), (1, 1, 2))
    assert not easier_than(fp((1, 1, 2), (1, 1, 2)), rep)  # equal
    assert easier_than(fp((1, 1, 2)), rep)  # fewer pending pods
    assert easier_than(fp((1, 1, 1), (1, 1, 2)), rep)  # one pod strictly smaller
    assert not easier_than(fp((1, 1, 3), (1, 1, 3)), rep)  # larger
    assert not easier_than(fp((2, 0, 2), (2, 0, 2)), rep)  # incomparable
    assert not easier_than(fp((1, 1, 2), (1, 1, 2), (1, 1, 2)), rep)  # more pods
    assert easier_than(fp((0, 0, 0), (1, 1, 2), (1, 1, 2)), rep)  # ... one smaller
    assert not easier_than(fp((1, 1, 1)), fp())  # a representative with no pending pod
    assert not easier_than(fp(), rep)


def test_easier_than_on_few_rows_decides_as_on_arrays(monkeypatch):
    """Footprints of a few rows are compared in Python floats; the array comparison,
    which longer ones take, must give the same answers."""
    import random

    import kai.actions.signatures as signatures

    rng = random.Random(5)
    pairs = []
    for _ in range(2000):
        rows = [tuple(rng.choice([0.0, 0.5, 1.0, 2.0]) for _ in range(3)) for _ in range(4)]
        pairs.append((fp(*rows[: rng.randint(0, 3)]), fp(*rows[rng.randint(0, 3) :])))
    few = [easier_than(a, b) for a, b in pairs]
    monkeypatch.setattr(signatures, "_FEW_ROWS", 0)
    assert few == [easier_than(a, b) for a, b in pairs]
    assert 0 < sum(few) < len(few)


def test_no_larger_than():
    rep = fp((1, 1, 2), (1, 1, 2))
    assert no_larger_than(fp((1, 1, 2), (1, 1, 2)), rep)
    assert no_larger_than(fp((1, 1, 1)), rep)
    assert not no_larger_than(fp((1, 1, 1), (1, 1, 1), (1, 1, 1)), rep)
    assert not no_larger_than(fp((2, 0, 1)), rep)
    assert not no_larger_than(fp(), rep)


# ------------------------------------------------------------------ representatives
def test_equal_job_is_skipped_and_smaller_job_tried():
    r = reps()
    first = make_job("first", [(1, 1, 2)])
    assert r.equivalent_failed(first) is None
    r.failed(first)
    assert r.equivalent_failed(make_job("same", [(1, 1, 2)])) is first
    assert r.equivalent_failed(make_job("bigger", [(1, 1, 4)])) is first
    assert r.equivalent_failed(make_job("smaller", [(1, 1, 1)])) is None


def test_a_job_is_judged_by_its_pods_statuses_when_asked():
    """A job asked about again after some of its pods changed status (placed since) is
    judged by the pods it still has to place, not as it was when first asked."""
    r = reps()
    a = make_job("a", [(1, 1, 1), (1, 1, 1)])
    r.failed(a)
    b = make_job("b", [(1, 1, 1), (1, 1, 1), (1, 1, 1)])
    assert r.equivalent_failed(b) is None  # three pods to place: another signature
    b.tasks[0].status = TaskStatus.RUNNING  # one was placed since
    assert r.equivalent_failed(b) is a  # the same two pods as "a" left
    assert r.footprint(b).tolist() == pending_footprint(b).tolist()
    b.tasks[1].status = TaskStatus.RUNNING
    assert r.equivalent_failed(b) is None  # one pod left: another signature


def test_a_smaller_failure_replaces_the_representative():
    r = reps()
    big = make_job("big", [(1, 1, 4)])
    small = make_job("small", [(1, 1, 2)])
    r.failed(big)
    assert r.equivalent_failed(small) is None
    r.failed(small)
    assert r.equivalent_failed(make_job("mid", [(1, 1, 3)])) is small
    r.failed(make_job("larger", [(1, 1, 8)]))  # no smaller: the representative stays
    assert r.equivalent_failed(make_job("mid2", [(1, 1, 3)])) is small
    assert len(r) == 1


def test_different_constraints_are_not_equivalent():
    r = reps()
    r.failed(make_job("sel", [(1, 1, 2)], node_selector={"zone": "a"}))
    assert r.equivalent_failed(make_job("plain", [(1, 1, 2)])) is None
    tol = [Toleration("gpu", "Exists")]
    assert r.equivalent_failed(make_job("tol", [(1, 1, 2)], tolerations=tol)) is None
    assert r.equivalent_failed(make_job("sel2", [(1, 1, 2)], node_selector={"zone": "a"}))


def test_per_queue_keys_and_global_keys():
    per_queue, global_ = reps(per_queue=True), reps(per_queue=False)
    for r in (per_queue, global_):
        r.failed(make_job("a", [(1, 1, 2)], queue="q1"))
    other_queue = make_job("b", [(1, 1, 2)], queue="q2")
    same_queue = make_job("c", [(1, 1, 2)], queue="q1")
    assert per_queue.equivalent_failed(other_queue) is None
    assert per_queue.equivalent_failed(same_queue) is not None
    assert global_.equivalent_failed(other_queue) is not None
    assert global_.equivalent_failed(same_queue) is not None


# ------------------------------------------------------------------ in the actions
def with_pod_spec(objs: list[dict], **spec: Any) -> list[dict]:
    for obj in objs:
        if obj["kind"] == "Pod":
            obj["spec"].update(spec)
    return objs


def test_reclaim_records_why_an_equivalent_job_was_skipped():
    out = act_out(
        [
            *SIG_BASE,
            *job("p", "q1", gpus=2, pc="build", created=9),
            *job("r", "q1", gpus=2, created=10),
        ],
        "reclaim",
    )
    assert out["decisions"] == []
    explain = out["podGroups"]["default/r"]["explain"]
    assert explain == ["Reclaim: skipped, equivalent to already failed job default/p"]


def test_reclaim_tries_a_smaller_job_after_a_failure():
    out = act_out(
        [
            *SIG_BASE,
            *job("p", "q1", gpus=2, pc="build", created=9),
            *job("r", "q1", gpus=1, created=10),
        ],
        "reclaim",
    )
    assert statuses(out)["default/r-0"] == PIPE("n0")


def test_reclaim_tries_a_job_with_other_tolerations():
    tolerations = [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]
    out = act_out(
        [
            *SIG_BASE,
            *job("p", "q1", gpus=2, pc="build", created=9),
            *with_pod_spec(job("r", "q1", gpus=2, created=10), tolerations=tolerations),
        ],
        "reclaim",
    )
    assert statuses(out)["default/r-0"] == PIPE("n0")


def test_a_job_that_succeeded_never_becomes_a_representative():
    # r1 reclaims (succeeds); the identical r2 is still tried afterwards.
    out = act_out(
        [
            *SIG_BASE,
            *job("r1", "q1", gpus=1, created=9),
            *job("r2", "q1", gpus=1, created=10),
        ],
        "reclaim",
    )
    s = statuses(out)
    assert s["default/r1-0"] == PIPE("n0") and s["default/r2-0"] == PIPE("n0")
    assert not any("equivalent" in e for e in out["podGroups"]["default/r2"]["explain"])


def test_every_job_left_is_passed_over_with_the_representative_of_its_failure():
    # Once every job left is equivalent to a failed one, the action passes them all over
    # at once: each still records which failed job it is equivalent to, and a smaller
    # job among them is still tried (and reclaims).
    others = [o for i in range(12) for o in job(f"r{i}", "q1", gpus=2, created=10 + i)]
    out = act_out(
        [
            *SIG_BASE,
            *job("p", "q1", gpus=2, pc="build", created=9),
            *others,
            *job("s", "q1", gpus=1, created=30),
        ],
        "reclaim",
    )
    groups = out["podGroups"]
    for i in range(12):
        assert groups[f"default/r{i}"]["explain"] == [
            "Reclaim: skipped, equivalent to already failed job default/p"
        ]
    assert statuses(out)["default/s-0"] == PIPE("n0")


def test_jobs_passed_over_name_the_representative_of_the_last_failure():
    # p fails; the next check passes r0..r3 over (equivalent to p) and finds y, which
    # asks for less.  y is tried and fails too, and replaces p as the representative
    # its key: when every job left is passed over, r0..r3 name y.
    out = act_out(
        [
            *SIG_BASE,
            *job("p", "q1", gpus=2, pc="build", created=9),
            *job("y", "q1", gpus=2, pc="build", created=10, cpu="500m"),
            *[o for i in range(4) for o in job(f"r{i}", "q1", gpus=2, pc="build", created=11 + i)],
        ],
        "reclaim",
    )
    groups = out["podGroups"]
    assert out["decisions"] == []
    assert not any("equivalent" in e for e in groups["default/y"]["explain"])
    for i in range(4):
        assert groups[f"default/r{i}"]["explain"] == [
            "Reclaim: skipped, equivalent to already failed job default/y"
        ]


def test_pod_signatures_are_kept_with_the_state_across_sessions(monkeypatch):
    """A state that lives across sessions (the replay's) hashes each pod once; the cache
    is emptied once it holds many more pods than the state."""
    import kai.actions.signatures as signatures

    hashed: list[str] = []
    original = signatures.pod_signature

    def counted(pod: PodObject) -> str:
        hashed.append(pod.name)
        return original(pod)

    monkeypatch.setattr(signatures, "pod_signature", counted)
    jobs = [make_job(f"j{i}", [(1.0, 1.0, 1.0)] * 3) for i in range(4)]
    state = SimpleNamespace(pod_signatures={}, tasks=[t for j in jobs for t in j.tasks])
    for _session in range(3):
        failed = FailedRepresentatives(SimpleNamespace(cache={}, state=state), per_queue=True)
        keys = [failed.key(j) for j in jobs]
        assert keys[0][1] == keys[1][1]  # alike pods: one signature
    assert sorted(hashed) == sorted(t.pod.name for j in jobs for t in j.tasks)

    state.tasks = []  # the pods are gone: past the limit, the cache is emptied
    state.pod_signatures.update({-i: (None, "") for i in range(1100)})
    FailedRepresentatives(SimpleNamespace(cache={}, state=state), per_queue=True)
    assert state.pod_signatures == {}


def test_a_sessions_actions_share_what_they_learn_of_its_jobs(monkeypatch):
    """The eviction actions of one session ask about the same pending jobs: a job's
    signature is made once per state of its pods, whichever action asks (per queue or
    not), and again once a pod changed status."""
    import kai.actions.signatures as signatures

    made: list[str] = []
    original = signatures.job_signature

    def counted(job, cache=None):
        made.append(job.name)
        return original(job, cache)

    monkeypatch.setattr(signatures, "job_signature", counted)
    jobs = [make_job(f"j{i}", [(1.0, 1.0, float(i + 1))] * 2) for i in range(3)]
    state = SimpleNamespace(pod_signatures={}, tasks=[t for j in jobs for t in j.tasks])
    ssn = SimpleNamespace(cache={}, state=state)
    per_queue = FailedRepresentatives(ssn, per_queue=True)
    per_queue.failed(jobs[0])
    keys = [per_queue.key(j) for j in jobs]
    whole = FailedRepresentatives(ssn, per_queue=False)
    assert [whole.key(j) for j in jobs] == [key[1:] for key in keys]
    assert whole.equivalent_failed(jobs[1]) is None  # no failure in this action yet
    assert sorted(made) == ["j0", "j1", "j2"]
    jobs[2].tasks[0].status = TaskStatus.RUNNING
    assert whole.key(jobs[2]) != keys[2][1:]  # one pod left to place: another signature
    assert sorted(made) == ["j0", "j1", "j2", "j2"]
