"""Load a cluster snapshot (Kubernetes manifests) into :class:`~kai.api.objects.ClusterObjects`.

Input is multi-document YAML or JSON, including ``kind: List`` documents such as
``kubectl get ... -o yaml`` prints.  Kinds kai uses (Node, Pod, PodGroup, Queue,
PriorityClass, NodeMetric, SchedulerConfiguration) are parsed into typed objects; any
other object with ``metadata.name`` is kept as a :class:`GenericObject` so that owner
references can be resolved.  Every problem in the input is reported as an
:class:`~kai.api.errors.InputError` naming the file, document index, object and field.

Public functions: :func:`load_files`, :func:`load_text`, :func:`load_objects`,
:func:`load_config_file`.
"""

from __future__ import annotations

import codecs
import json
import math
import os
import re
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import date, datetime, timezone
from typing import Any

import orjson

from kai import _fast
from kai.api.errors import ConfigError, InputError
from kai.api.objects import (
    API_GROUPS_KAI,
    EMPTY_MAP,
    AggregatedUsage,
    ClusterObjects,
    GenericObject,
    NodeMetricObject,
    NodeObject,
    NodeSelectorTerm,
    OwnerReference,
    PluginOption,
    PodGroupObject,
    PodMetric,
    PodObject,
    PreferredSchedulingTerm,
    PriorityClassObject,
    QueueObject,
    QueueResource,
    SchedulerConfigObject,
    SelectorRequirement,
    Source,
    Taint,
    Toleration,
)
from kai.api.quantity import parse_duration, parse_quantity, parse_time, to_canonical
from kai.memory import gc_paused

__all__ = ["load_files", "load_text", "load_objects", "load_config_file", "convert_object"]

ANNOTATION_LAST_START = "kai.scheduler/last-start-timestamp"
ANNOTATION_STALE = "kai.scheduler/stale-podgroup-timestamp"
ANNOTATION_LAST_EVICTION = "kai.scheduler/last-eviction-timestamp"

PRESSURE_CONDITIONS = ("MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")
_SELECTOR_OPERATORS = frozenset(("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"))
_MANIFEST_EXTENSIONS = (".yaml", ".yml", ".json")
_QUEUE_RESOURCES = ("gpu", "cpu", "memory")
_MB = 1_000_000.0

_IDENT_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def _key_path(prefix: str, key: str) -> str:
    """``prefix.key`` for plain identifiers, ``prefix[key]`` for names like nvidia.com/gpu."""
    if key and all(c in _IDENT_CHARS for c in key):
        return f"{prefix}.{key}"
    return f"{prefix}[{key}]"


class _Ctx:
    """Where the object being parsed is, for error messages."""

    __slots__ = ("file", "document", "obj")

    def __init__(self, file: str, document: int | None, obj: str | None) -> None:
        self.file = file
        self.document = document
        self.obj = obj

    def error(self, message: str, field: str | None = None) -> InputError:
        return InputError(
            message, file=self.file, document=self.document, obj=self.obj, field=field
        )

    def source(self) -> Source:
        return Source(self.file, self.document if self.document is not None else 0)


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a map"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return type(value).__name__


# --------------------------------------------------------------------------- field helpers


def _map(ctx: _Ctx, value: Any, field: str) -> dict:
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    raise ctx.error(f"expected a map, got {_type_name(value)}", field)


def _list(ctx: _Ctx, value: Any, field: str) -> list:
    if value is None:
        return []
    if isinstance(value, list):
        return value
    raise ctx.error(f"expected a list, got {_type_name(value)}", field)


