"""Tests of kai.api.quantity: Kubernetes quantities, Go durations, RFC 3339 timestamps."""

from __future__ import annotations

import math
from datetime import date, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kai.api.quantity import parse_duration, parse_quantity, parse_time, to_canonical


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1", 1.0),
        ("0", 0.0),
        ("100m", 0.1),
        ("1500m", 1.5),
        ("0.5", 0.5),
        (".5", 0.5),
        ("5.", 5.0),
        ("1n", 1e-9),
        ("3u", 3e-6),
        ("2k", 2000.0),
        ("1M", 1e6),
        ("1G", 1e9),
        ("2T", 2e12),
        ("1P", 1e15),
        ("1E", 1e18),
        ("1Ki", 1024.0),
        ("1Mi", 1024.0**2),
        ("2Gi", 2 * 1024.0**3),
        ("1.5Gi", 1.5 * 1024.0**3),
        ("1Ti", 1024.0**4),
        ("1Pi", 1024.0**5),
        ("1Ei", 1024.0**6),
        ("1e3", 1000.0),
        ("1E3", 1000.0),
        ("1.5E2", 150.0),
        ("5e-1", 0.5),
        ("2e+2", 200.0),
        ("+5", 5.0),
        ("-1", -1.0),
        ("-500m", -0.5),
        (" 2Gi ", 2 * 1024.0**3),
        (4, 4.0),
        (0.25, 0.25),
        (-3, -3.0),
    ],
)
def test_parse_quantity(text, expected):
    assert parse_quantity(text, what="x") == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "abc",
        "1.2.3",
        "1Gb",
        "2GB",
        "1 Gi",
        "Gi",
        "1i",
        "1ki",
        "--1",
        "1e",
        "1e1.5",
        "m",
        "1mm",
        "0x10",
        "1,5",
        ".",
        "inf",
        "nan",
        "1e400",
    ],
)
def test_parse_quantity_rejects_garbage(bad):
    with pytest.raises(ValueError) as info:
        parse_quantity(bad, what="memory")
    assert "memory" in str(info.value)


@pytest.mark.parametrize("bad", [None, True, False, [1], {"a": 1}, float("nan"), float("inf")])
def test_parse_quantity_rejects_non_numbers(bad):
    with pytest.raises(ValueError):
        parse_quantity(bad, what="cpu")


def test_parse_quantity_hint_for_byte_units():
    with pytest.raises(ValueError, match="Gi"):
        parse_quantity("4GB", what="memory")


def test_parse_quantity_cached_result_is_stable():
    assert parse_quantity("7Gi", what="a") == parse_quantity("7Gi", what="b") == 7 * 2.0**30


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.1, 100.0),  # not 101 from float noise
        (0.5, 500.0),
        (1.0, 1000.0),
        (2.0, 2000.0),
        (1e-9, 1.0),  # 1n rounds up to one millicore like MilliValue
        (0.0001, 1.0),
        (0.0015, 2.0),
        (1.0005, 1001.0),
        (0.0, 0.0),
        (-0.0015, -2.0),  # away from zero
    ],
)
def test_to_canonical_cpu(value, expected):
    assert to_canonical("cpu", value) == expected


def test_to_canonical_cpu_from_strings():
    for text, millis in [
        ("100m", 100),
        ("250m", 250),
        ("1", 1000),
        ("0.3", 300),
        ("1.1", 1100),
        ("2.2", 2200),
        ("0.7", 700),
        ("1n", 1),
        ("1e-3", 1),
    ]:
        assert to_canonical("cpu", parse_quantity(text, what="cpu")) == millis


@pytest.mark.parametrize("name", ["memory", "nvidia.com/gpu", "pods", "ephemeral-storage", "x/y"])
def test_to_canonical_other_resources_unchanged(name):
    assert to_canonical(name, 123.5) == 123.5


@given(st.integers(min_value=0, max_value=10**9))
def test_to_canonical_integer_millicores_roundtrip(m):
    assert to_canonical("cpu", parse_quantity(f"{m}m", what="cpu")) == m


