"""``loadaware``: Koordinator's LoadAwareScheduling as a kai plugin.

Filters out nodes whose NodeMetric expired or whose estimated usage, if the pod were
placed there, exceeds the usage thresholds, and prefers the least used nodes.  The
arguments are Koordinator's ``LoadAwareSchedulingArgs`` (JSON names, defaults and
validation; see :mod:`kai.plugins.loadaware_estimator` and ``docs/loadaware.md``) plus
``scoreWeight``, the factor applied to Koordinator's 0..100 integer score before it is
added to kai's other node scores.

The per-node cache mirrors Koordinator's ``podAssignCache``: every pod on a node
(including the pods placed earlier in this session, kept up to date by the session's
allocate/deallocate events) contributes its estimate to ``nodeDelta``,
``nodeEstimated`` and the prod vectors, so later pods see earlier ones.  The filter and
the score of one pod against all nodes are each one kernel call of the backend
(``loadaware_filter``, ``loadaware_score``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import numpy as np

from kai._dataclasses import dataclass
from kai.api.model import Job, Task, TaskStatus
from kai.api.objects import NodeMetricObject
from kai.framework import Plugin, Session, register_plugin
from kai.framework.kernel import KernelScore, ScoreKind
from kai.framework.session import EventHandler
from kai.plugins.loadaware_estimator import (
    ANN_CUSTOM_THRESHOLDS,
    ANN_SCALING_FACTORS,
    ARGUMENTS,
    PRIORITY_PROD,
    LoadAwareArgs,
    estimate_deadline,
    estimate_pod,
    is_daemonset_pod,
    koord_priority_class,
    node_allocatable,
    parse_args,
    pod_timestamp,
    resource_vec,
    threshold_profile,
)

# Filter states (see kai.backends._common LA_*).
_CHECK, _PASS, _EXPIRED = 0, 1, 2

# Where a node's existing usage comes from, per profile (see _existing); the fused
# allocate loop's row kinds (native/include/kai/allocate.hpp kRow*) use the same codes.
ROW_USAGE, ROW_AGGREGATED, ROW_ESTIMATED, ROW_PROD = 0, 1, 2, 3

# LoadAwareKernel.task_flags bits (allocate.hpp kProdPod, kNoFilter, kProdScore).
FLAG_PROD_POD, FLAG_NO_FILTER, FLAG_PROD_SCORE = 1, 2, 4

# Threshold kinds of a node for one pod, in reason-table order.
_KIND_USAGE, _KIND_PROD, _KIND_AGG = 0, 1, 2
_KIND_ARG = ("usageThresholds", "prodUsageThresholds", "aggregated.usageThresholds")
_KIND_ANN = ("usageThresholds", "prodUsageThresholds", "aggregatedUsage.usageThresholds")

_COUNTED = frozenset(
    {
        TaskStatus.ALLOCATED,
        TaskStatus.PIPELINED,
        TaskStatus.BINDING,
        TaskStatus.BOUND,
        TaskStatus.RUNNING,
    }
)


def _counted_node(task: Task) -> int:
    """The node whose cache holds ``task`` (-1: none), like koordinator's pod informer."""
    if task.node < 0:
        return -1
    if task.status in _COUNTED:
        return task.node
    if task.status is TaskStatus.RELEASING and not task.virtually_evicted:
        return task.node  # terminating but not yet gone: still in koordinator's cache
    return -1


@dataclass(eq=False)  # arrays: compared by identity
class _PodEntry:
    """A pod's node and the usage vectors load-aware scoring charges for it."""

    node: int
    prod_usage: np.ndarray | None
    node_delta: np.ndarray | None
    node_estimated: np.ndarray | None
    prod_delta: np.ndarray | None


