"""Parsing of Kubernetes quantities, Go durations and RFC 3339 timestamps.

All parsers raise :class:`ValueError` with a readable message on bad input; callers
(the snapshot loader) wrap it into an :class:`~kai.api.errors.InputError` that names
the file, document, object and field.

* :func:`parse_quantity` follows ``k8s.io/apimachinery/pkg/api/resource.Quantity``:
  ``<sign><digits>[.<digits>][<suffix>]`` where the suffix is a decimal SI suffix
  (``n u m k M G T P E``), a binary SI suffix (``Ki Mi Gi Ti Pi Ei``) or a decimal
  exponent (``e3``, ``E-2``).
* :func:`to_canonical` converts a parsed quantity to the canonical unit of its
  resource (cpu to millicores, rounded up like ``Quantity.MilliValue``).
* :func:`parse_duration` follows Go's ``time.ParseDuration`` plus the ``d`` and ``w``
  units of ``str2duration``; plain numbers are seconds.
* :func:`parse_time` parses RFC 3339 timestamps into timezone-aware UTC datetimes.
"""

from __future__ import annotations

import math
import re
from datetime import date, datetime, timedelta, timezone

__all__ = ["parse_quantity", "to_canonical", "parse_duration", "parse_time"]

# --------------------------------------------------------------------------- quantities

_DECIMAL_SUFFIX = {
    "": 0,
    "n": -9,
    "u": -6,
    "m": -3,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_BINARY_SUFFIX = {
    "Ki": 10,
    "Mi": 20,
    "Gi": 30,
    "Ti": 40,
    "Pi": 50,
    "Ei": 60,
}

# number, then either a decimal exponent or an SI suffix.  "1E" is one exa, "1E3" is 1000.
_QUANTITY_RE = re.compile(
    r"([+-]?)(\d+(?:\.\d*)?|\.\d+)"
    r"(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)"
)

_quantity_cache: dict[str, float] = {}
_CACHE_LIMIT = 65536


def _describe(what: str) -> str:
    return f" for {what}" if what else ""


def _parse_quantity_str(text: str, what: str) -> float:
    s = text.strip()
    m = _QUANTITY_RE.fullmatch(s)
    if m is None:
        hint = ""
        if s.lower().endswith(("kb", "mb", "gb", "tb", "kib", "mib", "gib", "tib")):
            hint = " (use Kubernetes suffixes such as Ki, Mi, Gi or k, M, G)"
        raise ValueError(
            f"invalid quantity {text!r}{_describe(what)}: expected a number with an optional "
            f"suffix n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent "
            f"like 1e3{hint}"
        )
    sign, number, exponent, suffix = m.groups()
    if exponent is not None:
        value = float(f"{number}e{exponent[1:]}")
    elif suffix is None or suffix in _DECIMAL_SUFFIX:
        power = _DECIMAL_SUFFIX[suffix or ""]
        # float("1.5e-3") is correctly rounded, unlike 1.5 * 10 ** -3
        value = float(f"{number}e{power}") if power else float(number)
    else:
        value = float(number) * float(1 << _BINARY_SUFFIX[suffix])
    if not math.isfinite(value):
        raise ValueError(f"quantity {text!r}{_describe(what)} is too large")
    return -value if sign == "-" else value


def parse_quantity(value: object, *, what: str = "") -> float:
    """Parse a Kubernetes quantity (``"500m"``, ``"2Gi"``, ``"1e3"``, ``4``, ``0.5``).

    Returns the value in base units (cores for cpu, bytes for memory, ...) as a float.
    Negative values are returned as such; the caller decides whether they are allowed.
    ``what`` names the value in error messages.
    """
    if isinstance(value, str):
        cached = _quantity_cache.get(value)
        if cached is not None:
            return cached
        result = _parse_quantity_str(value, what)
        if len(_quantity_cache) >= _CACHE_LIMIT:
            _quantity_cache.clear()
        _quantity_cache[value] = result
        return result
    if isinstance(value, bool) or value is None:
        raise ValueError(f"invalid quantity {value!r}{_describe(what)}: expected a number")
    if isinstance(value, int):
        return float(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"invalid quantity {value!r}{_describe(what)}: not a finite number")
        return value
    raise ValueError(
        f"invalid quantity {value!r}{_describe(what)}: expected a number or a string such "
        f"as '500m' or '2Gi', got {type(value).__name__}"
    )


def _ceil_away(v: float) -> float:
    """Round to an integer away from zero, ignoring float noise (0.1 * 1000 -> 100)."""
    r = round(v)
    if abs(v - r) <= 1e-12 * max(1.0, abs(v)):
        return float(r)
    return float(math.ceil(v)) if v > 0 else float(-math.ceil(-v))


def to_canonical(resource_name: str, value: float) -> float:
    """Convert a parsed quantity to the canonical unit of ``resource_name``.

    ``cpu`` becomes millicores rounded up to an integer (like ``Quantity.MilliValue``);
    memory stays bytes, GPUs stay devices, pods and extended resources stay counts.
    """
    if resource_name == "cpu":
        return _ceil_away(value * 1000.0)
    return value


# --------------------------------------------------------------------------- durations

_DURATION_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "\u00b5s": 1e-6,  # micro sign
    "\u03bcs": 1e-6,  # greek mu
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
}
_DURATION_PART_RE = re.compile(r"(\d*)(?:\.(\d*))?([^\d.+\-\s]+)?")


