"""Hierarchical fair share as the proportion plugin divides it."""

from __future__ import annotations

import pytest

from tests.factory import node, pod, queue, run


def fair(out, name):
    return out["queues"][name]["fairShare"]["gpu"]


def pending(n, q, ns, gpus=1):
    return [pod(f"{ns}-{i}", ns, gpus=gpus, queue=q) for i in range(n)]


def test_deserved_first_then_over_quota_by_weight():
    objs = [node(f"n{i}") for i in range(4)]  # 32 GPUs
    objs += [queue("a", gpu=(4, -1, 3)), queue("b", gpu=(4, -1, 1))]
    objs += pending(30, "a", "na") + pending(30, "b", "nb")
    out = run(objs, [])
    # 8 deserved, 24 over quota split 3:1
    assert (fair(out, "a"), fair(out, "b")) == (22.0, 10.0)


def test_queue_gets_no_more_than_it_requests():
    objs = [node("n1"), queue("a", gpu=(0, -1, 1)), queue("b", gpu=(0, -1, 1))]
    objs += pending(1, "a", "na") + pending(20, "b", "nb")
    out = run(objs, [])
    assert (fair(out, "a"), fair(out, "b")) == (1.0, 7.0)


def test_limit_caps_the_fair_share():
    objs = [node("n1"), queue("a", gpu=(0, 2, 1)), queue("b", gpu=(0, -1, 1))]
    objs += pending(8, "a", "na") + pending(8, "b", "nb")
    out = run(objs, [])
    assert (fair(out, "a"), fair(out, "b")) == (2.0, 6.0)


def test_zero_weight_gets_only_deserved():
    objs = [node("n1"), queue("a", gpu=(1, -1, 0)), queue("b", gpu=(1, -1, 1))]
    objs += pending(8, "a", "na") + pending(8, "b", "nb")
    out = run(objs, [])
    assert (fair(out, "a"), fair(out, "b")) == (1.0, 7.0)


def test_higher_priority_queues_take_over_quota_first():
    objs = [
        node("n1"),
        queue("hi", gpu=(0, -1, 1), priority=200),
        queue("lo", gpu=(0, -1, 1), priority=100),
    ]
    objs += pending(6, "hi", "nh") + pending(6, "lo", "nl")
    out = run(objs, [])
    assert (fair(out, "hi"), fair(out, "lo")) == (6.0, 2.0)


def test_children_divide_their_parents_share():
    objs = [node(f"n{i}") for i in range(2)]  # 16 GPUs
    objs += [
        queue("d1", gpu=(8, -1, 1)),
        queue("d2", gpu=(8, -1, 1)),
        queue("t1", parent="d1", gpu=(2, -1, 1)),
        queue("t2", parent="d1", gpu=(2, -1, 1)),
        queue("t3", parent="d2", gpu=(0, -1, 1)),
    ]
    objs += pending(10, "t1", "n1") + pending(10, "t2", "n2") + pending(2, "t3", "n3")
    out = run(objs, [])
    # d2 asks for 2 only, so d1 gets 8 + 6 = 14 and splits it between t1 and t2.
    assert (fair(out, "d1"), fair(out, "d2")) == (14.0, 2.0)
    assert (fair(out, "t1"), fair(out, "t2"), fair(out, "t3")) == (7.0, 7.0, 2.0)


def test_remainders_are_handed_out_one_unit_at_a_time_to_the_oldest():
    objs = [node("n1", gpus=10)]
    objs += [
        queue(n, gpu=(0, -1, 1), created=f"2026-01-0{i + 1}T00:00:00Z")
        for i, n in enumerate(("a", "b", "c"))
    ]
    for name in ("a", "b", "c"):
        objs += pending(10, name, f"ns{name}")
    out = run(objs, [])
    assert sorted((fair(out, n) for n in "abc"), reverse=True) == [4.0, 3.0, 3.0]
    assert fair(out, "a") == 4.0


def test_cpu_and_memory_units():
    objs = [
        node("n1", gpus=0, cpu="10", memory="10G"),
        queue("a", cpu=(2000, -1, 1), memory=(1000, -1, 1)),
    ]
    objs += [pod("p", "ns", cpu="4", memory="5G", queue="a")]
    out = run(objs, [])
    share = out["queues"]["a"]["fairShare"]
    assert share["cpu"] == 4000.0  # millicores, capped at the request
    assert share["memory"] == pytest.approx(5e9)  # bytes
    assert out["queues"]["a"]["requested"]["memory"] == pytest.approx(5e9)


def test_what_victims_hold_is_summed_as_on_arrays():
    """The queue order's victims vector, summed in Python floats, equals the array sum
    task by task (the same additions in the same order): fractions of a CPU, memory
    in bytes, fractional and whole GPUs, pipelined pods left out."""
    import random
    from datetime import datetime, timezone

    import numpy as np

    import kai
    from kai.api.model import ALLOCATED
    from kai.config import SchedulerConfig
    from kai.framework.session import Session
    from kai.plugins.proportion import ProportionPlugin, queue_vector

    rng = random.Random(5)
    objs = [node(f"n{i}", gpus=8) for i in range(4)] + [queue("q")]
    for i in range(40):
        objs.append(
            pod(
                f"p{i}",
                cpu=f"{rng.randint(1, 999)}m",
                memory=f"{rng.randint(1, 5000)}Mi",
                queue="q",
                node=f"n{i % 4}" if rng.random() < 0.8 else None,
                gpus=rng.choice([0, 1, 2]),
            )
        )
    config = SchedulerConfig.default()
    now = datetime(2026, 11, 22, 12, tzinfo=timezone.utc)
    ssn = Session(kai.Snapshot.from_objects(objs).state(), config, now=now)
    ssn.open(config.build_plugins())
    proportion = next(p for p in ssn.plugins if isinstance(p, ProportionPlugin))
    jobs = sorted(ssn.jobs.values(), key=lambda j: j.key)

    def expected(victims):
        out = np.zeros(3)
        for job in victims:
            for task in job.tasks:
                if task.status in ALLOCATED:
                    out += queue_vector(ssn, task)
        return out.tolist()

    for _ in range(20):
        victims = rng.sample(jobs, rng.randint(1, len(jobs)))
        assert list(proportion._victims_held(victims)) == expected(victims)
        # Growing the list one job at a time, as a victim queue does (each sum goes on
        # from the one before): the same sums.
        for k in range(1, len(victims) + 1):
            assert list(proportion._victims_held(victims[:k])) == expected(victims[:k])
    # A pod that changes status changes what its job holds.
    running = next(t for job in jobs for t in job.tasks if t.status in ALLOCATED)
    victims = [running.job]
    before = proportion._victims_held(victims)
    stmt = ssn.statement()
    stmt.evict(running, "test")
    assert list(proportion._victims_held(victims)) == expected(victims) != list(before)
    stmt.discard()
    assert proportion._victims_held(victims) == before
    ssn.close()
