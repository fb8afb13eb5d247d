"""What an end-to-end test works with: the control plane, a test's own slice of it,
and ``kai run`` processes.

Tests share one control plane.  Each test gets its own node pool: its nodes, queues,
PodGroups and pods carry ``kai.scheduler/node-pool=<pool>``, and the scheduler it starts
runs with ``--partition-label-value <pool>``, so tests never see each other's objects.
Pods live in a namespace named after the pool.

kai runs as a separate process with the token of the ``kai-scheduler`` ServiceAccount,
which only deploy/rbac.yaml's ClusterRole and Role bind: every scenario is also a test
of least privilege.  Assertions read the cluster back from the API server.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, utils, watch
from kubernetes.client.exceptions import ApiException

from tests.e2e.controlplane import ADMIN_TOKEN, REPO, ControlPlane, free_port
from tests.e2e.kubelet import FakeKubelet

POOL_LABEL = "kai.scheduler/node-pool"
GROUP, PG_VERSION, Q_VERSION = "scheduling.run.ai", "v2alpha2", "v2"
KAI_NAMESPACE, KAI_ACCOUNT = "kai-scheduler", "kai-scheduler"


def wait_for(check: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll ``check`` until it returns something truthy; that value."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def apply_manifests(api: client.ApiClient, path: Path) -> None:
    """Create every object of a YAML file (or of the files of a directory), as a user's
    ``kubectl create -f`` would; objects that exist already are left as they are."""
    files = sorted(path.rglob("*.yaml")) if path.is_dir() else [path]
    for file in files:
        for doc in yaml.safe_load_all(file.read_text()):
            if not doc or doc.get("kind") == "Kustomization":
                continue
            try:
                utils.create_from_dict(api, doc)
            except utils.FailToCreateError as err:
                if any(getattr(e, "status", 0) != 409 for e in err.api_exceptions):
                    raise


class E2E:
    """The shared control plane, the harness's admin client and the fake kubelet."""

    def __init__(self, plane: ControlPlane, workdir: Path) -> None:
        self.plane = plane
        self.workdir = workdir
        self.admin_kubeconfig = plane.kubeconfig(ADMIN_TOKEN, workdir / "admin.kubeconfig")
        self.api = self._client()
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.kubelet: FakeKubelet | None = None
        self.kai_kubeconfig: Path | None = None

    def _client(self) -> client.ApiClient:
        from kubernetes import config

        return config.new_client_from_config(str(self.admin_kubeconfig))

    def install(self) -> None:
        """Install what a user installs: the CRDs and RBAC of deploy/, and Koordinator's
        NodeMetric CRD; then give kai its ServiceAccount's token."""
        apply_manifests(self.api, REPO / "deploy" / "crds")
        apply_manifests(self.api, REPO / "deploy" / "rbac.yaml")
        ext = client.ApiextensionsV1Api(self.api)
        for crd in ("podgroups.scheduling.run.ai", "queues.scheduling.run.ai"):
            wait_for(
                lambda crd=crd: any(
                    c.type == "Established" and c.status == "True"
                    for c in (ext.read_custom_resource_definition(crd).status.conditions or [])
                ),
                30,
                f"CRD {crd} established",
            )
        self.kai_kubeconfig = self.service_account_kubeconfig(KAI_NAMESPACE, KAI_ACCOUNT)

    def service_account_kubeconfig(self, namespace: str, name: str) -> Path:
        self.ensure_service_account(namespace, "default")
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=24 * 3600)
        )
        token = self.core.create_namespaced_service_account_token(name, namespace, request)
        path = self.workdir / f"{namespace}-{name}.kubeconfig"
        return self.plane.kubeconfig(token.status.token, path)

    def ensure_service_account(self, namespace: str, name: str) -> None:
        try:
            self.core.create_namespace({"metadata": {"name": namespace}})
        except ApiException as err:
            if err.status != 409:
                raise
        # No controller-manager: nothing creates the default account, and pods are
        # refused without it.
        try:
            self.core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
        except ApiException as err:
            if err.status != 409:
                raise

    def restart_clients(self) -> None:
        self.api = self._client()
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)


class DeletionRecorder:
    """Watches a namespace and records every pod deletion with the node it was on."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.deleted: dict[str, str | None] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        rv = self.cluster.core.list_namespaced_pod(self.cluster.ns).metadata.resource_version
        while not self._stop.is_set():
            w = watch.Watch()
            for event in w.stream(
                self.cluster.core.list_namespaced_pod,
                self.cluster.ns,
                resource_version=rv,
                timeout_seconds=2,
            ):
                pod = event["object"]
                rv = pod.metadata.resource_version
                if event["type"] == "DELETED" or pod.metadata.deletion_timestamp:
                    self.deleted.setdefault(pod.metadata.name, pod.spec.node_name)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


class KaiProcess:
    """One ``kai run`` process and its log."""

    def __init__(self, args: list[str], log_path: Path, metrics_port: int) -> None:
        self.args = args
        self.log_path = log_path
        self.metrics_port = metrics_port
        self.log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).with_name("kai")), "run", *args],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )

    def output(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.read().decode()

    def metric(self, name: str, labels: str = "") -> float:
        """The value of one sample (``labels`` as in the exposition, e.g. 'kind="Pod"');
        -1 while the process does not serve its metrics yet."""
        pattern = re.escape(name) + (r"\{" + re.escape(labels) + r"\}" if labels else "")
        try:
            text = self.metrics()
        except OSError:
            return -1.0
        for line in text.splitlines():
            if re.match(pattern + r"\s", line):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def kill(self) -> None:
        """kill -9: no lease release, no cleanup."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()
        return self.proc.returncode