def parse_duration(value: object) -> float:
    """Parse a duration into seconds.

    Accepts Go ``time.ParseDuration`` strings (``"1h30m"``, ``"300ms"``, ``"1.5h"``,
    ``"-1s"``, ``"0"``), the ``d`` (24h) and ``w`` (7d) units, and plain numbers
    (seconds).  Raises :class:`ValueError` on anything else.
    """
    if isinstance(value, bool) or value is None:
        raise ValueError(f"invalid duration {value!r}: expected a string such as '30s' or '5m'")
    if isinstance(value, int):
        return float(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"invalid duration {value!r}: not a finite number")
        return value
    if isinstance(value, timedelta):
        return value.total_seconds()
    if not isinstance(value, str):
        raise ValueError(
            f"invalid duration {value!r}: expected a string such as '30s' or '5m', "
            f"got {type(value).__name__}"
        )
    s = value.strip()
    orig = s
    neg = False
    if s[:1] in ("+", "-"):
        neg = s[0] == "-"
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise ValueError(f"invalid duration {orig!r}")
    total = 0.0
    pos = 0
    n = len(s)
    while pos < n:
        m = _DURATION_PART_RE.match(s, pos)
        whole, frac, unit = m.groups() if m else ("", None, None)
        if m is None or (not whole and not frac):
            raise ValueError(
                f"invalid duration {orig!r}: expected a number followed by a unit "
                f"(ns, us, ms, s, m, h, d, w), e.g. '90s' or '1h30m'"
            )
        if unit is None:
            raise ValueError(f"invalid duration {orig!r}: missing unit (ns, us, ms, s, m, h, d, w)")
        scale = _DURATION_UNITS.get(unit)
        if scale is None:
            raise ValueError(
                f"invalid duration {orig!r}: unknown unit {unit!r} "
                f"(valid units: ns, us, ms, s, m, h, d, w)"
            )
        number = float(f"{whole or '0'}.{frac or '0'}")
        total += number * scale
        pos = m.end()
    if not math.isfinite(total):
        raise ValueError(f"invalid duration {orig!r}: too large")
    return -total if neg else total


# --------------------------------------------------------------------------- timestamps

_TIME_RE = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))"
)


def _is_plain_utc(value: str) -> bool:
    """Whether ``value`` has the separators of ``YYYY-MM-DDTHH:MM:SSZ``, and only them
    (so no ISO week date or other form that ``datetime.fromisoformat`` also reads)."""
    return (
        len(value) == 20
        and value[19] == "Z"
        and value[10] == "T"
        and value[4] == "-"
        and value[7] == "-"
        and value[13] == ":"
        and value[16] == ":"
    )


def parse_time(value: object) -> datetime:
    """Parse an RFC 3339 timestamp (``2024-05-01T12:00:00Z``, ``...+02:00``, with optional
    fractional seconds) into a timezone-aware UTC ``datetime``.

    ``datetime`` objects (as PyYAML produces for unquoted timestamps) are accepted; naive
    ones are taken as UTC.
    """
    if isinstance(value, datetime):
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=timezone.utc)
    if not isinstance(value, str):
        raise ValueError(
            f"invalid timestamp {value!r}: expected an RFC 3339 string such as "
            f"'2024-05-01T12:00:00Z'"
        )
    if _is_plain_utc(value):
        # The shape the API server writes (2024-05-01T12:00:00Z), parsed in C: what the
        # expression below gives for it.  Python 3.10 reads no "Z", and a value out of
        # range fails here: both go on to the expression and its messages.
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            pass
    m = _TIME_RE.fullmatch(value.strip())
    if m is None:
        raise ValueError(
            f"invalid timestamp {value!r}: expected RFC 3339, e.g. '2024-05-01T12:00:00Z' "
            f"or '2024-05-01T12:00:00.5+02:00'"
        )
    year, month, day, hour, minute, second, frac, z, osign, oh, om = m.groups()
    micro = int((frac or "0")[:6].ljust(6, "0"))
    try:
        if z:
            tz = timezone.utc
        else:
            offset = timedelta(hours=int(oh), minutes=int(om))
            if int(oh) > 23 or int(om) > 59:
                raise ValueError("offset out of range")
            tz = timezone(-offset if osign == "-" else offset)
        result = datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second), micro, tz
        )
    except ValueError as exc:
        raise ValueError(f"invalid timestamp {value!r}: {exc}") from None
    return result.astimezone(timezone.utc)
