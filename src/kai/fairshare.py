"""Time-based fair share: queues' historical usage, decayed, windowed and normalised.

Among queues that compete for resources beyond their deserved quota, the one that used
more in the past gets less now.  The proportion plugin divides the over-quota part of
every resource among sibling queues with share weights

    P_i = max(0, W'_i + kValue * (W'_i - U_i))

where ``W'_i`` is the queue's over-quota weight over the siblings' sum and ``U_i`` its
*normalised usage* of that resource: what it was allocated over the usage window, each
moment weighted by ``0.5 ** (age / halfLifePeriod)``, divided by the cluster's capacity
over the same window weighted the same way.  A queue that held half the cluster the
whole window has usage 0.5 whatever the decay.  Deserved quota is handed out first and
is never affected.

This module holds the arithmetic and the configuration; it knows nothing about
sessions or Prometheus:

* :class:`UsageParams` reads KAI-Scheduler's ``usageDBConfig.usageParams``
  (``halfLifePeriod``, ``windowSize``, ``windowType``, ...).
* :func:`decayed_usage` computes the usage table from a list of allocation samples.
* :class:`UsageTracker` computes the same table incrementally, one scheduling period
  at a time, for a simulation that asks for it every period.
* :func:`check_usage_table` validates a usage table; the result goes into a session
  with ``kai.run_session(snapshot, queue_usage=table)``.

A *usage table* maps a queue name to a mapping of resource (``"gpu"``, ``"cpu"``,
``"memory"``) to normalised usage, a float >= 0 (1.0 = the whole cluster for the whole
window).  Queues or resources left out have usage 0; a parent queue left out gets the
sum of its children's usage.

Times are seconds on any clock (``time.time()``, or seconds from a simulation's start)
as long as samples, ``now`` and ``UsageParams.tumbling_start`` use the same one.
Allocation and capacity amounts may use any unit per resource (GPUs, cores or
millicores, bytes) as long as both use the same one: only their ratio counts.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import field
from typing import Any

import numpy as np

from kai._dataclasses import dataclass
from kai.api.errors import ConfigError, InputError

#: The resources the proportion plugin divides, as named in usage tables and results.
RESOURCES = ("gpu", "cpu", "memory")
#: Other names a usage table may use for them.
RESOURCE_ALIASES = {"nvidia.com/gpu": "gpu", "gpus": "gpu"}

SLIDING = "sliding"
TUMBLING = "tumbling"
WINDOW_TYPES = (SLIDING, TUMBLING)

#: KAI-Scheduler's defaults (``usagedb`` ``SetDefaults``).
DEFAULT_WINDOW = 7 * 24 * 3600.0
DEFAULT_FETCH_INTERVAL = 60.0
DEFAULT_STALENESS_PERIOD = 300.0
DEFAULT_WAIT_TIMEOUT = 60.0

#: The session cache key under which a session's usage table travels to the plugin.
QUEUE_USAGE_KEY = "fairshare.queue_usage"

#: ``usageParams`` fields read; ``cronString`` belongs to the cron window kai lacks.
#: ``extraParams`` that are durations (of the Prometheus client).
DURATION_EXTRA_PARAMS = ("queryResolution", "usageQueryTimeout")
USAGE_PARAM_FIELDS = (
    "halfLifePeriod",
    "windowSize",
    "windowType",
    "tumblingWindowStartTime",
    "fetchInterval",
    "stalenessPeriod",
    "waitTimeout",
    "extraParams",
)

Allocation = Mapping[str, float]
UsageTable = dict[str, dict[str, float]]
#: Cluster capacity: one mapping for the whole history, or a step function given as
#: ``(time, {resource: amount})`` pairs, each holding until the next.
Capacity = Mapping[str, float] | Sequence[tuple[float, Mapping[str, float]]]


# ----------------------------------------------------------------------- parameters
@dataclass(frozen=True)
class UsageParams:
    """How historical usage is counted.

    ``half_life``: seconds after which a usage counts half (None: no decay).
    ``window``: seconds of history counted (KAI's ``windowSize``, default one week).
    ``window_type``: ``"sliding"`` counts the last ``window`` seconds before now;
    ``"tumbling"`` counts from the start of the current window, windows being
    ``[tumbling_start + k * window, tumbling_start + (k + 1) * window)``; usage drops
    to zero when a new window starts.
    ``tumbling_start``: where tumbling windows start, on the samples' clock (None: at
    the start of the history, the first sample).
    ``fetch_interval``, ``staleness_period``, ``wait_timeout``: how a live scheduler
    refreshes usage from its database (seconds).
    ``extra_params``: client-specific strings (metric names, ``queryResolution``,
    ``usageQueryTimeout``).
    """

    half_life: float | None = None
    window: float = DEFAULT_WINDOW
    window_type: str = SLIDING
    tumbling_start: float | None = None
    fetch_interval: float = DEFAULT_FETCH_INTERVAL
    staleness_period: float = DEFAULT_STALENESS_PERIOD
    wait_timeout: float = DEFAULT_WAIT_TIMEOUT
    extra_params: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.half_life is not None and not self.half_life > 0:
            raise ValueError(f"half_life must be positive or None, got {self.half_life!r}")
        if not (self.window > 0 and math.isfinite(self.window)):
            raise ValueError(f"window must be a positive number of seconds, got {self.window!r}")
        if self.window_type not in WINDOW_TYPES:
            raise ValueError(f"window_type must be one of {WINDOW_TYPES}, got {self.window_type!r}")

    @classmethod
    def from_config(
        cls, mapping: Mapping[str, Any] | None, *, field: str = "usageDBConfig.usageParams"
    ) -> UsageParams:
        """Read KAI's ``usageParams`` fields; what is left out takes KAI's defaults.

        ``halfLifePeriod``, ``windowSize``, ``fetchInterval``, ``stalenessPeriod`` and
        ``waitTimeout`` are durations (``"10m"``, ``"168h"``, ``"1w"`` or seconds);
        ``halfLifePeriod`` empty or 0 means no decay.  ``windowType`` is ``sliding`` or
        ``tumbling``; ``tumblingWindowStartTime`` is an RFC 3339 time (or seconds on the
        samples' clock).  A bad value raises :class:`kai.ConfigError` naming
        ``FIELD.KEY`` (``field`` is the path of the mapping itself).
        """
        if mapping is None:
            return cls()
        if not isinstance(mapping, Mapping):
            raise ConfigError(f"expected a map, got {_type_name(mapping)}", field=field)
        for key in mapping:
            if key not in USAGE_PARAM_FIELDS:
                hint = " (the cron window type is not supported)" if key == "cronString" else ""
                raise ConfigError(
                    f"unknown field (expected one of {', '.join(USAGE_PARAM_FIELDS)}){hint}",
                    field=f"{field}.{key}",
                )

        def seconds(key: str, default: float | None, *, zero_is_none: bool = False) -> Any:
            return config_seconds(mapping.get(key), f"{field}.{key}", default, zero_is_none)

        window_type = mapping.get("windowType")
        if window_type is None or window_type == "":
            window_type = SLIDING
        if window_type not in WINDOW_TYPES:
            hint = " (the cron window type is not supported)" if window_type == "cron" else ""
            raise ConfigError(
                f"{window_type!r} is not one of {', '.join(WINDOW_TYPES)}{hint}",
                field=f"{field}.windowType",
            )
        start = mapping.get("tumblingWindowStartTime")
        tumbling_start: float | None = None
        if start is not None and start != "":
            tumbling_start = _parse_instant(start, f"{field}.tumblingWindowStartTime")
        extra = mapping.get("extraParams") or {}
        if not isinstance(extra, Mapping) or not all(
            isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in extra.values()
        ):
            raise ConfigError("expected a map of strings", field=f"{field}.extraParams")
        for key in DURATION_EXTRA_PARAMS:
            config_seconds(extra.get(key), f"{field}.extraParams.{key}", None)
        return cls(
            half_life=seconds("halfLifePeriod", None, zero_is_none=True),
            window=seconds("windowSize", DEFAULT_WINDOW),
            window_type=window_type,
            tumbling_start=tumbling_start,
            fetch_interval=seconds("fetchInterval", DEFAULT_FETCH_INTERVAL),
            staleness_period=seconds("stalenessPeriod", DEFAULT_STALENESS_PERIOD),
            wait_timeout=seconds("waitTimeout", DEFAULT_WAIT_TIMEOUT),
            extra_params={str(k): str(v) for k, v in extra.items()},
        )

    def window_start(self, now: float, history_start: float | None = None) -> float:
        """Where the window that ``now`` reads begins.

        Sliding: ``now - window``.  Tumbling: the latest window start before ``now``
        (at a window boundary, the window that just ended is still read, as KAI
        does); ``tumbling_start`` (or ``history_start`` when it is None) is the first.
        """
        if self.window_type == SLIDING:
            return now - self.window
        origin = self.tumbling_start if self.tumbling_start is not None else history_start
        if origin is None or now <= origin:
            return now if origin is None else origin
        k = max(math.ceil((now - origin) / self.window) - 1, 0)
        return origin + k * self.window

    def weight(self, start: float, end: float, now: float) -> float:
        """The integral over ``[start, end]`` of the decay ``0.5 ** ((now - t) / half_life)``
        (plain ``end - start`` without decay): the weight of one unit held then."""
        if end <= start:
            return 0.0
        h = self.half_life
        if h is None:
            return end - start
        rate = math.log(2.0) / h
        # (h / ln 2) * 2^-(now-end)/h * (1 - 2^-(end-start)/h), with expm1 for short spans
        return math.exp(-(now - end) * rate) * -math.expm1(-(end - start) * rate) / rate


@dataclass(frozen=True)
class UsageDBConfig:
    """KAI-Scheduler's ``usageDBConfig``: where a live scheduler reads usage from.

    ``client_type`` is ``prometheus``; ``connection_string`` its URL (or the value of
    the environment variable ``connection_string_env_var``).
    """

    client_type: str
    connection_string: str | None
    connection_string_env_var: str | None
    params: UsageParams

    @classmethod
    def from_config(cls, mapping: Any, *, field: str = "usageDBConfig") -> UsageDBConfig:
        """Parse ``usageDBConfig``; errors are :class:`kai.ConfigError` naming the field.

        ``extraParams`` is read from ``usageParams.extraParams`` (where KAI's code reads
        it) and also directly under ``usageDBConfig`` (where KAI's documentation shows
        it); the former wins on a key given in both.
        """
        if not isinstance(mapping, Mapping):
            raise ConfigError(f"expected a map, got {_type_name(mapping)}", field=field)
        known = ("clientType", "connectionString", "connectionStringEnvVar", "usageParams")
        for key in mapping:
            if key not in (*known, "extraParams"):
                raise ConfigError(
                    f"unknown field (expected one of {', '.join(known)})", field=f"{field}.{key}"
                )
        client = mapping.get("clientType")
        if client != "prometheus":
            raise ConfigError(
                f"{client!r} is not a supported client type (expected 'prometheus')",
                field=f"{field}.clientType",
            )
        strings = {}
        for key in ("connectionString", "connectionStringEnvVar"):
            value = mapping.get(key)
            if value is not None and not isinstance(value, str):
                raise ConfigError(
                    f"expected a string, got {_type_name(value)}", field=f"{field}.{key}"
                )
            strings[key] = value or None
        params_raw = mapping.get("usageParams")
        outer_extra = mapping.get("extraParams")
        if outer_extra is not None:
            if not isinstance(outer_extra, Mapping):
                raise ConfigError(
                    f"expected a map of strings, got {_type_name(outer_extra)}",
                    field=f"{field}.extraParams",
                )
            inner = dict(params_raw or {}) if isinstance(params_raw, Mapping) else params_raw
            if isinstance(inner, dict):
                inner["extraParams"] = {**outer_extra, **(inner.get("extraParams") or {})}
            params_raw = inner
        params = UsageParams.from_config(params_raw, field=f"{field}.usageParams")
        return cls(client, strings["connectionString"], strings["connectionStringEnvVar"], params)


# ------------------------------------------------------------------- usage from samples
def decayed_usage(
    samples: Iterable[tuple[float, str, Allocation]],
    now: float,
    params: UsageParams,
    capacity: Capacity,
    *,
    start: float | None = None,
) -> UsageTable:
    """Every queue's normalised usage at ``now`` from allocation samples.

    ``samples`` are ``(time, queue, {resource: amount allocated})``.  A queue's
    allocation is a step function: a sample sets it from its time until the queue's
    next sample, and the last sample holds until ``now``.  So a scheduler that records
    every queue at the start of every period of length ``p`` charges each allocation
    for ``p`` seconds; to record that a queue released everything, give it a sample of
    zeros (or ``{}``).  Samples after ``now`` are ignored; their order does not matter.

    ``capacity`` is the cluster's total per resource, one mapping or a step function
    of ``(time, {resource: amount})``.  The history starts at ``start`` (default: the
    earliest sample or capacity time); capacity counts only from there, as a metrics
    database has no capacity before it recorded any.

    The result has every sampled queue and every resource of ``capacity``: the
    decayed allocation inside the window (:meth:`UsageParams.window_start`) divided by
    the decayed capacity inside it (0 where that is 0).
    """
    by_queue: dict[str, list[tuple[float, Allocation]]] = {}
    first = math.inf
    for t, queue, alloc in samples:
        t = float(t)
        first = min(first, t)
        by_queue.setdefault(queue, []).append((t, alloc))
    steps = _capacity_steps(capacity)
    if steps and isinstance(capacity, Sequence):
        first = min(first, steps[0][0])
    if start is None:
        start = first if math.isfinite(first) else now
    resources = sorted({r for _, amounts in steps for r in amounts}, key=_resource_order)
    lo = max(params.window_start(now, start), start)

    def integral(points: list[tuple[float, Mapping[str, float]]]) -> dict[str, float]:
        out = dict.fromkeys(resources, 0.0)
        for i, (t, amounts) in enumerate(points):
            end = points[i + 1][0] if i + 1 < len(points) else now
            a, b = max(t, lo), min(end, now)
            if b <= a:
                continue
            w = params.weight(a, b, now)
            for r in resources:
                out[r] += float(amounts.get(r, 0.0)) * w
        return out

    total = integral(steps)
    table: UsageTable = {}
    for queue, points in by_queue.items():
        points.sort(key=lambda p: p[0])
        used = integral([p for p in points if p[0] <= now])
        table[queue] = {r: (used[r] / total[r] if total[r] > 0 else 0.0) for r in resources}
    return table


def _capacity_steps(capacity: Capacity) -> list[tuple[float, Mapping[str, float]]]:
    if isinstance(capacity, Mapping):
        return [(-math.inf, capacity)]
    return sorted(((float(t), c) for t, c in capacity), key=lambda p: p[0])


# --------------------------------------------------------------------- incremental
class UsageTracker:
    """Normalised usage, kept up to date one scheduling period at a time.

    For a simulator that asks for the usage table every period: ``record`` adds a
    period in O(queues), ``usage`` answers in O(queues + periods that left the window)
    instead of summing the whole history again.  It gives what :func:`decayed_usage`
    gives for the same periods (to rounding), with one difference: time not covered
    by any recorded period counts neither usage nor capacity (a metrics database with
    a gap).

    >>> tracker = UsageTracker(UsageParams(half_life=600.0, window=3600.0))
    >>> tracker.record(0.0, 10.0, {"a": {"gpu": 16.0}}, {"gpu": 16.0})
    >>> tracker.record(10.0, 20.0, {"a": {"gpu": 8.0}, "b": {"gpu": 8.0}}, {"gpu": 16.0})
    >>> table = tracker.usage(20.0)   # {"a": {"gpu": 0.75...}, "b": {"gpu": 0.24...}}
    """

    def __init__(self, params: UsageParams, resources: Sequence[str] = RESOURCES) -> None:
        self.params = params
        self.resources = tuple(resources)
        self._index = {r: i for i, r in enumerate(self.resources)}
        self._queues: dict[str, int] = {}
        # Periods still (partly) inside the window: (start, end, allocation rows, capacity).
        self._periods: deque[tuple[float, float, np.ndarray, np.ndarray]] = deque()
        # Decayed sums of the periods in ``_periods``, as seen from ``_ref``.
        self._acc = np.zeros((0, len(self.resources)))
        self._acc_capacity = np.zeros(len(self.resources))
        self._ref: float | None = None
        self._history_start: float | None = None
        self._last_end = -math.inf

    @property
    def queues(self) -> list[str]:
        """The queues recorded so far."""
        return list(self._queues)

    def record(
        self,
        start: float,
        end: float,
        allocations: Mapping[str, Allocation],
        capacity: Mapping[str, float],
    ) -> None:
        """Queues held ``allocations`` ({queue: {resource: amount}}) from ``start`` to
        ``end`` in a cluster of ``capacity`` ({resource: amount}).

        Periods come in time order and do not overlap; queues left out held nothing.
        """
        if end < start:
            raise ValueError(f"period ends ({end}) before it starts ({start})")
        if start < self._last_end:
            raise ValueError(
                f"period starting at {start} overlaps the last one (ends {self._last_end})"
            )
        for queue in allocations:
            if queue not in self._queues:
                self._queues[queue] = len(self._queues)
        rows = np.zeros((len(self._queues), len(self.resources)))
        for queue, alloc in allocations.items():
            row = rows[self._queues[queue]]
            for resource, amount in alloc.items():
                i = self._index.get(RESOURCE_ALIASES.get(resource, resource))
                if i is not None:
                    row[i] = amount
        cap = np.zeros(len(self.resources))
        for resource, amount in capacity.items():
            i = self._index.get(RESOURCE_ALIASES.get(resource, resource))
            if i is not None:
                cap[i] = amount
        if self._history_start is None:
            self._history_start = start
        self._advance(end)
        assert self._ref is not None
        w = self.params.weight(start, end, self._ref)
        if len(self._acc) < len(rows):
            self._acc = np.vstack([self._acc, np.zeros((len(rows) - len(self._acc), len(cap)))])
        self._acc[: len(rows)] += rows * w
        self._acc_capacity += cap * w
        self._periods.append((start, end, rows, cap))
        self._last_end = end

    def usage(self, now: float) -> UsageTable:
        """Every recorded queue's normalised usage at ``now`` (not before the last
        recorded period's end)."""
        if now < max(self._last_end, self._ref if self._ref is not None else -math.inf):
            raise ValueError(
                f"usage asked at {now}, before the last period's end or the last question"
            )
        if self._history_start is None:
            return {}
        self._advance(now)
        lo = self.params.window_start(now, self._history_start)
        periods = self._periods
        while periods and periods[0][1] <= lo:  # wholly before the window: gone for good
            s, e, rows, cap = periods.popleft()
            w = self.params.weight(s, e, now)
            self._acc[: len(rows)] -= rows * w
            self._acc_capacity -= cap * w
        used, total = self._acc.copy(), self._acc_capacity.copy()
        if periods and periods[0][0] < lo:  # the part of the first period before the window
            s, _, rows, cap = periods[0]
            w = self.params.weight(s, lo, now)
            used[: len(rows)] -= rows * w
            total -= cap * w
        if not periods:
            self._acc[:] = 0.0  # nothing left: no rounding residue either
            self._acc_capacity[:] = 0.0
        ratio = np.divide(np.maximum(used, 0.0), total, out=np.zeros_like(used), where=total > 0)
        return {
            queue: dict(zip(self.resources, ratio[i].tolist())) for queue, i in self._queues.items()
        }

    def _advance(self, now: float) -> None:
        """Decay the sums from the last reference time to ``now``."""
        ref = self._ref
        if ref is not None and now > ref and self.params.half_life is not None:
            factor = 0.5 ** ((now - ref) / self.params.half_life)
            self._acc *= factor
            self._acc_capacity *= factor
        if ref is None or now > ref:
            self._ref = now


# ------------------------------------------------------------------- usage in sessions
def check_usage_table(table: Any, *, obj: str = "queue_usage") -> UsageTable:
    """A usage table validated and normalised: resource aliases (``nvidia.com/gpu``)
    mapped to ``gpu``/``cpu``/``memory``, values as floats.

    Raises :class:`kai.InputError` naming the queue and resource for anything else
    than a map of queue to a map of resource to a finite number >= 0.
    """
    if not isinstance(table, Mapping):
        raise InputError(f"expected a map of queue to usage, got {_type_name(table)}", obj=obj)
    out: UsageTable = {}
    for queue, usage in table.items():
        if not isinstance(usage, Mapping):
            raise InputError(
                f"expected a map of resource to usage, got {_type_name(usage)}",
                obj=obj,
                field=str(queue),
            )
        row: dict[str, float] = {}
        for resource, value in usage.items():
            name = RESOURCE_ALIASES.get(str(resource), str(resource))
            where = f"{queue}.{resource}"
            if name not in RESOURCES:
                raise InputError(
                    f"unknown resource (expected one of {', '.join(RESOURCES)})",
                    obj=obj,
                    field=where,
                )
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InputError(f"expected a number, got {value!r}", obj=obj, field=where)
            number = float(value)
            if not (math.isfinite(number) and number >= 0):
                raise InputError(
                    f"usage must be a finite number >= 0, got {value!r}", obj=obj, field=where
                )
            row[name] = number
        out[str(queue)] = row
    return out


def usage_vectors(
    table: Mapping[str, Mapping[str, float]],
    parents: Mapping[str, str | None],
    resources: Sequence[str] = RESOURCES,
) -> dict[str, list[float]]:
    """Per queue of ``parents`` (queue -> parent), its usage as a list in the order of
    ``resources``.

    A queue in the table takes its own row (missing resources 0); a queue that is not
    gets the sum of its children's rows, so a table of leaf queues serves a tree.
    """
    children: dict[str, list[str]] = {}
    for queue, parent in parents.items():
        if parent is not None and parent in parents:
            children.setdefault(parent, []).append(queue)
    out: dict[str, list[float]] = {}

    def vector(queue: str, seen: frozenset[str]) -> list[float]:
        cached = out.get(queue)
        if cached is not None:
            return cached
        row = table.get(queue)
        if row is not None:
            vec = [float(row.get(r, 0.0)) for r in resources]
        else:
            vec = [0.0] * len(resources)
            for child in children.get(queue, ()):
                if child not in seen:  # a cycle in a bad tree must not recurse forever
                    vec = [a + b for a, b in zip(vec, vector(child, seen | {child}))]
        out[queue] = vec
        return vec

    for queue in parents:
        vector(queue, frozenset({queue}))
    return out


def load_usage_file(path: str) -> UsageTable:
    """Read a usage table from a JSON or YAML file (``{queue: {resource: usage}}``).

    The table may also sit under a top-level ``queues`` key.  Errors are
    :class:`kai.InputError` naming the file.
    """
    import yaml

    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except OSError as exc:
        raise InputError(f"cannot read usage table: {exc.strerror}", file=path) from None
    except yaml.YAMLError as exc:
        raise InputError(f"not valid JSON or YAML: {exc}", file=path) from None
    if data is None:
        return {}
    if isinstance(data, Mapping) and set(data) == {"queues"}:
        data = data["queues"]
    try:
        return check_usage_table(data)
    except InputError as err:
        raise InputError(err.message, file=path, field=err.field) from None


# ------------------------------------------------------------------------- helpers
def _resource_order(resource: str) -> tuple[int, str]:
    return (RESOURCES.index(resource) if resource in RESOURCES else len(RESOURCES), resource)


def _type_name(value: Any) -> str:
    return "a list" if isinstance(value, list) else type(value).__name__


def config_seconds(
    value: Any, field: str, default: float | None, zero_is_none: bool = False
) -> Any:
    """A configured duration in seconds (``default`` when unset): longer than 0, or
    None for 0 when ``zero_is_none``; a :class:`kai.ConfigError` naming ``field``."""
    if value is None or value == "":
        return default
    from kai.api.quantity import parse_duration

    try:
        out = parse_duration(value)
    except ValueError as exc:
        raise ConfigError(str(exc), field=field) from None
    if out < 0:
        raise ConfigError(f"{value!r} must not be negative", field=field)
    if out == 0:
        if zero_is_none:
            return None
        raise ConfigError(f"{value!r} must be longer than 0", field=field)
    return out


def _parse_instant(value: Any, field: str) -> float:
    """An RFC 3339 time as epoch seconds, or a plain number of seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    from kai.api.quantity import parse_time

    try:
        return parse_time(value).timestamp()
    except ValueError as exc:
        raise ConfigError(str(exc), field=field) from None
