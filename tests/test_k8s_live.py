"""The live scheduler (``kai run``) against a fake Kubernetes API server on 127.0.0.1."""

from __future__ import annotations

import copy
import re
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from kai.cli import main
from kai.k8s.cache import ClusterCache
from kai.k8s.client import KINDS, KubeClient, TokenBucket, parse_owner_resource
from kai.k8s.leader import LeaderElector
from kai.k8s.scheduler import CycleReport, Scheduler, SchedulerOptions
from kai.k8s.server import parse_listen_address
from kai.snapshot.builder import GPU_GROUP_LABEL
from kai.snapshot.loader import convert_object
from tests import factory as f
from tests.fake_apiserver import FakeApiServer

LAST_START = "kai.scheduler/last-start-timestamp"
OWNER = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "j1", "controller": True}]


_OURS = ("informer-", "leader-election", "kai-bind", "kai-http")


@pytest.fixture(autouse=True)
def no_leftover_threads() -> Iterator[None]:
    yield
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        left = [t.name for t in threading.enumerate() if t.name.startswith(_OURS)]
        if not left:
            return
        time.sleep(0.02)
    raise AssertionError(f"threads left running: {left}")


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def client(api: FakeApiServer) -> Iterator[KubeClient]:
    c = KubeClient.for_host(api.url)
    try:
        yield c
    finally:
        c.close()


def _options(**kw) -> SchedulerOptions:
    base = dict(
        listen_address=None,
        leader_elect=False,
        schedule_period=0.05,
        sync_timeout=5.0,
        bind_backoff=0.01,
    )
    base.update(kw)
    return SchedulerOptions(**base)


@pytest.fixture(params=[True, False], ids=["pipelined", "through-a-proxy"])
def pipelined(request: pytest.FixtureRequest, client: KubeClient) -> bool:
    """Binds through the pipeline, or (as through a proxy) one per worker thread."""
    if not request.param:
        client.direct = None
    return request.param


def _one_cycle(sched: Scheduler) -> CycleReport:
    """Start the scheduler, run one cycle once its cache is synced, shut it down."""
    sched.start()
    try:
        assert sched.cache.wait_for_sync(5)
        return sched.cycle()
    finally:
        sched.shutdown()


def _owned(objs: list[dict]) -> list[dict]:
    for o in objs:
        if o["kind"] == "Pod":
            o["metadata"]["ownerReferences"] = OWNER
    return objs


def _node_of(api: FakeApiServer, name: str) -> str | None:
    pod = api.get("Pod", name, "default")
    return None if pod is None else pod["spec"].get("nodeName")


# ---------------------------------------------------------------------- cache


def test_cache_syncs_then_follows_the_watch(api: FakeApiServer, client: KubeClient) -> None:
    api.put(f.node("n1"))
    api.put(f.pod("p1"))
    cache = ClusterCache(client, retry_backoff=0.05)
    cache.start()
    try:
        assert cache.wait_for_sync(5)
        snap = cache.snapshot()
        assert [n.name for n in snap.objects.nodes] == ["n1"]
        assert [p.key for p in snap.objects.pods] == ["default/p1"]
        first_pod = snap.objects.pods[0]

        api.put(f.pod("p2"))
        api.put(f.pod("p1", node="n1"))  # modified
        api.put(f.queue("q"))
        assert api.wait_for(lambda: cache.count("Pod") == 2 and cache.count("Queue") == 1)
        assert api.wait_for(lambda: cache.get("Pod", "default", "p1")["spec"].get("nodeName"))
        snap = cache.snapshot()
        pods = {p.key: p for p in snap.objects.pods}
        assert pods["default/p1"].node_name == "n1"
        assert pods["default/p1"] is not first_pod
        # An unchanged object is not converted again.
        again = {p.key: p for p in cache.snapshot().objects.pods}
        assert again["default/p2"] is pods["default/p2"]

        api.delete("Pod", "p2", "default")
        assert api.wait_for(lambda: cache.count("Pod") == 1)
        assert api.list_count["pods"] == 1  # no relist needed
    finally:
        cache.stop()


def test_a_pod_handed_to_the_binder_is_seen_bound_then_pending_again(
    api: FakeApiServer, client: KubeClient
) -> None:
    api.put(f.node("n1"))
    api.put(f.pod("p1", gpus=1))
    cache = ClusterCache(client, retry_backoff=0.05)
    cache.start()
    try:
        assert cache.wait_for_sync(5)
        observed = cache.get("Pod", "default", "p1")
        before = copy.deepcopy(observed)
        pending = cache.snapshot().objects.pods[0]

        cache.assume_bound("default", "p1", "n1")
        bound = cache.snapshot().objects.pods[0]
        # The same pod as the API server would give it once bound, without a second parse
        # and without touching the object the watch brought.
        assert bound == convert_object(
            {**observed, "spec": {**observed["spec"], "nodeName": "n1"}}, file="Pod from the API"
        )
        assert bound.node_name == "n1" and pending.node_name is None
        assert observed == before

        cache.forget_bound("default", "p1")
        again = cache.snapshot().objects.pods[0]
        assert again.node_name is None
        assert cache.get("Pod", "default", "p1") == before
    finally:
        cache.stop()