class Cluster:
    """A test's node pool on the shared control plane, and objects in it."""

    def __init__(self, e2e: E2E, pool: str, workdir: Path) -> None:
        self.e2e = e2e
        self.pool = pool
        self.ns = pool
        self.workdir = workdir
        self.core = e2e.core
        self.custom = e2e.custom
        self.procs: list[KaiProcess] = []
        self.pools = [pool]  # this test's node pools (cleaned up)
        e2e.ensure_service_account(self.ns, "default")

    @property
    def labels(self) -> dict[str, str]:
        return {POOL_LABEL: self.pool}

    def other_pool(self, suffix: str) -> dict[str, str]:
        """The labels of a second node pool of this test (its nodes and queues are
        cleaned up with the test's)."""
        pool = f"{self.pool}-{suffix}"
        self.pools.append(pool)
        return {POOL_LABEL: pool}

    # ------------------------------------------------------------------ objects
    def node(
        self,
        name: str,
        *,
        gpus: int = 8,
        cpu: str = "64",
        memory: str = "512Gi",
        pods: int = 110,
        labels: dict[str, str] | None = None,
        extra: dict[str, str] | None = None,
    ) -> str:
        name = f"{self.pool}-{name}"
        capacity = {"cpu": cpu, "memory": memory, "pods": str(pods), **(extra or {})}
        if gpus:
            capacity["nvidia.com/gpu"] = str(gpus)
        self.core.create_node(
            {
                "metadata": {"name": name, "labels": {**self.labels, **(labels or {})}},
                "status": {"capacity": capacity, "allocatable": capacity},
            }
        )
        # The node's status is a subresource: set capacity there too (create drops it).
        self.core.patch_node_status(
            name, {"status": {"capacity": capacity, "allocatable": capacity}}
        )
        return name

    def wait_nodes_ready(self, timeout: float = 30) -> None:
        def ready() -> bool:
            nodes = [
                node
                for pool in self.pools
                for node in self.core.list_node(label_selector=f"{POOL_LABEL}={pool}").items
            ]
            return bool(nodes) and all(
                not any(t.key.startswith("node.kubernetes.io/") for t in (n.spec.taints or []))
                and any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
                and n.status.allocatable
                for n in nodes
            )

        wait_for(ready, timeout, "nodes Ready")

    def queue(
        self,
        name: str,
        *,
        gpu_quota: float = 0,
        gpu_limit: float = -1,
        weight: float = 1,
        parent: str | None = None,
        spec: dict | None = None,
        labels: dict[str, str] | None = None,
    ) -> str:
        """A queue; names are prefixed with the pool (queues are cluster-wide)."""
        full = f"{self.pool}-{name}"
        body: dict[str, Any] = {
            "resources": {
                "gpu": {"quota": gpu_quota, "limit": gpu_limit, "overQuotaWeight": weight},
                "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
            },
            **(spec or {}),
        }
        if parent:
            body["parentQueue"] = f"{self.pool}-{parent}"
        self.custom.create_cluster_custom_object(
            GROUP,
            Q_VERSION,
            "queues",
            {
                "apiVersion": f"{GROUP}/{Q_VERSION}",
                "kind": "Queue",
                "metadata": {"name": full, "labels": {**self.labels, **(labels or {})}},
                "spec": body,
            },
        )
        return full

    def priority_class(self, name: str, value: int) -> str:
        full = f"{self.pool}-{name}"
        client.SchedulingV1Api(self.e2e.api).create_priority_class(
            {"metadata": {"name": full}, "value": value}
        )
        return full

    def pod_group(
        self,
        name: str,
        queue: str,
        *,
        min_member: int = 1,
        priority_class: str | None = None,
        annotations: dict[str, str] | None = None,
        spec: dict | None = None,
        labels: dict[str, str] | None = None,
    ) -> str:
        body: dict[str, Any] = {"minMember": min_member, "queue": f"{self.pool}-{queue}"}
        if priority_class:
            body["priorityClassName"] = priority_class
        body.update(spec or {})
        self.custom.create_namespaced_custom_object(
            GROUP,
            PG_VERSION,
            self.ns,
            "podgroups",
            {
                "apiVersion": f"{GROUP}/{PG_VERSION}",
                "kind": "PodGroup",
                "metadata": {
                    "name": name,
                    "labels": {**self.labels, **(labels or {})},
                    "annotations": annotations or {},
                },
                "spec": body,
            },
        )
        return name

    def pod(
        self,
        name: str,
        *,
        group: str | None = None,
        queue: str | None = None,
        gpus: float = 0,
        cpu: str = "1",
        memory: str = "1Gi",
        priority_class: str | None = None,
        annotations: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
        owner: dict | None = None,
        scheduler: str = "kai-scheduler",
        node_name: str | None = None,
    ) -> str:
        requests: dict[str, str] = {"cpu": cpu, "memory": memory}
        limits: dict[str, str] = {}
        if gpus and float(gpus).is_integer():
            limits["nvidia.com/gpu"] = str(int(gpus))
        meta_labels = {**self.labels, **(labels or {})}
        if queue:
            meta_labels["kai.scheduler/queue"] = f"{self.pool}-{queue}"
        meta: dict[str, Any] = {
            "name": name,
            "labels": meta_labels,
            "annotations": {**({"pod-group-name": group} if group else {}), **(annotations or {})},
        }
        if owner:
            meta["ownerReferences"] = [owner]
        spec: dict[str, Any] = {
            "schedulerName": scheduler,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/train:1",
                    "resources": {"requests": requests, "limits": limits or None},
                }
            ],
            "terminationGracePeriodSeconds": 30,
        }
        if priority_class:
            spec["priorityClassName"] = priority_class
        if node_name:
            spec["nodeName"] = node_name
        self.core.create_namespaced_pod(self.ns, {"metadata": meta, "spec": spec})
        return f"{self.ns}/{name}"

    def node_metric(self, node: str, *, cpu: str, memory: str, update_time: str) -> None:
        self.custom.create_cluster_custom_object(
            "slo.koordinator.sh",
            "v1alpha1",
            "nodemetrics",
            {
                "apiVersion": "slo.koordinator.sh/v1alpha1",
                "kind": "NodeMetric",
                "metadata": {"name": node},
                "spec": {"metricCollectPolicy": {"reportIntervalSeconds": 60}},
            },
        )
        self.custom.patch_cluster_custom_object_status(
            "slo.koordinator.sh",
            "v1alpha1",
            "nodemetrics",
            node,
            {
                "status": {
                    "updateTime": update_time,
                    "nodeMetric": {"nodeUsage": {"resources": {"cpu": cpu, "memory": memory}}},
                }
            },
        )

    # ------------------------------------------------------------------ reading back
    def pods(self) -> dict[str, client.V1Pod]:
        return {p.metadata.name: p for p in self.core.list_namespaced_pod(self.ns).items}

    def placement(self) -> dict[str, str | None]:
        """Pod name -> node name (None while pending), for pods not terminating."""
        return {
            name: p.spec.node_name
            for name, p in self.pods().items()
            if p.metadata.deletion_timestamp is None
        }

    def bound(self, *names: str) -> bool:
        placement = self.placement()
        return all(placement.get(n) for n in names)

    def get_pod_group(self, name: str) -> dict:
        return self.custom.get_namespaced_custom_object(
            GROUP, PG_VERSION, self.ns, "podgroups", name
        )

    def events(self, involved: str | None = None) -> list[client.CoreV1Event]:
        events = self.core.list_namespaced_event(self.ns).items
        return [e for e in events if involved is None or e.involved_object.name == involved]

    # ------------------------------------------------------------------ kai
    def kai(
        self,
        *extra: str,
        lease: str | None = None,
        period: str = "200ms",
        kubeconfig: Path | None = None,
        name: str = "kai",
    ) -> KaiProcess:
        port = free_port()
        args = [
            f"--kubeconfig={kubeconfig or self.e2e.kai_kubeconfig}",
            f"--partition-label-value={self.pool}",
            f"--lease-name={lease or self.pool}",
            f"--listen-address=127.0.0.1:{port}",
            f"--schedule-period={period}",
            "--log-level=info",
            *extra,
        ]
        proc = KaiProcess(args, self.workdir / f"{name}-{len(self.procs)}.log", port)
        self.procs.append(proc)
        return proc

    def cleanup(self) -> None:
        for proc in self.procs:
            proc.stop()
        grace = client.V1DeleteOptions(grace_period_seconds=0)
        for pod in self.core.list_namespaced_pod(self.ns).items:
            try:
                self.core.delete_namespaced_pod(pod.metadata.name, self.ns, body=grace)
            except ApiException:
                pass
        for pool in self.pools:
            selector = f"{POOL_LABEL}={pool}"
            for node in self.core.list_node(label_selector=selector).items:
                self.core.delete_node(node.metadata.name)
            for q in self.custom.list_cluster_custom_object(
                GROUP, Q_VERSION, "queues", label_selector=selector
            )["items"]:
                self.custom.delete_cluster_custom_object(
                    GROUP, Q_VERSION, "queues", q["metadata"]["name"]
                )
