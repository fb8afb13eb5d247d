"""Time-based fair share: the usage arithmetic against hand-computed values, its
configuration, and what it changes in a session."""

from __future__ import annotations

import logging
import math
import random

import numpy as np
import pytest

import kai
from kai.api.errors import ConfigError, InputError
from kai.backends import get_backend
from kai.fairshare import (
    UsageDBConfig,
    UsageParams,
    UsageTracker,
    check_usage_table,
    decayed_usage,
    load_usage_file,
    usage_vectors,
)
from kai.fairshare_prometheus import PrometheusUsageClient, UsageLister, UsageQueryError
from tests.factory import NOW, gang, node, queue

LN2 = math.log(2.0)

# ----------------------------------------------------------------- the arithmetic


def _gpu(table, queue):
    return table[queue]["gpu"]


def test_without_decay_usage_is_the_share_of_capacity_over_the_history():
    # a holds the 16-GPU cluster for 10 s, then a and b hold 8 each for 10 s.
    samples = [(0.0, "a", {"gpu": 16.0}), (10.0, "a", {"gpu": 8.0}), (10.0, "b", {"gpu": 8.0})]
    table = decayed_usage(samples, 20.0, UsageParams(), {"gpu": 16.0})
    # a: 16*10 + 8*10 = 240 GPU-s of 320; b: 80 of 320
    assert _gpu(table, "a") == pytest.approx(0.75)
    assert _gpu(table, "b") == pytest.approx(0.25)


def test_a_half_life_weighs_recent_use_more():
    # a holds everything over [0, 600), b over [600, 1200); half-life 600 s, now 1200.
    samples = [(0.0, "a", {"gpu": 16.0}), (600.0, "a", {}), (600.0, "b", {"gpu": 16.0})]
    table = decayed_usage(samples, 1200.0, UsageParams(half_life=600.0), {"gpu": 16.0})
    # integral of 2^-((1200 - t) / 600): [0, 600] -> (600/ln2) * 0.25, [600, 1200] ->
    # (600/ln2) * 0.5, of (600/ln2) * 0.75 in all.
    assert _gpu(table, "a") == pytest.approx(1 / 3)
    assert _gpu(table, "b") == pytest.approx(2 / 3)
    # Without the decay both halves count the same.
    plain = decayed_usage(samples, 1200.0, UsageParams(), {"gpu": 16.0})
    assert (_gpu(plain, "a"), _gpu(plain, "b")) == pytest.approx((0.5, 0.5))


def test_weight_is_the_integral_of_the_decay():
    p = UsageParams(half_life=100.0)
    assert p.weight(0.0, 100.0, 100.0) == pytest.approx((100 / LN2) * 0.5)
    assert p.weight(0.0, 100.0, 200.0) == pytest.approx((100 / LN2) * 0.25)
    assert p.weight(5.0, 5.0, 10.0) == 0.0
    assert UsageParams().weight(3.0, 10.0, 1e9) == 7.0


def test_a_sliding_window_forgets_what_is_older():
    samples = [(0.0, "a", {"gpu": 16.0}), (600.0, "a", {}), (600.0, "b", {"gpu": 16.0})]
    gone = decayed_usage(samples, 1200.0, UsageParams(window=600.0), {"gpu": 16.0})
    assert (_gpu(gone, "a"), _gpu(gone, "b")) == (0.0, 1.0)
    # window 1000 s: [200, 1200]; a's 400 s and b's 600 s of 1000.
    part = decayed_usage(samples, 1200.0, UsageParams(window=1000.0), {"gpu": 16.0})
    assert (_gpu(part, "a"), _gpu(part, "b")) == pytest.approx((0.4, 0.6))


