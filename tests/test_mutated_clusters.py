"""``kai simulate`` on generated clusters with unusual but plausible edits.

Each cluster comes from one of the benchmark generators and gets a few random edits
(fixed seeds) of the kind real snapshots carry: fractional and GPU-memory
annotations, gangs larger than their pods, pods on unknown nodes, deletions in
progress, taints, node affinities, node pools, preemptibility labels, min-runtime and
staleness settings, and scheduler configurations that leave plugins out or reorder
the actions.  A session must end with exit code 0, or 2 for input it refuses, never
an internal error; and the native and Python backends must decide alike.  Each edit
class here once found a session that failed or a backend that decided otherwise.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

import kai.bench_clusters as gen
from kai.backends import available_backends
from kai.cli import main

SEEDS = range(120)
NOW = "2026-01-01T00:00:00Z"
ACTIONS = ["allocate", "consolidation", "reclaim", "preempt", "stalegangeviction", "backfill"]
PLUGIN_SETS = [
    ["predicates", "proportion", "priority", "gpusharingorder", "gpupack", "nodeplacement"],
    ["predicates", "proportion", "priority", "minruntime", "nodeplacement"],
    ["predicates", "proportion", "priority", "elastic", "nodeavailability", "taskorder"],
    ["predicates", "proportion"],
    ["proportion"],
    ["predicates", "proportion", "priority", "nodeplacement", "loadaware"],
]


def _cluster(rng: random.Random) -> list[dict[str, Any]]:
    seed = rng.randrange(10**6)
    build: list[Callable[[], gen.ClusterBuilder]] = [
        lambda: gen.random_cluster(seed, nodes=rng.randint(2, 10), jobs=rng.randint(3, 30)),
        lambda: gen.storm(
            rng.randint(2, 6), rng.randint(3, 25), kind=rng.choice(("reclaim", "preempt"))
        ),
        lambda: gen.fractional(rng.randint(2, 6), pods=rng.randint(3, 30), seed=seed),
        lambda: gen.kai_topology(
            rng.randint(2, 6), rng.choice(("pending", "running", "mixed")), gang=rng.choice((1, 4))
        ),
    ]
    return rng.choice(build)().dicts()


def _annotate(obj: dict, **values: str) -> None:
    obj["metadata"].setdefault("annotations", {}).update(values)


def _label(obj: dict, **values: str) -> None:
    obj["metadata"].setdefault("labels", {}).update(values)


def _edits(rng: random.Random, node_names: list[str], queue_names: list[str]) -> list:
    """(kind, edit of one object of that kind) pairs."""
    pick = rng.choice

    def fraction(pod: dict) -> None:
        _annotate(pod, **{"gpu-fraction": pick(("0.5", "1.5", "0", "abc", "0.25"))})

    def gpu_memory(pod: dict) -> None:
        _annotate(pod, **{"gpu-memory": pick(("1024", "0", "-5", "40000"))})

    def min_member(group: dict) -> None:
        group["spec"]["minMember"] = pick((0, 2, 5, 50))

    def missing_group(pod: dict) -> None:
        _annotate(pod, **{"pod-group-name": "missing"})

    def parent(queue: dict) -> None:
        queue["spec"]["parentQueue"] = pick([*queue_names, "missing"])

    def preemptibility(group: dict) -> None:
        values = ("preemptible", "non-preemptible", "semi-preemptible", "bogus")
        group["spec"]["preemptibility"] = pick(values)

    def placed(pod: dict) -> None:  # on a node of the snapshot's, or an unknown one
        pod["spec"]["nodeName"] = pick([*node_names, "gone"])
        pod.setdefault("status", {})["phase"] = pick(("Running", "Pending", "Succeeded"))

    def deleting(pod: dict) -> None:
        pod["metadata"]["deletionTimestamp"] = "2025-12-31T23:59:00Z"

    def tainted(node: dict) -> None:
        taint = {"key": "k", "value": "v", "effect": "NoSchedule"}
        node["spec"] = {"taints": [taint], "unschedulable": rng.random() < 0.3}

    def affinity(pod: dict) -> None:
        term = {"key": "pool", "operator": pick(("In", "NotIn", "Exists")), "values": ["a"]}
        required = {"nodeSelectorTerms": [{"matchExpressions": [term]}]}
        pod["spec"]["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}
        }

    def min_runtime(queue: dict) -> None:
        queue["spec"]["reclaimMinRuntime"] = pick(("0s", "1m", "1h"))
        queue["spec"]["preemptMinRuntime"] = pick(("0s", "5m"))

    def stale(group: dict) -> None:
        _annotate(
            group,
            **{
                "kai.scheduler/stale-podgroup-timestamp": "2025-12-31T23:00:00Z",
                "kai.scheduler/last-start-timestamp": "2025-12-31T23:59:00Z",
            },
        )

    def priority(pod: dict) -> None:
        pod["spec"]["priorityClassName"] = pick(("high", "missing"))
        pod["spec"]["priority"] = pick((0, 100, 1000))

    def node_pool(node: dict) -> None:
        _label(node, **{"kai.scheduler/node-pool": pick(("p1", "p2"))})

    def preemptible_label(pod: dict) -> None:
        _label(pod, **{"kai.scheduler/preemptibility": pick(("preemptible", "x"))})

    def huge(node: dict) -> None:  # more than an int64 of millicores or bytes
        node["status"]["allocatable"][pick(("cpu", "memory"))] = "100Ei"

    return [
        ("Pod", fraction),
        ("Pod", gpu_memory),
        ("PodGroup", min_member),
        ("Pod", missing_group),
        ("Queue", parent),
        ("PodGroup", preemptibility),
        ("Pod", placed),
        ("Pod", deleting),
        ("Node", tainted),
        ("Pod", affinity),
        ("Queue", min_runtime),
        ("PodGroup", stale),
        ("Pod", priority),
        ("Node", node_pool),
        ("Pod", preemptible_label),
        ("Node", huge),
    ]


def _edit(rng: random.Random, docs: list[dict[str, Any]]) -> None:
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for doc in docs:
        by_kind.setdefault(doc["kind"], []).append(doc)
    names = {kind: [o["metadata"]["name"] for o in objs] for kind, objs in by_kind.items()}
    edits = _edits(rng, names.get("Node", []), names.get("Queue", []))
    for _ in range(rng.randint(1, 4)):
        kind, edit = rng.choice(edits)
        if by_kind.get(kind):
            edit(rng.choice(by_kind[kind]))
    if rng.random() < 0.5:
        plugins = [{"name": name} for name in rng.choice(PLUGIN_SETS)]
        actions = rng.sample(ACTIONS, rng.randint(1, len(ACTIONS)))
        docs.append(
            {
                "apiVersion": "kai.scheduler/v1",
                "kind": "SchedulerConfiguration",
                "actions": ",".join(actions),
                "tiers": [{"plugins": plugins}],
            }
        )


def _simulate(path: Path, backend: str) -> tuple[int, str]:
    args = ["simulate", str(path), "--now", NOW, "--output", "json", "--explain"]
    result = CliRunner().invoke(main, [*args, "--backend", backend])
    return result.exit_code, result.stdout if result.exit_code == 0 else result.output


@pytest.mark.parametrize("seed", SEEDS)
def test_edited_clusters_end_in_a_decision_or_an_input_error(seed: int, tmp_path: Path) -> None:
    rng = random.Random(seed)
    docs = _cluster(rng)
    _edit(rng, docs)
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    code, out = _simulate(path, "native" if "native" in available_backends() else "python")
    assert code in (0, 2), f"seed {seed}: exit {code}\n{out}"
    if code == 0 and "native" in available_backends():
        python_code, python_out = _simulate(path, "python")
        assert python_code == 0, python_out
        assert json.loads(out) == json.loads(python_out), f"seed {seed}: the backends differ"
