"""Arguments, pod classification and the default estimator of the ``loadaware`` plugin.

Everything here follows Koordinator's LoadAwareScheduling (see ``docs/loadaware.md``):
argument names and defaults of ``LoadAwareSchedulingArgs``, the koordinator priority
class of a pod, the per-pod usage estimate and the node capacity.  Resource vectors are
int64 numpy arrays over the sorted resource set ``R``; cpu in millicores, every other
resource in its integer unit (bytes for memory), rounded up like ``Quantity.Value``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import field
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from kai._dataclasses import dataclass
from kai.api.errors import ConfigError
from kai.api.objects import NodeObject, PodObject
from kai.api.quantity import parse_duration, parse_quantity, to_canonical

PLUGIN = "loadaware"

# Constants of Koordinator's default estimator.
DEFAULT_MILLI_CPU_REQUEST = 250
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024

DEFAULT_EXPIRATION_SECONDS = 180
DEFAULT_RESOURCE_WEIGHTS = {"cpu": 1, "memory": 1}
DEFAULT_USAGE_THRESHOLDS = {"cpu": 65, "memory": 95}
DEFAULT_SCALING_FACTORS = {"cpu": 85, "memory": 70}
AGGREGATION_TYPES = ("avg", "p50", "p90", "p95", "p99")

# Annotations and labels Koordinator reads.
ANN_CUSTOM_THRESHOLDS = "scheduling.koordinator.sh/usage-thresholds"
ANN_RAW_ALLOCATABLE = "node.koordinator.sh/raw-allocatable"
ANN_SCALING_FACTORS = "scheduling.koordinator.sh/load-estimated-scaling-factors"
ANN_SECONDS_AFTER_SCHEDULED = "scheduling.koordinator.sh/load-estimated-seconds-after-pod-scheduled"
ANN_SECONDS_AFTER_INITIALIZED = "scheduling.koordinator.sh/load-estimated-seconds-after-initialized"
LABEL_PRIORITY_CLASS = "koordinator.sh/priority-class"
LABEL_QOS_CLASS = "koordinator.sh/qosClass"

PRIORITY_PROD = "koord-prod"
PRIORITY_MID = "koord-mid"
PRIORITY_BATCH = "koord-batch"
PRIORITY_FREE = "koord-free"
_PRIORITY_RANGES = (
    (PRIORITY_PROD, 9000, 9999),
    (PRIORITY_MID, 7000, 7999),
    (PRIORITY_BATCH, 5000, 5999),
    (PRIORITY_FREE, 3000, 3999),
)
# Resource name translation by priority class (apis/extension ResourceNameMap).
_TRANSLATE = {
    PRIORITY_BATCH: {"cpu": "kubernetes.io/batch-cpu", "memory": "kubernetes.io/batch-memory"},
    PRIORITY_MID: {"cpu": "kubernetes.io/mid-cpu", "memory": "kubernetes.io/mid-memory"},
}
_DEFAULT_CPU_NAMES = ("cpu", "kubernetes.io/batch-cpu")
_DEFAULT_MEMORY_NAMES = ("memory", "kubernetes.io/batch-memory")

_STANDARD_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage", "storage", "pods"})

ARGUMENTS = (
    "filterExpiredNodeMetrics",
    "nodeMetricExpirationSeconds",
    "enableScheduleWhenNodeMetricsExpired",
    "resourceWeights",
    "dominantResourceWeight",
    "usageThresholds",
    "prodUsageThresholds",
    "prodUsageIncludeSys",
    "scoreAccordingProdUsage",
    "estimator",
    "estimatedScalingFactors",
    "estimatedSecondsAfterPodScheduled",
    "estimatedSecondsAfterInitialized",
    "allowCustomizeEstimation",
    "aggregated",
    "supportedResources",
    "scoreWeight",
)
AGGREGATED_ARGUMENTS = (
    "usageThresholds",
    "usageAggregationType",
    "usageAggregatedDuration",
    "scoreAggregationType",
    "scoreAggregatedDuration",
)


# ------------------------------------------------------------------------- arguments


def _err(message: str, key: str) -> ConfigError:
    return ConfigError(message, obj=f"plugin {PLUGIN}", field=f"arguments.{key}")


def _structured(value: Any) -> Any:
    """Maps and lists may also come as JSON/YAML text (KAI passes arguments as strings)."""
    if isinstance(value, str) and value.strip()[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            import yaml

            try:
                return yaml.safe_load(value)
            except yaml.YAMLError:
                return value
    return value


def _int(value: Any, key: str) -> int:
    if isinstance(value, bool):
        raise _err(f"expected an integer, got {value!r}", key)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text)
        except ValueError:
            try:
                f = float(text)
            except ValueError:
                f = math.nan
            if math.isfinite(f) and f.is_integer():
                return int(f)
    raise _err(f"expected an integer, got {value!r}", key)


def _bool(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise _err(f"expected true or false, got {value!r}", key)


def _duration(value: Any, key: str) -> float:
    if value is None:
        return 0.0
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise _err(str(exc), key) from None
    if seconds < 0:
        raise _err(f"must not be negative, got {value!r}", key)
    return seconds


def check_resource_name(name: Any, key: str) -> str:
    """A Kubernetes resource name: a standard one or a domain-qualified extended one."""
    if not isinstance(name, str) or not name:
        raise _err(f"expected a resource name, got {name!r}", key)
    if name in _STANDARD_RESOURCES or name.startswith("hugepages-"):
        return name
    prefix, _, rest = name.partition("/")
    if rest and "." in prefix and "/" not in rest:
        return name
    raise _err(
        f"unknown resource name {name!r} (expected cpu, memory, ephemeral-storage, pods, "
        "hugepages-<size> or a domain-qualified extended resource such as nvidia.com/gpu)",
        key,
    )


def _resource_map(value: Any, key: str, lo: int, hi: int, *, lo_open: bool) -> dict[str, int]:
    value = _structured(value)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _err(f"expected a map of resource name to integer, got {value!r}", key)
    out: dict[str, int] = {}
    for name, raw in value.items():
        k = f"{key}.{name}"
        name = check_resource_name(str(name), k)
        v = _int(raw, k)
        if v > hi or v < lo or (lo_open and v == lo):
            rng = f"({lo}, {hi}]" if lo_open else f"[{lo}, {hi}]"
            raise _err(f"{v} is outside {rng}", k)
        out[name] = v
    return out


@dataclass
class AggregatedArgs:
    """The load-aware plugin's ``aggregated`` arguments: percentile thresholds and scoring."""

    usage_thresholds: dict[str, int] = field(default_factory=dict)
    usage_aggregation_type: str = ""
    usage_aggregated_duration: float = 0.0
    score_aggregation_type: str = ""
    score_aggregated_duration: float = 0.0

    @property
    def filter_enabled(self) -> bool:
        return bool(self.usage_thresholds) and bool(self.usage_aggregation_type)