def test_a_tumbling_window_starts_afresh_at_each_boundary():
    samples = [(0.0, "a", {"gpu": 16.0}), (600.0, "a", {}), (600.0, "b", {"gpu": 16.0})]
    params = UsageParams(window=500.0, window_type="tumbling")
    # now 1200: the window began at 1000 and holds only b.
    late = decayed_usage(samples, 1200.0, params, {"gpu": 16.0})
    assert (_gpu(late, "a"), _gpu(late, "b")) == (0.0, 1.0)
    # Exactly at a boundary the window that just ended is read: [500, 1000].
    edge = decayed_usage(samples, 1000.0, params, {"gpu": 16.0})
    assert (_gpu(edge, "a"), _gpu(edge, "b")) == pytest.approx((0.2, 0.8))
    assert params.window_start(1000.0, 0.0) == 500.0
    assert params.window_start(1000.1, 0.0) == 1000.0
    shifted = UsageParams(window=500.0, window_type="tumbling", tumbling_start=100.0)
    assert shifted.window_start(1200.0) == 1100.0


def test_capacity_counts_only_from_the_start_of_the_history():
    # One day of history in a one-week window: half the cluster is usage 0.5, not 1/14.
    table = decayed_usage([(100.0, "a", {"gpu": 4.0})], 86500.0, UsageParams(), {"gpu": 8.0})
    assert _gpu(table, "a") == pytest.approx(0.5)


def test_capacity_may_change_over_time():
    capacity = [(0.0, {"gpu": 8.0}), (100.0, {"gpu": 16.0})]
    table = decayed_usage([(0.0, "a", {"gpu": 8.0})], 200.0, UsageParams(), capacity)
    assert _gpu(table, "a") == pytest.approx(1600 / 2400)


def test_every_resource_is_normalised_on_its_own_and_empty_capacity_gives_zero():
    samples = [(0.0, "a", {"gpu": 2.0, "cpu": 4000.0, "memory": 1e9})]
    cap = {"gpu": 8.0, "cpu": 16000.0, "memory": 0.0}
    table = decayed_usage(samples, 60.0, UsageParams(half_life=30.0), cap)
    assert table["a"] == pytest.approx({"gpu": 0.25, "cpu": 0.25, "memory": 0.0})


def test_samples_after_now_and_unordered_samples():
    samples = [(10.0, "a", {"gpu": 0.0}), (0.0, "a", {"gpu": 8.0}), (50.0, "a", {"gpu": 8.0})]
    table = decayed_usage(samples, 20.0, UsageParams(), {"gpu": 8.0})
    assert _gpu(table, "a") == pytest.approx(0.5)


