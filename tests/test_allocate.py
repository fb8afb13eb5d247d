"""The allocate action: gangs, pipelining, fair share, quotas, predicates, fractions."""

from __future__ import annotations

from tests.factory import gang, node, pod, podgroup, priority_class, queue, run, statuses


def test_single_pod_binds_and_binpacks_onto_the_fuller_node():
    objs = [
        node("n1", gpus=8),
        node("n2", gpus=8),
        queue("q"),
        pod("busy", gpus=6, node="n2", queue="q"),
        pod("p", gpus=1, queue="q"),
    ]
    out = run(objs, ["allocate"])
    assert statuses(out)["default/p"] == ("Binding", "n2")
    assert {
        "action": "allocate",
        "type": "bind",
        "pod": "default/p",
        "node": "n2",
        "gpuGroups": [],
    }.items() <= out["decisions"][0].items()


def test_spread_strategy_prefers_the_emptier_node():
    objs = [
        node("n1"),
        node("n2"),
        queue("q"),
        pod("busy", gpus=6, node="n2", queue="q"),
        pod("p", gpus=1, queue="q"),
    ]
    config = {
        "tiers": [
            {
                "plugins": [
                    {"name": "predicates"},
                    {"name": "proportion"},
                    {"name": "nodeplacement", "arguments": {"gpu": "spread", "cpu": "spread"}},
                ]
            }
        ]
    }
    out = run(objs, ["allocate"], config=config)
    assert statuses(out)["default/p"] == ("Binding", "n1")


def test_gang_is_all_or_nothing():
    objs = [node("n1"), node("n2"), queue("q"), *gang("train", 3, gpus=8)]
    out = run(objs, ["allocate"])
    assert all(s == ("Pending", None) for s in statuses(out).values())
    assert out["decisions"] == []
    group = out["podGroups"]["default/train"]
    assert group["scheduled"] is False
    assert "gang" in group["reason"] and "3" in group["reason"]


def test_gang_that_fits_binds_together_on_distinct_nodes():
    objs = [node("n1"), node("n2"), node("n3"), queue("q"), *gang("train", 3, gpus=8)]
    out = run(objs, ["allocate"])
    nodes = {statuses(out)[f"default/train-{i}"][1] for i in range(3)}
    assert nodes == {"n1", "n2", "n3"}
    assert out["podGroups"]["default/train"]["scheduled"] is True
    bind = out["decisions"][0]
    assert (
        bind["podGroupAnnotations"]["kai.scheduler/last-start-timestamp"] == "2026-11-22T12:00:00Z"
    )


def test_elastic_job_places_pods_beyond_min_member_one_at_a_time():
    objs = [node("n1", gpus=4), queue("q"), *gang("elastic", 3, gpus=2, min_member=1)]
    out = run(objs, ["allocate"])
    s = statuses(out)
    bound = [k for k, v in s.items() if v[0] == "Binding"]
    assert len(bound) == 2
    assert out["podGroups"]["default/elastic"]["scheduled"] is True


def test_gang_waits_for_missing_pods():
    objs = [
        node("n1"),
        queue("q"),
        podgroup("pg", min_member=3),
        pod("a", gpus=1, group="pg"),
        pod("b", gpus=1, group="pg"),
    ]
    out = run(objs, ["allocate"])
    assert statuses(out)["default/a"] == ("Pending", None)
    assert "minMember is 3" in out["podGroups"]["default/pg"]["reason"]


def test_pod_is_pipelined_onto_releasing_resources():
    objs = [
        node("n1", gpus=8),
        queue("q"),
        pod("old", gpus=8, node="n1", queue="q", deleting=True),
        pod("new", gpus=4, queue="q"),
    ]
    out = run(objs, ["allocate"])
    s = statuses(out)
    assert s["default/old"] == ("Releasing", "n1")
    assert s["default/new"] == ("Pipelined", "n1")
    assert out["decisions"][0]["type"] == "pipeline"
    assert out["podGroups"]["default/new"]["scheduled"] is False


def test_gang_with_one_pipelined_pod_is_pipelined_whole():
    objs = [
        node("n1", gpus=8),
        node("n2", gpus=8),
        queue("q"),
        pod("old", gpus=8, node="n2", queue="q", deleting=True),
        *gang("g", 2, gpus=8),
    ]
    out = run(objs, ["allocate"])
    s = statuses(out)
    assert {s["default/g-0"][0], s["default/g-1"][0]} == {"Pipelined"}
    assert {d["type"] for d in out["decisions"]} == {"pipeline"}