@dataclass
class LoadAwareArgs:
    """Koordinator ``LoadAwareSchedulingArgs`` after defaulting and validation."""

    filter_expired_node_metrics: bool = True
    node_metric_expiration_seconds: int = DEFAULT_EXPIRATION_SECONDS
    enable_schedule_when_node_metrics_expired: bool = False
    resource_weights: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_RESOURCE_WEIGHTS))
    dominant_resource_weight: int = 0
    usage_thresholds: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_USAGE_THRESHOLDS))
    prod_usage_thresholds: dict[str, int] = field(default_factory=dict)
    prod_usage_include_sys: bool = False
    score_according_prod_usage: bool = False
    estimated_scaling_factors: dict[str, int] = field(
        default_factory=lambda: dict(DEFAULT_SCALING_FACTORS)
    )
    estimated_seconds_after_pod_scheduled: int | None = None
    estimated_seconds_after_initialized: int | None = None
    allow_customize_estimation: bool = False
    aggregated: AggregatedArgs | None = None
    supported_resources: list[str] = field(default_factory=list)
    score_weight: float = 1.0
    resources: tuple[str, ...] = ("cpu", "memory")  # the vector layout R

    def vec(self, values: Mapping[str, int]) -> np.ndarray:
        """``ToFactorVec``: a map over R as an int64 vector, missing keys 0."""
        return np.array([int(values.get(r, 0)) for r in self.resources], dtype=np.int64)