def _agg_index(metric: NodeMetricObject, resources: tuple[str, ...]) -> dict:
    """``aggUsages``: (type, duration) -> vector; duration 0 is the longest recorded."""
    out: dict[tuple[str, float], np.ndarray] = {}
    longest: dict[str, float] = {}
    for agg in metric.aggregated_usages:
        d = agg.duration or 0.0
        for kind, usage in agg.usage.items():
            if not usage:
                continue
            out[(kind, d)] = resource_vec(resources, usage)
            if d > longest.get(kind, 0.0):
                longest[kind] = d
    for kind, d in longest.items():
        out[(kind, 0.0)] = out[(kind, d)]
    return out


@dataclass(frozen=True, eq=False)  # arrays: compared by identity
class LoadAwareKernel:
    """The plugin's kernel form: what the fused allocate loop needs to filter and score
    the pending ``tasks`` itself and to follow the node cache as it places them.

    Profiles 0 and 1 are the filter's for a pod (any, koord-prod), 2 and 3 the score's
    (any, prod usage).  A pod placed on a ``counted`` node adds to each profile row the
    delta its ``row_delta`` kind takes: ``max(estimate, 0)`` for ROW_USAGE and
    ROW_AGGREGATED, the estimate for ROW_ESTIMATED and, for a koord-prod pod only, for
    ROW_PROD (the contributions :meth:`LoadAwarePlugin._entry` makes for a pod without
    reported usage, the only pods given to the loop).
    """

    allocatable: np.ndarray  # [N, R] int64
    existing: np.ndarray  # [4, N, R] int64: existing usage per profile
    row_delta: np.ndarray  # [4, N] int64: ROW_* per profile row
    thresholds: np.ndarray  # [2, N, R] int64
    state: np.ndarray  # [2, N] int64: filter state (check, pass, expired)
    reason_slot: np.ndarray  # [2, N] int64: reason of the node's first resource
    reasons: list[str]  # the filter's reasons; the last is the expired metric's
    valid: np.ndarray  # [N] bool: nodes scored
    weights: np.ndarray  # [R] int64
    dominant_weight: int
    counted: np.ndarray  # [N] bool: nodes whose cache counts pods
    estimates: np.ndarray  # [T, R] int64, one row per task
    task_flags: np.ndarray  # [T] int64: FLAG_* bits


def _row_kinds(prod: np.ndarray, agg: np.ndarray, agg_found: np.ndarray) -> np.ndarray:
    """Per node, where its existing usage comes from (ROW_*) for one profile."""
    kinds = np.full(len(prod), ROW_USAGE, dtype=np.int64)
    kinds[agg & agg_found] = ROW_AGGREGATED
    kinds[agg & ~agg_found] = ROW_ESTIMATED
    kinds[prod] = ROW_PROD
    return kinds