def _scalar_str(value: Any) -> str | None:
    """String form of a YAML scalar (YAML may turn ``true``, ``1`` or timestamps into
    non-strings); None for maps and lists."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, date):
        return value.isoformat()
    return None


def _str(ctx: _Ctx, value: Any, field: str, default: str | None = None) -> str | None:
    if value is None:
        return default
    if isinstance(value, str):
        return value
    s = _scalar_str(value)
    if s is None:
        raise ctx.error(f"expected a string, got {_type_name(value)}", field)
    return s


def _nonempty_str(ctx: _Ctx, value: Any, field: str) -> str | None:
    """A string where the empty string means 'not set'."""
    s = _str(ctx, value, field)
    return s or None


def _str_map(ctx: _Ctx, value: Any, field: str) -> Mapping[str, str]:
    if value is None:
        return EMPTY_MAP
    if not isinstance(value, dict):
        raise ctx.error(f"expected a map of strings, got {_type_name(value)}", field)
    out: dict[str, str] = {}
    for k, v in value.items():
        key = k if isinstance(k, str) else str(k)
        if isinstance(v, str):
            out[key] = v
            continue
        if v is None:
            out[key] = ""
            continue
        s = _scalar_str(v)
        if s is None:
            raise ctx.error(f"expected a string, got {_type_name(v)}", _key_path(field, key))
        out[key] = s
    return out or EMPTY_MAP


def _int(ctx: _Ctx, value: Any, field: str) -> int:
    if isinstance(value, bool):
        raise ctx.error("expected an integer, got a boolean", field)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise ctx.error(f"expected an integer, got {value!r}", field)


def _number(ctx: _Ctx, value: Any, field: str) -> float:
    """A plain number; numeric strings are accepted."""
    if isinstance(value, bool):
        raise ctx.error("expected a number, got a boolean", field)
    if isinstance(value, (int, float)):
        result = float(value)
    elif isinstance(value, str):
        try:
            result = float(value.strip())
        except ValueError:
            raise ctx.error(f"expected a number, got {value!r}", field) from None
    else:
        raise ctx.error(f"expected a number, got {_type_name(value)}", field)
    if not math.isfinite(result):
        raise ctx.error(f"expected a finite number, got {value!r}", field)
    return result


def _bool(ctx: _Ctx, value: Any, field: str, default: bool = False) -> bool:
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ctx.error(f"expected true or false, got {value!r}", field)


def _time(ctx: _Ctx, value: Any, field: str) -> datetime | None:
    if value is None or value == "":
        return None
    try:
        return parse_time(value)
    except ValueError as exc:
        raise ctx.error(str(exc), field) from None


def _duration(ctx: _Ctx, value: Any, field: str, *, allow_negative: bool) -> float | None:
    if value is None or value == "":
        return None
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise ctx.error(str(exc), field) from None
    if seconds < 0 and not allow_negative:
        raise ctx.error(f"duration {value!r} must not be negative", field)
    return seconds


def _resource_list(ctx: _Ctx, value: Any, field: str) -> dict[str, float]:
    """A ResourceList in canonical units; negative quantities are errors."""
    if not value:
        if value is None or isinstance(value, dict):
            return {}
    if not isinstance(value, dict):
        raise ctx.error(
            f"expected a map of resource name to quantity, got {_type_name(value)}", field
        )
    out: dict[str, float] = {}
    for k, v in value.items():
        name = k if isinstance(k, str) else str(k)
        try:
            q = parse_quantity(v, what=name)
        except ValueError as exc:
            raise ctx.error(str(exc), _key_path(field, name)) from None
        if q < 0:
            raise ctx.error(
                f"quantity {v!r} for {name} must not be negative", _key_path(field, name)
            )
        out[name] = to_canonical(name, q)
    return out


def _owner_references(ctx: _Ctx, value: Any, field: str) -> tuple[OwnerReference, ...]:
    if not value:
        return ()
    out = []
    for i, ref in enumerate(_list(ctx, value, field)):
        f = f"{field}[{i}]"
        ref = _map(ctx, ref, f)
        kind = _str(ctx, ref.get("kind"), f + ".kind")
        name = _str(ctx, ref.get("name"), f + ".name")
        if not kind:
            raise ctx.error("owner reference needs a kind", f + ".kind")
        if not name:
            raise ctx.error("owner reference needs a name", f + ".name")
        out.append(
            OwnerReference(
                kind=kind,
                name=name,
                uid=_str(ctx, ref.get("uid"), f + ".uid", "") or "",
                controller=_bool(ctx, ref.get("controller"), f + ".controller"),
            )
        )
    return tuple(out)


def _requirement(ctx: _Ctx, value: Any, field: str) -> SelectorRequirement:
    req = _map(ctx, value, field)
    key = _str(ctx, req.get("key"), field + ".key")
    if not key:
        raise ctx.error("selector requirement needs a key", field + ".key")
    op = _str(ctx, req.get("operator"), field + ".operator")
    if op not in _SELECTOR_OPERATORS:
        raise ctx.error(
            f"invalid operator {op!r}: expected one of In, NotIn, Exists, DoesNotExist, Gt, Lt",
            field + ".operator",
        )
    values = []
    for j, v in enumerate(_list(ctx, req.get("values"), field + ".values")):
        s = _scalar_str(v)
        if s is None:
            raise ctx.error(f"expected a string, got {_type_name(v)}", f"{field}.values[{j}]")
        values.append(s)
    return SelectorRequirement(key=key, operator=op, values=tuple(values))


def _selector_term(ctx: _Ctx, value: Any, field: str) -> NodeSelectorTerm:
    term = _map(ctx, value, field)
    exprs = _list(ctx, term.get("matchExpressions"), field + ".matchExpressions")
    fields = _list(ctx, term.get("matchFields"), field + ".matchFields")
    return NodeSelectorTerm(
        match_expressions=tuple(
            _requirement(ctx, r, f"{field}.matchExpressions[{i}]") for i, r in enumerate(exprs)
        ),
        match_fields=tuple(
            _requirement(ctx, r, f"{field}.matchFields[{i}]") for i, r in enumerate(fields)
        ),
    )


def _condition_times(ctx: _Ctx, value: Any, field: str) -> Mapping[str, datetime]:
    """type -> lastTransitionTime of the conditions that give one."""
    out: dict[str, datetime] = {}
    for i, cond in enumerate(_list(ctx, value, field)):
        f = f"{field}[{i}]"
        cond = _map(ctx, cond, f)
        ctype = _str(ctx, cond.get("type"), f + ".type")
        ts = _time(ctx, cond.get("lastTransitionTime"), f + ".lastTransitionTime")
        if ctype and ts is not None:
            out[ctype] = ts
    return out or EMPTY_MAP


def _conditions(ctx: _Ctx, value: Any, field: str) -> Mapping[str, str]:
    out: dict[str, str] = {}
    for i, cond in enumerate(_list(ctx, value, field)):
        f = f"{field}[{i}]"
        cond = _map(ctx, cond, f)
        ctype = _str(ctx, cond.get("type"), f + ".type")
        if not ctype:
            continue
        out[ctype] = _str(ctx, cond.get("status"), f + ".status", "") or ""
    return out or EMPTY_MAP


# --------------------------------------------------------------------------- kinds


def _parse_node(ctx: _Ctx, obj: dict, meta: dict, name: str) -> NodeObject:
    spec = _map(ctx, obj.get("spec"), "spec")
    status = _map(ctx, obj.get("status"), "status")
    taints = []
    for i, t in enumerate(_list(ctx, spec.get("taints"), "spec.taints")):
        f = f"spec.taints[{i}]"
        t = _map(ctx, t, f)
        key = _str(ctx, t.get("key"), f + ".key")
        if not key:
            raise ctx.error("taint needs a key", f + ".key")
        taints.append(
            Taint(
                key=key,
                value=_str(ctx, t.get("value"), f + ".value", "") or "",
                effect=_str(ctx, t.get("effect"), f + ".effect", "") or "",
            )
        )
    if "allocatable" in status and status.get("allocatable") is not None:
        allocatable = _resource_list(ctx, status.get("allocatable"), "status.allocatable")
    else:
        # Kubernetes defaults allocatable to capacity.
        allocatable = _resource_list(ctx, status.get("capacity"), "status.capacity")
    conditions = _conditions(ctx, status.get("conditions"), "status.conditions")
    ready_status = conditions.get("Ready")
    return NodeObject(
        name=name,
        labels=_str_map(ctx, meta.get("labels"), "metadata.labels"),
        annotations=_str_map(ctx, meta.get("annotations"), "metadata.annotations"),
        taints=taints,
        unschedulable=_bool(ctx, spec.get("unschedulable"), "spec.unschedulable"),
        allocatable=allocatable,
        ready=True if ready_status is None else ready_status == "True",
        pressure_conditions=[c for c in PRESSURE_CONDITIONS if conditions.get(c) == "True"],
        source=ctx.source(),
    )


def _container_resources(
    ctx: _Ctx, container: Any, field: str
) -> tuple[dict[str, float], dict[str, float]]:
    container = _map(ctx, container, field)
    res = container.get("resources")
    if not res:
        if res is None or isinstance(res, dict):
            return {}, {}
    res = _map(ctx, res, field + ".resources")
    requests = _resource_list(ctx, res.get("requests"), field + ".resources.requests")
    limits = _resource_list(ctx, res.get("limits"), field + ".resources.limits")
    for k, v in limits.items():
        if k not in requests:
            requests[k] = v  # Kubernetes defaults a missing request to the limit
    return requests, limits


def _pod_resources(ctx: _Ctx, spec: dict) -> tuple[dict[str, float], dict[str, float]]:
    """Effective pod requests (like k8s ``resourcehelper.PodRequests``) and limits."""
    total: dict[str, float] = {}
    limits: dict[str, float] = {}
    limited_everywhere: set[str] | None = None
    containers = _list(ctx, spec.get("containers"), "spec.containers")
    for i, c in enumerate(containers):
        req, lim = _container_resources(ctx, c, f"spec.containers[{i}]")
        for k, v in req.items():
            total[k] = total.get(k, 0.0) + v
        for k, v in lim.items():
            limits[k] = limits.get(k, 0.0) + v
        if limited_everywhere is None:
            limited_everywhere = set(lim)
        else:
            limited_everywhere &= lim.keys()
    if limited_everywhere is not None and len(limited_everywhere) != len(limits):
        limits = {k: v for k, v in limits.items() if k in limited_everywhere}

    init = spec.get("initContainers")
    if init:
        sidecars: dict[str, float] = {}
        init_max: dict[str, float] = {}
        for i, c in enumerate(_list(ctx, init, "spec.initContainers")):
            req, _ = _container_resources(ctx, c, f"spec.initContainers[{i}]")
            if isinstance(c, dict) and c.get("restartPolicy") == "Always":
                # A sidecar keeps running next to later init containers and the app.
                for k, v in req.items():
                    sidecars[k] = sidecars.get(k, 0.0) + v
                current = dict(sidecars)
            else:
                current = dict(req)
                for k, v in sidecars.items():
                    current[k] = current.get(k, 0.0) + v
            for k, v in current.items():
                init_max[k] = max(v, init_max.get(k, v))
        for k, v in sidecars.items():
            total[k] = total.get(k, 0.0) + v
        for k, v in init_max.items():
            if k not in total or v > total[k]:
                total[k] = v

    overhead = spec.get("overhead")
    if overhead:
        for k, v in _resource_list(ctx, overhead, "spec.overhead").items():
            total[k] = total.get(k, 0.0) + v
    return total, limits


def _parse_pod(ctx: _Ctx, obj: dict, meta: dict, name: str, namespace: str) -> PodObject:
    spec = _map(ctx, obj.get("spec"), "spec")
    status = _map(ctx, obj.get("status"), "status")
    requests, limits = _pod_resources(ctx, spec)

    required = None
    preferred: list[PreferredSchedulingTerm] = []
    affinity = spec.get("affinity")
    if affinity:
        affinity = _map(ctx, affinity, "spec.affinity")
        node_aff = _map(ctx, affinity.get("nodeAffinity"), "spec.affinity.nodeAffinity")
        base = "spec.affinity.nodeAffinity."
        req = node_aff.get("requiredDuringSchedulingIgnoredDuringExecution")
        if req is not None:
            f = base + "requiredDuringSchedulingIgnoredDuringExecution"
            req = _map(ctx, req, f)
            terms = _list(ctx, req.get("nodeSelectorTerms"), f + ".nodeSelectorTerms")
            required = [
                _selector_term(ctx, t, f"{f}.nodeSelectorTerms[{i}]") for i, t in enumerate(terms)
            ]
        f = base + "preferredDuringSchedulingIgnoredDuringExecution"
        for i, p in enumerate(_list(ctx, node_aff.get(f[len(base) :]), f)):
            pf = f"{f}[{i}]"
            p = _map(ctx, p, pf)
            preferred.append(
                PreferredSchedulingTerm(
                    weight=_int(ctx, p.get("weight", 0), pf + ".weight"),
                    preference=_selector_term(ctx, p.get("preference"), pf + ".preference"),
                )
            )

    tolerations = []
    tol_list = spec.get("tolerations")
    if tol_list:
        for i, t in enumerate(_list(ctx, tol_list, "spec.tolerations")):
            f = f"spec.tolerations[{i}]"
            t = _map(ctx, t, f)
            tolerations.append(
                Toleration(
                    key=_str(ctx, t.get("key"), f + ".key", "") or "",
                    operator=_str(ctx, t.get("operator"), f + ".operator", "") or "Equal",
                    value=_str(ctx, t.get("value"), f + ".value", "") or "",
                    effect=_str(ctx, t.get("effect"), f + ".effect", "") or "",
                )
            )

    priority = spec.get("priority")
    return PodObject(
        name=name,
        namespace=namespace,
        uid=_str(ctx, meta.get("uid"), "metadata.uid", "") or "",
        labels=_str_map(ctx, meta.get("labels"), "metadata.labels"),
        annotations=_str_map(ctx, meta.get("annotations"), "metadata.annotations"),
        owner_references=_owner_references(
            ctx, meta.get("ownerReferences"), "metadata.ownerReferences"
        ),
        creation_timestamp=_time(ctx, meta.get("creationTimestamp"), "metadata.creationTimestamp"),
        deletion_timestamp=_time(ctx, meta.get("deletionTimestamp"), "metadata.deletionTimestamp"),
        scheduler_name=_str(ctx, spec.get("schedulerName"), "spec.schedulerName")
        or "default-scheduler",
        node_name=_nonempty_str(ctx, spec.get("nodeName"), "spec.nodeName"),
        priority=None if priority is None else _int(ctx, priority, "spec.priority"),
        priority_class_name=_nonempty_str(
            ctx, spec.get("priorityClassName"), "spec.priorityClassName"
        ),
        node_selector=_str_map(ctx, spec.get("nodeSelector"), "spec.nodeSelector"),
        required_node_affinity=required,
        preferred_node_affinity=tuple(preferred),
        tolerations=tuple(tolerations),
        requests=requests,
        limits=limits,
        phase=_str(ctx, status.get("phase"), "status.phase") or "Pending",
        conditions=_conditions(ctx, status.get("conditions"), "status.conditions"),
        condition_times=_condition_times(ctx, status.get("conditions"), "status.conditions"),
        nominated_node_name=_nonempty_str(
            ctx, status.get("nominatedNodeName"), "status.nominatedNodeName"
        ),
        start_time=_time(ctx, status.get("startTime"), "status.startTime"),
        scheduling_gates=_scheduling_gates(ctx, spec.get("schedulingGates")),
        source=ctx.source(),
    )


def _scheduling_gates(ctx: _Ctx, value: Any) -> tuple[str, ...]:
    field = "spec.schedulingGates"
    out = []
    for i, gate in enumerate(_list(ctx, value, field)):
        f = f"{field}[{i}]"
        out.append(_str(ctx, _map(ctx, gate, f).get("name"), f + ".name") or "")
    return tuple(out)


def _parse_pod_group(ctx: _Ctx, obj: dict, meta: dict, name: str, namespace: str) -> PodGroupObject:
    spec = _map(ctx, obj.get("spec"), "spec")
    annotations = _str_map(ctx, meta.get("annotations"), "metadata.annotations")
    min_member = spec.get("minMember")
    if min_member is not None:
        min_member = _int(ctx, min_member, "spec.minMember")
        if min_member < 0:
            raise ctx.error(f"minMember must be >= 0, got {min_member}", "spec.minMember")

    def ann_time(key: str) -> datetime | None:
        return _time(ctx, annotations.get(key), f"metadata.annotations[{key}]")

    return PodGroupObject(
        name=name,
        namespace=namespace,
        uid=_str(ctx, meta.get("uid"), "metadata.uid", "") or "",
        labels=_str_map(ctx, meta.get("labels"), "metadata.labels"),
        annotations=annotations,
        owner_references=_owner_references(
            ctx, meta.get("ownerReferences"), "metadata.ownerReferences"
        ),
        creation_timestamp=_time(ctx, meta.get("creationTimestamp"), "metadata.creationTimestamp"),
        min_member=min_member,
        queue=_nonempty_str(ctx, spec.get("queue"), "spec.queue"),
        priority_class_name=_nonempty_str(
            ctx, spec.get("priorityClassName"), "spec.priorityClassName"
        ),
        preemptibility=_nonempty_str(ctx, spec.get("preemptibility"), "spec.preemptibility"),
        staleness_grace_period=_duration(
            ctx, spec.get("stalenessGracePeriod"), "spec.stalenessGracePeriod", allow_negative=True
        ),
        preemption_delay=_duration(
            ctx, spec.get("preemptionDelay"), "spec.preemptionDelay", allow_negative=False
        ),
        last_start_timestamp=ann_time(ANNOTATION_LAST_START),
        stale_timestamp=ann_time(ANNOTATION_STALE),
        last_eviction_timestamp=ann_time(ANNOTATION_LAST_EVICTION),
        source=ctx.source(),
    )


def _queue_resource(ctx: _Ctx, resource: str, value: Any, field: str) -> QueueResource:
    res = _map(ctx, value, field)
    scale = _MB if resource == "memory" else 1.0
    amounts = []
    for key in ("quota", "limit"):
        raw = res.get(key)
        if raw is None:
            amounts.append(0.0)
            continue
        v = _number(ctx, raw, f"{field}.{key}")
        if v == -1:
            amounts.append(-1.0)
        elif v < 0:
            raise ctx.error(
                f"{key} must be -1 (unlimited) or a non-negative number, got {raw!r}",
                f"{field}.{key}",
            )
        else:
            amounts.append(v * scale)
    raw = res.get("overQuotaWeight")
    weight = 0.0
    if raw is not None:
        weight = _number(ctx, raw, f"{field}.overQuotaWeight")
        if weight < 0:
            raise ctx.error(
                f"overQuotaWeight must be a non-negative number, got {raw!r}",
                f"{field}.overQuotaWeight",
            )
    return QueueResource(quota=amounts[0], limit=amounts[1], over_quota_weight=weight)


def _parse_queue(ctx: _Ctx, obj: dict, meta: dict, name: str) -> QueueObject:
    spec = _map(ctx, obj.get("spec"), "spec")
    resources_spec = _map(ctx, spec.get("resources"), "spec.resources")
    resources = {}
    for res in _QUEUE_RESOURCES:
        if resources_spec.get(res) is not None:
            resources[res] = _queue_resource(ctx, res, resources_spec[res], f"spec.resources.{res}")
    priority = spec.get("priority")
    return QueueObject(
        name=name,
        parent=_nonempty_str(ctx, spec.get("parentQueue"), "spec.parentQueue"),
        priority=100 if priority is None else _int(ctx, priority, "spec.priority"),
        display_name=_nonempty_str(ctx, spec.get("displayName"), "spec.displayName"),
        labels=_str_map(ctx, meta.get("labels"), "metadata.labels"),
        resources=resources,
        preempt_min_runtime=_duration(
            ctx, spec.get("preemptMinRuntime"), "spec.preemptMinRuntime", allow_negative=False
        ),
        reclaim_min_runtime=_duration(
            ctx, spec.get("reclaimMinRuntime"), "spec.reclaimMinRuntime", allow_negative=False
        ),
        creation_timestamp=_time(ctx, meta.get("creationTimestamp"), "metadata.creationTimestamp"),
        source=ctx.source(),
    )


def _parse_priority_class(ctx: _Ctx, obj: dict, meta: dict, name: str) -> PriorityClassObject:
    if obj.get("value") is None:
        raise ctx.error("PriorityClass needs a value", "value")
    return PriorityClassObject(
        name=name,
        value=_int(ctx, obj.get("value"), "value"),
        global_default=_bool(ctx, obj.get("globalDefault"), "globalDefault"),
        source=ctx.source(),
    )


def _usage_resources(ctx: _Ctx, value: Any, field: str) -> dict[str, float]:
    return _resource_list(ctx, _map(ctx, value, field).get("resources"), field + ".resources")


def _parse_node_metric(ctx: _Ctx, obj: dict, meta: dict, name: str) -> NodeMetricObject:
    spec = _map(ctx, obj.get("spec"), "spec")
    status = _map(ctx, obj.get("status"), "status")
    policy = _map(ctx, spec.get("metricCollectPolicy"), "spec.metricCollectPolicy")
    interval = policy.get("reportIntervalSeconds")
    report_interval = 60.0
    if interval is not None:
        f = "spec.metricCollectPolicy.reportIntervalSeconds"
        report_interval = _number(ctx, interval, f)
        if report_interval < 0:
            raise ctx.error(f"reportIntervalSeconds must not be negative, got {interval!r}", f)
    node_metric = _map(ctx, status.get("nodeMetric"), "status.nodeMetric")

    pods = []
    for i, pm in enumerate(_list(ctx, status.get("podsMetric"), "status.podsMetric")):
        f = f"status.podsMetric[{i}]"
        pm = _map(ctx, pm, f)
        pods.append(
            PodMetric(
                namespace=_str(ctx, pm.get("namespace"), f + ".namespace") or "default",
                name=_str(ctx, pm.get("name"), f + ".name", "") or "",
                usage=_usage_resources(ctx, pm.get("podUsage"), f + ".podUsage"),
                priority_class=_nonempty_str(ctx, pm.get("priority"), f + ".priority"),
            )
        )

    aggregated = []
    base = "status.nodeMetric.aggregatedNodeUsages"
    for i, agg in enumerate(_list(ctx, node_metric.get("aggregatedNodeUsages"), base)):
        f = f"{base}[{i}]"
        agg = _map(ctx, agg, f)
        usage = {}
        for pct, val in _map(ctx, agg.get("usage"), f + ".usage").items():
            pct = str(pct)
            usage[pct] = _usage_resources(ctx, val, _key_path(f + ".usage", pct))
        aggregated.append(
            AggregatedUsage(
                duration=_duration(ctx, agg.get("duration"), f + ".duration", allow_negative=False),
                usage=usage,
            )
        )

    return NodeMetricObject(
        name=name,
        update_time=_time(ctx, status.get("updateTime"), "status.updateTime"),
        node_usage=_usage_resources(
            ctx, node_metric.get("nodeUsage"), "status.nodeMetric.nodeUsage"
        ),
        system_usage=_usage_resources(
            ctx, node_metric.get("systemUsage"), "status.nodeMetric.systemUsage"
        ),
        pods_usage=pods,
        aggregated_usages=aggregated,
        report_interval_seconds=report_interval,
        has_node_metric=status.get("nodeMetric") is not None,
        source=ctx.source(),
    )


_CONFIG_KEYS = (
    "actions",
    "tiers",
    "queueDepthPerAction",
    "reclaimMinRuntime",
    "preemptMinRuntime",
    "scenarioSearchBudgets",
    "usageDBConfig",
    "kValue",
    "maxNumberConsolidationPreemptees",
)
_BUDGET_MAP_KEYS = ("maxActionSearchDuration", "maxGeneratorSearchDuration")
_BUDGET_KEYS = ("maxJobSearchDuration", "minJobSearchDuration", *_BUDGET_MAP_KEYS)


def _config_error(ctx: _Ctx, message: str, field: str | None = None) -> ConfigError:
    return ConfigError(message, file=ctx.file, document=ctx.document, obj=ctx.obj, field=field)


def _parse_config(ctx: _Ctx, body: dict) -> SchedulerConfigObject:
    if not any(k in body for k in _CONFIG_KEYS) and isinstance(body.get("spec"), dict):
        body = body["spec"]  # tolerate the settings nested under spec
        prefix = "spec."
    else:
        prefix = ""

    actions = None
    raw = body.get("actions")
    if raw is not None:
        f = prefix + "actions"
        if isinstance(raw, str):
            parts = raw.split(",")
        elif isinstance(raw, list):
            parts = []
            for i, a in enumerate(raw):
                if not isinstance(a, str):
                    raise _config_error(ctx, f"expected an action name, got {a!r}", f"{f}[{i}]")
                parts.append(a)
        else:
            raise _config_error(
                ctx, f"expected a comma-separated string or a list, got {_type_name(raw)}", f
            )
        actions = [p.strip() for p in parts if p.strip()]

    tiers = None
    raw = body.get("tiers")
    if raw is not None:
        f = prefix + "tiers"
        if not isinstance(raw, list):
            raise _config_error(ctx, f"expected a list of tiers, got {_type_name(raw)}", f)
        tiers = []
        for i, tier in enumerate(raw):
            tf = f"{f}[{i}]"
            if tier is None:
                tier = {}
            if not isinstance(tier, dict):
                raise _config_error(ctx, f"expected a map with plugins, got {_type_name(tier)}", tf)
            plugins_raw = tier.get("plugins")
            if plugins_raw is None:
                plugins_raw = []
            if not isinstance(plugins_raw, list):
                raise _config_error(
                    ctx,
                    f"expected a list of plugins, got {_type_name(plugins_raw)}",
                    tf + ".plugins",
                )
            plugins = []
            for j, p in enumerate(plugins_raw):
                pf = f"{tf}.plugins[{j}]"
                if isinstance(p, str):
                    p = {"name": p}
                if not isinstance(p, dict):
                    raise _config_error(ctx, f"expected a plugin map, got {_type_name(p)}", pf)
                pname = p.get("name")
                if not isinstance(pname, str) or not pname.strip():
                    raise _config_error(ctx, "plugin needs a name", pf + ".name")
                args = p.get("arguments")
                if args is None:
                    args = {}
                if not isinstance(args, dict):
                    raise _config_error(
                        ctx,
                        f"expected a map of arguments, got {_type_name(args)}",
                        pf + ".arguments",
                    )
                plugins.append(
                    PluginOption(name=pname.strip(), arguments={str(k): v for k, v in args.items()})
                )
            tiers.append(plugins)

    def config_int(value: Any, field: str) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise _config_error(ctx, f"expected an integer, got {value!r}", field)
        try:
            return _int(ctx, value, field)
        except InputError as exc:
            raise _config_error(ctx, exc.message, field) from None

    depth: dict[str, int] = {}
    raw = body.get("queueDepthPerAction")
    if raw is not None:
        f = prefix + "queueDepthPerAction"
        if not isinstance(raw, dict):
            raise _config_error(
                ctx, f"expected a map of action to integer, got {_type_name(raw)}", f
            )
        for k, v in raw.items():
            kf = _key_path(f, str(k))
            n = config_int(v, kf)
            if n < 0:
                raise _config_error(ctx, f"queue depth must not be negative, got {n}", kf)
            depth[str(k)] = n

    def duration(key: str) -> float | None:
        try:
            return _duration(ctx, body.get(key), prefix + key, allow_negative=False)
        except InputError as exc:
            raise _config_error(ctx, exc.message, exc.field) from None

    preemptees = None
    raw = body.get("maxNumberConsolidationPreemptees")
    if raw is not None:
        f = prefix + "maxNumberConsolidationPreemptees"
        preemptees = config_int(raw, f)
        if preemptees < -1:
            raise _config_error(
                ctx, f"expected -1 (no limit), 0 (no consolidation) or more, got {preemptees}", f
            )

    return SchedulerConfigObject(
        actions=actions,
        tiers=tiers,
        queue_depth_per_action=depth,
        reclaim_min_runtime=duration("reclaimMinRuntime"),
        preempt_min_runtime=duration("preemptMinRuntime"),
        scenario_search_budgets=_parse_search_budgets(ctx, body, prefix),
        usage_db=body.get("usageDBConfig"),
        k_value=body.get("kValue"),
        max_consolidation_preemptees=preemptees,
        source=ctx.source(),
    )


def _parse_search_budgets(ctx: _Ctx, body: dict, prefix: str) -> dict | None:
    """``scenarioSearchBudgets``: durations in seconds, maps keyed by action/generator."""
    raw = body.get("scenarioSearchBudgets")
    if raw is None:
        return None
    f = prefix + "scenarioSearchBudgets"
    if not isinstance(raw, dict):
        raise _config_error(ctx, f"expected a map, got {_type_name(raw)}", f)

    def seconds(value: object, field: str) -> float:
        try:
            return _duration(ctx, value, field, allow_negative=False) or 0.0
        except InputError as exc:
            raise _config_error(ctx, exc.message, exc.field) from None

    out: dict = {}
    for key, value in raw.items():
        kf = _key_path(f, str(key))
        if key not in _BUDGET_KEYS:
            raise _config_error(ctx, f"unknown key (expected one of {', '.join(_BUDGET_KEYS)})", kf)
        if key in _BUDGET_MAP_KEYS:
            if not isinstance(value, dict):
                raise _config_error(ctx, f"expected a map, got {_type_name(value)}", kf)
            out[key] = {str(k): seconds(v, _key_path(kf, str(k))) for k, v in value.items()}
        else:
            out[key] = seconds(value, kf)
    return out


def _parse_generic(
    ctx: _Ctx, obj: dict, meta: dict, api_version: str, kind: str, name: str
) -> GenericObject:
    ns = meta.get("namespace")
    return GenericObject(
        api_version=api_version,
        kind=kind,
        name=name,
        namespace=_nonempty_str(ctx, ns, "metadata.namespace"),
        uid=_str(ctx, meta.get("uid"), "metadata.uid", "") or "",
        labels=_str_map(ctx, meta.get("labels"), "metadata.labels"),
        owner_references=_owner_references(
            ctx, meta.get("ownerReferences"), "metadata.ownerReferences"
        ),
    )


# --------------------------------------------------------------------------- builder

# kind -> (accepted API groups, any version; "" is the core group, v1 only), namespaced
_KNOWN_KINDS: dict[str, tuple[tuple[str, ...], bool]] = {
    "Node": (("",), False),
    "Pod": (("",), True),
    "PodGroup": (API_GROUPS_KAI, True),
    "Queue": (API_GROUPS_KAI, False),
    "PriorityClass": (("scheduling.k8s.io",), False),
    "NodeMetric": (("slo.koordinator.sh",), False),
}


class _Builder:
    """Accumulates objects from any number of documents and files."""

    def __init__(self) -> None:
        self.out = ClusterObjects()
        # (kind key, namespace, name) -> (file, document)
        self._seen: dict[tuple, tuple[str, int | None]] = {}
        self._config_ctx: _Ctx | None = None
        # Pods of one workload ask for the same resources: they share one requests map
        # (objects are read-only), which lets a session convert it to a vector once.
        self._requests: dict[tuple, dict[str, float]] = {}
        # What kai._fast.convert parses once per load (timestamps, quantities).
        self._fast_cache: Any = None
        self._compiled = _fast.module("convert")

    # -- documents

    def add_document(self, doc: Any, file: str, index: int) -> None:
        if doc is None:
            return
        if not isinstance(doc, dict):
            raise InputError(
                f"document is not a Kubernetes object (expected a map with apiVersion and "
                f"kind, got {_type_name(doc)})",
                file=file,
                document=index,
            )
        compiled = self._compiled
        if compiled is None or not compiled.add(self, doc, file, index):
            self._add(doc, file, index, None, None)

    def _add(
        self,
        obj: dict,
        file: str,
        index: int,
        item: str | None,
        inherited: tuple[str, str] | None,
    ) -> None:
        api_version = obj.get("apiVersion")
        kind = obj.get("kind")
        if inherited is not None:
            # Items of a typed list (PodList) may omit apiVersion and kind.
            if api_version is None:
                api_version = inherited[0]
            if kind is None:
                kind = inherited[1]
        where = item
        if not isinstance(api_version, str) or not api_version:
            raise InputError(
                "not a Kubernetes object: missing apiVersion"
                if api_version is None or api_version == ""
                else f"apiVersion must be a string, got {api_version!r}",
                file=file,
                document=index,
                obj=self._label(kind, obj, where),
                field="apiVersion",
            )
        if not isinstance(kind, str) or not kind:
            raise InputError(
                "not a Kubernetes object: missing kind"
                if kind is None or kind == ""
                else f"kind must be a string, got {kind!r}",
                file=file,
                document=index,
                obj=where,
                field="kind",
            )

        if kind == "List" or (kind.endswith("List") and isinstance(obj.get("items"), list)):
            self._add_list(obj, file, index, item, api_version, kind)
            return

        group, _, _version = api_version.rpartition("/")
        if kind == "SchedulerConfiguration" and group == "kai.scheduler":
            self._add_config(obj, file, index, item)
            return
        known = _KNOWN_KINDS.get(kind)
        if known is not None and (group not in known[0] or (not group and api_version != "v1")):
            known = None

        meta = obj.get("metadata")
        if known is None:
            if not isinstance(meta, dict):
                return  # unknown kind without metadata: not ours
            name = _scalar_str(meta.get("name"))
            if not name:
                return
            ns = _scalar_str(meta.get("namespace"))
            ctx = _Ctx(file, index, f"{kind} {ns}/{name}" if ns else f"{kind} {name}")
            generic = _parse_generic(ctx, obj, meta, api_version, kind, name)
            self._check_duplicate(ctx, (group, kind), generic.namespace, name)
            self.out.others.append(generic)
            return

        namespaced = known[1]
        ctx = _Ctx(file, index, self._label(kind, obj, where))
        if meta is None:
            raise ctx.error(f"{kind} needs metadata with a name", "metadata")
        if not isinstance(meta, dict):
            raise ctx.error(f"expected a map, got {_type_name(meta)}", "metadata")
        name = _scalar_str(meta.get("name"))
        if not name:
            raise ctx.error(f"{kind} needs a name", "metadata.name")
        if namespaced:
            namespace = _scalar_str(meta.get("namespace")) or "default"
            ctx.obj = f"{kind} {namespace}/{name}"
        else:
            namespace = None
            ctx.obj = f"{kind} {name}"
        self._check_duplicate(ctx, kind, namespace, name)

        out = self.out
        if kind == "Pod":
            assert namespace is not None  # Pod and PodGroup are namespaced kinds
            pod = _parse_pod(ctx, obj, meta, name, namespace)
            pod.requests = self._requests.setdefault(tuple(pod.requests.items()), pod.requests)
            out.pods.append(pod)
        elif kind == "Node":
            out.nodes.append(_parse_node(ctx, obj, meta, name))
        elif kind == "PodGroup":
            assert namespace is not None
            out.pod_groups.append(_parse_pod_group(ctx, obj, meta, name, namespace))
        elif kind == "Queue":
            out.queues.append(_parse_queue(ctx, obj, meta, name))
        elif kind == "PriorityClass":
            out.priority_classes.append(_parse_priority_class(ctx, obj, meta, name))
        elif kind == "NodeMetric":
            out.node_metrics.append(_parse_node_metric(ctx, obj, meta, name))

    def _add_list(
        self, obj: dict, file: str, index: int, item: str | None, api_version: str, kind: str
    ) -> None:
        items = obj.get("items")
        if items is None:
            return
        prefix = f"{item}." if item else ""
        if not isinstance(items, list):
            raise InputError(
                f"expected a list of objects, got {_type_name(items)}",
                file=file,
                document=index,
                obj=item,
                field=prefix + "items",
            )
        inherited = None
        if kind != "List":
            inherited = (api_version, kind[: -len("List")])
        if self._compiled is not None:
            # Usual pods and pod groups converted in C; every other item through _add.
            self._compiled.add_items(self, items, file, index, prefix, inherited)
            return
        for i, it in enumerate(items):
            if it is not None:
                self._add_item(it, file, index, f"{prefix}items[{i}]", inherited)

    def _add_item(
        self, it: Any, file: str, index: int, where: str, inherited: tuple[str, str] | None
    ) -> None:
        if not isinstance(it, dict):
            raise InputError(
                f"list item is not a Kubernetes object (expected a map, got {_type_name(it)})",
                file=file,
                document=index,
                obj=where,
            )
        self._add(it, file, index, where, inherited)

    @staticmethod
    def _label(kind: Any, obj: dict, where: str | None) -> str | None:
        """Best-effort object label before the name is validated."""
        kind_s = kind if isinstance(kind, str) and kind else None
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            meta = {}
        name = _scalar_str(meta.get("name"))
        if kind_s and name:
            ns = _scalar_str(meta.get("namespace"))
            return f"{kind_s} {ns}/{name}" if ns else f"{kind_s} {name}"
        if kind_s:
            return f"{kind_s} at {where}" if where else kind_s
        return where

    def _check_duplicate(self, ctx: _Ctx, kind_key: Any, namespace: str | None, name: str) -> None:
        key = (kind_key, namespace, name)
        previous = self._seen.get(key)
        if previous is not None:
            raise ctx.error(
                f"duplicate {ctx.obj}: also defined in {previous[0]}, document {previous[1]}"
            )
        self._seen[key] = (ctx.file, ctx.document)

    def _add_config(self, obj: dict, file: str, index: int, item: str | None) -> None:
        meta = obj.get("metadata")
        name = _scalar_str(meta.get("name")) if isinstance(meta, dict) else None
        label = f"SchedulerConfiguration {name}" if name else "SchedulerConfiguration"
        if item and not name:
            label += f" at {item}"
        ctx = _Ctx(file, index, label)
        if self._config_ctx is not None:
            prev = self._config_ctx
            raise ctx.error(
                f"more than one SchedulerConfiguration: the first is in {prev.file}, "
                f"document {prev.document}"
            )
        self._config_ctx = ctx
        self.out.config = _parse_config(ctx, obj)

    # -- whole-snapshot checks

    def finish(self) -> ClusterObjects:
        self._check_queues()
        return self.out

    def _check_queues(self) -> None:
        queues = {q.name: q for q in self.out.queues}
        for q in self.out.queues:
            if q.parent is not None and q.parent not in queues:
                raise self._queue_error(
                    q, f"parent queue {q.parent!r} does not exist", "spec.parentQueue"
                )
        done: set[str] = set()
        for q in self.out.queues:
            if q.name in done:
                continue
            path: list[str] = []
            on_path: dict[str, int] = {}
            cur: str | None = q.name
            while cur is not None and cur not in done:
                if cur in on_path:
                    cycle = path[on_path[cur] :]
                    text = " -> ".join([*cycle, cycle[0]])
                    first = queues[min(cycle)]
                    raise self._queue_error(
                        first,
                        f"the queue tree has a cycle: {text} (queues {', '.join(sorted(cycle))})",
                        "spec.parentQueue",
                    )
                on_path[cur] = len(path)
                path.append(cur)
                cur = queues[cur].parent
            done.update(path)

    @staticmethod
    def _queue_error(q: QueueObject, message: str, field: str) -> InputError:
        src = q.source
        return InputError(
            message,
            file=src.file if src else None,
            document=src.document if src else None,
            obj=f"Queue {q.name}",
            field=field,
        )


# --------------------------------------------------------------------------- reading


def _yaml_error_message(exc: Exception) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    text = f"YAML does not parse: {problem}"
    if context:
        text += f" ({context})"
    if mark is not None:
        text = f"line {mark.line + 1}, column {mark.column + 1}: {text}"
    return text


_TAG_STR = "tag:yaml.org,2002:str"
_TAG_MAP = "tag:yaml.org,2002:map"
_TAG_SEQ = "tag:yaml.org,2002:seq"


def _yaml_documents(text: str) -> Iterator[Any]:
    """``yaml.safe_load_all`` with a faster constructor for the common case.

    Plain maps, lists and strings are built directly from the composed nodes; anything
    else (numbers, booleans, timestamps, merge keys, ...) goes through PyYAML's own
    safe constructor, so the result is the same as ``yaml.safe_load_all``.
    """
    import yaml  # here: a JSON snapshot never pays for importing PyYAML

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    construct_object = loader.construct_object
    mapping_node = yaml.MappingNode
    sequence_node = yaml.SequenceNode
    memo: dict[int, Any] = {}  # aliases share nodes: build each collection once
    building: set[int] = set()

    def build(node: Any) -> Any:
        tag = node.tag
        if tag == _TAG_STR:
            return node.value
        cls = node.__class__
        if cls is mapping_node and tag == _TAG_MAP:
            key = id(node)
            done = memo.get(key, memo)
            if done is not memo:
                return done
            if key in building:
                raise ValueError("recursive YAML alias is not supported")
            building.add(key)
            result: Any = {}
            for k, v in node.value:
                if k.tag != _TAG_STR:  # merge key "<<" or a non-string key
                    result = construct_object(node, deep=True)
                    break
                result[k.value] = build(v)
            building.discard(key)
            memo[key] = result
            return result
        if cls is sequence_node and tag == _TAG_SEQ:
            key = id(node)
            done = memo.get(key, memo)
            if done is not memo:
                return done
            if key in building:
                raise ValueError("recursive YAML alias is not supported")
            building.add(key)
            result = [build(x) for x in node.value]
            building.discard(key)
            memo[key] = result
            return result
        return construct_object(node, deep=True)

    try:
        while loader.check_node():
            node = loader.get_node()
            doc = None if node is None else build(node)
            memo.clear()
            loader.constructed_objects.clear()
            loader.recursive_objects.clear()
            yield doc
    finally:
        loader.dispose()


def _json_loads(text: str) -> Any:
    """``json.loads``, by orjson where it reads the text (orjson refuses what JSON does
    not allow and ``json`` accepts, such as NaN or integers beyond 64 bits: those are
    read by ``json``, so the result is always ``json.loads``'s)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def _iter_documents(data: str | bytes, file: str) -> Iterator[tuple[int, Any]]:
    """Yield (document index, parsed document) of a YAML or JSON text, or of a file's
    bytes (see :func:`_read`)."""
    if isinstance(data, bytes):
        start = _LEADING_SPACE.match(data).end()  # type: ignore[union-attr]
        if data[start : start + 1] in (b"{", b"["):
            # orjson reads UTF-8 bytes without the text made first.
            try:
                doc = orjson.loads(data)
            except orjson.JSONDecodeError:
                pass  # read as text below: json's reading, or YAML's, and their errors
            else:
                yield 0, doc
                return
        data = _decode(data, file)
    text = data
    head = text.lstrip()[:1]
    if head in ("{", "["):
        try:
            doc = _json_loads(text)
        except ValueError:
            pass  # not plain JSON: let the YAML parser read it (and report errors)
        else:
            yield 0, doc
            return
    import yaml

    index = 0
    try:
        for doc in _yaml_documents(text):
            yield index, doc
            index += 1
    except yaml.YAMLError as exc:
        raise InputError(_yaml_error_message(exc), file=file, document=index) from None
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        # e.g. PyYAML building an impossible timestamp such as 2024-13-01
        raise InputError(f"YAML does not parse: {exc}", file=file, document=index) from None


#: JSON's white space, before a document's first character.
_LEADING_SPACE = re.compile(rb"[ \t\r\n]*")


def _read(path: str) -> tuple[str | bytes, str]:
    """A file's content and its name for messages: the bytes, without a UTF-8 byte
    order mark (:func:`_iter_documents` decodes them unless they are JSON); stdin as
    text."""
    if path == "-":
        return sys.stdin.read(), "<stdin>"
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise InputError(f"cannot read file: {exc.strerror or exc}", file=path) from None
    return data.removeprefix(codecs.BOM_UTF8), path


def _decode(data: bytes, file: str) -> str:
    """A file's bytes as UTF-8 text."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"cannot read file: {exc}", file=file) from None


def _expand(paths: Sequence[str]) -> list[str]:
    out: list[str] = []
    for p in paths:
        if p != "-" and os.path.isdir(p):
            try:
                names = sorted(os.listdir(p))
            except OSError as exc:
                raise InputError(f"cannot read directory: {exc.strerror}", file=p) from None
            out.extend(
                os.path.join(p, n) for n in names if n.lower().endswith(_MANIFEST_EXTENSIONS)
            )
        else:
            out.append(p)
    return out


def load_files(paths: Sequence[str]) -> ClusterObjects:
    """Load YAML/JSON manifest files (``-`` is stdin; a directory means its *.yaml, *.yml
    and *.json files) into one :class:`ClusterObjects`.

    Raises :class:`InputError` for any problem in the input.
    """
    if isinstance(paths, str):
        paths = [paths]
    builder = _Builder()
    with gc_paused(promote=True):
        for path in _expand(paths):
            text, file = _read(path)
            for index, doc in _iter_documents(text, file):
                builder.add_document(doc, file, index)
            del text
        return builder.finish()


def load_text(text: str, file: str = "<string>") -> ClusterObjects:
    """Load manifests from a YAML or JSON string; ``file`` names it in error messages."""
    builder = _Builder()
    with gc_paused(promote=True):
        for index, doc in _iter_documents(text, file):
            builder.add_document(doc, file, index)
        return builder.finish()


def load_objects(objs: Iterable[dict], file: str = "<python>") -> ClusterObjects:
    """Load manifests given as Python dicts (as yaml/json produce them).

    The document index in error messages is the position in ``objs``.
    """
    if isinstance(objs, dict):
        objs = [objs]
    builder = _Builder()
    with gc_paused(promote=True):
        for index, doc in enumerate(objs):
            builder.add_document(doc, file, index)
        return builder.finish()


#: How many parsed timestamps and quantities convert_object keeps between calls.
LIVE_CACHE_ENTRIES = 50_000
_live_caches = threading.local()


def convert_object(obj: dict, file: str = "<api>") -> Any:
    """Convert one Kubernetes object dict into its typed object, or None when kai ignores
    it (the live cache converts objects one at a time and keeps the results).

    A List is not accepted.  Whole-snapshot checks (duplicates, the queue tree) are the
    caller's.  Raises :class:`InputError` like :func:`load_objects`.
    """
    builder = _Builder()
    if builder._compiled is not None:
        # One object per call: the parse cache (timestamps, quantities) is kept from call
        # to call, as a load keeps it for its documents, and started again when large.
        # One per thread and file: a cache also remembers the document it is at (and
        # goes with its thread).
        caches = getattr(_live_caches, "by_file", None)
        if caches is None:
            caches = _live_caches.by_file = {}
        cache = caches.get(file)
        if cache is None or len(cache) > LIVE_CACHE_ENTRIES:
            cache = caches[file] = builder._compiled.new_cache()
        builder._fast_cache = cache
    builder.add_document(obj, file, 0)
    out = builder.out
    for found in (
        out.pods,
        out.nodes,
        out.pod_groups,
        out.queues,
        out.priority_classes,
        out.node_metrics,
        out.others,
    ):
        if found:
            return found[0]
    return out.config


def load_config_file(path: str) -> SchedulerConfigObject:
    """Load a scheduler configuration file (``--config FILE``).

    The file holds either a ``SchedulerConfiguration`` object (``apiVersion:
    kai.scheduler/v1``) or a bare mapping in the format of KAI's own configuration file
    (``actions``, ``tiers``, ``queueDepthPerAction``, ...).  An empty file gives a
    configuration with every field left to KAI's defaults.
    """
    text, file = _read(path)
    docs = [(i, d) for i, d in _iter_documents(text, file) if d is not None]
    if not docs:
        return SchedulerConfigObject(source=Source(file, 0))
    if len(docs) > 1:
        raise ConfigError(
            f"expected one configuration document, found {len(docs)}",
            file=file,
            document=docs[1][0],
        )
    index, doc = docs[0]
    if not isinstance(doc, dict):
        raise ConfigError(
            f"configuration must be a map, got {_type_name(doc)}", file=file, document=index
        )
    if "kind" not in doc and "apiVersion" not in doc:
        return _parse_config(_Ctx(file, index, None), doc)
    builder = _Builder()
    builder.add_document(doc, file, index)
    if builder.out.config is None:
        raise ConfigError(
            f"expected a SchedulerConfiguration (apiVersion kai.scheduler/v1) or a bare "
            f"configuration map, got kind {doc.get('kind')!r} "
            f"apiVersion {doc.get('apiVersion')!r}",
            file=file,
            document=index,
        )
    return builder.out.config