def parse_args(raw: Mapping[str, Any]) -> LoadAwareArgs:
    """Default and validate the plugin arguments (Koordinator's JSON names)."""
    a = LoadAwareArgs()
    get = raw.get
    if get("filterExpiredNodeMetrics") is not None:
        a.filter_expired_node_metrics = _bool(
            get("filterExpiredNodeMetrics"), "filterExpiredNodeMetrics"
        )
    if get("nodeMetricExpirationSeconds") is not None:
        v = _int(get("nodeMetricExpirationSeconds"), "nodeMetricExpirationSeconds")
        if v <= 0:
            raise _err(
                f"must be a positive number of seconds, got {v}", "nodeMetricExpirationSeconds"
            )
        a.node_metric_expiration_seconds = v
    for key, attr in (
        ("enableScheduleWhenNodeMetricsExpired", "enable_schedule_when_node_metrics_expired"),
        ("prodUsageIncludeSys", "prod_usage_include_sys"),
        ("scoreAccordingProdUsage", "score_according_prod_usage"),
        ("allowCustomizeEstimation", "allow_customize_estimation"),
    ):
        if get(key) is not None:
            setattr(a, attr, _bool(get(key), key))
    estimator = get("estimator")
    if estimator not in (None, "", "defaultEstimator"):
        raise _err(f"unknown estimator {estimator!r} (only defaultEstimator)", "estimator")

    if get("dominantResourceWeight") is not None:
        d = _int(get("dominantResourceWeight"), "dominantResourceWeight")
        if not 0 <= d <= 100:
            raise _err(f"{d} is outside [0, 100]", "dominantResourceWeight")
        a.dominant_resource_weight = d
    weights = _resource_map(get("resourceWeights"), "resourceWeights", 0, 100, lo_open=True)
    if weights or a.dominant_resource_weight != 0:
        a.resource_weights = weights
    thresholds = _resource_map(get("usageThresholds"), "usageThresholds", 0, 100, lo_open=False)
    if thresholds:
        a.usage_thresholds = thresholds
    a.prod_usage_thresholds = _resource_map(
        get("prodUsageThresholds"), "prodUsageThresholds", 0, 100, lo_open=False
    )
    factors = _resource_map(
        get("estimatedScalingFactors"), "estimatedScalingFactors", 0, 100, lo_open=True
    )
    for name, value in DEFAULT_SCALING_FACTORS.items():
        factors.setdefault(name, value)
    a.estimated_scaling_factors = factors
    for name in a.resource_weights:
        if name not in factors:
            raise _err(
                f"resource {name!r} has a weight but no estimatedScalingFactors entry",
                f"resourceWeights.{name}",
            )
    for key, attr in (
        ("estimatedSecondsAfterPodScheduled", "estimated_seconds_after_pod_scheduled"),
        ("estimatedSecondsAfterInitialized", "estimated_seconds_after_initialized"),
    ):
        if get(key) is not None:
            setattr(a, attr, _int(get(key), key))

    agg_raw = _structured(get("aggregated"))
    if agg_raw is not None:
        if not isinstance(agg_raw, Mapping):
            raise _err(f"expected a map, got {agg_raw!r}", "aggregated")
        unknown = sorted(set(map(str, agg_raw)) - set(AGGREGATED_ARGUMENTS))
        if unknown:
            raise _err(
                f"unknown argument(s) {', '.join(unknown)} "
                f"(accepted: {', '.join(AGGREGATED_ARGUMENTS)})",
                "aggregated",
            )
        agg = AggregatedArgs(
            usage_thresholds=_resource_map(
                agg_raw.get("usageThresholds"), "aggregated.usageThresholds", 0, 100, lo_open=False
            )
        )
        for key in ("usageAggregationType", "scoreAggregationType"):
            t = agg_raw.get(key)
            if t in (None, ""):
                continue
            if t not in AGGREGATION_TYPES:
                raise _err(
                    f"{t!r} is not one of {', '.join(AGGREGATION_TYPES)}", f"aggregated.{key}"
                )
            if key == "usageAggregationType":
                agg.usage_aggregation_type = t
            else:
                agg.score_aggregation_type = t
        agg.usage_aggregated_duration = _duration(
            agg_raw.get("usageAggregatedDuration"), "aggregated.usageAggregatedDuration"
        )
        agg.score_aggregated_duration = _duration(
            agg_raw.get("scoreAggregatedDuration"), "aggregated.scoreAggregatedDuration"
        )
        a.aggregated = agg

    supported = _structured(get("supportedResources"))
    if supported is not None:
        if isinstance(supported, str):
            supported = [s.strip() for s in supported.split(",") if s.strip()]
        if not isinstance(supported, Sequence):
            raise _err(
                f"expected a list of resource names, got {supported!r}", "supportedResources"
            )
        a.supported_resources = [
            check_resource_name(s, f"supportedResources[{i}]") for i, s in enumerate(supported)
        ]

    weight = get("scoreWeight")
    if weight is not None:
        try:
            w = float(weight)
        except (TypeError, ValueError):
            raise _err(f"{weight!r} is not a number", "scoreWeight") from None
        if not math.isfinite(w) or w < 0:
            raise _err(f"must be a non-negative number, got {w}", "scoreWeight")
        a.score_weight = w

    names = {"cpu", "memory"}
    names.update(a.usage_thresholds, a.prod_usage_thresholds, a.resource_weights)
    names.update(a.estimated_scaling_factors, a.supported_resources)
    if a.aggregated is not None:
        names.update(a.aggregated.usage_thresholds)
    a.resources = tuple(sorted(names))
    return a