def test_queue_over_its_limit_gets_nothing_more():
    objs = [
        node("n1"),
        queue("q", gpu=(2, 2, 1)),
        pod("run", gpus=2, node="n1", queue="q"),
        pod("p", gpus=1, queue="q"),
    ]
    out = run(objs, ["allocate"])
    assert statuses(out)["default/p"] == ("Pending", None)
    assert "OverLimit" in out["podGroups"]["default/p"]["reason"]


def test_limit_applies_at_every_ancestor():
    objs = [
        node("n1"),
        queue("dept", gpu=(-1, 2, 1)),
        queue("team", parent="dept"),
        pod("p", gpus=3, queue="team"),
    ]
    out = run(objs, ["allocate"])
    assert statuses(out)["default/p"] == ("Pending", None)
    assert "'dept'" in out["podGroups"]["default/p"]["reason"]


def test_non_preemptible_job_stays_within_quota():
    objs = [
        node("n1"),
        queue("q", gpu=(2, -1, 1)),
        priority_class("inference", 125),
        pod("serve", gpus=4, queue="q", priority_class="inference"),
        pod("train", gpus=4, queue="q"),
    ]
    out = run(objs, ["allocate"])
    s = statuses(out)
    assert s["default/serve"] == ("Pending", None)
    assert "NonPreemptibleOverQuota" in out["podGroups"]["default/serve"]["reason"]
    assert s["default/train"][0] == "Binding"  # preemptible jobs may go over quota


def test_fair_share_divides_scarce_gpus_between_queues():
    objs = [node("n1", gpus=4), queue("a", gpu=(2, -1, 1)), queue("b", gpu=(2, -1, 1))]
    for i in range(4):
        objs.append(pod(f"a{i}", "ns-a", gpus=1, queue="a", created=f"2026-11-22T10:0{i}:00Z"))
        objs.append(pod(f"b{i}", "ns-b", gpus=1, queue="b", created=f"2026-11-22T10:0{i}:30Z"))
    out = run(objs, ["allocate"])
    bound_a = sum(1 for k, v in statuses(out).items() if k.startswith("ns-a") and v[0] == "Binding")
    bound_b = sum(1 for k, v in statuses(out).items() if k.startswith("ns-b") and v[0] == "Binding")
    assert (bound_a, bound_b) == (2, 2)
    assert out["queues"]["a"]["fairShare"]["gpu"] == 2.0
    assert out["queues"]["a"]["allocated"]["gpu"] == 2.0


def test_higher_priority_job_of_a_queue_goes_first():
    objs = [
        node("n1", gpus=1),
        queue("q"),
        priority_class("high", 80),
        pod("low", gpus=1, queue="q", created="2026-11-22T09:00:00Z"),
        pod("high", gpus=1, queue="q", priority_class="high"),
    ]
    out = run(objs, ["allocate"])
    assert statuses(out)["default/high"][0] == "Binding"
    assert statuses(out)["default/low"][0] == "Pending"


def test_older_job_goes_first_at_equal_priority():
    objs = [
        node("n1", gpus=1),
        queue("q"),
        pod("newer", gpus=1, queue="q", created="2026-11-22T10:00:00Z"),
        pod("older", gpus=1, queue="q", created="2026-11-22T09:00:00Z"),
    ]
    out = run(objs, ["allocate"])
    assert statuses(out)["default/older"][0] == "Binding"


def test_predicates_selector_taints_affinity_and_node_state():
    objs = [
        node(
            "tainted",
            labels={"pool": "a"},
            taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}],
        ),
        node("other-pool", labels={"pool": "b"}),
        node("down", labels={"pool": "a"}, ready=False),
        node("cordoned", labels={"pool": "a"}, unschedulable=True),
        node("good", labels={"pool": "a", "zone": "z1"}),
        queue("q"),
        pod("sel", gpus=1, queue="q", node_selector={"pool": "a"}),
        pod(
            "tol",
            gpus=1,
            queue="q",
            node_selector={"pool": "a"},
            tolerations=[
                {"key": "dedicated", "operator": "Equal", "value": "x", "effect": "NoSchedule"}
            ],
        ),
        pod(
            "aff",
            gpus=1,
            queue="q",
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "zone", "operator": "In", "values": ["z9"]}
                                ]
                            }
                        ]
                    }
                }
            },
        ),
    ]
    out = run(objs, ["allocate"])
    s = statuses(out)
    assert s["default/sel"][1] == "good"
    assert s["default/tol"][1] in ("good", "tainted")
    assert s["default/aff"] == ("Pending", None)
    reason = out["podGroups"]["default/aff"]["reason"]
    assert "0/5 nodes are available" in reason and "affinity" in reason


