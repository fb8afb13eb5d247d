"""Typed Kubernetes objects as kai reads them from a snapshot.

These are the parsed, validated forms of the manifests (see ``kai.snapshot.loader``):
quantities are already numbers in canonical units, timestamps are timezone-aware
``datetime`` objects and durations are seconds.  Canonical units:

* ``cpu``: millicores
* ``memory`` (and any byte-valued resource such as ``ephemeral-storage``): bytes
* ``nvidia.com/gpu``: devices
* ``pods`` and extended resources: plain counts
"""

from __future__ import annotations

import copyreg
from collections.abc import Mapping
from dataclasses import field
from datetime import datetime
from types import MappingProxyType
from typing import Any

from kai._dataclasses import dataclass

# Parsed objects are read-only: every empty map is this one (most pods have no node
# selector, conditions, ...), which saves a dictionary per field and keeps a session's
# per-pod tests on one hot object.
EMPTY_MAP: Mapping[str, Any] = MappingProxyType({})


def _empty_map() -> Mapping[str, Any]:
    return EMPTY_MAP


def _read_only(values: dict) -> Mapping[str, Any]:
    return MappingProxyType(values)


def _reduce_mapping_proxy(proxy: MappingProxyType) -> tuple:
    if proxy is EMPTY_MAP:
        return _empty_map, ()
    return _read_only, (dict(proxy),)


# Read-only maps (parsed objects' empty maps, a result's shared annotations) are
# mapping proxies, which the standard library cannot pickle or deep-copy: teach it, so
# snapshots and results still travel to other processes.
copyreg.pickle(MappingProxyType, _reduce_mapping_proxy)


GPU_RESOURCE = "nvidia.com/gpu"

API_GROUPS_KAI = ("scheduling.run.ai", "scheduling.kai.nvidia.com")


@dataclass(frozen=True)
class Source:
    """Where an object came from, for error messages."""

    file: str
    document: int

    def __str__(self) -> str:
        return f"{self.file}, document {self.document}"


@dataclass(frozen=True)
class OwnerReference:
    """An entry of ``metadata.ownerReferences``: the object that owns this one."""

    kind: str
    name: str
    uid: str = ""
    controller: bool = False


@dataclass(frozen=True)
class Taint:
    """A node taint: pods that do not tolerate it are kept off (or away from) the node."""

    key: str
    value: str = ""
    effect: str = ""  # NoSchedule | PreferNoSchedule | NoExecute


@dataclass(frozen=True)
class Toleration:
    """A pod toleration: which node taints the pod accepts."""

    key: str = ""
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # empty matches all effects


@dataclass(frozen=True)
class SelectorRequirement:
    """One requirement of a node selector term: a label key, an operator, values."""

    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist | Gt | Lt
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeSelectorTerm:
    """One term of requiredDuringScheduling...: all expressions and fields must match."""

    match_expressions: tuple[SelectorRequirement, ...] = ()
    match_fields: tuple[SelectorRequirement, ...] = ()  # only metadata.name is defined


@dataclass(frozen=True)
class PreferredSchedulingTerm:
    """A preferred node-affinity term and its weight (1-100)."""

    weight: int
    preference: NodeSelectorTerm


@dataclass(slots=True)
class NodeObject:
    """A Node: its labels, taints, allocatable resources and condition."""

    name: str
    labels: Mapping[str, str] = field(default_factory=_empty_map)
    annotations: Mapping[str, str] = field(default_factory=_empty_map)
    taints: list[Taint] = field(default_factory=list)
    unschedulable: bool = False
    allocatable: dict[str, float] = field(default_factory=dict)
    ready: bool = True
    # Other node conditions with status True that block scheduling (MemoryPressure, ...).
    pressure_conditions: list[str] = field(default_factory=list)
    source: Source | None = None