# -------------------------------------------------------------------- quantities


#: The int64 range Koordinator's quantities live in.  Kubernetes caps a quantity's
#: magnitude at 2^63 - 1; a larger one (``100Ei``, or millicores of a huge cpu) is
#: held at the bound instead of overflowing.
INT64_MAX = 2**63 - 1


def to_int(value: float) -> int:
    """A canonical quantity as Koordinator's int64 (``MilliValue``/``Value``: rounded up),
    held within the int64 range."""
    if not -INT64_MAX <= value <= INT64_MAX:
        return INT64_MAX if value > 0 else -INT64_MAX
    r = round(value)
    if abs(value - r) <= 1e-9 * max(1.0, abs(value)):
        return int(r)
    return int(math.ceil(value))


def resource_vec(resources: Sequence[str], values: Mapping[str, float]) -> np.ndarray:
    """``ToVec``: a resource list over R (names outside R dropped)."""
    return np.array([to_int(values.get(r, 0.0)) for r in resources], dtype=np.int64)


def go_round(x: float) -> float:
    """Go's ``math.Round``: halves away from zero."""
    t = math.trunc(x)
    if abs(x - t) >= 0.5:
        return t + math.copysign(1.0, x)
    return float(t)


def node_allocatable(node: NodeObject) -> dict[str, float]:
    """``EstimateNode``: status.allocatable, overridden by the raw-allocatable annotation."""
    alloc = dict(node.allocatable)
    raw = node.annotations.get(ANN_RAW_ALLOCATABLE)
    if not raw:
        return alloc
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            return alloc
        parsed = {
            str(k): to_canonical(str(k), parse_quantity(v, what=str(k))) for k, v in data.items()
        }
    except (ValueError, TypeError):
        return alloc
    if parsed and parsed != alloc:
        alloc.update(parsed)
    return alloc