@given(st.integers(min_value=0, max_value=10**6), st.integers(min_value=0, max_value=999))
def test_to_canonical_decimal_cores(whole, frac):
    text = f"{whole}.{frac:03d}"
    assert to_canonical("cpu", parse_quantity(text, what="cpu")) == whole * 1000 + frac


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("-0", 0.0),
        ("1s", 1.0),
        ("90s", 90.0),
        ("1m", 60.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("300ms", 0.3),
        ("1us", 1e-6),
        ("1\u00b5s", 1e-6),
        ("1\u03bcs", 1e-6),
        ("10ns", 1e-8),
        ("-1s", -1.0),
        ("+2m", 120.0),
        ("5m0s", 300.0),
        ("1h0m0s", 3600.0),
        (".5s", 0.5),
        ("1.s", 1.0),
        ("1d", 86400.0),
        ("2w", 14 * 86400.0),
        ("1w2d3h", 7 * 86400 + 2 * 86400 + 3 * 3600.0),
        ("0s", 0.0),
        (30, 30.0),
        (1.5, 1.5),
        (-5, -5.0),
        (timedelta(minutes=2), 120.0),
    ],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "s",
        "1",
        "30",
        "abc",
        "1x",
        "1H",
        "1h 30m",
        ".s",
        "1.2.3s",
        "--1s",
        "1s-",
        "one hour",
        "1sec",
        None,
        True,
        [1],
        {"a": 1},
        float("nan"),
    ],
)
def test_parse_duration_rejects_garbage(bad):
    with pytest.raises(ValueError):
        parse_duration(bad)


def test_parse_duration_message_names_units():
    with pytest.raises(ValueError, match="unit"):
        parse_duration("5y")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-05-01T12:00:00Z", datetime(2024, 5, 1, 12, tzinfo=timezone.utc)),
        ("2024-05-01t12:00:00z", datetime(2024, 5, 1, 12, tzinfo=timezone.utc)),
        ("2024-05-01T12:00:00.5Z", datetime(2024, 5, 1, 12, 0, 0, 500000, tzinfo=timezone.utc)),
        (
            "2024-05-01T12:00:00.123456789Z",
            datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=timezone.utc),
        ),
        ("2024-05-01T14:00:00+02:00", datetime(2024, 5, 1, 12, tzinfo=timezone.utc)),
        ("2024-05-01T07:30:00-04:30", datetime(2024, 5, 1, 12, tzinfo=timezone.utc)),
        ("2024-05-01T12:00:00+00:00", datetime(2024, 5, 1, 12, tzinfo=timezone.utc)),
    ],
)
def test_parse_time(text, expected):
    got = parse_time(text)
    assert got == expected
    assert got.tzinfo is timezone.utc


def test_parse_time_datetime_objects():
    naive = datetime(2024, 1, 2, 3, 4, 5)
    assert parse_time(naive) == datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    aware = datetime(2024, 1, 2, 5, 4, 5, tzinfo=timezone(timedelta(hours=2)))
    got = parse_time(aware)
    assert got == datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    assert got.tzinfo is timezone.utc
    assert parse_time(date(2024, 1, 2)) == datetime(2024, 1, 2, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "yesterday",
        "2024-05-01",
        "2024-05-01T12:00:00",
        "2024-13-01T00:00:00Z",
        "2024-02-30T00:00:00Z",
        "2024-05-01T25:00:00Z",
        "2024-05-01T12:00Z",
        "1714564800",
        "2024-05-01T12:00:00+25:00",
        1714564800,
        None,
        ["2024"],
    ],
)
def test_parse_time_rejects_garbage(bad):
    with pytest.raises(ValueError):
        parse_time(bad)


def test_quantity_results_are_finite():
    assert math.isfinite(parse_quantity("999Ei", what="x"))


@given(
    st.integers(0, 9999),
    st.integers(0, 13),
    st.integers(0, 32),
    st.integers(0, 24),
    st.integers(0, 60),
    st.integers(0, 60),
    st.sampled_from(["", "٢", "６", "W"]),
    st.integers(0, 19),
)
def test_api_server_timestamps_parse_as_the_rfc3339_expression_reads_them(
    year, month, day, hour, minute, second, odd_character, at
):
    # parse_time reads YYYY-MM-DDTHH:MM:SSZ in C; with a trailing space the same text
    # takes the general expression, which must agree: same instant, or both refuse.
    text = f"{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}Z"
    if odd_character and text[at].isdigit():  # a non-ASCII digit, an ISO week
        text = text[:at] + odd_character + text[at + 1 :]

    def read(value):
        try:
            return parse_time(value)
        except ValueError:
            return None

    fast, general = read(text), read(text + " ")
    assert fast == general
    assert fast is None or fast.tzinfo is timezone.utc