def test_cache_relists_after_410_gone(api: FakeApiServer, client: KubeClient) -> None:
    api.put(f.pod("p1"))
    cache = ClusterCache(client, kinds=[KINDS["Pod"]], retry_backoff=0.05)
    cache.start()
    try:
        assert cache.wait_for_sync(5)
        api.gone_next_watch.add("pods")
        api.end_watches()  # the watch ends; the next one answers 410 Gone
        api.put(f.pod("p2"))
        assert api.wait_for(lambda: api.list_count.get("pods", 0) >= 2)
        assert api.wait_for(lambda: cache.count("Pod") == 2)
        assert cache.relists["Pod"] >= 1
    finally:
        cache.stop()


def test_bad_object_is_skipped_and_reported(api: FakeApiServer, client: KubeClient) -> None:
    api.put(f.node("n1"))
    api.put(f.queue("q"))
    api.put(f.pod("bad", cpu="lots", queue="q"))
    api.put(f.pod("good", queue="q"))
    sched = Scheduler(client, _options())
    assert sched.run_once() == 0
    assert _node_of(api, "good") == "n1"
    assert _node_of(api, "bad") is None
    invalid = [e for e in api.events() if e["reason"] == "InvalidObject"]
    assert invalid and invalid[0]["involvedObject"]["name"] == "bad"
    assert invalid[0]["type"] == "Warning"


# ---------------------------------------------------------------------- one cycle


