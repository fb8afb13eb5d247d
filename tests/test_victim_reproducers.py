"""Small clusters on which the exhaustive victim oracle (tests/test_victim_oracle.py)
found kai leaving a job pending or evicting more than needed: the cluster, the action,
the end status of every pod."""

from __future__ import annotations

from tests._kai_cluster import J, T, build, queue, run, statuses


def test_fractional_gang_does_not_count_gpus_promised_to_its_own_pods() -> None:
    # n0 runs the 1-GPU victim v and has one idle GPU; n1 has one idle GPU.  Five
    # half-GPU pods need three devices: evicting v gives them.  Pods pipelined onto a
    # node are charged to its releasing GPUs, so n0 showed an idle GPU that its pipelined
    # pods already held, was picked for the last pod and had no device for it.
    snap = build(
        {"n0": 2, "n1": 1},
        [queue("q0", 0)],
        [
            J("v", "q0", [T("Running", "n0")], priority=10),
            J("p", "q0", [T() for _ in range(5)], gpus=0.5, priority=50),
        ],
    )
    st = statuses(run(snap, ["preempt"]))
    assert st == {
        "v-0": ("Releasing", "n0"),
        "p-0": ("Pipelined", "n1"),
        "p-1": ("Pipelined", "n1"),
        "p-2": ("Pipelined", "n0"),
        "p-3": ("Pipelined", "n0"),
        "p-4": ("Pipelined", "n0"),
    }


def test_victim_placed_again_in_the_simulation_may_move() -> None:
    # n2 (4 GPUs) runs a, one pod of the gang g, and device d3 shared by s (0.25) and u
    # (0.25); n0 runs g's other pod; n1's device is shared by t (0.5).  The 2-pod job p
    # evicts the gang g and takes n2's free GPU and g's.  s was a victim of the same
    # scenario; as in KAI-Scheduler, victims are placed again by node order once the
    # pending job is placed, so s moves to n1's device (no node or device over-full).
    groups = {"s-0": "n2-d3", "u-0": "n2-d3", "t-0": "n1-d0"}
    snap = build(
        {"n0": 1, "n1": 1, "n2": 4},
        [queue("q0", 0)],
        [
            J("a", "q0", [T("Running", "n2")], priority=10),
            J("g", "q0", [T("Running", "n2"), T("Running", "n0")], priority=10),
            J("t", "q0", [T("Running", "n1")], gpus=0.5, priority=40),
            J("s", "q0", [T("Running", "n2")], gpus=0.25, priority=10),
            J("u", "q0", [T("Running", "n2")], gpus=0.25, priority=40),
            J("p", "q0", [T(), T()], priority=50),
        ],
        devices=groups,
    )
    st = statuses(run(snap, ["preempt"]))
    assert st == {
        "a-0": ("Running", "n2"),
        "g-0": ("Releasing", "n2"),
        "g-1": ("Releasing", "n0"),
        "t-0": ("Running", "n1"),
        "s-0": ("Pipelined", "n1"),
        "u-0": ("Running", "n2"),
        "p-0": ("Pipelined", "n2"),
        "p-1": ("Pipelined", "n2"),
    }


def test_fully_released_device_is_not_also_offered_as_room_on_it() -> None:
    # n0 runs the whole-GPU pod a (not a victim) and the 0.25-GPU victim s on device
    # d1; n1 has two idle GPUs.  Six half-GPU pods need d1 whole: evicting s frees it.
    # Two pods take d1 as a whole releasing GPU; the device's own free room (0.75) was
    # offered again, so n0 was picked for a third pod that found no device.
    groups = {"s-0": "n0-d1"}
    snap = build(
        {"n0": 2, "n1": 2},
        [queue("q0", 0)],
        [
            J("a", "q0", [T("Running", "n0")], priority=100),
            J("s", "q0", [T("Running", "n0")], gpus=0.25, priority=10),
            J("p", "q0", [T() for _ in range(6)], gpus=0.5, priority=50),
        ],
        devices=groups,
    )
    st = statuses(run(snap, ["preempt"]))
    assert st == {
        "a-0": ("Running", "n0"),
        "s-0": ("Releasing", "n0"),
        **{f"p-{i}": ("Pipelined", "n1") for i in range(4)},
        "p-4": ("Pipelined", "n0"),
        "p-5": ("Pipelined", "n0"),
    }


def test_fractional_victim_is_not_put_back_on_a_device_that_lost_its_room() -> None:
    # n0 (2 GPUs): device d0 shared by a (0.25) and v (0.5) of q1, one idle GPU.  Reclaim
    # alone places q0's half-GPU pod p on d0, in the room v's eviction frees.  v, offered
    # a whole device on its node, went back onto d0 (1.25 of one GPU); it now takes a
    # new device.
    snap = build(
        {"n0": 2},
        [queue("q0", 1), queue("q1", 0)],
        [
            J("a", "q1", [T("Running", "n0")], gpus=0.25, priority=10),
            J("v", "q1", [T("Running", "n0")], gpus=0.5, priority=10),
            J("p", "q0", [T()], gpus=0.5, priority=50),
        ],
        devices={"a-0": "n0-d0", "v-0": "n0-d0"},
    )
    result = run(snap, ["reclaim"])
    assert statuses(result) == {
        "a-0": ("Running", "n0"),
        "v-0": ("Pipelined", "n0"),
        "p-0": ("Pipelined", "n0"),
    }
    device = {d.pod: d.gpu_groups for d in result.decisions if d.type == "pipeline"}
    assert device["ns/p-0"] == ["n0-d0"]
    assert device["ns/v-0"] != ["n0-d0"]
