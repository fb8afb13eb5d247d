"""What a production scheduler survives: bad objects, a dead leader, a restarted API
server, an expired watch; and what it is allowed to do."""

from __future__ import annotations

import time
from collections import Counter

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.e2e.cluster import Cluster, KaiProcess, wait_for


def _single_pods(cluster: Cluster, prefix: str, count: int, queue: str = "team") -> list[str]:
    names = [f"{prefix}-{i}" for i in range(count)]
    for name in names:
        cluster.pod(name, queue=queue, gpus=1)
    return names


def _bind_conflicts(*procs: KaiProcess) -> list[str]:
    """Log lines of binds the API server refused, e.g. a pod bound twice (409)."""
    return [
        line
        for proc in procs
        for line in proc.output().splitlines()
        if "binding" in line and "failed" in line
    ]


def test_invalid_queue_gets_an_event_and_the_rest_is_scheduled(cluster: Cluster) -> None:
    cluster.node("n0", gpus=4)
    cluster.wait_nodes_ready()
    cluster.queue("team", gpu_quota=4)
    orphan = cluster.queue("orphan", parent="no-such-parent")
    cluster.pod("ok", queue="team", gpus=1)
    cluster.pod("stuck", queue="orphan", gpus=1)
    kai = cluster.kai()
    wait_for(lambda: cluster.bound("ok"), 60, "the valid queue's pod bound")

    def invalid_event() -> list:
        events = cluster.core.list_namespaced_event("default").items
        return [
            e for e in events if e.involved_object.name == orphan and e.reason == "InvalidObject"
        ]

    event = wait_for(invalid_event, 30, "an InvalidObject event on the queue")[0]
    assert "no-such-parent" in event.message
    assert event.type == "Warning"
    assert not cluster.placement()["stuck"]
    assert kai.proc.poll() is None


def test_standby_takes_over_when_the_leader_is_killed(cluster: Cluster) -> None:
    for i in range(2):
        cluster.node(f"n{i}", gpus=8)
    cluster.wait_nodes_ready()
    cluster.queue("team", gpu_quota=16)
    election = [
        "--leader-elect-lease-duration=6s",
        "--leader-elect-renew-deadline=4s",
        "--leader-elect-retry-period=1s",
    ]
    first = cluster.kai(*election, name="replica")
    second = cluster.kai(*election, name="replica")
    leader = wait_for(
        lambda: next((p for p in (first, second) if p.metric("kai_is_leader") == 1), None),
        60,
        "a leader",
    )
    standby = second if leader is first else first
    # Up (its metrics served: -1 before that) and standing by, not leading.
    wait_for(lambda: standby.metric("kai_is_leader") == 0, 60, "the standby ready")
    before = _single_pods(cluster, "before", 4)
    wait_for(lambda: cluster.bound(*before), 60, "pods bound by the leader")

    leader.kill()
    killed_at = time.monotonic()
    after = _single_pods(cluster, "after", 4)
    wait_for(lambda: cluster.bound(*after), 60, "pods bound by the new leader")
    # The lease expires 6s after the last renewal; then the standby takes it.
    assert time.monotonic() - killed_at < 6 + 10
    assert standby.metric("kai_is_leader") == 1
    assert not _bind_conflicts(first, second)
    nodes = Counter(cluster.placement().values())
    assert sum(nodes.values()) == 8 and max(nodes.values()) <= 8


def test_recovers_when_the_api_server_restarts(cluster: Cluster) -> None:
    cluster.node("n0", gpus=8)
    cluster.wait_nodes_ready()
    cluster.queue("team", gpu_quota=8)
    kai = cluster.kai()
    before = _single_pods(cluster, "before", 2)
    wait_for(lambda: cluster.bound(*before), 60, "pods bound")

    plane = cluster.e2e.plane
    plane.kill_apiserver()
    time.sleep(3)  # kai's watches break and its lists fail meanwhile
    plane.start_apiserver()
    cluster.e2e.restart_clients()
    cluster.core, cluster.custom = cluster.e2e.core, cluster.e2e.custom

    after = _single_pods(cluster, "after", 4)
    wait_for(lambda: cluster.bound(*after), 90, "pods bound after the restart")
    assert kai.proc.poll() is None
    assert not _bind_conflicts(kai)
    assert sum(1 for node in cluster.placement().values() if node) == 6
    # A restart is not a thousand warnings: one line per retry interval at most.
    unreachable = [line for line in kai.output().splitlines() if "cannot reach" in line]
    assert len(unreachable) <= 6, unreachable