# ------------------------------------------------------------- pod classification


def pod_qos_is_best_effort(pod: PodObject) -> bool:
    keys = ("cpu", "memory")
    return not any(pod.requests.get(k) for k in keys) and not any(pod.limits.get(k) for k in keys)


def koord_priority_class(pod: PodObject) -> str:
    """``GetPodPriorityClassWithDefault``: label, then spec.priority range, then QoS."""
    label = pod.labels.get(LABEL_PRIORITY_CLASS)
    if label:
        return label
    priority = pod.priority
    if priority is None and pod.priority_class_name:
        # A snapshot may leave out spec.priority; Koordinator's own classes map directly.
        priority = {PRIORITY_PROD: 9000, PRIORITY_MID: 7000, PRIORITY_BATCH: 5000}.get(
            pod.priority_class_name, {PRIORITY_FREE: 3000}.get(pod.priority_class_name)
        )
    if priority is not None:
        for name, lo, hi in _PRIORITY_RANGES:
            if lo <= priority <= hi:
                return name
    qos = pod.labels.get(LABEL_QOS_CLASS)
    if qos:
        return PRIORITY_BATCH if qos == "BE" else PRIORITY_PROD
    return PRIORITY_BATCH if pod_qos_is_best_effort(pod) else PRIORITY_PROD


def is_daemonset_pod(pod: PodObject) -> bool:
    return any(ref.kind == "DaemonSet" for ref in pod.owner_references)


# ----------------------------------------------------------------------- estimator


def _annotation_int(pod: PodObject, key: str) -> int:
    raw = pod.annotations.get(key)
    if raw is None:
        return -1
    try:
        return int(raw.strip())
    except ValueError:
        return -1


def _custom_factors(pod: PodObject) -> dict[str, int]:
    raw = pod.annotations.get(ANN_SCALING_FACTORS)
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    out = {}
    for k, v in data.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not float(v).is_integer():
            return {}
        out[str(k)] = int(v)
    return out


def _quantity(values: Mapping[str, float], name: str) -> int:
    return to_int(values.get(name, 0.0))


def translate_resource(priority_class: str, name: str) -> str:
    """``TranslateResourceNameByPriorityClass``: "" when the class has no such resource."""
    if priority_class in (PRIORITY_PROD, ""):
        return name
    return _TRANSLATE.get(priority_class, {}).get(name, "")


def estimate_pod(args: LoadAwareArgs, pod: PodObject) -> np.ndarray:
    """The default estimator's ``e(p)`` over R."""
    factors: dict[str, int] = {}
    if args.allow_customize_estimation:
        factors = _custom_factors(pod)
    if factors:
        for k, v in args.estimated_scaling_factors.items():
            factors.setdefault(k, v)
    else:
        factors = args.estimated_scaling_factors
    cls = koord_priority_class(pod)
    index = {r: i for i, r in enumerate(args.resources)}
    out = np.zeros(len(args.resources), dtype=np.int64)
    for name, factor in factors.items():
        i = index.get(name)
        if i is None:
            continue
        real = translate_resource(cls, name)
        req = _quantity(pod.requests, real) if real else 0
        lim = _quantity(pod.limits, real) if real else 0
        q = lim if lim > req else req
        if q == 0:
            if real in _DEFAULT_CPU_NAMES:
                out[i] = DEFAULT_MILLI_CPU_REQUEST
            elif real in _DEFAULT_MEMORY_NAMES:
                out[i] = DEFAULT_MEMORY_REQUEST
            continue
        e = int(go_round(float(q) * float(factor) / 100.0))
        if lim > 0 and e > lim:
            e = lim
        out[i] = e
    return out