def test_run_once_binds_and_patches_the_podgroup(api: FakeApiServer, tmp_path: Path) -> None:
    api.put(f.node("n1", gpus=2))
    api.put(f.queue("q"))
    for o in f.gang("train", 2, gpus=1):
        api.put(o)
    for o in f.gang("big", 3, gpus=1):  # cannot fit next to train: pending
        api.put(o)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(api.kubeconfig())
    args = ["run", "--kubeconfig", str(kubeconfig), "--once", "--no-leader-elect"]
    args += ["--listen-address", "127.0.0.1:0", "--schedule-period", "100ms"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output

    assert _node_of(api, "train-0") == "n1" and _node_of(api, "train-1") == "n1"
    assert len(api.calls("POST", "/binding")) == 2
    pg = api.get("PodGroup", "train", "default")
    assert LAST_START in pg["metadata"]["annotations"]
    # The pending gang: a condition and an event that say why.
    big = api.get("PodGroup", "big", "default")
    (cond,) = big["status"]["schedulingConditions"]
    assert cond["type"] == "UnschedulableOnNodePool" and "gang" in cond["message"]
    events = [e for e in api.events() if e["reason"] == "Unschedulable"]
    assert [e["involvedObject"]["name"] for e in events] == ["big"]
    assert events[0]["type"] == "Warning" and events[0]["message"] == cond["message"]
    assert events[0]["source"]["component"] == "kai-scheduler"


def test_dry_run_writes_nothing(api: FakeApiServer, client: KubeClient) -> None:
    api.put(f.node("n1"))
    api.put(f.queue("q"))
    api.put(f.pod("p", queue="q"))
    sched = Scheduler(client, _options(dry_run=True))
    report = _one_cycle(sched)
    assert report.ok and [d.type for d in report.result.decisions] == ["bind"]
    assert [r for r in api.requests if r[0] != "GET"] == []


def _put_owned_gang(api: FakeApiServer, size: int) -> None:
    """Gang ``g`` of ``size`` one-GPU pods owned by a controller, queue ``q``, node ``n1``
    with room for four."""
    api.put(f.node("n1", gpus=4))
    api.put(f.queue("q"))
    for o in _owned(f.gang("g", size, gpus=1)):
        api.put(o)


def test_failed_bind_rolls_back_the_gang(
    api: FakeApiServer, client: KubeClient, pipelined: bool
) -> None:
    _put_owned_gang(api, 3)
    api.fail[("binding", "default/g-1")] = 500
    sched = Scheduler(client, _options(bind_attempts=3))
    assert (sched.binder._pipeline is not None) == pipelined
    report = _one_cycle(sched)
    applied = report.applied
    assert list(applied.bind_failed) == ["default/g-1"]
    assert applied.rollback_groups == ["default/g"]
    # Retried, then given up; the others were either never bound or deleted again.
    assert len(api.calls("POST", "/pods/g-1/binding")) == 3
    assert sorted(applied.rolled_back + applied.skipped) == ["default/g-0", "default/g-2"]
    for name in applied.rolled_back:
        assert api.calls("DELETE", f"/pods/{name.split('/')[1]}")
    for name in ("g-0", "g-1", "g-2"):
        assert _node_of(api, name) is None
    pg = api.get("PodGroup", "g", "default")
    assert LAST_START not in (pg["metadata"].get("annotations") or {})
    assert any(e["reason"] == "BindFailed" for e in api.events())
    assert sched.metrics.bind_failures._value.get() == 1


def test_a_bind_whose_answer_was_lost_is_bound_not_rolled_back(
    api: FakeApiServer, client: KubeClient, pipelined: bool
) -> None:
    # The bind went through but its answer did not come back: the retry's 409 says the
    # pod is on that node already, so the gang is whole.
    _put_owned_gang(api, 2)
    api.lose_bind_answer.add("default/g-1")
    report = _one_cycle(Scheduler(client, _options(bind_attempts=3)))
    applied = report.applied
    assert applied.bind_failed == {} and applied.rollback_groups == []
    assert sorted(applied.bound) == ["default/g-0", "default/g-1"]
    assert len(api.calls("POST", "/pods/g-1/binding")) == 2
    assert _node_of(api, "g-0") == _node_of(api, "g-1") == "n1"
    assert api.calls("DELETE", "/pods/") == []


def test_reclaim_evicts_through_the_eviction_api(api: FakeApiServer, client: KubeClient) -> None:
    api.put(f.node("n1", gpus=2))
    api.put(f.queue("q1", gpu=(1, -1, 1)))
    api.put(f.queue("q2", gpu=(1, -1, 1)))
    for o in f.gang("a", 2, gpus=1, queue="q1", min_member=1, nodes=["n1", "n1"]):
        api.put(o)
    for o in f.gang("b", 1, gpus=1, queue="q2"):
        api.put(o)
    sched = Scheduler(client, _options())
    sched.start()
    try:
        assert sched.cache.wait_for_sync(5)
        report = sched.cycle()
        assert report.applied.evicted == ["default/a-1"]
        assert report.applied.pipelined == ["default/b-0"]
        (call,) = api.calls("POST", "/eviction")
        assert call[1] == "/api/v1/namespaces/default/pods/a-1/eviction"
        assert call[2]["apiVersion"] == "policy/v1" and call[2]["kind"] == "Eviction"
        assert api.get("Pod", "a-1", "default") is None
        victim = api.get("PodGroup", "a", "default")
        assert "kai.scheduler/last-eviction-timestamp" in victim["metadata"]["annotations"]
        reasons = {(e["reason"], e["involvedObject"]["name"]) for e in api.events()}
        assert ("Evicted", "a-1") in reasons and ("Pipelined", "b-0") in reasons
        metrics = sched.metrics.render().decode()
        assert 'kai_pod_group_evicted_pods_total{action="reclaim"' in metrics
        # The eviction freed the GPU: the next cycle binds the reclaiming pod.
        assert api.wait_for(lambda: sched.cache.get("Pod", "default", "a-1") is None)
        sched.cycle()
        assert _node_of(api, "b-0") == "n1"
    finally:
        sched.shutdown()


# ---------------------------------------------------------------------- leader election


def _elector(client: KubeClient, identity: str) -> LeaderElector:
    return LeaderElector(
        client,
        "kai",
        "kai-scheduler",
        identity=identity,
        lease_duration=1.0,
        renew_deadline=0.6,
        retry_period=0.1,
    )


def test_leader_election_fails_over(api: FakeApiServer, client: KubeClient) -> None:
    a, b = _elector(client, "a"), _elector(client, "b")
    a.start()
    try:
        assert a.wait_for_leadership(3)
        b.start()
        time.sleep(0.5)
        assert not b.is_leader and a.is_leader
        a.stop(release=False)  # stops renewing, as a crashed replica would
        assert not a.is_leader
        started = time.monotonic()
        assert b.wait_for_leadership(5)
        assert time.monotonic() - started >= 0.5  # waited for the lease to expire
        lease = api.get("Lease", "kai-scheduler", "kai")
        assert lease["spec"]["holderIdentity"] == "b"
        assert lease["spec"]["leaseTransitions"] == 1
    finally:
        a.stop(release=False)
        b.stop(release=True)
    assert api.get("Lease", "kai-scheduler", "kai")["spec"]["holderIdentity"] == ""


def test_only_the_leader_schedules(api: FakeApiServer, client: KubeClient) -> None:
    api.put(f.node("n1"))
    api.put(f.queue("q"))
    api.put(f.pod("p", queue="q"))
    other = _elector(client, "other")
    other.start()
    try:
        assert other.wait_for_leadership(3)
        sched = Scheduler(
            client,
            _options(
                leader_elect=True,
                lease_namespace="kai",
                lease_duration=1.0,
                renew_deadline=0.6,
                retry_period=0.1,
                identity="me",
            ),
        )
        assert sched.run_once(leadership_timeout=0.5) == 1
        assert api.calls("POST", "/binding") == []
    finally:
        other.stop(release=True)
    # The lease released, a new replica takes over and schedules.
    sched = Scheduler(
        client,
        _options(
            leader_elect=True,
            lease_namespace="kai",
            lease_duration=1.0,
            renew_deadline=0.6,
            retry_period=0.1,
            identity="me",
        ),
    )
    assert sched.run_once(leadership_timeout=3) == 0
    assert _node_of(api, "p") == "n1"


# ---------------------------------------------------------------------- loop and HTTP


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_loop_serves_metrics_and_health(api: FakeApiServer, client: KubeClient) -> None:
    api.put(f.node("n1", gpus=2))
    api.put(f.queue("q"))
    for o in f.gang("g", 1, gpus=1):
        api.put(o)
    sched = Scheduler(client, _options(listen_address="127.0.0.1:0"))
    runner = threading.Thread(target=sched.run)
    runner.start()
    try:
        base = f"http://127.0.0.1:{_wait_port(sched)}"
        assert api.wait_for(lambda: sched.cycles >= 3)
        assert _node_of(api, "g-0") == "n1"
        code, body = _get(base + "/metrics")
        assert code == 200
        for name in (
            "kai_e2e_scheduling_latency_milliseconds",
            'kai_action_scheduling_latency_milliseconds{action="allocate"}',
            'kai_podgroups_scheduled_by_action_total{action="allocate"} 1.0',
            'kai_queue_fair_share_gpu{queue_display_name="q"',
            'kai_queue_gpu_usage{queue_display_name="q"',
            "kai_task_bind_latency_milliseconds_bucket",
            "kai_is_leader 1.0",
        ):
            assert name in body, name
        assert _get(base + "/healthz") == (200, "ok\n")
        assert _get(base + "/readyz") == (200, "ok\n")
        assert _get(base + "/nope")[0] == 404
        # Bound once only: the cache assumed the bind before the watch reported it.
        assert len(api.calls("POST", "/binding")) == 1
    finally:
        sched.stop()
        runner.join(10)
    assert not runner.is_alive()


def _wait_port(sched: Scheduler) -> int:
    deadline = time.monotonic() + 5
    while sched.server is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sched.server is not None
    return sched.server.port


def test_a_failing_cycle_does_not_stop_the_loop(api: FakeApiServer, client: KubeClient) -> None:
    api.put(f.node("n1"))
    sched = Scheduler(client, _options())
    calls = {"n": 0}
    real = sched.cache.snapshot

    def flaky():
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("boom")
        return real()

    sched.cache.snapshot = flaky  # type: ignore[method-assign]
    runner = threading.Thread(target=sched.run)
    runner.start()
    try:
        assert api.wait_for(lambda: sched.cycles >= 3)
    finally:
        sched.stop()
        runner.join(10)
    text = sched.metrics.render().decode()
    assert 'kai_scheduling_cycles_total{result="error"} 1.0' in text
    assert 'kai_scheduling_cycles_total{result="ok"}' in text


def test_listen_address_parsing() -> None:
    assert parse_listen_address(":8080") == ("", 8080)
    assert parse_listen_address("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_listen_address("[::1]:9090") == ("::1", 9090)
    with pytest.raises(ValueError):
        parse_listen_address("host:http")


def test_run_rejects_a_bad_period(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["run", "--schedule-period", "soon", "--once"])
    assert res.exit_code == 2
    assert "--schedule-period" in res.output


def test_run_rejects_a_consolidation_limit_below_minus_one() -> None:
    res = CliRunner().invoke(main, ["run", "--max-consolidation-preemptees", "-2", "--once"])
    assert res.exit_code == 2
    assert "--max-consolidation-preemptees" in res.output


def test_shard_scheduler_name_and_missing_crd(api: FakeApiServer, client: KubeClient) -> None:
    api.not_served.add("nodemetrics")  # no Koordinator in this cluster
    pool = {"kai.scheduler/node-pool": "a"}
    api.put(f.node("n-a", labels=pool))
    api.put(f.node("n-other", cpu="128"))  # bigger, but in the default pool
    queue = f.queue("q")
    queue["metadata"]["labels"] = pool
    api.put(queue)
    pg = f.podgroup("mine")
    pg["metadata"]["labels"] = pool
    api.put(pg)
    api.put(f.pod("mine-0", group="mine", scheduler="kai-a"))
    api.put(f.pod("foreign", queue="q", scheduler="default-scheduler"))
    api.put(f.pod("default-pool", queue="q", scheduler="kai-a"))
    opts = _options(scheduler_name="kai-a", partition_label_value="a")
    assert Scheduler(client, opts).run_once() == 0
    assert _node_of(api, "mine-0") == "n-a"
    assert _node_of(api, "foreign") is None  # another scheduler's pod
    assert _node_of(api, "default-pool") is None  # another node pool's pod


def test_sigterm_shuts_down_cleanly(api: FakeApiServer, tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(api.kubeconfig())
    api.put(f.node("n1"))
    cmd = [sys.executable, "-m", "kai.cli", "run", "--kubeconfig", str(kubeconfig)]
    cmd += ["--listen-address", "127.0.0.1:0", "--schedule-period", "50ms"]
    cmd += ["--lease-namespace", "kai", "--log-level", "info"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # Running once it holds the lease; then a signal must stop it and free the lease.
        # Generous: the interpreter's start-up is slow on a loaded machine.
        assert api.wait_for(lambda: api.get("Lease", "kai-scheduler", "kai") is not None, 90)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out
    assert "shutting down" in out
    assert api.get("Lease", "kai-scheduler", "kai")["spec"]["holderIdentity"] == ""


# ---------------------------------------------------------------------- shared GPUs


def _label_of(api: FakeApiServer, name: str) -> str | None:
    pod = api.get("Pod", name, "default") or {}
    return ((pod.get("metadata") or {}).get("labels") or {}).get(GPU_GROUP_LABEL)


def test_fractional_pods_share_one_device_across_cycles(
    api: FakeApiServer, client: KubeClient
) -> None:
    api.put(f.node("n1", gpus=2))
    api.put(f.queue("q"))
    api.put(f.pod("f1", queue="q", fraction=0.5))
    sched = Scheduler(client, _options())
    sched.start()
    try:
        assert sched.cache.wait_for_sync(5)
        first = sched.cycle()
        assert first.applied.bound == ["default/f1"] and first.applied.labelled == ["default/f1"]
        group = _label_of(api, "f1")
        assert group and group.startswith("n1-") and len(group) <= 63
        assert re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", group)
        pod = api.get("Pod", "f1", "default")
        assert pod["metadata"]["annotations"]["received-resource-type"] == "Fraction"
        assert pod["spec"]["nodeName"] == "n1"
        # The label went in (as a strategic merge patch) before the bind.
        writes = [(m, p) for m, p, _ in api.requests if m != "GET"]
        assert writes.index(("PATCH", "/api/v1/namespaces/default/pods/f1")) < writes.index(
            ("POST", "/api/v1/namespaces/default/pods/f1/binding")
        )
        (patch,) = [h for m, p, h in api.headers if m == "PATCH" and p.endswith("/pods/f1")]
        assert patch["Content-Type"] == "application/strategic-merge-patch+json"

        # A second half-GPU pod, next cycle: the snapshot reads the device back from the
        # label, and the pod joins it (gpupack) rather than opening the second GPU.
        api.put(f.pod("f2", queue="q", fraction=0.5))
        assert api.wait_for(lambda: sched.cache.get("Pod", "default", "f2") is not None)
        second = sched.cycle()
        assert second.applied.bound == ["default/f2"]
        (bind,) = [d for d in second.result.decisions if d.pod == "default/f2"]
        assert bind.gpu_groups == [group]
        assert _label_of(api, "f2") == group
        # Nothing left to do: no repeated label patch, no new bind.
        assert api.wait_for(lambda: sched.cache.get("Pod", "default", "f2")["spec"].get("nodeName"))
        third = sched.cycle()
        assert third.result.decisions == []
        assert len(api.calls("PATCH", "/pods/f1")) == 1
    finally:
        sched.shutdown()


def test_a_failed_gpu_group_label_fails_the_bind(api: FakeApiServer, client: KubeClient) -> None:
    api.put(f.node("n1", gpus=2))
    api.put(f.queue("q"))
    for o in _owned(f.gang("g", 2, gpus=0, fraction=0.5)):
        api.put(o)
    api.fail[("patch", "default/g-1")] = 500
    sched = Scheduler(client, _options(bind_attempts=2))
    report = _one_cycle(sched)
    applied = report.applied
    assert list(applied.bind_failed) == ["default/g-1"]
    assert "labelling its GPU group failed" in applied.bind_failed["default/g-1"]
    assert api.calls("POST", "/pods/g-1/binding") == []  # no label, no bind
    label_patches = [c for c in api.calls("PATCH") if c[1].endswith("/pods/g-1")]
    assert len(label_patches) == 2  # retried
    assert applied.rollback_groups == ["default/g"]
    for name in ("g-0", "g-1"):
        assert _node_of(api, name) is None


def test_new_gpu_group_ids_are_unique_stable_label_values() -> None:
    from kai.api.model import NodeTable
    from kai.api.objects import NodeObject
    from kai.api.resources import ResourceTable

    long_name = "gpu-node-" + "x" * 80 + ".example.com"
    nodes = [NodeObject(name=n, allocatable={"nvidia.com/gpu": 2}) for n in ("n1", long_name)]
    table = NodeTable(nodes, ResourceTable())
    ids = {table.new_group_id(i, uid) for i in (0, 1) for uid in ("uid-a", "uid-b")}
    assert len(ids) == 4  # per node and per first pod
    assert table.new_group_id(0, "uid-a") == table.new_group_id(0, "uid-a")  # deterministic
    for gid in ids:
        assert len(gid) <= 63 and re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", gid)
    # An id still in use on the node (the same pod moved to another device) gets a suffix.
    taken = table.new_group_id(0, "uid-a")
    table.gpu_groups[0][taken] = object()  # type: ignore[assignment]
    assert table.new_group_id(0, "uid-a") == f"{taken}-2"


def test_simulate_gpu_groups_are_deterministic() -> None:
    objs = [f.node("n1", gpus=2), f.queue("q")]
    objs += [f.pod(f"p{i}", queue="q", fraction=0.3) for i in range(4)]
    first = f.run(objs, ["allocate"])
    second = f.run(objs, ["allocate"])
    groups = [d["gpuGroups"] for d in first["decisions"]]
    assert groups == [d["gpuGroups"] for d in second["decisions"]]
    assert all(g and g[0].startswith("n1-") for g in groups)


# ---------------------------------------------------------------------- owners


def _owner(kind: str, api_version: str, name: str, owner: dict | None = None, **labels) -> dict:
    meta: dict = {"name": name, "namespace": "default", "uid": f"uid-{kind}-{name}"}
    if labels:
        meta["labels"] = {k.replace("_", "/", 1): v for k, v in labels.items()}
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
            }
        ]
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": meta,
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "big"}]}}},
    }