def test_relists_when_a_compaction_expires_its_watch(cluster: Cluster) -> None:
    cluster.node("n0", gpus=4)
    cluster.wait_nodes_ready()
    cluster.queue("team", gpu_quota=4)
    scheduling = client.SchedulingV1Api(cluster.e2e.api)
    kai = cluster.kai("--watch-timeout=2s")
    wait_for(lambda: kai.metric("kai_is_leader") == 1, 60, "kai leading")
    relists = kai.metric("kai_cache_relists_total", 'kind="PriorityClass"')
    # PriorityClasses are watched straight from etcd (no watch cache): once etcd is
    # compacted past the version kai watches from, reopening the watch is answered 410.
    for i in range(3):
        cluster.queue(f"churn-{i}")  # advance etcd's revision through other kinds
    cluster.e2e.plane.compact_etcd()
    wait_for(
        lambda: kai.metric("kai_cache_relists_total", 'kind="PriorityClass"') > relists,
        30,
        "a relist of PriorityClasses",
    )
    assert "410" in kai.output()
    # Listed again, kai sees a PriorityClass created after the compaction.
    high = cluster.priority_class("after-compaction", 90)
    cluster.pod_group("job", "team", priority_class=high)
    cluster.pod("job-0", group="job", gpus=1)
    wait_for(lambda: cluster.bound("job-0"), 60, "a pod bound after the relist")
    assert scheduling.read_priority_class(high).value == 90


def test_kai_runs_with_least_privilege(cluster: Cluster) -> None:
    """Every scenario runs kai as the ServiceAccount of deploy/rbac.yaml; this checks the
    token is not an admin's and that kai still does its whole job with it."""
    e2e = cluster.e2e
    from kubernetes import config

    api = config.new_client_from_config(str(e2e.kai_kubeconfig))
    core = client.CoreV1Api(api)
    review = client.AuthorizationV1Api(api)

    def allowed(verb: str, resource: str, group: str = "", subresource: str = "") -> bool:
        body = client.V1SelfSubjectAccessReview(
            spec=client.V1SelfSubjectAccessReviewSpec(
                resource_attributes=client.V1ResourceAttributes(
                    verb=verb, resource=resource, group=group, subresource=subresource
                )
            )
        )
        return bool(review.create_self_subject_access_review(body).status.allowed)

    assert allowed("create", "pods", subresource="binding")
    assert allowed("create", "pods", subresource="eviction")
    assert allowed("watch", "podgroups", group="scheduling.run.ai")
    for verb, resource, group in (
        ("create", "pods", ""),
        ("delete", "nodes", ""),
        ("update", "nodes", ""),
        ("get", "secrets", ""),
        ("create", "queues", "scheduling.run.ai"),
        ("delete", "customresourcedefinitions", "apiextensions.k8s.io"),
    ):
        assert not allowed(verb, resource, group), f"kai may {verb} {resource}"
    try:
        core.list_secret_for_all_namespaces()
        raise AssertionError("kai's token can read secrets")
    except ApiException as err:
        assert err.status == 403
    # And with only those rights it schedules.
    cluster.node("n0", gpus=1)
    cluster.wait_nodes_ready()
    cluster.queue("team", gpu_quota=1)
    cluster.pod("job", queue="team", gpus=1)
    cluster.kai()
    wait_for(lambda: cluster.bound("job"), 60, "a pod bound by the least-privileged kai")
