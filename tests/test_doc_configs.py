"""Every scheduler configuration shown in README.md and docs/*.md loads and works.

A fenced YAML or JSON block whose document is a ``SchedulerConfiguration`` (or a bare
configuration map) is loaded with kai's configuration loader and run through
``kai simulate``. For each eviction action a configuration enables, a small cluster
where that action must evict checks that it does (a ``tiers`` list that names no
scenario generator gets both added).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from kai.cli import main
from kai.config import SchedulerConfig
from kai.snapshot.loader import load_config_file
from tests.factory import node, pod, podgroup, priority_class, queue

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "cluster.yaml"
NOW = "2026-11-22T12:00:00Z"
CONFIG_KEYS = {"actions", "tiers", "queueDepthPerAction", "scenarioSearchBudgets"}
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", flags=re.S | re.M)


def _is_config(doc: Any) -> bool:
    if not isinstance(doc, dict):
        return False
    if doc.get("kind") == "SchedulerConfiguration":
        return True
    return "kind" not in doc and "apiVersion" not in doc and bool(CONFIG_KEYS & set(doc))


def documented_configs() -> list[Any]:
    """One parameter per configuration block: its text, with the file and line as id."""
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text()
        for match in FENCE.finditer(text):
            lang, body = match.group(1).lower(), match.group(2)
            if lang not in ("", "yaml", "yml", "json"):
                continue
            line = text.count("\n", 0, match.start()) + 1
            where = f"{path.relative_to(ROOT)}:{line}"
            try:
                docs = [d for d in yaml.safe_load_all(body) if d is not None]
            except yaml.YAMLError:
                assert "SchedulerConfiguration" not in body, f"{where}: not valid YAML"
                continue
            configs = [d for d in docs if _is_config(d)]
            if not configs:
                continue
            assert len(configs) == 1, f"{where}: more than one configuration in one block"
            # The block as written when it holds the configuration alone: comments and
            # quoting are checked too.
            doc_text = body if len(docs) == 1 else yaml.safe_dump(configs[0])
            found.append(pytest.param(doc_text, id=where))
    return found


CONFIGS = documented_configs()


def _dump(tmp_path: Path, name: str, objs: list[dict]) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(objs))
    return str(path)


STARTED = {"kai.scheduler/last-start-timestamp": "2026-11-22T09:00:00Z"}
EARLY, LATE = "2026-11-22T09:00:00Z", "2026-11-22T11:00:00Z"


def _running(name: str, queue_name: str, node_name: str, gpus: int, **pg: Any) -> list[dict]:
    return [
        podgroup(name, queue=queue_name, created=EARLY, annotations=STARTED, **pg),
        pod(f"{name}-0", gpus=gpus, group=name, node=node_name, created=EARLY),
    ]


def _pending(name: str, queue_name: str, gpus: int, **pg: Any) -> list[dict]:
    return [
        podgroup(name, queue=queue_name, created=LATE, **pg),
        pod(f"{name}-0", gpus=gpus, group=name, created=LATE),
    ]


# For each eviction action, a cluster where it must evict to place the pending pod.
SCENES: dict[str, list[dict]] = {
    # A high-priority pod preempts a low-priority one of the same queue.
    "preempt": [
        node("n1", gpus=1),
        queue("q"),
        priority_class("low", 40),
        priority_class("high", 80),
        *_running("low", "q", "n1", 1, priority_class="low"),
        *_pending("high", "q", 1, priority_class="high"),
    ],
    # Queue a uses both GPUs while b deserves one of them.
    "reclaim": [
        node("n1", gpus=2),
        queue("a", gpu=(1, -1, 1)),
        queue("b", gpu=(1, -1, 1)),
        *_running("a1", "a", "n1", 1),
        *_running("a2", "a", "n1", 1),
        *_pending("b1", "b", 1),
    ],
    # Two half-used nodes; a two-GPU pod fits once one pod moves.
    "consolidation": [
        node("n1", gpus=2),
        node("n2", gpus=2),
        queue("q"),
        *_running("a", "q", "n1", 1),
        *_running("b", "q", "n2", 1),
        *_pending("big", "q", 2),
    ],
}


def _simulate(*args: str) -> dict:
    result = CliRunner().invoke(main, ["simulate", *args, "--now", NOW])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_readme_and_docs_show_configurations() -> None:
    where = [p.id for p in CONFIGS]
    assert any(w.startswith("README.md:") for w in where), where
    assert any(w.startswith("docs/loadaware.md:") for w in where), where


@pytest.mark.parametrize("text", CONFIGS)
def test_documented_configuration_loads_and_simulates(tmp_path: Path, text: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    config = SchedulerConfig.from_object(load_config_file(str(path)))
    _simulate(str(EXAMPLE), "--config", str(path))
    evicting = [a for a in config.actions if a in SCENES]
    for action in evicting:
        cluster = _dump(tmp_path, f"{action}.yaml", SCENES[action])
        out = _simulate(cluster, "--config", str(path))
        evictions = [d for d in out["decisions"] if d["type"] == "evict"]
        assert any(d["action"] == action for d in evictions), (action, out["decisions"])


@pytest.mark.parametrize("action", sorted(SCENES))
def test_each_scene_evicts_with_the_scenario_generators_named_or_added(
    tmp_path: Path, action: str
) -> None:
    cluster = _dump(tmp_path, f"{action}.yaml", SCENES[action])
    plugins = ["predicates", "proportion", "priority", "nodeplacement"]
    path = tmp_path / "config.yaml"
    for generators in ([], ["sg-nodelocalgreedy", "sg-multinodegang"]):
        tiers = [{"plugins": [{"name": name} for name in plugins + generators]}]
        path.write_text(yaml.safe_dump({"tiers": tiers}))
        out = _simulate(cluster, "--config", str(path))
        assert any(d["type"] == "evict" for d in out["decisions"]), generators