def test_owner_preemptibility_is_read_from_watched_owners(
    api: FakeApiServer, client: KubeClient
) -> None:
    label = {"kai.scheduler_preemptibility": "non-preemptible"}
    deploy = api.put(_owner("Deployment", "apps/v1", "web", **label))
    rs = api.put(_owner("ReplicaSet", "apps/v1", "web-1", deploy))
    jobset = api.put(_owner("JobSet", "jobset.x-k8s.io/v1alpha2", "train", **label))
    job = api.put(_owner("Job", "batch/v1", "train-0", jobset))
    api.not_served.add("statefulsets")  # an API this cluster lacks: empty, not an error
    api.put(f.node("n1"))
    api.put(f.queue("q"))
    for name, owner in (("web-1-a", rs), ("train-0-a", job), ("plain", None)):
        pod = f.pod(name, queue="q")
        if owner is not None:
            pod["metadata"]["ownerReferences"] = _owner("Pod", "v1", name, owner)["metadata"][
                "ownerReferences"
            ]
        api.put(pod)
    opts = _options(dry_run=True, owner_resources=["jobset.x-k8s.io/v1alpha2/jobsets=JobSet"])
    sched = Scheduler(client, opts)
    sched.start()
    try:
        assert sched.cache.wait_for_sync(5)
        report = sched.cycle()
        cached = sched.cache.get("ReplicaSet", "default", "web-1")
    finally:
        sched.shutdown()
    groups = report.result.pod_groups
    assert groups["default/web-1-a"].preemptibility == "non-preemptible"
    assert groups["default/train-0-a"].preemptibility == "non-preemptible"
    assert groups["default/plain"].preemptibility == "preemptible"  # priority rule
    # Owners are kept metadata-only, under their own kind.
    assert cached["kind"] == "ReplicaSet" and cached["apiVersion"] == "apps/v1"
    assert "spec" not in cached and cached["metadata"]["uid"] == rs["metadata"]["uid"]
    # Owners are asked for their metadata only.
    accepts = {p: h.get("Accept", "") for m, p, h in api.headers if m == "GET"}
    assert "as=PartialObjectMetadata" in accepts["/apis/apps/v1/replicasets"]
    assert "as=PartialObjectMetadata" in accepts["/apis/jobset.x-k8s.io/v1alpha2/jobsets"]
    assert "as=PartialObjectMetadata" not in accepts["/api/v1/pods"]