@dataclass(slots=True)
class PodObject:
    """A Pod: its scheduling constraints, requests, phase and placement."""

    name: str
    namespace: str
    uid: str = ""
    labels: Mapping[str, str] = field(default_factory=_empty_map)
    annotations: Mapping[str, str] = field(default_factory=_empty_map)
    owner_references: tuple[OwnerReference, ...] = ()
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None
    scheduler_name: str = "default-scheduler"
    node_name: str | None = None
    priority: int | None = None
    priority_class_name: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=_empty_map)
    # requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms (ORed); None = none.
    required_node_affinity: list[NodeSelectorTerm] | None = None
    preferred_node_affinity: tuple[PreferredSchedulingTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    # Effective pod request: max(sum of containers, max of init containers) + overhead.
    requests: dict[str, float] = field(default_factory=dict)
    # Sum of container limits (a resource with no limit in some container is absent).
    limits: dict[str, float] = field(default_factory=dict)
    phase: str = "Pending"
    conditions: Mapping[str, str] = field(default_factory=_empty_map)  # type -> status
    # type -> lastTransitionTime, for conditions that give one (load-aware estimation)
    condition_times: Mapping[str, datetime] = field(default_factory=_empty_map)
    nominated_node_name: str | None = None
    # spec.schedulingGates names: a gated pod is not scheduled until they are removed.
    scheduling_gates: tuple[str, ...] = ()
    start_time: datetime | None = None
    source: Source | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(slots=True)
class PodGroupObject:
    """A PodGroup: a gang's minimum member count, queue, priority and preemptibility."""

    name: str
    namespace: str
    uid: str = ""
    labels: Mapping[str, str] = field(default_factory=_empty_map)
    annotations: Mapping[str, str] = field(default_factory=_empty_map)
    owner_references: tuple[OwnerReference, ...] = ()
    creation_timestamp: datetime | None = None
    min_member: int | None = None
    queue: str | None = None
    priority_class_name: str | None = None
    preemptibility: str | None = None  # raw value; validated by the resolver
    staleness_grace_period: float | None = None  # seconds; negative disables
    preemption_delay: float | None = None  # seconds
    last_start_timestamp: datetime | None = None
    stale_timestamp: datetime | None = None
    last_eviction_timestamp: datetime | None = None
    source: Source | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class QueueResource:
    """quota/limit in canonical units (memory converted from MB to bytes); -1 = unlimited."""

    quota: float = 0.0
    limit: float = 0.0
    over_quota_weight: float = 0.0


@dataclass
class QueueObject:
    """A Queue of the queue tree: its parent, priority and per-resource quota, limit and
    over-quota weight."""

    name: str
    parent: str | None = None
    priority: int = 100
    display_name: str | None = None
    labels: Mapping[str, str] = field(default_factory=_empty_map)
    # keys "gpu", "cpu", "memory"; a missing key means the CRD zero values.
    resources: dict[str, QueueResource] = field(default_factory=dict)
    preempt_min_runtime: float | None = None  # seconds; None = inherit
    reclaim_min_runtime: float | None = None
    creation_timestamp: datetime | None = None
    source: Source | None = None


@dataclass
class PriorityClassObject:
    """A PriorityClass: the priority value a name stands for."""

    name: str
    value: int
    global_default: bool = False
    source: Source | None = None


@dataclass
class PodMetric:
    """One pod's resource usage as a NodeMetric reports it."""

    namespace: str
    name: str
    usage: dict[str, float]
    priority_class: str | None = None  # koordinator priority class of the pod if reported


@dataclass
class AggregatedUsage:
    """A node's usage percentiles over one aggregation window (NodeMetric ``aggUsages``)."""

    duration: float | None  # seconds of the aggregation window; None if unspecified
    usage: dict[str, dict[str, float]]  # percentile ("p50", "p90", "p95", "p99") -> resources


@dataclass
class NodeMetricObject:
    """A Koordinator NodeMetric: a node's measured usage, its pods' and the system's."""

    name: str  # node name
    update_time: datetime | None = None
    node_usage: dict[str, float] = field(default_factory=dict)
    # system usage (koordinator's nodeMetric.systemUsage), used with prodUsageIncludeSys
    system_usage: dict[str, float] = field(default_factory=dict)
    pods_usage: list[PodMetric] = field(default_factory=list)
    aggregated_usages: list[AggregatedUsage] = field(default_factory=list)
    report_interval_seconds: float = 60.0  # spec.metricCollectPolicy.reportIntervalSeconds
    # False when status.nodeMetric is absent (koordinator then skips the node's load checks)
    has_node_metric: bool = True
    source: Source | None = None


@dataclass
class GenericObject:
    """Any other object with metadata, kept for ownerReferences resolution."""

    api_version: str
    kind: str
    name: str
    namespace: str | None
    uid: str = ""
    labels: Mapping[str, str] = field(default_factory=_empty_map)
    owner_references: tuple[OwnerReference, ...] = ()


@dataclass
class PluginOption:
    """A plugin named in a scheduler configuration tier, with its arguments."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass
class SchedulerConfigObject:
    """A ``SchedulerConfiguration``; fields left out are None and take KAI's defaults."""

    actions: list[str] | None = None
    tiers: list[list[PluginOption]] | None = None
    queue_depth_per_action: dict[str, int] = field(default_factory=dict)
    reclaim_min_runtime: float | None = None  # seconds
    preempt_min_runtime: float | None = None
    # scenarioSearchBudgets as parsed: durations in seconds; maps keyed by action or
    # generator name (maxActionSearchDuration, maxGeneratorSearchDuration).
    scenario_search_budgets: dict[str, Any] | None = None
    # Time-based fair share, as written (checked by kai.config): ``usageDBConfig`` and
    # the shard-level ``kValue`` that proportion takes when its own argument is unset.
    usage_db: Any = None
    k_value: Any = None
    # maxNumberConsolidationPreemptees: victim jobs one consolidation may move (-1: any).
    max_consolidation_preemptees: int | None = None
    source: Source | None = None


@dataclass
class ClusterObjects:
    """Everything a snapshot file set contains, before it becomes session state."""

    nodes: list[NodeObject] = field(default_factory=list)
    pods: list[PodObject] = field(default_factory=list)
    pod_groups: list[PodGroupObject] = field(default_factory=list)
    queues: list[QueueObject] = field(default_factory=list)
    priority_classes: list[PriorityClassObject] = field(default_factory=list)
    node_metrics: list[NodeMetricObject] = field(default_factory=list)
    others: list[GenericObject] = field(default_factory=list)
    config: SchedulerConfigObject | None = None
    # Pods of other node pools on these nodes (kai.snapshot.partition): they hold their
    # nodes' capacity, as other schedulers' pods do, and their own pool schedules them.
    occupants: list[PodObject] = field(default_factory=list)
    # The nodes of the cluster's other node pools: a pod of this pool running on one of
    # them is on a known node (its pool counts it; the node's pool holds its capacity).
    other_pool_nodes: frozenset[str] = frozenset()
