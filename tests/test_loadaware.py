"""The ``loadaware`` plugin: Koordinator LoadAwareScheduling (estimator, filter, score,
argument validation) and the four user stories of its design as end-to-end sessions."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import kai
from kai.api.objects import PodObject
from kai.config import SchedulerConfig
from kai.engine import parse_now
from kai.framework import Session
from kai.plugins.loadaware import LoadAwarePlugin
from kai.plugins.loadaware_estimator import estimate_pod, koord_priority_class, parse_args
from tests import factory

NOW = "2026-11-22T12:00:00Z"
FRESH = "2026-11-22T11:59:30Z"
STALE = "2026-11-22T11:50:00Z"
GIB = 1024**3

PLUGINS = ["predicates", "proportion", "priority", "nodeavailability", "taskorder"]


def node(name: str, cpu: str = "32", memory: str = "128Gi", annotations=None) -> dict:
    return factory.node(name, gpus=0, cpu=cpu, memory=memory, annotations=annotations)


def metric(name: str, cpu: str, memory: str, update: str | None = FRESH, pods=(), **extra):
    status: dict[str, Any] = {
        "nodeMetric": {"nodeUsage": {"resources": {"cpu": cpu, "memory": memory}}}
    }
    if update is not None:
        status["updateTime"] = update
    if pods:
        status["podsMetric"] = [
            {
                "namespace": ns,
                "name": n,
                "priority": prio,
                "podUsage": {"resources": {"cpu": c, "memory": m}},
            }
            for ns, n, c, m, prio in pods
        ]
    status["nodeMetric"].update(extra)
    return {
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeMetric",
        "metadata": {"name": name},
        "spec": {"metricCollectPolicy": {"reportIntervalSeconds": 60}},
        "status": status,
    }


def pod(name: str, cpu: str = "8", memory: str = "16Gi", **kw) -> dict:
    return factory.pod(name, cpu=cpu, memory=memory, queue="q", **kw)


def config(args: dict | None = None, plugins=PLUGINS) -> dict:
    tier = [{"name": p} for p in plugins]
    tier.append({"name": "loadaware", "arguments": args or {}})
    return {
        "apiVersion": "kai.scheduler/v1",
        "kind": "SchedulerConfiguration",
        "actions": "allocate",
        "tiers": [{"plugins": tier}],
    }


def cluster(*objs, args: dict | None = None) -> list[dict]:
    return [factory.queue("q"), config(args), *objs]


def run(objs: list[dict]) -> kai.SessionResult:
    return kai.run_session(kai.Snapshot.from_objects(objs), actions=["allocate"], now=NOW)


def open_session(objs: list[dict]) -> tuple[Session, LoadAwarePlugin]:
    snap = kai.Snapshot.from_objects(objs)
    cfg = SchedulerConfig.from_object(snap.config)
    ssn = Session(snap.state(), cfg, now=parse_now(NOW))
    ssn.open(cfg.build_plugins())
    plugin = next(p for p in ssn.plugins if isinstance(p, LoadAwarePlugin))
    return ssn, plugin


def pending_task(ssn: Session, key: str):
    return next(t for t in ssn.state.tasks if t.key == key)


def nodes_of(result) -> dict[str, str | None]:
    return {k: v.node for k, v in result.pods.items()}


# --------------------------------------------------------------------- estimator


def _pod_obj(requests=None, limits=None, **kw) -> PodObject:
    return PodObject(name="p", namespace="d", requests=requests or {}, limits=limits or {}, **kw)


def test_estimator_defaults():
    args = parse_args({})
    assert args.resources == ("cpu", "memory")
    e = estimate_pod(args, _pod_obj({"cpu": 16_000, "memory": 32 * GIB}, {"cpu": 16_000}))
    assert e.tolist() == [13_600, round(32 * GIB * 0.7)]
    # no request: 250m and 200 MiB, not scaled
    assert estimate_pod(args, _pod_obj()).tolist() == [250, 200 * 1024 * 1024]
    # a limit above the request is the base; the estimate is capped by the limit
    e = estimate_pod(args, _pod_obj({"cpu": 1000, "memory": GIB}, {"cpu": 4000, "memory": GIB}))
    assert e.tolist() == [3400, round(GIB * 0.7)]
    # Go rounding: 1m * 85 / 100 = 0.85 -> 1; 3m -> 2.55 -> 3
    assert estimate_pod(args, _pod_obj({"cpu": 3, "memory": 1}))[0] == 3


def test_estimator_batch_and_custom_annotations():
    args = parse_args({"allowCustomizeEstimation": True})
    batch = _pod_obj(
        {"kubernetes.io/batch-cpu": 2000, "kubernetes.io/batch-memory": GIB},
        labels={"koordinator.sh/priority-class": "koord-batch"},
    )
    assert koord_priority_class(batch) == "koord-batch"
    assert estimate_pod(args, batch).tolist() == [1700, round(GIB * 0.7)]
    mid = _pod_obj({"cpu": 2000}, priority=7500)
    assert estimate_pod(args, mid).tolist() == [0, 0]  # no mid-cpu request: 0, not 250
    custom = _pod_obj(
        {"cpu": 2000, "memory": GIB},
        annotations={"scheduling.koordinator.sh/load-estimated-scaling-factors": '{"cpu": 50}'},
    )
    assert estimate_pod(args, custom).tolist() == [1000, round(GIB * 0.7)]
    assert estimate_pod(parse_args({}), custom).tolist() == [1700, round(GIB * 0.7)]


def test_priority_class_defaults():
    assert koord_priority_class(_pod_obj({"cpu": 1})) == "koord-prod"  # Burstable
    assert koord_priority_class(_pod_obj()) == "koord-batch"  # BestEffort
    assert koord_priority_class(_pod_obj(priority=9500)) == "koord-prod"
    assert koord_priority_class(_pod_obj({"cpu": 1}, priority=5100)) == "koord-batch"


# ------------------------------------------------------------------------- score


def test_score_matches_koordinator_test_score():
    objs = cluster(
        node("empty", cpu="96", memory="512Gi"),
        node("busy", cpu="96", memory="512Gi"),
        metric("empty", "0", "0"),
        metric("busy", "32", "10Gi"),
        pod("p", cpu="16", memory="32Gi"),
    )
    ssn, plugin = open_session(objs)
    task = pending_task(ssn, "default/p")
    scores = plugin._score(task, task.job, np.ones(2, dtype=bool))
    assert scores.tolist() == [72.0, 90.0]  # busy, empty (names sorted)

    objs[1] = config({"dominantResourceWeight": 10})
    ssn, plugin = open_session(objs)
    task = pending_task(ssn, "default/p")
    assert plugin._score(task, task.job, np.ones(2, dtype=bool))[1] == 85.0

    objs[1] = config({"scoreWeight": 2})
    ssn, plugin = open_session(objs)
    task = pending_task(ssn, "default/p")
    assert plugin._score(task, task.job, np.ones(2, dtype=bool)).tolist() == [144.0, 180.0]


def test_score_zero_without_or_with_expired_metric():
    objs = cluster(
        node("a"),
        node("b"),
        node("c"),
        metric("a", "1", "1Gi"),
        metric("b", "1", "1Gi", update=STALE),
        pod("p"),
    )
    ssn, plugin = open_session(objs)
    task = pending_task(ssn, "default/p")
    s = plugin._score(task, task.job, np.ones(3, dtype=bool))
    assert s[0] > 0 and s[1] == 0 and s[2] == 0


# ------------------------------------------------------------------------ filter


def test_filter_threshold_is_strict_and_counts_estimate():
    # 32 cores: usage 14000m + estimate 6800m = 20800m = 65% -> passes; 21120m = 66% fails
    objs = cluster(
        node("a"),
        node("b"),
        metric("a", "14000m", "1Gi"),
        metric("b", "14320m", "1Gi"),
        pod("p"),
    )
    ssn, plugin = open_session(objs)
    task = pending_task(ssn, "default/p")
    mask, codes, reasons = plugin._filter(task, task.job)
    assert mask.tolist() == [True, False]
    assert reasons[codes[1]] == "node(s) cpu usage exceed threshold (loadaware usageThresholds)"


def test_filter_expired_no_metric_and_custom_annotation():
    custom = json.dumps({"usageThresholds": {"cpu": 10}})
    objs = cluster(
        node("a"),
        node("b"),
        node("c", annotations={"scheduling.koordinator.sh/usage-thresholds": custom}),
        node("d"),
        metric("a", "1", "1Gi", update=STALE),
        metric("c", "1", "1Gi"),
        metric("d", "1", "1Gi", update=None),
        pod("p"),
    )
    ssn, plugin = open_session(objs)
    task = pending_task(ssn, "default/p")
    mask, codes, reasons = plugin._filter(task, task.job)
    assert mask.tolist() == [False, True, False, False]
    assert reasons[codes[0]].startswith("node(s) nodeMetric expired")
    assert reasons[codes[3]].startswith("node(s) nodeMetric expired")
    assert "scheduling.koordinator.sh/usage-thresholds" in reasons[codes[2]]

    objs[1] = config({"enableScheduleWhenNodeMetricsExpired": True})
    ssn, plugin = open_session(objs)
    mask, _, _ = plugin._filter(task := pending_task(ssn, "default/p"), task.job)
    assert mask.tolist() == [True, True, False, True]


def test_filter_prod_thresholds_only_for_prod_pods():
    objs = cluster(
        node("a"),
        metric("a", "10", "1Gi", pods=[("default", "web", "12", "1Gi", "koord-prod")]),
        pod("web", node="a", cpu="12"),
        pod("prod-pod", cpu="4", priority=9000),
        pod("batch-pod", cpu="4", priority=5000),
        args={"prodUsageThresholds": {"cpu": 30}},
    )
    ssn, plugin = open_session(objs)
    prod = pending_task(ssn, "default/prod-pod")
    batch = pending_task(ssn, "default/batch-pod")
    # prod: web's 12 cores reported prod + 3400m estimate = 15400 / 32000 = 48% > 30
    mask, codes, reasons = plugin._filter(prod, prod.job)
    assert not mask[0] and "prodUsageThresholds" in reasons[codes[0]]
    # batch-pod uses usageThresholds: 10 cores + 3400m = 42% <= 65
    assert plugin._filter(batch, batch.job)[0].tolist() == [True]


def test_filter_aggregated_percentile():
    agg = [
        {"duration": "5m0s", "usage": {"p95": {"resources": {"cpu": "20", "memory": "1Gi"}}}},
        {"duration": "10m0s", "usage": {"p95": {"resources": {"cpu": "25", "memory": "1Gi"}}}},
    ]
    objs = cluster(
        node("a"),
        metric("a", "1", "1Gi", aggregatedNodeUsages=agg),
        pod("p", cpu="1"),
        args={"aggregated": {"usageThresholds": {"cpu": 70}, "usageAggregationType": "p95"}},
    )
    ssn, plugin = open_session(objs)
    task = pending_task(ssn, "default/p")
    # longest window (10m): 25 cores + 850m = 81% > 70
    mask, codes, reasons = plugin._filter(task, task.job)
    assert not mask[0]
    assert reasons[codes[0]].startswith("node(s) cpu aggregated usage exceed threshold")
    objs[1] = config(
        {
            "aggregated": {
                "usageThresholds": {"cpu": 70},
                "usageAggregationType": "p95",
                "usageAggregatedDuration": "5m",
            }
        }
    )
    ssn, plugin = open_session(objs)
    task = pending_task(ssn, "default/p")
    assert plugin._filter(task, task.job)[0].tolist() == [True]  # 20850 / 32000 = 65%


def test_existing_pods_inside_report_interval_are_estimated():
    # "new" was scheduled 10 s before the metric: its 8-core request counts at 85 %.
    objs = cluster(
        node("a"),
        metric("a", "10", "1Gi", pods=[("default", "new", "100m", "100Mi", "koord-prod")]),
        pod("new", node="a"),
        pod("p", cpu="100m"),
    )
    objs[4]["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-22T11:59:20Z"}
    ]
    ssn, plugin = open_session(objs)
    state = plugin.node_state("a")
    assert state["nodeDelta"]["cpu"] == 6800 - 100
    # a pod scheduled long before the metric is not estimated
    objs[4]["status"]["conditions"][0]["lastTransitionTime"] = "2026-11-22T10:00:00Z"
    ssn, plugin = open_session(objs)
    assert plugin.node_state("a")["nodeDelta"]["cpu"] == 0
    # ... unless estimatedSecondsAfterPodScheduled still covers it
    objs[1] = config({"estimatedSecondsAfterPodScheduled": 7200})
    ssn, plugin = open_session(objs)
    assert plugin.node_state("a")["nodeDelta"]["cpu"] == 6700


def test_raw_allocatable_annotation():
    raw = json.dumps({"cpu": "16"})
    objs = cluster(
        node("a", annotations={"node.koordinator.sh/raw-allocatable": raw}),
        metric("a", "8", "1Gi"),
        pod("p", cpu="4"),
    )
    ssn, plugin = open_session(objs)
    task = pending_task(ssn, "default/p")
    # 8 + 3.4 cores of 16 = 71% > 65 (it would pass against the 32 allocatable cores)
    assert plugin._filter(task, task.job)[0].tolist() == [False]


# -------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"usageThresholds": {"cpux": 50}}, "arguments.usageThresholds.cpux"),
        ({"usageThresholds": {"cpu": 120}}, "arguments.usageThresholds.cpu"),
        ({"prodUsageThresholds": {"memory": -1}}, "arguments.prodUsageThresholds.memory"),
        ({"resourceWeights": {"cpu": 0}}, "arguments.resourceWeights.cpu"),
        ({"resourceWeights": {"nvidia.com/gpu": 1}}, "arguments.resourceWeights.nvidia.com/gpu"),
        ({"estimatedScalingFactors": {"cpu": 101}}, "arguments.estimatedScalingFactors.cpu"),
        ({"dominantResourceWeight": 101}, "arguments.dominantResourceWeight"),
        ({"nodeMetricExpirationSeconds": 0}, "arguments.nodeMetricExpirationSeconds"),
        ({"supportedResources": ["gpu"]}, "arguments.supportedResources[0]"),
        (
            {"aggregated": {"usageAggregationType": "p42"}},
            "arguments.aggregated.usageAggregationType",
        ),
        (
            {"aggregated": {"usageThresholds": {"cpu": 101}}},
            "arguments.aggregated.usageThresholds.cpu",
        ),
        (
            {"enableScheduleWhenNodeMetricsExpired": "yes"},
            "arguments.enableScheduleWhenNodeMetricsExpired",
        ),
        ({"usageThreshold": {"cpu": 1}}, "arguments"),
    ],
)
def test_argument_errors_name_the_argument(args, field):
    with pytest.raises(kai.ConfigError) as info:
        LoadAwarePlugin(args)
    assert info.value.field == field
    assert info.value.obj == "plugin loadaware"


def test_arguments_accept_strings_and_extra_resources():
    a = parse_args(
        {
            "usageThresholds": '{"cpu": "70"}',
            "nodeMetricExpirationSeconds": "60",
            "scoreAccordingProdUsage": "true",
            "supportedResources": ["nvidia.com/gpu"],
            "resourceWeights": {"cpu": 2},
        }
    )
    assert a.usage_thresholds == {"cpu": 70}
    assert a.node_metric_expiration_seconds == 60
    assert a.score_according_prod_usage is True
    assert a.resources == ("cpu", "memory", "nvidia.com/gpu")
    assert a.resource_weights == {"cpu": 2}  # user weights replace the defaults
    assert parse_args({"dominantResourceWeight": 3}).resource_weights == {}


# ----------------------------------------------------------------- user stories


def test_story1_hot_node_is_excluded():
    """Story 1: a node whose utilization is at its safe threshold takes no more pods."""
    result = run(
        cluster(
            node("hot"),
            node("cool"),
            metric("hot", "21", "20Gi"),
            metric("cool", "20", "20Gi"),
            pod("p", cpu="2"),
        )
    )
    # hot: 21 + 1.7 cores = 71% > 65; cool: 20 + 1.7 = 68% > 65
    assert result.pods["default/p"].node is None
    result = run(
        cluster(
            node("hot"),
            node("cool"),
            metric("hot", "21", "20Gi"),
            metric("cool", "10", "20Gi"),
            pod("p", cpu="2"),
        )
    )
    assert result.pods["default/p"].node == "cool"
    reason = result.pod_groups["default/p"].explain
    assert reason == []


def test_a_quantity_beyond_int64_is_held_at_the_bound():
    """Koordinator's quantities are int64s, and Kubernetes caps a quantity at 2^63 - 1: a
    node with ``100Ei`` of cpu (more millicores than an int64 holds) is filtered and
    scored as one with the most cpu there is, not a crash."""
    result = run(
        cluster(
            node("huge", cpu="100Ei", memory="100Ei"),
            node("small"),
            metric("huge", "10", "20Gi"),
            metric("small", "10", "20Gi"),
            pod("p", cpu="64"),  # more than the small node has
        )
    )
    assert result.pods["default/p"].node == "huge"


def test_story2_dominant_resource_balances_cpu_and_memory():
    """Story 2: a cpu-hungry pod goes where cpu, the dominant resource, has headroom."""
    objs = [
        node("x"),
        node("y"),
        metric("x", "14", "0"),  # cpu-heavy, memory idle
        metric("y", "6", "60Gi"),  # balanced
        pod("p", cpu="8", memory="1Gi"),
    ]
    # default weights: x = (35 + 99) // 2 = 67, y = (60 + 52) // 2 = 56
    assert run(cluster(*objs)).pods["default/p"].node == "x"
    # dominantResourceWeight alone: the score is the least headroom, x = 35, y = 52
    result = run(cluster(*objs, args={"dominantResourceWeight": 1}))
    assert result.pods["default/p"].node == "y"


def test_story3_no_herd_onto_the_cold_node():
    """Story 3: pods placed earlier in the session count in the estimate of later ones."""
    pods = [
        pod(f"p{i}", cpu="6", memory="4Gi", created=f"2026-11-22T10:00:0{i}Z") for i in range(4)
    ]
    result = run(
        cluster(
            node("cold"),
            node("warm"),
            metric("cold", "1", "4Gi"),
            metric("warm", "6", "8Gi"),
            *pods,
        )
    )
    placed = [result.pods[f"default/p{i}"].node for i in range(4)]
    assert all(placed)
    assert placed.count("cold") < 4 and placed.count("warm") >= 1
    # the kernel state after the session includes every placed pod
    ssn, plugin = open_session(
        cluster(
            node("cold"), metric("cold", "1", "4Gi"), *[pod(f"x{i}", node="cold") for i in range(2)]
        )
    )
    assert plugin.node_state("cold")["nodeDelta"]["cpu"] == 2 * 6800


def test_story4_node_with_stale_metric_is_avoided():
    """Story 4: koordlet stopped reporting; the node is not used."""
    yaml_text = "\n---\n".join(
        json.dumps(o)
        for o in cluster(
            node("broken"),
            node("healthy"),
            metric("broken", "0", "0", update=STALE),
            metric("healthy", "20", "60Gi"),
            pod("p", cpu="1"),
        )
    )
    snap = kai.Snapshot.from_yaml(yaml_text)
    result = kai.run_session(snap, actions=["allocate"], now=NOW)
    assert result.pods["default/p"].node == "healthy"
    result = kai.run_session(
        kai.Snapshot.from_yaml(yaml_text.replace('"healthy"', '"gone"')),
        actions=["allocate"],
        now=NOW,
    )
    assert result.pods["default/p"].node == "gone"  # no NodeMetric at all: load-aware skips it
    explain = (
        kai.run_session(
            kai.Snapshot.from_yaml(yaml_text.replace('"20"', '"31"')), actions=["allocate"], now=NOW
        )
        .pod_groups["default/p"]
        .explain
    )
    text = " ".join(explain)
    assert "1 node(s) nodeMetric expired" in text
    assert "1 node(s) cpu usage exceed threshold (loadaware usageThresholds)" in text


def test_example_directory_runs():
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "examples" / "loadaware"
    snap = kai.Snapshot.from_files(sorted(str(p) for p in root.glob("*.yaml")))
    result = kai.run_session(snap, now=NOW)
    placed = [result.pods[f"batch/job-{i}"].node for i in range(6)]
    assert placed[:3] == ["node-c", "node-c", "node-b"]
    assert placed[3:] == [None, None, None]
    assert "cpu usage exceed threshold" in result.pod_groups["batch/job-3"].reason