def test_owner_resource_parsing() -> None:
    k = parse_owner_resource("kubeflow.org/v1/pytorchjobs")
    assert (k.group, k.version, k.plural) == ("kubeflow.org", "v1", "pytorchjobs")
    assert k.name == "Pytorchjob"  # a guess; owners are found by uid
    assert k.metadata_only and k.namespaced
    assert parse_owner_resource("jobset.x-k8s.io/v1alpha2/jobsets=JobSet").name == "JobSet"
    with pytest.raises(ValueError):
        parse_owner_resource("jobsets")
    res = CliRunner().invoke(main, ["run", "--owner-resources", "apps/v1", "--once"])
    assert res.exit_code == 2 and "--owner-resources" in res.output


# ---------------------------------------------------------------------- PodScheduled


def _pod_scheduled(api: FakeApiServer, name: str) -> dict | None:
    conditions = (api.get("Pod", name, "default").get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "PodScheduled"), None)


def test_pending_pods_get_pod_scheduled_false_once(api: FakeApiServer, client: KubeClient) -> None:
    api.put(f.node("n1", gpus=1))
    api.put(f.queue("q"))
    for o in f.gang("big", 2, gpus=1):  # a gang of 2 on one GPU: pending
        o.setdefault("status", {})["conditions"] = [{"type": "Initialized", "status": "True"}]
        api.put(o)
    half = f.gang("half", 2, gpus=0)  # one member gated: the gang waits for it
    half[2]["spec"]["schedulingGates"] = [{"name": "example.com/wait"}]
    for o in half:
        api.put(o)
    sched = Scheduler(client, _options())
    sched.start()
    try:
        assert sched.cache.wait_for_sync(5)
        first = sched.cycle()
        # A gated pod's PodScheduled condition is the API server's (SchedulingGated).
        assert first.applied.pod_conditions == ["default/big-0", "default/big-1", "default/half-0"]
        cond = _pod_scheduled(api, "big-0")
        message = first.result.pod_groups["default/big"].reason
        assert cond["status"] == "False" and cond["reason"] == "Unschedulable"
        assert cond["message"] == message and cond["lastTransitionTime"]
        # A strategic merge patch of the status subresource: other conditions stay.
        pod = api.get("Pod", "big-0", "default")
        assert {c["type"] for c in pod["status"]["conditions"]} == {"Initialized", "PodScheduled"}
        (call,) = [h for m, p, h in api.headers if p.endswith("/pods/big-0/status")]
        assert call["Content-Type"] == "application/strategic-merge-patch+json"
        # Unchanged next cycle: not written again.
        second = sched.cycle()
        assert second.applied.pod_conditions == []
        assert len(api.calls("PATCH", "/pods/big-0/status")) == 1
    finally:
        sched.shutdown()