class LoadAwarePlugin(Plugin):
    """Koordinator LoadAwareScheduling: filter and score nodes by their real usage."""

    name = "loadaware"
    arguments = ARGUMENTS
    native_allocate = True  # see kernel_form

    def __init__(self, args: Mapping[str, Any] | None = None) -> None:
        super().__init__(args)
        self.la: LoadAwareArgs = parse_args(self.args)

    # ----------------------------------------------------------------- session
    def on_session_open(self, ssn: Session) -> None:
        la = self.la
        res = la.resources
        r = len(res)
        nodes = ssn.nodes
        n = len(nodes)
        now = ssn.now
        metrics = ssn.state.node_metrics
        zeros = lambda: np.zeros((n, r), dtype=np.int64)  # noqa: E731

        self.ssn = ssn
        self.allocatable = zeros()
        self.has_metric = np.zeros(n, dtype=np.bool_)
        self.has_status = np.zeros(n, dtype=np.bool_)  # status.nodeMetric present
        self.expired = np.zeros(n, dtype=np.bool_)
        self.node_usage = zeros()
        self.prod_usage = zeros()
        self.node_delta = zeros()
        self.prod_delta = zeros()
        self.node_estimated = zeros()
        self.update_time: list[datetime | None] = [None] * n
        self.report_interval = np.full(n, 60.0)
        self.pod_usage: list[dict[str, np.ndarray]] = [{} for _ in range(n)]
        self.prod_pods: list[set[str]] = [set() for _ in range(n)]

        # threshold profiles
        self.thr = {k: zeros() for k in (_KIND_USAGE, _KIND_PROD, _KIND_AGG)}
        self.prod_enabled = np.zeros(n, dtype=np.bool_)
        self.agg_enabled = np.zeros(n, dtype=np.bool_)
        self.custom = {k: np.zeros(n, dtype=np.bool_) for k in (_KIND_USAGE, _KIND_PROD, _KIND_AGG)}
        self.filter_agg = zeros()
        self.filter_agg_found = np.zeros(n, dtype=np.bool_)
        self.score_agg = zeros()
        self.score_agg_found = np.zeros(n, dtype=np.bool_)
        aggregated = la.aggregated
        score_agg = aggregated.score_aggregation_type if aggregated else ""

        expiration = la.node_metric_expiration_seconds
        for i, node in enumerate(nodes.objects):
            self.allocatable[i] = resource_vec(res, node_allocatable(node))
            profile = threshold_profile(la, node)
            self.thr[_KIND_USAGE][i] = la.vec(profile.usage)
            self.thr[_KIND_PROD][i] = la.vec(profile.prod)
            self.prod_enabled[i] = bool(profile.prod)
            self.custom[_KIND_USAGE][i] = profile.custom_usage
            self.custom[_KIND_PROD][i] = profile.custom_prod
            if profile.agg is not None:
                self.agg_enabled[i] = True
                self.thr[_KIND_AGG][i] = la.vec(profile.agg)
                self.custom[_KIND_AGG][i] = profile.custom_agg
            metric = metrics.get(node.name)
            if metric is None:
                continue
            self.has_metric[i] = True
            self.has_status[i] = metric.has_node_metric
            u = metric.update_time
            self.update_time[i] = u
            self.expired[i] = u is None or (now - u).total_seconds() >= expiration
            self.report_interval[i] = metric.report_interval_seconds
            if la.prod_usage_include_sys and metric.has_node_metric:
                self.prod_usage[i] += resource_vec(res, metric.system_usage)
            self.node_usage[i] = resource_vec(res, metric.node_usage)
            for pm in metric.pods_usage:
                if not pm.usage:
                    continue
                key = f"{pm.namespace}/{pm.name}"
                self.pod_usage[i][key] = resource_vec(res, pm.usage)
                if pm.priority_class == PRIORITY_PROD:
                    self.prod_pods[i].add(key)
            if metric.has_node_metric:
                aggs = _agg_index(metric, res)
                if profile.agg is not None:
                    vec = self._target_agg(aggs, profile.agg_type, profile.agg_duration, i)
                    if vec is not None:
                        self.filter_agg[i] = vec
                        self.filter_agg_found[i] = True
                if score_agg and aggregated is not None:
                    vec = self._target_agg(aggs, score_agg, aggregated.score_aggregated_duration, i)
                    if vec is not None:
                        self.score_agg[i] = vec
                        self.score_agg_found[i] = True

        self.weights = la.vec(la.resource_weights)
        self.reasons = self._reason_table()
        self._filter_profiles: dict[bool, tuple[np.ndarray, ...]] = {}
        self._score_profiles: dict[bool, tuple[np.ndarray, ...]] = {}
        self.entries: dict[Task, _PodEntry] = {}
        self._estimates: dict[Task, np.ndarray] = {}
        self._estimates_by_shape: dict[tuple, np.ndarray] = {}
        self._reported = frozenset(key for usage in self.pod_usage for key in usage)
        for task in ssn.state.tasks + ssn.state.foreign_tasks:
            self._sync(task)

        ssn.add_event_handler(
            EventHandler(self._on_event, self._on_event, self._on_events, self._on_events)
        )
        ssn.add_batch_predicate_fn("loadaware", self._filter)
        ssn.add_batch_node_order_fn(self._score)

    def _target_agg(self, aggs: dict, kind: str, duration: float, i: int) -> np.ndarray | None:
        vec = aggs.get((kind, duration))
        if vec is None and duration == 0:
            vec = self.node_usage[i]
        return vec

    def _reason_table(self) -> list[str]:
        reasons = []
        for custom in (False, True):
            for kind in (_KIND_USAGE, _KIND_PROD, _KIND_AGG):
                what = "aggregated usage" if kind == _KIND_AGG else "usage"
                if custom:
                    source = f"node annotation {ANN_CUSTOM_THRESHOLDS} {_KIND_ANN[kind]}"
                else:
                    source = f"loadaware {_KIND_ARG[kind]}"
                for name in self.la.resources:
                    reasons.append(f"node(s) {name} {what} exceed threshold ({source})")
        reasons.append(
            "node(s) nodeMetric expired (loadaware nodeMetricExpirationSeconds="
            f"{self.la.node_metric_expiration_seconds})"
        )
        return reasons

    # ------------------------------------------------------------------- cache
    def _estimate(self, task: Task) -> np.ndarray:
        e = self._estimates.get(task)
        if e is None:
            # Pods of one workload share what the estimate reads: estimate each shape once.
            pod = task.pod
            custom = self.la.allow_customize_estimation
            shape = (
                koord_priority_class(pod),
                tuple(pod.requests.items()),
                tuple(pod.limits.items()),
                pod.annotations.get(ANN_SCALING_FACTORS) if custom else None,
            )
            e = self._estimates_by_shape.get(shape)
            if e is None:
                e = self._estimates_by_shape[shape] = estimate_pod(self.la, pod)
            self._estimates[task] = e
        return e

    def handles(self, handler: EventHandler) -> bool:
        """Whether ``handler`` is the one this plugin registered (its node cache)."""
        return handler.allocate_func == self._on_event

    def _on_event(self, event) -> None:
        self._sync(event.task)

    def _on_events(self, tasks: list[Task]) -> None:
        for task in tasks:
            self._sync(task)

    def _sync(self, task: Task) -> None:
        node = _counted_node(task)
        old = self.entries.get(task)
        if old is not None:
            if old.node == node:
                return
            self._apply(old, -1)
            del self.entries[task]
        if node >= 0 and self.has_metric[node]:
            entry = self._entry(task, node)
            self._apply(entry, +1)
            self.entries[task] = entry

    def _apply(self, entry: _PodEntry, sign: int) -> None:
        i = entry.node
        for vec, target in (
            (entry.prod_usage, self.prod_usage),
            (entry.node_delta, self.node_delta),
            (entry.node_estimated, self.node_estimated),
            (entry.prod_delta, self.prod_delta),
        ):
            if vec is not None:
                target[i] += sign * vec

    def _entry(self, task: Task, i: int) -> _PodEntry:
        """A pod's contributions to its node's vectors (koordinator ``nodeInfo.addPod``)."""
        pod = task.pod
        key = task.key
        u = self.pod_usage[i].get(key)
        prod = koord_priority_class(pod) == PRIORITY_PROD
        active_prod = prod and key in self.prod_pods[i]
        entry = _PodEntry(i, u if active_prod else None, None, None, None)
        e = self._estimate(task)
        timestamp = pod_timestamp(pod, self.ssn.now)
        deadline = estimate_deadline(self.la, pod, timestamp)
        update = self.update_time[i]
        if update is None:
            fresh = True  # a zero update time: every real timestamp is after it
        else:
            since = (timestamp - update).total_seconds()
            fresh = since > -self.report_interval[i] or (deadline is not None and deadline > update)
        fresh = fresh or u is None
        if fresh:
            entry.node_delta = e - u if u is not None else e.copy()
            np.maximum(entry.node_delta, 0, out=entry.node_delta)
        entry.node_estimated = e
        if prod:
            pu = u
            if not active_prod and u is not None:
                pu, fresh = None, True
            if fresh:
                entry.prod_delta = np.maximum(e - pu, 0) if pu is not None else e.copy()
        return entry

    # ------------------------------------------------------------ filter/score
    def _existing(
        self, prod: np.ndarray, agg: np.ndarray, agg_usage: np.ndarray, agg_found: np.ndarray
    ) -> np.ndarray:
        """``B`` per node: prod rows, aggregated rows, or node usage rows (the row kinds
        of :func:`_row_kinds`)."""
        b = self.node_usage + self.node_delta
        if agg.any():
            rows = agg & agg_found  # ROW_AGGREGATED
            b[rows] = agg_usage[rows] + self.node_delta[rows]
            rows = agg & ~agg_found  # ROW_ESTIMATED
            b[rows] = self.node_estimated[rows]
        if prod.any():  # ROW_PROD
            b[prod] = self.prod_usage[prod] + self.prod_delta[prod]
        return b

    def _filter(self, task: Task, job: Job):
        if is_daemonset_pod(task.pod):
            return None
        prod, agg, thresholds, state, slots = self._filter_profile(
            koord_priority_class(task.pod) == PRIORITY_PROD
        )
        existing = self._existing(prod, agg, self.filter_agg, self.filter_agg_found)
        mask, code = self.ssn.backend.loadaware_filter(
            existing, self._estimate(task), self.allocatable, thresholds, state
        )
        codes = np.where(
            code >= 0, slots + code, np.where(code == -2, 6 * len(self.la.resources), -1)
        )
        return mask, codes, self.reasons

    def _filter_profile(self, is_prod: bool) -> tuple[np.ndarray, ...]:
        """Per node, for a prod or a non-prod pod: (prod rows, aggregated rows,
        thresholds, filter state, first reason slot).  Fixed for the session, so made
        once per kind of pod rather than for every pod the filter sees.
        """
        cached = self._filter_profiles.get(is_prod)
        if cached is not None:
            return cached
        n = len(self.ssn.nodes)
        r = len(self.la.resources)
        prod = self.prod_enabled & is_prod
        agg = ~prod & self.agg_enabled
        kind = np.where(prod, _KIND_PROD, np.where(agg, _KIND_AGG, _KIND_USAGE))
        thresholds = self.thr[_KIND_USAGE].copy()
        thresholds[prod] = self.thr[_KIND_PROD][prod]
        thresholds[agg] = self.thr[_KIND_AGG][agg]

        state = np.full(n, _CHECK, dtype=np.int64)
        if self.la.filter_expired_node_metrics:
            state[self.expired] = (
                _PASS if self.la.enable_schedule_when_node_metrics_expired else _EXPIRED
            )
        state[~self.has_status & (state == _CHECK)] = _PASS
        state[~self.has_metric] = _PASS
        state[~thresholds.any(axis=1)] = _PASS

        custom = np.zeros(n, dtype=np.bool_)
        for k in (_KIND_USAGE, _KIND_PROD, _KIND_AGG):
            custom |= (kind == k) & self.custom[k]
        slots = (custom.astype(np.int64) * 3 + kind) * r
        cached = self._filter_profiles[is_prod] = (prod, agg, thresholds, state, slots)
        return cached

    def _score_profile(self, prod_pod: bool) -> tuple[np.ndarray, ...]:
        """Per node, for a pod scored on prod usage or not: (prod rows, aggregated rows,
        scored nodes).  Fixed for the session: made once per kind of pod."""
        profile = self._score_profiles.get(prod_pod)
        if profile is None:
            la = self.la
            n = len(self.ssn.nodes)
            agg_score = bool(la.aggregated and la.aggregated.score_aggregation_type)
            profile = self._score_profiles[prod_pod] = (
                np.full(n, prod_pod, dtype=np.bool_),
                np.full(n, agg_score and not prod_pod, dtype=np.bool_),
                self.has_metric & ~self.expired & self.has_status,
            )
        return profile

    def _score(self, task: Task, job: Job, candidates: np.ndarray) -> np.ndarray:
        la = self.la
        prod_pod = la.score_according_prod_usage and (
            koord_priority_class(task.pod) == PRIORITY_PROD
        )
        prod, agg, valid = self._score_profile(prod_pod)
        existing = self._existing(prod, agg, self.score_agg, self.score_agg_found)
        scores = self.ssn.backend.loadaware_score(
            existing,
            self._estimate(task),
            self.allocatable,
            self.weights,
            la.dominant_resource_weight,
            valid,
        )
        return scores.astype(np.float64) * la.score_weight

    # ------------------------------------------------------------ kernel form
    def kernel_form(self, tasks: list[Task]) -> LoadAwareKernel | None:
        """The filter, score and node cache of this session for the fused allocate loop
        placing ``tasks``; None when some task's usage is already reported (its
        contributions then depend on its node: the plugin's own path handles it)."""
        reported = self._reported
        if reported and any(t.key in reported for t in tasks):
            return None
        la = self.la
        n, r = len(self.ssn.nodes), len(la.resources)
        if r == 0:
            return None
        existing = np.empty((4, n, r), dtype=np.int64)
        row_delta = np.empty((4, n), dtype=np.int64)
        thresholds = np.empty((2, n, r), dtype=np.int64)
        state = np.empty((2, n), dtype=np.int64)
        reason_slot = np.empty((2, n), dtype=np.int64)
        for p, is_prod in enumerate((False, True)):
            prod, agg, thr, st, slots = self._filter_profile(is_prod)
            existing[p] = self._existing(prod, agg, self.filter_agg, self.filter_agg_found)
            row_delta[p] = _row_kinds(prod, agg, self.filter_agg_found)
            thresholds[p], state[p], reason_slot[p] = thr, st, slots
        for p, prod_score in ((2, False), (3, True)):
            prod, agg, valid = self._score_profile(prod_score)
            existing[p] = self._existing(prod, agg, self.score_agg, self.score_agg_found)
            row_delta[p] = _row_kinds(prod, agg, self.score_agg_found)
        estimates = np.zeros((len(tasks), r), dtype=np.int64)
        flags = np.zeros(len(tasks), dtype=np.int64)
        for i, task in enumerate(tasks):
            pod = task.pod
            estimates[i] = self._estimate(task)
            f = 0
            if koord_priority_class(pod) == PRIORITY_PROD:
                f |= FLAG_PROD_POD | (FLAG_PROD_SCORE if la.score_according_prod_usage else 0)
            if is_daemonset_pod(pod):
                f |= FLAG_NO_FILTER
            flags[i] = f
        return LoadAwareKernel(
            allocatable=self.allocatable,
            existing=existing,
            row_delta=row_delta,
            thresholds=thresholds,
            state=state,
            reason_slot=reason_slot,
            reasons=self.reasons,
            valid=self._score_profile(False)[2],
            weights=self.weights,
            dominant_weight=int(la.dominant_resource_weight),
            counted=self.has_metric,
            estimates=estimates,
            task_flags=flags,
        )

    @property
    def kernel_score(self) -> KernelScore:
        """Its 0..100 score, weighted by ``scoreWeight``, as a score of the loop."""
        return KernelScore(ScoreKind.LOAD_AWARE, float(self.la.score_weight))

    def kernel_placed(self, tasks: list[Task]) -> None:
        """Bring the node cache up to date with ``tasks``, placed by the fused loop
        (which fires no events)."""
        for task in tasks:
            self._sync(task)

    # ---------------------------------------------------------------- helpers
    def node_state(self, name: str) -> dict:
        """Debug view of one node's cached vectors (like koordinator's /node/:name)."""
        i = self.ssn.nodes.index[name]
        res = self.la.resources

        def d(v: np.ndarray) -> dict[str, int]:
            return {k: int(x) for k, x in zip(res, v)}

        return {
            "nodeUsage": d(self.node_usage[i]),
            "prodUsage": d(self.prod_usage[i]),
            "nodeDelta": d(self.node_delta[i]),
            "prodDelta": d(self.prod_delta[i]),
            "nodeEstimated": d(self.node_estimated[i]),
            "pods": sorted(t.key for t, e in self.entries.items() if e.node == i),
        }


register_plugin("loadaware", LoadAwarePlugin)
