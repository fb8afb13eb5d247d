"""Plugin names in a SchedulerConfiguration: KAI-Scheduler's own names load, an unknown
name is an error that names the known ones, and eviction actions get the scenario
generators when the configuration names none."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from click.testing import CliRunner

import kai.framework.plugin
from kai.api.objects import PluginOption
from kai.cli import main
from kai.config import SchedulerConfig

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = str(ROOT / "examples" / "cluster.yaml")
NOW = "2026-11-22T12:00:00Z"

# KAI-Scheduler's built-in default plugin list, in its order, plus the operator's
# podaffinity.
KAI_DEFAULT = """\
apiVersion: kai.scheduler/v1
kind: SchedulerConfiguration
actions: "allocate, consolidation, reclaim, preempt, stalegangeviction"
tiers:
- plugins:
  - name: predicates
  - name: proportion
    arguments: {kValue: "1.0", relcaimerSaturationMultiplier: "1.0"}
  - name: priority
  - name: elastic
  - name: kubeflow
  - name: ray
  - name: nodeavailability
  - name: gpusharingorder
  - name: gpupack
  - name: resourcetype
  - name: podaffinity
  - name: subgrouporder
  - name: taskorder
  - name: nominatednode
  - name: dynamicresources
  - name: nodeplacement
    arguments: {cpu: binpack, gpu: binpack}
  - name: minruntime
  - name: topology
  - name: snapshot
  - name: sg-nodelocalgreedy
  - name: sg-multinodegang
"""


def _simulate(*args: str) -> dict:
    result = CliRunner().invoke(main, ["simulate", *args, "--now", NOW])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(autouse=True)
def _fresh_log(monkeypatch) -> None:
    monkeypatch.setattr(kai.framework.plugin, "_logged", set())


def test_kai_default_configuration_loads_and_decides_as_kai_defaults(tmp_path: Path) -> None:
    path = tmp_path / "kai.yaml"
    path.write_text(KAI_DEFAULT)
    with_names = _simulate(EXAMPLE, "--config", str(path))
    defaults = _simulate(EXAMPLE)
    assert with_names["decisions"] == defaults["decisions"]
    assert with_names["pods"] == defaults["pods"]


def test_inert_plugins_log_once_that_they_have_no_effect(tmp_path: Path, caplog) -> None:
    path = tmp_path / "kai.yaml"
    path.write_text(KAI_DEFAULT)
    with caplog.at_level(logging.INFO, logger="kai"):
        _simulate(EXAMPLE, "--config", str(path))
        _simulate(EXAMPLE, "--config", str(path))
    said = [r.getMessage() for r in caplog.records if "has no effect in kai" in r.getMessage()]
    for name in ("subgrouporder", "dynamicresources", "topology", "snapshot", "podaffinity"):
        assert len([m for m in said if m.startswith(f"plugin {name} ")]) == 1, said


def test_unknown_plugin_is_an_error_naming_the_field_and_the_closest_name(
    tmp_path: Path,
) -> None:
    path = tmp_path / "kai.yaml"
    path.write_text(KAI_DEFAULT.replace("name: topology", "name: topolgy"))
    result = CliRunner().invoke(main, ["simulate", EXAMPLE, "--config", str(path)])
    assert result.exit_code == 2
    assert "field tiers[0].plugins[17].name" in result.output
    assert "unknown plugin 'topolgy' (did you mean 'topology'?" in result.output
    assert "proportion" in result.output  # the known names are listed


def _tiers(*names: str) -> list[list[PluginOption]]:
    return [[PluginOption(name) for name in names]]


@pytest.mark.parametrize("action", ["consolidation", "reclaim", "preempt"])
def test_eviction_action_without_generators_gets_both(action: str, caplog) -> None:
    from kai.api.objects import SchedulerConfigObject

    obj = SchedulerConfigObject(actions=["allocate", action], tiers=_tiers("predicates"))
    with caplog.at_level(logging.INFO, logger="kai"):
        config = SchedulerConfig.from_object(obj)
        SchedulerConfig.from_object(obj)
    assert [p.name for p in config.tiers[-1]] == [
        "predicates",
        "sg-nodelocalgreedy",
        "sg-multinodegang",
    ]
    said = [r.getMessage() for r in caplog.records if "scenario generator" in r.getMessage()]
    assert len(said) == 1 and action in said[0], said


def test_generators_are_not_added_when_one_is_named_or_nothing_evicts() -> None:
    from kai.api.objects import SchedulerConfigObject

    named = SchedulerConfigObject(
        actions=["reclaim"], tiers=_tiers("predicates", "sg-multinodegang")
    )
    assert [p.name for p in SchedulerConfig.from_object(named).tiers[0]] == [
        "predicates",
        "sg-multinodegang",
    ]
    allocate = SchedulerConfigObject(actions=["allocate"], tiers=_tiers("predicates"))
    assert [p.name for p in SchedulerConfig.from_object(allocate).tiers[0]] == ["predicates"]