# ---------------------------------------------------------------------- rate limiting


def test_token_bucket_waits_for_tokens() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    bucket = TokenBucket(10, 3, clock=lambda: now[0], sleep=sleep)
    for _ in range(3):
        assert bucket.acquire() == 0  # the burst
    assert bucket.acquire() == pytest.approx(0.1)
    assert bucket.reserve() == pytest.approx(0.1)  # queued behind the previous one...
    assert bucket.reserve() == pytest.approx(0.2)
    now[0] += 1.0  # ...refilled, up to the burst
    assert bucket.acquire(wait_for_it=False) == 0
    assert TokenBucket(0, 1).reserve() == 0  # qps 0: no limit
    assert slept == [pytest.approx(0.1)]


def test_client_requests_share_the_rate_limit(api: FakeApiServer) -> None:
    c = KubeClient.for_host(api.url, qps=10, burst=1)
    try:
        start = time.monotonic()
        for _ in range(4):
            c.list(KINDS["Node"])
        elapsed = time.monotonic() - start
        waited = c.limiter.waited
        c.get_lease("kai", "x")  # takes a token without waiting for it...
        assert c.limiter.waited == waited
        c.list(KINDS["Node"])  # ...which the next request waits for
    finally:
        c.close()
    # 4 requests, 1 at once, 10/s: at least 0.3 s however fast the server answers.
    assert 0.3 <= elapsed < 2.0 and waited > 0
    assert c.limiter.waited > waited


