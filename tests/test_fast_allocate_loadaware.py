"""Load-aware scheduling on the allocate fast path decides exactly as the slow path.

Randomized clusters (fixed seeds) with Koordinator NodeMetrics: fresh, stale and
missing metrics, reported pod usage (prod and batch pods, inside and outside the report
interval), system usage, aggregated percentiles, custom threshold annotations, and
pending pods of every koordinator priority class, with limits, custom estimation
annotations and DaemonSet owners.  The loadaware arguments are drawn too: thresholds,
prod thresholds, aggregated filtering and scoring, weights, score weight and the
expiry switches.  Whole session results (decisions, pod states, reasons) of the fast
path must equal the slow path's (``KAI_FAST_ALLOCATE=0``).
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from kai.backends import available_backends, get_backend
from tests._fast_path import record_fast_path, session_json
from tests.factory import node, pod, podgroup, queue

#: Backends whose fused loop covers the loadaware plugin.
LOADAWARE_BACKENDS = [
    b
    for b in ("native", "numba")
    if b in available_backends() and "loadaware" in get_backend(b).allocate_loop_features
]
SEEDS = range(60)
FRESH = ("2026-11-22T11:59:30Z", "2026-11-22T11:58:10Z")
STALE = "2026-11-22T11:50:00Z"
CLASSES = (None, 9500, 7500, 5500, 3500)  # spec.priority: prod, mid, batch, free
LIMITS = {"500m": "1", "1": "2", "2": "3", "4": "6", "6": "8"}


def _usage(rng: random.Random, cores: int, gib: int) -> dict[str, str]:
    return {
        "cpu": f"{rng.randint(0, cores * 1000)}m",
        "memory": f"{rng.randint(0, gib * 1024)}Mi",
    }


def _cluster(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    objs: list[dict[str, Any]] = [queue("q"), queue("q2")]
    names = []
    shapes = {}
    uniform = rng.random() < 0.4  # many nodes alike: ties between nodes
    for i in range(rng.randint(3, 12) if not uniform else rng.randint(10, 30)):
        name = f"n{i:02d}"
        cores, gib = (16, 64) if uniform else (rng.choice((8, 16, 32)), rng.choice((32, 64)))
        annotations = {}
        if rng.random() < 0.2:
            custom: dict[str, Any] = {"usageThresholds": {"cpu": rng.randint(20, 90)}}
            if rng.random() < 0.5:
                custom["prodUsageThresholds"] = {"memory": rng.randint(20, 90)}
            annotations["scheduling.koordinator.sh/usage-thresholds"] = json.dumps(custom)
        objs.append(
            node(
                name,
                gpus=rng.choice((0, 0, 4)),
                cpu=str(cores),
                memory=f"{gib}Gi",
                annotations=annotations or None,
            )
        )
        names.append(name)
        shapes[name] = (cores, gib)
    running: dict[str, list[tuple[str, str]]] = {n: [] for n in names}
    # running pods, some of them reported in their node's metric
    for k in range(rng.randint(0, 12)):
        where = rng.choice(names)
        prio = rng.choice(CLASSES)
        p = pod(f"run{k}", cpu=f"{rng.randint(1, 6)}", memory="2Gi", node=where, priority=prio)
        if rng.random() < 0.5:
            stamp = rng.choice(("2026-11-22T11:59:20Z", "2026-11-22T10:00:00Z"))
            p["status"]["conditions"] = [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp}
            ]
        objs.append(p)
        running[where].append((f"run{k}", "koord-prod" if prio in (None, 9500) else "koord-batch"))
    pending: list[dict[str, Any]] = []
    # pending jobs
    for j in range(rng.randint(4, 25)):
        size = rng.choice((1, 1, 1, 2, 3, 6))
        group = f"job{j}"
        q = rng.choice(("q", "q2"))
        pending.append(podgroup(group, queue=q, min_member=rng.choice((size, 1))))
        prio = rng.choice(CLASSES)
        cpu = rng.choice(("500m", "1", "2", "4", "6"))
        memory, gpus = rng.choice(("1Gi", "4Gi", "8Gi")), rng.choice((0, 0, 0, 1))
        for t in range(size):
            p = pod(
                f"{group}-{t}",
                cpu=cpu,
                memory=memory,
                gpus=gpus,
                group=group,
                queue=q,
                priority=prio,
            )
            resources = p["spec"]["containers"][0]["resources"]
            if rng.random() < 0.3:
                resources["limits"] = {"cpu": LIMITS[cpu]}
            if rng.random() < 0.15:
                p["metadata"]["annotations"][
                    "scheduling.koordinator.sh/load-estimated-scaling-factors"
                ] = json.dumps({"cpu": rng.randint(50, 100)})
            if rng.random() < 0.1:
                p["metadata"]["ownerReferences"] = [
                    {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "ds-1"}
                ]
            if rng.random() < 0.1:
                p["metadata"]["labels"]["koordinator.sh/priority-class"] = rng.choice(
                    ("koord-prod", "koord-batch")
                )
            pending.append(p)
            if rng.random() < 0.01:  # a pending pod the metric reports: the slow path
                running[rng.choice(names)].append((p["metadata"]["name"], "koord-prod"))
    for name in names:
        if rng.random() < 0.15:
            continue  # no NodeMetric at all
        cores, gib = shapes[name]
        usage = {"resources": _usage(rng, cores, gib)}
        status: dict[str, Any] = {"nodeMetric": {"nodeUsage": usage}}
        if rng.random() < 0.3:
            status["nodeMetric"]["systemUsage"] = {"resources": _usage(rng, 2, 4)}
        if rng.random() < 0.4:
            status["nodeMetric"]["aggregatedNodeUsages"] = [
                {"duration": d, "usage": {"p95": {"resources": _usage(rng, cores, gib)}}}
                for d in ("5m0s", "10m0s")
            ]
        update = rng.choice((*FRESH, FRESH[0], STALE, None))
        if update is not None:
            status["updateTime"] = update
        reported = [r for r in running[name] if rng.random() < 0.7]
        if reported:
            status["podsMetric"] = [
                {
                    "namespace": "default",
                    "name": pod_name,
                    "priority": prio,
                    "podUsage": {"resources": _usage(rng, 4, 4)},
                }
                for pod_name, prio in reported
            ]
        objs.append(
            {
                "apiVersion": "slo.koordinator.sh/v1alpha1",
                "kind": "NodeMetric",
                "metadata": {"name": name},
                "spec": {"metricCollectPolicy": {"reportIntervalSeconds": 60}},
                "status": status,
            }
        )
    objs.extend(pending)
    objs.append(_config(rng))
    return objs


def _config(rng: random.Random) -> dict[str, Any]:
    args: dict[str, Any] = {
        "usageThresholds": {"cpu": rng.randint(30, 95), "memory": rng.randint(30, 95)},
        "scoreWeight": rng.choice((1, 1, 0.5, 3)),
    }
    if rng.random() < 0.4:
        args["prodUsageThresholds"] = {"cpu": rng.randint(20, 80)}
    if rng.random() < 0.3:
        args["scoreAccordingProdUsage"] = True
    if rng.random() < 0.3:
        args["prodUsageIncludeSys"] = True
    if rng.random() < 0.4:
        args["aggregated"] = {
            "usageThresholds": {"cpu": rng.randint(30, 90)},
            "usageAggregationType": "p95",
            "usageAggregatedDuration": rng.choice(("5m", "0s", "10m")),
        }
        if rng.random() < 0.6:
            args["aggregated"]["scoreAggregationType"] = "p95"
    if rng.random() < 0.3:
        args["resourceWeights"] = {"cpu": rng.randint(1, 3), "memory": rng.randint(1, 3)}
    if rng.random() < 0.3:
        args["dominantResourceWeight"] = rng.randint(1, 3)
    if rng.random() < 0.3:
        args["enableScheduleWhenNodeMetricsExpired"] = True
    if rng.random() < 0.2:
        args["filterExpiredNodeMetrics"] = False
    if rng.random() < 0.3:
        args["allowCustomizeEstimation"] = True
    if rng.random() < 0.2:
        args["estimatedScalingFactors"] = {"cpu": rng.randint(50, 100), "memory": 60}
    plugins = [
        {"name": "predicates"},
        {"name": "proportion"},
        {"name": "priority"},
        {"name": "elastic"},
        {"name": "nodeavailability"},
        {"name": "resourcetype"},
        {"name": "taskorder"},
        {"name": "nodeplacement", "arguments": {"cpu": rng.choice(("binpack", "spread"))}},
    ]
    loadaware = {"name": "loadaware", "arguments": args}
    plugins.insert(rng.choice((len(plugins), len(plugins), 5)), loadaware)
    return {
        "apiVersion": "kai.scheduler/v1",
        "kind": "SchedulerConfiguration",
        "tiers": [{"plugins": plugins}],
    }


@pytest.mark.skipif(not LOADAWARE_BACKENDS, reason="no fused loop covers loadaware")
@pytest.mark.parametrize("seed", SEEDS)
def test_loadaware_fast_path_matches_slow_path(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    objs = _cluster(seed)
    for actions in (["allocate"], None):
        slow = session_json(objs, actions, "python", False, monkeypatch)
        for backend in LOADAWARE_BACKENDS:
            fast = session_json(objs, actions, backend, True, monkeypatch)
            assert fast == slow, f"seed {seed}, backend {backend}, actions {actions}"


@pytest.mark.skipif(not LOADAWARE_BACKENDS, reason="no fused loop covers loadaware")
def test_loadaware_clusters_take_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Most random clusters run on the fast path, and they exercise the load-aware
    filter: some pods are refused by it and placed elsewhere or not at all."""
    taken = record_fast_path(monkeypatch)
    reasons = 0
    for seed in SEEDS:
        out = session_json(_cluster(seed), ["allocate"], LOADAWARE_BACKENDS[0], True, monkeypatch)
        reasons += sum("exceed threshold" in (g["reason"] or "") for g in out["podGroups"].values())
    assert sum(taken) >= 0.7 * len(SEEDS)
    assert reasons >= 5