def test_pod_count_is_a_resource():
    objs = [
        node("n1", gpus=0, pods=1),
        queue("q"),
        pod("a", queue="q"),
        pod("b", queue="q", created="2026-11-22T10:01:00Z"),
    ]
    out = run(objs, ["allocate"])
    assert [v[0] for v in statuses(out).values()].count("Binding") == 1


def test_cpu_only_pods_prefer_cpu_only_nodes():
    objs = [
        node("gpu-node", gpus=8),
        node("cpu-node", gpus=0),
        queue("q"),
        pod("etl", cpu="2", queue="q"),
    ]
    out = run(objs, ["allocate"])
    assert statuses(out)["default/etl"][1] == "cpu-node"


def test_other_schedulers_pods_hold_capacity():
    objs = [
        node("n1", gpus=2),
        queue("q"),
        pod("foreign", gpus=2, node="n1", scheduler="default-scheduler"),
        pod("mine", gpus=1, queue="q"),
    ]
    out = run(objs, ["allocate"])
    assert statuses(out)["default/mine"] == ("Pending", None)
    assert statuses(out)["default/foreign"] == ("Running", "n1")


def test_fractional_pods_share_a_device_and_fill_the_fullest_first():
    objs = [
        node("n1", gpus=2),
        queue("q"),
        pod("f0", queue="q", fraction=0.5, node="n1", labels={"runai-gpu-group": "dev-0"}),
        pod("f1", queue="q", fraction=0.5),
        pod("f2", queue="q", fraction=0.5, created="2026-11-22T10:05:00Z"),
    ]
    out = run(objs, ["allocate"])
    groups = {d["pod"]: d["gpuGroups"] for d in out["decisions"]}
    assert groups["default/f1"] == ["dev-0"]  # gpupack: the already shared device first
    assert groups["default/f2"] != ["dev-0"] and len(groups["default/f2"]) == 1
    assert out["queues"]["q"]["allocated"]["gpu"] == 1.5


def test_fraction_does_not_fit_a_full_device():
    objs = [
        node("n1", gpus=1),
        queue("q"),
        pod("f0", queue="q", fraction=0.7, node="n1", labels={"runai-gpu-group": "d"}),
        pod("f1", queue="q", fraction=0.5),
    ]
    out = run(objs, ["allocate"])
    assert statuses(out)["default/f1"] == ("Pending", None)


def test_unknown_queue_is_reported_and_the_rest_is_scheduled():
    objs = [node("n1"), queue("q"), pod("lost", gpus=1, queue="nope"), pod("ok", gpus=1, queue="q")]
    out = run(objs, ["allocate"])
    assert statuses(out)["default/ok"][0] == "Binding"
    assert "QueueDoesNotExist" in out["podGroups"]["default/lost"]["reason"]


def test_pods_of_a_missing_podgroup_are_unschedulable():
    objs = [node("n1"), queue("q"), pod("a", gpus=1, group="ghost")]
    out = run(objs, ["allocate"])
    assert statuses(out)["default/a"] == ("Pending", None)
    assert "does not exist" in out["podGroups"]["default/ghost"]["reason"]


def test_jobs_may_only_use_leaf_queues():
    objs = [
        node("n1"),
        queue("parent"),
        queue("leaf", parent="parent"),
        pod("a", gpus=1, queue="parent"),
    ]
    out = run(objs, ["allocate"])
    assert "leaf" in out["podGroups"]["default/a"]["reason"]


def test_backfill_places_best_effort_pods():
    be = pod("be", queue="q")
    be["spec"]["containers"][0]["resources"] = {}
    objs = [node("n1", gpus=0), queue("q"), be]
    out = run(objs, ["backfill"])
    assert statuses(out)["default/be"] == ("Binding", "n1")
    assert out["decisions"][0]["action"] == "backfill"


def test_completed_pods_are_reported_and_hold_nothing():
    objs = [
        node("n1", gpus=1),
        queue("q"),
        pod("done", gpus=1, node="n1", queue="q", phase="Succeeded"),
        pod("p", gpus=1, queue="q"),
    ]
    out = run(objs, ["allocate"])
    s = statuses(out)
    assert s["default/done"][0] == "Succeeded"
    assert s["default/p"] == ("Binding", "n1")