# ---------------------------------------------------------------------- asynchronous binds


class _GatedBinds:
    """Holds the binds of some pods at the API server until released, as a slow API
    server would; ``sent`` names the pods whose binds arrived, in order."""

    def __init__(self, api: FakeApiServer, *names: str) -> None:
        self.names = set(names)
        self.release = threading.Event()
        self.sent: list[str] = []
        api.on_bind = self

    def __call__(self, namespace: str, name: str) -> None:
        self.sent.append(name)
        if name in self.names:
            assert self.release.wait(20)


def _looping(sched: Scheduler) -> threading.Thread:
    runner = threading.Thread(target=sched.run)
    runner.start()
    return runner


def _bind_content_types(api: FakeApiServer) -> list[str]:
    return [
        h.get("Content-Type", "")
        for method, path, h in api.headers
        if method == "POST" and path.endswith("/binding")
    ]


def test_binds_go_as_protobuf(api: FakeApiServer, client: KubeClient) -> None:
    api.put(f.node("n1"))
    api.put(f.pod("p1", queue="q"))
    uid = api.objects[("pods", "default", "p1")]["metadata"]["uid"]
    client.bind("default", "p1", "n1", uid)
    assert _node_of(api, "p1") == "n1"
    assert _bind_content_types(api) == ["application/vnd.kubernetes.protobuf"]
    body = api.requests[-1][2]  # as the fake decoded it from the wire
    assert body["kind"] == "Binding"
    assert body["metadata"] == {"name": "p1", "namespace": "default", "uid": uid}
    assert body["target"] == {"kind": "Node", "name": "n1", "apiVersion": "v1"}


def test_binds_fall_back_to_json_where_protobuf_is_refused(
    api: FakeApiServer, client: KubeClient
) -> None:
    api.protobuf = False  # answered 415 Unsupported Media Type
    api.put(f.node("n1"))
    for name in ("p1", "p2"):
        api.put(f.pod(name, queue="q"))
    client.bind("default", "p1", "n1")
    client.bind("default", "p2", "n1")
    assert _node_of(api, "p1") == _node_of(api, "p2") == "n1"
    protobuf, json_ = "application/vnd.kubernetes.protobuf", "application/json"
    assert _bind_content_types(api) == [protobuf, json_, json_]  # asked once


def test_binds_in_flight_when_protobuf_is_refused_are_sent_again_as_json(
    api: FakeApiServer, client: KubeClient
) -> None:
    # Every bind of the cycle is on the wire in protobuf before the first 415 comes back:
    # each one refused is sent again in JSON, none fails.
    api.protobuf = False
    api.put(f.node("n1", gpus=8))
    api.put(f.queue("q"))
    for i in range(6):
        api.put(f.pod(f"p{i}", queue="q", gpus=1))
    sched = Scheduler(client, _options())
    report = _one_cycle(sched)
    assert report.applied.bind_failed == {}
    assert [_node_of(api, f"p{i}") for i in range(6)] == ["n1"] * 6
    types = _bind_content_types(api)
    assert types.count("application/json") == 6
    assert sched.metrics.bind_failures._value.get() == 0