@pytest.mark.parametrize(
    "params",
    [
        UsageParams(),
        UsageParams(half_life=300.0),
        UsageParams(half_life=120.0, window=900.0),
        UsageParams(window=700.0, window_type="tumbling"),
        UsageParams(half_life=200.0, window=650.0, window_type="tumbling", tumbling_start=-40.0),
    ],
)
def test_the_incremental_tracker_gives_what_the_samples_give(params):
    rng = random.Random(7)
    tracker = UsageTracker(params)
    samples = []
    t, period = 0.0, 10.0
    queues = ["a", "b", "c"]
    for step in range(300):
        live = queues[: 1 + min(step // 40, 2)]  # queues appear over time
        alloc = {q: {"gpu": float(rng.randint(0, 4)), "cpu": rng.uniform(0, 8000)} for q in live}
        cap = {"gpu": 16.0, "cpu": 32000.0, "memory": 1.0}
        tracker.record(t, t + period, alloc, cap)
        samples += [(t, q, a) for q, a in alloc.items()]
        t += period
        if step % 37 == 36 or step == 299:
            expected = decayed_usage(samples, t, params, cap, start=0.0)
            got = tracker.usage(t)
            for q in expected:
                for r in ("gpu", "cpu"):
                    assert got[q][r] == pytest.approx(expected[q][r], rel=1e-9, abs=1e-12)


def test_the_tracker_refuses_going_back_in_time():
    tracker = UsageTracker(UsageParams())
    tracker.record(0.0, 10.0, {"a": {"gpu": 1.0}}, {"gpu": 1.0})
    with pytest.raises(ValueError, match="overlaps"):
        tracker.record(5.0, 15.0, {}, {"gpu": 1.0})
    assert tracker.usage(10.0) == {"a": {"gpu": 1.0, "cpu": 0.0, "memory": 0.0}}
    with pytest.raises(ValueError, match="before"):
        tracker.usage(9.0)


# ------------------------------------------------------------------ configuration


def test_usage_params_take_kais_defaults_and_names():
    p = UsageParams.from_config(None)
    assert (p.half_life, p.window, p.window_type) == (None, 7 * 24 * 3600.0, "sliding")
    p = UsageParams.from_config(
        {
            "halfLifePeriod": "10m",
            "windowSize": "168h",
            "windowType": "tumbling",
            "tumblingWindowStartTime": "2026-01-01T00:00:00Z",
            "fetchInterval": "30s",
            "extraParams": {"queryResolution": "15s"},
        }
    )
    assert (p.half_life, p.window, p.window_type, p.fetch_interval) == (
        600.0,
        604800.0,
        "tumbling",
        30.0,
    )
    assert p.tumbling_start == 1767225600.0
    assert p.extra_params == {"queryResolution": "15s"}
    assert UsageParams.from_config({"halfLifePeriod": "0"}).half_life is None
    assert UsageParams.from_config({"halfLifePeriod": ""}).half_life is None


@pytest.mark.parametrize(
    ("raw", "field", "message"),
    [
        ({"halfLifePeriod": "ten minutes"}, "usageParams.halfLifePeriod", "invalid duration"),
        ({"halfLifePeriod": "-5m"}, "usageParams.halfLifePeriod", "negative"),
        ({"windowSize": "0s"}, "usageParams.windowSize", "longer than 0"),
        ({"windowType": "cron"}, "usageParams.windowType", "cron window type is not supported"),
        ({"windowType": "hopping"}, "usageParams.windowType", "not one of sliding, tumbling"),
        ({"tumblingWindowStartTime": "yesterday"}, "tumblingWindowStartTime", "RFC 3339"),
        ({"halfLife": "5m"}, "usageParams.halfLife", "unknown field"),
        ({"extraParams": ["a"]}, "usageParams.extraParams", "map of strings"),
    ],
)
def test_bad_usage_params_name_the_field(raw, field, message):
    with pytest.raises(ConfigError, match=message) as err:
        UsageDBConfig.from_config({"clientType": "prometheus", "usageParams": raw})
    assert err.value.field is not None and err.value.field.endswith(field)
    assert err.value.field.startswith("usageDBConfig.")


def test_usage_db_config_fields():
    cfg = UsageDBConfig.from_config(
        {
            "clientType": "prometheus",
            "connectionString": "http://prom:9090",
            "extraParams": {"gpuCapacityMetric": "sum(x)", "queryResolution": "1m"},
            "usageParams": {"extraParams": {"queryResolution": "5s"}},
        }
    )
    assert cfg.connection_string == "http://prom:9090"
    # extraParams under usageParams (KAI's code) wins over the documented outer place.
    assert cfg.params.extra_params == {"gpuCapacityMetric": "sum(x)", "queryResolution": "5s"}
    with pytest.raises(ConfigError, match="not a supported client type") as err:
        UsageDBConfig.from_config({"clientType": "influx"})
    assert err.value.field == "usageDBConfig.clientType"
    with pytest.raises(ConfigError, match="expected a map"):
        UsageDBConfig.from_config("prometheus")


def _config(**fields):
    return {"apiVersion": "kai.scheduler/v1", "kind": "SchedulerConfiguration", **fields}


def test_the_scheduler_configuration_carries_a_kai_shards_settings():
    usage_db = {
        "clientType": "prometheus",
        "connectionString": "http://127.0.0.1:9090",
        "usageParams": {"halfLifePeriod": "10m", "windowSize": "1w"},
    }
    snap = kai.Snapshot.from_objects([_config(kValue=0.5, usageDBConfig=usage_db)])
    config = snap.scheduler_config()
    assert config.k_value == 0.5
    assert config.usage_db is not None
    assert config.usage_db.params.half_life == 600.0
    # The plugin's own argument wins over the shard-level value.
    tiers = [{"plugins": [{"name": "proportion", "arguments": {"kValue": "2"}}]}]
    own = kai.Snapshot.from_objects([_config(kValue=0.5, tiers=tiers)]).scheduler_config()
    assert own.k_value == 2.0


def test_a_bad_value_in_the_configuration_file_names_file_and_field(tmp_path):
    path = tmp_path / "conf.yaml"
    path.write_text(
        "apiVersion: kai.scheduler/v1\nkind: SchedulerConfiguration\n"
        "usageDBConfig:\n  clientType: prometheus\n  usageParams:\n    windowSize: a week\n"
    )
    with pytest.raises(ConfigError) as err:
        kai.Snapshot.from_files([str(path)]).scheduler_config()
    text = str(err.value)
    assert str(path) in text and "field usageDBConfig.usageParams.windowSize" in text
    path.write_text("apiVersion: kai.scheduler/v1\nkind: SchedulerConfiguration\nkValue: lots\n")
    with pytest.raises(ConfigError, match="field kValue: 'lots' is not a number"):
        kai.Snapshot.from_files([str(path)]).scheduler_config()


def test_usage_tables_are_checked():
    assert check_usage_table({"a": {"nvidia.com/gpu": 1, "cpu": 0.5}}) == {
        "a": {"gpu": 1.0, "cpu": 0.5}
    }
    for bad, field in (
        ({"a": {"gpu": -0.1}}, "a.gpu"),
        ({"a": {"gpu": float("nan")}}, "a.gpu"),
        ({"a": {"gpu": "lots"}}, "a.gpu"),
        ({"a": {"disk": 1}}, "a.disk"),
        ({"a": 0.5}, "a"),
    ):
        with pytest.raises(InputError) as err:
            check_usage_table(bad)
        assert err.value.field == field
    with pytest.raises(InputError, match="expected a map of queue"):
        check_usage_table([1])


def test_usage_files(tmp_path):
    path = tmp_path / "usage.yaml"
    path.write_text("queues:\n  a: {gpu: 0.25}\n")
    assert load_usage_file(str(path)) == {"a": {"gpu": 0.25}}
    path.write_text('{"a": {"gpu": true}}')
    with pytest.raises(InputError) as err:
        load_usage_file(str(path))
    assert err.value.file == str(path) and err.value.field == "a.gpu"


def test_parents_without_a_row_get_their_childrens_usage():
    parents = {"dept": None, "a": "dept", "b": "dept", "other": None}
    table = {"a": {"gpu": 0.25}, "b": {"gpu": 0.5, "cpu": 0.125}}
    vectors = usage_vectors(table, parents, ("gpu", "cpu"))
    assert vectors == {"dept": [0.75, 0.125], "a": [0.25, 0.0], "b": [0.5, 0.125], "other": [0, 0]}
    # A parent's own row wins.
    assert usage_vectors({**table, "dept": {"gpu": 0.1}}, parents, ("gpu",))["dept"] == [0.1]


# ------------------------------------------------------------------- in a session

PLUGINS = ["predicates", "priority", "gpupack", "sg-nodelocalgreedy", "sg-multinodegang"]


def _two_queues(k_value, *, a_running=False):
    """A 16-GPU node; queues a (the older) and b with no quota and weight 1; each has
    one 16-GPU single-pod job (a's running when ``a_running``)."""
    proportion = {"name": "proportion", "arguments": {"kValue": str(k_value)}}
    objs = [
        node("n1", gpus=16, cpu="256", memory="2Ti"),
        queue("a", gpu=(0, -1, 1), created="2026-01-01T00:00:00Z"),
        queue("b", gpu=(0, -1, 1), created="2026-01-02T00:00:00Z"),
        *gang("ja", 1, gpus=16, queue="a", nodes=["n1"] if a_running else None),
        *gang("jb", 1, gpus=16, queue="b"),
        _config(tiers=[{"plugins": [PLUGINS[0], proportion, *PLUGINS[1:]]}]),
    ]
    return kai.Snapshot.from_objects(objs)


def _bound(result):
    return [d.pod for d in result.decisions if d.type == "bind"]


BACKENDS = ["native", "python"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_queue_with_more_history_loses_the_contested_gpus(backend):
    snap = _two_queues(1.0)
    # Equal history: the older queue, a, goes first.
    assert _bound(kai.run_session(snap, now=NOW, backend=backend)) == ["default/ja-0"]
    # a used half the cluster over the window: b's share is larger and b runs.
    result = kai.run_session(snap, now=NOW, backend=backend, queue_usage={"a": {"gpu": 0.5}})
    assert _bound(result) == ["default/jb-0"]
    # 16 GPUs split by P = max(0, W' + k (W' - U)): a 0.5 + (0.5 - 0.5) = 0.5, b 1.0 ->
    # 5.33 and 10.67, floored to 5 and 10, the left-over GPU to b's larger remainder.
    assert (result.queues["a"].fair_share["gpu"], result.queues["b"].fair_share["gpu"]) == (
        5.0,
        11.0,
    )
    # b's history instead: a keeps its turn.
    result = kai.run_session(snap, now=NOW, backend=backend, queue_usage={"b": {"gpu": 0.5}})
    assert _bound(result) == ["default/ja-0"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_k_value_zero_turns_history_off(backend):
    snap = _two_queues(0.0)
    result = kai.run_session(snap, now=NOW, backend=backend, queue_usage={"a": {"gpu": 0.9}})
    assert _bound(result) == ["default/ja-0"]
    assert result.queues["b"].fair_share["gpu"] == 8.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_starved_queue_reclaims_from_the_one_that_used_the_cluster(backend):
    snap = _two_queues(1.0, a_running=True)
    assert kai.run_session(snap, now=NOW, backend=backend).decisions == []
    result = kai.run_session(snap, now=NOW, backend=backend, queue_usage={"a": {"gpu": 1.0}})
    kinds = [(d.action, d.type, d.pod) for d in result.decisions]
    assert kinds == [
        ("reclaim", "evict", "default/ja-0"),
        ("reclaim", "pipeline", "default/jb-0"),
    ]


def test_deserved_quota_comes_before_history():
    objs = [
        node("n1", gpus=16, cpu="256", memory="2Ti"),
        queue("a", gpu=(6, -1, 1), created="2026-01-01T00:00:00Z"),
        queue("b", gpu=(0, -1, 1), created="2026-01-02T00:00:00Z"),
        *gang("ja", 16, gpus=1, queue="a", min_member=1),
        *gang("jb", 16, gpus=1, queue="b", min_member=1),
    ]
    snap = kai.Snapshot.from_objects(objs)
    result = kai.run_session(snap, now=NOW, actions=[], queue_usage={"a": {"gpu": 1.0}})
    # a's usage takes away its over-quota weight (P = max(0, 0.5 + 1 * (0.5 - 1))), not
    # its 6 deserved GPUs.
    assert result.queues["a"].fair_share["gpu"] == 6.0
    assert result.queues["b"].fair_share["gpu"] == 10.0


def test_a_leaf_table_reaches_the_departments_above():
    objs = [
        node("n1", gpus=16, cpu="256", memory="2Ti"),
        queue("d1", gpu=(0, -1, 1), created="2026-01-01T00:00:00Z"),
        queue("d2", gpu=(0, -1, 1), created="2026-01-02T00:00:00Z"),
        queue("a", parent="d1", gpu=(0, -1, 1)),
        queue("b", parent="d2", gpu=(0, -1, 1)),
        *gang("ja", 16, gpus=1, queue="a", min_member=1),
        *gang("jb", 16, gpus=1, queue="b", min_member=1),
    ]
    snap = kai.Snapshot.from_objects(objs)
    result = kai.run_session(snap, now=NOW, actions=[], queue_usage={"a": {"gpu": 0.5}})
    assert result.queues["d1"].fair_share["gpu"] == 5.0
    assert result.queues["d2"].fair_share["gpu"] == 11.0


def test_bad_usage_tables_are_input_errors():
    snap = _two_queues(1.0)
    with pytest.raises(InputError) as err:
        kai.run_session(snap, now=NOW, queue_usage={"a": {"gpu": -1}})
    assert err.value.obj == "queue_usage" and err.value.field == "a.gpu"


def test_the_backends_divide_with_usage_alike():
    """The compiled core and the Python fallback make the same split with usage, on
    random sibling sets (weights, requests, limits, priorities, usage)."""
    rng = np.random.default_rng(11)
    native, python = get_backend("native"), get_backend("python")
    for _ in range(300):
        n = int(rng.integers(2, 7))
        deserved = rng.choice([0.0, 0.0, 1.0, 3.0, -1.0], n)
        limit = rng.choice([-1.0, -1.0, 4.0, 12.0], n)
        weight = rng.choice([0.0, 1.0, 1.0, 2.0, 3.0], n)
        request = rng.integers(0, 20, n).astype(float)
        priority = rng.choice([100, 100, 200], n).astype(np.int64)
        rank = np.arange(n, dtype=np.int64)
        usage = rng.choice([0.0, 0.1, 0.5, 0.9, 1.0, 1.7], n)
        k = float(rng.choice([0.0, 0.5, 1.0, 3.0]))
        total = float(rng.integers(0, 40))
        args = (total, deserved, limit, weight, request, priority, rank, k, usage)
        assert native.divide_fair_share(*args).tolist() == python.divide_fair_share(*args).tolist()


def test_the_backends_make_the_same_decisions_with_usage():
    rng = random.Random(5)
    for trial in range(6):
        objs = [node(f"n{i}", gpus=8) for i in range(3)]
        usage = {}
        for q in "abcd":
            objs.append(queue(q, gpu=(rng.choice([0, 0, 2]), -1, rng.choice([1, 2]))))
            usage[q] = {"gpu": rng.choice([0.0, 0.2, 0.6, 1.0])}
            for j in range(rng.randint(1, 3)):
                size = rng.choice([1, 2, 4])
                running = rng.random() < 0.4
                nodes = [f"n{rng.randint(0, 2)}"] * size if running else None
                objs += gang(f"{q}{trial}{j}", size, gpus=rng.choice([1, 2]), queue=q, nodes=nodes)
        snap = kai.Snapshot.from_objects(objs)
        results = [
            kai.run_session(snap, now=NOW, backend=b, queue_usage=usage).to_json() for b in BACKENDS
        ]
        assert results[0] == results[1]


# ------------------------------------------------------------ the Prometheus client


def test_the_promql_decays_towards_now_and_sums_over_the_window():
    params = UsageParams(half_life=600.0, window=3600.0, extra_params={"queryResolution": "30s"})
    client = PrometheusUsageClient("http://prom:9090/", params)
    assert client.usage_query("gpu", 1000.0) == (
        "sum by (queue_name) (sum_over_time(((kai_queue_allocated_gpus) * "
        "(0.5^((1000.000 - time()) / 600)))[3600s:30s]))"
    )
    assert client.capacity_query("cpu", 1000.0) == (
        "sum(sum_over_time(((kai_cluster_capacity_cpu_cores) * "
        "(0.5^((1000.000 - time()) / 600)))[3600s:30s]))"
    )
    plain = PrometheusUsageClient(
        "http://prom:9090",
        UsageParams(window=7200.0, extra_params={"memoryAllocationMetric": "my_mem"}),
    )
    assert plain.usage_query("memory", 5.0) == (
        "sum by (queue_name) (sum_over_time((my_mem)[7200s:60s]))"
    )
    # A tumbling window reaches back to its start only.
    tumbling = PrometheusUsageClient(
        "http://prom:9090", UsageParams(window=3600.0, window_type="tumbling"), started=0.0
    )
    assert "[1000s:60s]" in tumbling.capacity_query("gpu", 4600.0)
    assert tumbling.fetch(3630.0) == {}  # 30 s into a window: less than one step


def test_an_unreachable_prometheus_is_a_clear_error():
    # A port nothing listens on (bound, then closed).
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = PrometheusUsageClient(f"http://127.0.0.1:{port}", UsageParams())
    with pytest.raises(
        UsageQueryError, match=f"cannot reach Prometheus at http://127.0.0.1:{port}"
    ):
        client.fetch(1e9)


def test_the_lister_keeps_the_last_usage_and_says_why_when_a_fetch_fails(caplog):
    answers: list = [{"a": {"gpu": 0.5}}, UsageQueryError("cannot reach Prometheus at X")]
    clock = [0.0]

    def fetch():
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    lister = UsageLister(fetch, UsageParams(), where="http://prom", clock=lambda: clock[0])
    with caplog.at_level(logging.WARNING, logger="kai.fairshare_prometheus"):
        assert lister.table() == {}
        assert lister.refresh()
        clock[0] = 42.0
        assert not lister.refresh()
    assert lister.table() == {"a": {"gpu": 0.5}}
    (record,) = caplog.records
    assert "usage query to http://prom failed: cannot reach Prometheus at X" in record.message
    assert "scheduling goes on with the usage fetched 42s ago" in record.message


def test_the_lister_starts_with_zero_usage_when_prometheus_never_answered(caplog):
    def fetch():
        raise UsageQueryError("cannot reach Prometheus at http://127.0.0.1:1")

    lister = UsageLister(fetch, UsageParams(wait_timeout=5.0), where="http://127.0.0.1:1")
    with caplog.at_level(logging.WARNING, logger="kai.fairshare_prometheus"):
        lister.start()
        try:
            assert lister.table() == {}  # waits for the first attempt, then goes on
        finally:
            lister.stop()
    assert "with zero usage (none fetched yet)" in caplog.text


# ---------------------------------------------------------------- kai simulate


def test_kai_simulate_reads_a_usage_table(tmp_path):
    import json

    import yaml
    from click.testing import CliRunner

    from kai.cli import main

    cluster = tmp_path / "cluster.yaml"
    proportion = {"name": "proportion", "arguments": {"kValue": "1"}}
    docs = [
        node("n1", gpus=16, cpu="256", memory="2Ti"),
        queue("a", gpu=(0, -1, 1), created="2026-01-01T00:00:00Z"),
        queue("b", gpu=(0, -1, 1), created="2026-01-02T00:00:00Z"),
        *gang("ja", 1, gpus=16, queue="a"),
        *gang("jb", 1, gpus=16, queue="b"),
        _config(tiers=[{"plugins": [PLUGINS[0], proportion, *PLUGINS[1:]]}]),
    ]
    cluster.write_text(yaml.safe_dump_all(docs))
    usage = tmp_path / "usage.json"
    usage.write_text(json.dumps({"a": {"gpu": 0.5}}))

    def simulate(*extra):
        result = CliRunner().invoke(main, ["simulate", str(cluster), "--now", NOW, *extra])
        return result.exit_code, result.output

    code, out = simulate()
    assert code == 0 and json.loads(out)["pods"]["default/ja-0"]["status"] == "Binding"
    code, out = simulate("--queue-usage", str(usage))
    assert code == 0 and json.loads(out)["pods"]["default/jb-0"]["status"] == "Binding"
    usage.write_text(json.dumps({"a": {"gpu": "most"}}))
    code, out = simulate("--queue-usage", str(usage))
    assert code == 2
    assert f"{usage}, field a.gpu: expected a number, got 'most'" in out


def test_duration_extra_params_are_checked_with_the_rest():
    with pytest.raises(ConfigError, match="invalid duration") as err:
        UsageParams.from_config({"extraParams": {"queryResolution": "often"}})
    assert err.value.field == "usageDBConfig.usageParams.extraParams.queryResolution"