def pod_timestamp(pod: PodObject, now: datetime) -> datetime:
    """When the pod was assigned: its PodScheduled=True transition, else ``now``."""
    if pod.conditions.get("PodScheduled") == "True":
        ts = pod.condition_times.get("PodScheduled")
        if ts is not None:
            return ts
    return now


def estimate_deadline(args: LoadAwareArgs, pod: PodObject, timestamp: datetime) -> datetime | None:
    """Until when an assigned pod is estimated regardless of its reported usage."""
    after_scheduled = after_initialized = -1
    if args.allow_customize_estimation:
        after_scheduled = _annotation_int(pod, ANN_SECONDS_AFTER_SCHEDULED)
        after_initialized = _annotation_int(pod, ANN_SECONDS_AFTER_INITIALIZED)
    if args.estimated_seconds_after_pod_scheduled is not None and after_scheduled < 0:
        after_scheduled = args.estimated_seconds_after_pod_scheduled
    if args.estimated_seconds_after_initialized is not None and after_initialized < 0:
        after_initialized = args.estimated_seconds_after_initialized
    if after_initialized > 0 and pod.conditions.get("Initialized") == "True":
        ts = pod.condition_times.get("Initialized")
        if ts is not None:
            return ts + timedelta(seconds=after_initialized)
    if after_scheduled > 0:
        return timestamp + timedelta(seconds=after_scheduled)
    return None


# ---------------------------------------------------------------- node thresholds


@dataclass
class ThresholdProfile:
    """``CustomUsageThresholds`` of one node (args, or overridden by its annotation)."""

    usage: dict[str, int]
    prod: dict[str, int]
    agg: dict[str, int] | None  # aggregated thresholds, None when not aggregated
    agg_type: str = ""
    agg_duration: float = 0.0
    custom_usage: bool = False  # which parts came from the node annotation
    custom_prod: bool = False
    custom_agg: bool = False


def _int_map(value: Any) -> dict[str, int]:
    if not isinstance(value, dict):
        return {}
    out = {}
    for k, v in value.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(k)
        out[str(k)] = int(v)
    return out


def threshold_profile(args: LoadAwareArgs, node: NodeObject) -> ThresholdProfile:
    agg_args = args.aggregated if args.aggregated and args.aggregated.filter_enabled else None

    def from_args() -> ThresholdProfile:
        if agg_args is None:
            return ThresholdProfile(args.usage_thresholds, args.prod_usage_thresholds, None)
        return ThresholdProfile(
            args.usage_thresholds,
            args.prod_usage_thresholds,
            agg_args.usage_thresholds,
            agg_args.usage_aggregation_type,
            agg_args.usage_aggregated_duration,
        )

    raw = node.annotations.get(ANN_CUSTOM_THRESHOLDS)
    if not raw:
        return from_args()
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("not a map")
        usage = _int_map(data.get("usageThresholds"))
        prod = _int_map(data.get("prodUsageThresholds"))
        agg_raw = data.get("aggregatedUsage")
        agg: dict[str, int] | None = None
        agg_type = ""
        agg_duration = 0.0
        if isinstance(agg_raw, dict):
            agg = _int_map(agg_raw.get("usageThresholds"))
            agg_type = str(agg_raw.get("usageAggregationType") or "")
            dur = agg_raw.get("usageAggregatedDuration")
            agg_duration = parse_duration(dur) if dur not in (None, "") else 0.0
            if not agg or not agg_type:
                agg = None
    except (ValueError, TypeError):
        return from_args()
    base = from_args()
    profile = ThresholdProfile(
        usage or base.usage,
        prod or base.prod,
        agg if agg is not None else base.agg,
        agg_type if agg is not None else base.agg_type,
        agg_duration if agg is not None else base.agg_duration,
        custom_usage=bool(usage),
        custom_prod=bool(prod),
        custom_agg=agg is not None,
    )
    return profile