def test_binds_in_flight_do_not_hold_up_the_loop(api: FakeApiServer, client: KubeClient) -> None:
    api.put(f.node("n1", gpus=2))
    api.put(f.queue("q"))
    for o in f.gang("slow", 1, gpus=1):
        api.put(o)
    gate = _GatedBinds(api, "slow-0")
    sched = Scheduler(client, _options())
    runner = _looping(sched)
    try:
        assert api.wait_for(lambda: gate.sent == ["slow-0"])
        cycles = sched.cycles
        assert api.wait_for(lambda: sched.cycles >= cycles + 3)  # the loop goes on
        assert sched.binder.binds_in_flight == 1
        assert "kai_binds_in_flight 1.0" in sched.metrics.render().decode()
        # A pod that comes meanwhile is bound; the held pod's GPU counts as used.
        for o in f.gang("quick", 1, gpus=1):
            api.put(o)
        for o in f.gang("third", 1, gpus=1):
            api.put(o)
        assert api.wait_for(lambda: _node_of(api, "quick-0") == "n1")
        assert _node_of(api, "slow-0") is None
        cycles = sched.cycles
        assert api.wait_for(lambda: sched.cycles >= cycles + 3)
        assert _node_of(api, "third-0") is None  # no third GPU: not bound
        # The PodGroup started only once its bind went through.
        annotations = api.get("PodGroup", "slow", "default")["metadata"].get("annotations") or {}
        assert LAST_START not in annotations
        gate.release.set()
        assert api.wait_for(lambda: _node_of(api, "slow-0") == "n1")
        assert api.wait_for(
            lambda: LAST_START in api.get("PodGroup", "slow", "default")["metadata"]["annotations"]
        )
        assert api.wait_for(lambda: sched.binder.binds_in_flight == 0)
        assert "kai_binds_in_flight 0.0" in sched.metrics.render().decode()
    finally:
        gate.release.set()
        sched.stop()
        runner.join(10)
    # Each pod was handed over once, however many cycles ran meanwhile.
    assert sorted(gate.sent) == ["quick-0", "slow-0"]
    assert len(api.calls("POST", "/binding")) == 2


def test_a_failed_bind_makes_the_pod_pending_again(api: FakeApiServer, client: KubeClient) -> None:
    api.put(f.node("n1", gpus=1))
    api.put(f.queue("q"))
    api.put(f.pod("f1", queue="q", fraction=0.5))
    api.fail[("binding", "default/f1")] = 500
    gate = _GatedBinds(api, "f1")
    sched = Scheduler(client, _options(bind_attempts=1))
    runner = _looping(sched)
    try:
        assert api.wait_for(lambda: gate.sent == ["f1"])
        # Handed over: bound in the cache, with its device group, before the API says so.
        cached = sched.cache.get("Pod", "default", "f1")
        assert cached["spec"]["nodeName"] == "n1"
        group = cached["metadata"]["labels"][GPU_GROUP_LABEL]
        assert api.wait_for(lambda: _label_of(api, "f1") == group)
        time.sleep(0.3)
        assert gate.sent == ["f1"]  # never decided on again meanwhile
        gate.release.set()
        # The bind fails: the pod is pending again and the next cycles retry it.
        assert api.wait_for(lambda: len(gate.sent) >= 2)
        assert sched.metrics.bind_failures._value.get() >= 1
        del api.fail[("binding", "default/f1")]
        assert api.wait_for(lambda: _node_of(api, "f1") == "n1")
        assert _label_of(api, "f1") == group  # the device written before is kept
    finally:
        gate.release.set()
        sched.stop()
        runner.join(10)


class _Lease:
    """A stand-in for the leader elector: the lease held until ``lose()``."""

    def __init__(self) -> None:
        self.is_leader = True

    def lose(self) -> None:
        self.is_leader = False

    def start(self) -> None:
        pass

    def stop(self, *, release: bool = True) -> None:
        pass


def test_losing_the_lease_stops_the_binds(api: FakeApiServer, client: KubeClient) -> None:
    api.put(f.node("n1", gpus=8))
    api.put(f.queue("q"))
    for i in range(4):
        api.put(f.pod(f"p{i}", queue="q", gpus=1))
    gate = _GatedBinds(api, "p0")
    sched = Scheduler(client, _options(bind_workers=1))
    lease = _Lease()
    sched.elector = lease  # type: ignore[assignment]
    runner = _looping(sched)
    try:
        assert api.wait_for(lambda: gate.sent == ["p0"])
        lease.lose()
        gate.release.set()  # the bind on the wire goes through...
        assert api.wait_for(lambda: _node_of(api, "p0") == "n1")
        time.sleep(0.3)
    finally:
        gate.release.set()
        sched.stop()
        runner.join(10)
    assert gate.sent == ["p0"]  # ...the queued ones are not sent
    assert [_node_of(api, f"p{i}") for i in range(1, 4)] == [None, None, None]


def test_shutdown_waits_for_the_binds_in_flight(api: FakeApiServer, client: KubeClient) -> None:
    api.put(f.node("n1", gpus=2))
    api.put(f.queue("q"))
    for o in f.gang("g", 2, gpus=1):
        api.put(o)
    gate = _GatedBinds(api, "g-0", "g-1")
    sched = Scheduler(client, _options())
    runner = _looping(sched)
    try:
        assert api.wait_for(lambda: sorted(gate.sent) == ["g-0", "g-1"])
        sched.stop()
        runner.join(0.5)
        assert runner.is_alive()  # waiting for the binds
        gate.release.set()
        runner.join(10)
        assert not runner.is_alive()
    finally:
        gate.release.set()
        sched.stop()
        runner.join(10)
    assert _node_of(api, "g-0") == "n1" and _node_of(api, "g-1") == "n1"
    pg = api.get("PodGroup", "g", "default")
    assert LAST_START in pg["metadata"]["annotations"]
