"""Throughput against a real kube-apiserver, kai beside kube-scheduler.

A scheduler_perf-like workload: N Ready nodes (4 CPU, 32Gi, 110 pods) and M pending
pods (100m CPU, 500Mi), all created before the scheduler starts.  Each scheduler gets
a fresh control plane (etcd and kube-apiserver on loopback, from ``ci/control-plane
--with-scheduler``), runs with client rate limits lifted, and is timed from its start
to the last bind, as read back from the API server by a watch of the pods.

    python benchmarks/apiserver_throughput.py --nodes 1000 --pods 5000
    python benchmarks/apiserver_throughput.py --nodes 1000 --pods 5000 --gang 8 --only kai

This is a benchmark, not a test: it prints a table and, with ``--json``, writes one.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kubernetes import client, config, watch  # noqa: E402
from tests.e2e.cluster import apply_manifests, wait_for  # noqa: E402
from tests.e2e.controlplane import (  # noqa: E402
    ADMIN_TOKEN,
    ControlPlane,
    free_port,
    provision_binaries,
)
from tests.e2e.kubelet import FakeKubelet  # noqa: E402

NAMESPACE = "bench"
QUEUE = "bench"


def _setup(plane: ControlPlane, workdir: Path, nodes: int) -> tuple[client.ApiClient, Path]:
    kubeconfig = plane.kubeconfig(ADMIN_TOKEN, workdir / "admin.kubeconfig")
    api = config.new_client_from_config(str(kubeconfig))
    api.configuration.connection_pool_maxsize = 32
    core = client.CoreV1Api(api)
    apply_manifests(api, REPO / "deploy" / "crds")
    core.create_namespace({"metadata": {"name": NAMESPACE}})
    core.create_namespaced_service_account(NAMESPACE, {"metadata": {"name": "default"}})
    capacity = {"cpu": "4", "memory": "32Gi", "pods": "110"}

    def node(i: int) -> None:
        name = f"node-{i:05d}"
        core.create_node({"metadata": {"name": name}})
        core.patch_node_status(name, {"status": {"capacity": capacity, "allocatable": capacity}})

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(node, range(nodes)))
    return api, kubeconfig


def _wait_ready(core: client.CoreV1Api, nodes: int) -> None:
    def ready() -> bool:
        items = core.list_node().items
        return len(items) == nodes and all(
            not n.spec.taints
            and any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
            for n in items
        )

    wait_for(ready, 600, "nodes Ready")


def _create_pods(api: client.ApiClient, pods: int, scheduler: str, gang: int) -> None:
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    if scheduler == "kai-scheduler":
        custom.create_cluster_custom_object(
            "scheduling.run.ai",
            "v2",
            "queues",
            {
                "apiVersion": "scheduling.run.ai/v2",
                "kind": "Queue",
                "metadata": {"name": QUEUE},
                "spec": {
                    "resources": {
                        r: {"quota": -1, "limit": -1, "overQuotaWeight": 1}
                        for r in ("gpu", "cpu", "memory")
                    }
                },
            },
        )
    if gang > 1:
        for g in range(pods // gang):
            custom.create_namespaced_custom_object(
                "scheduling.run.ai",
                "v2alpha2",
                NAMESPACE,
                "podgroups",
                {
                    "apiVersion": "scheduling.run.ai/v2alpha2",
                    "kind": "PodGroup",
                    "metadata": {"name": f"gang-{g:05d}"},
                    "spec": {"minMember": gang, "queue": QUEUE},
                },
            )

    def pod(i: int) -> None:
        annotations = {"pod-group-name": f"gang-{i // gang:05d}"} if gang > 1 else {}
        core.create_namespaced_pod(
            NAMESPACE,
            {
                "metadata": {
                    "name": f"pod-{i:05d}",
                    "labels": {"kai.scheduler/queue": QUEUE},
                    "annotations": annotations,
                },
                "spec": {
                    "schedulerName": scheduler,
                    "containers": [
                        {
                            "name": "pause",
                            "image": "registry.invalid/pause:3.10",
                            "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}},
                        }
                    ],
                },
            },
        )

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(pod, range(pods)))


class BindWatch:
    """Records, from a watch of the pods, when each one was first seen bound."""

    def __init__(self, core: client.CoreV1Api) -> None:
        self.core = core
        self.bound: dict[str, float] = {}
        self.nodes: dict[str, str] = {}
        self._stop = threading.Event()
        listed = core.list_namespaced_pod(NAMESPACE)
        self._rv = listed.metadata.resource_version
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._watch()
            except Exception:  # noqa: BLE001 - the control plane goes away at the end
                if not self._stop.is_set():
                    time.sleep(0.2)

    def _watch(self) -> None:
        while not self._stop.is_set():
            w = watch.Watch()
            for event in w.stream(
                self.core.list_namespaced_pod,
                NAMESPACE,
                resource_version=self._rv,
                timeout_seconds=5,
            ):
                pod = event["object"]
                self._rv = pod.metadata.resource_version
                name = pod.metadata.name
                if pod.spec.node_name and name not in self.bound:
                    self.bound[name] = time.monotonic()
                    self.nodes[name] = pod.spec.node_name

    def stop(self) -> None:
        self._stop.set()


def _start_kube_scheduler(bin_dir: Path, kubeconfig: Path, workdir: Path) -> subprocess.Popen:
    cfg = workdir / "kube-scheduler.yaml"
    cfg.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        f"clientConnection: {{kubeconfig: {kubeconfig}, qps: 5000, burst: 5000}}\n"
        "leaderElection: {leaderElect: false}\n"
    )
    return subprocess.Popen(
        [
            str(bin_dir / "kube-scheduler"),
            f"--config={cfg}",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            "--v=0",
        ],
        stdout=open(workdir / "kube-scheduler.log", "wb"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
    )


def _start_kai(
    kubeconfig: Path, workdir: Path, port: int, period: str, workers: int
) -> subprocess.Popen:
    return subprocess.Popen(
        [
            str(Path(sys.executable).with_name("kai")),
            "run",
            f"--kubeconfig={kubeconfig}",
            "--qps=0",
            "--no-leader-elect",
            f"--listen-address=127.0.0.1:{port}",
            f"--schedule-period={period}",
            f"--bind-workers={workers}",
        ],
        stdout=open(workdir / "kai.log", "wb"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
    )


def _kai_metrics(port: int) -> dict[str, float]:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for name in (
        "kai_e2e_scheduling_latency_milliseconds",
        "kai_task_bind_latency_milliseconds_sum",
        "kai_task_bind_latency_milliseconds_count",
    ):
        m = re.search(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M)
        if m:
            out[name] = float(m.group(1))
    return out


def run_one(
    which: str, nodes: int, pods: int, gang: int, bin_dir: Path, period: str, workers: int
) -> dict:
    plane = ControlPlane(bin_dir).start()
    workdir = plane.dir
    kubelet = None
    try:
        api, kubeconfig = _setup(plane, workdir, nodes)
        core = client.CoreV1Api(api)
        kubelet = FakeKubelet(api, run_pods=False).start()
        _wait_ready(core, nodes)
        scheduler = "kai-scheduler" if which == "kai" else "default-scheduler"
        t = time.monotonic()
        _create_pods(api, pods, scheduler, gang)
        created_s = time.monotonic() - t
        binds = BindWatch(core)
        port = free_port()
        start = time.monotonic()
        if which == "kai":
            proc = _start_kai(kubeconfig, workdir, port, period, workers)
        else:
            proc = _start_kube_scheduler(bin_dir, kubeconfig, workdir)
        deadline = start + 900
        while len(binds.bound) < pods and time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            time.sleep(0.2)
        metrics = _kai_metrics(port) if which == "kai" and proc.poll() is None else {}
        proc.terminate()
        proc.wait(30)
        binds.stop()
        times = sorted(binds.bound.values())
        result = {
            "scheduler": which,
            "nodes": nodes,
            "pods": pods,
            "gang": gang,
            "bound": len(times),
            "create_s": round(created_s, 1),
        }
        if len(times) >= 2:
            span = times[-1] - times[0]
            result["pods_per_s"] = round((len(times) - 1) / span, 1) if span else None
            result["start_to_last_bind_s"] = round(times[-1] - start, 2)
            result["start_to_first_bind_s"] = round(times[0] - start, 2)
        if metrics:
            count = metrics.get("kai_task_bind_latency_milliseconds_count") or 0
            if count:
                total = metrics["kai_task_bind_latency_milliseconds_sum"]
                result["kai_bind_latency_ms_mean"] = round(total / count, 1)
            result["kai_last_cycle_ms"] = metrics.get("kai_e2e_scheduling_latency_milliseconds")
        return result
    finally:
        if kubelet is not None:
            kubelet.stop()
        plane.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--gang", type=int, default=1, help="pods per PodGroup (kai only)")
    parser.add_argument("--only", choices=["kai", "kube-scheduler"])
    parser.add_argument("--period", default="1s", help="kai's --schedule-period")
    parser.add_argument("--bind-workers", type=int, default=16, help="kai's --bind-workers")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    bin_dir = provision_binaries(with_scheduler=True)
    which = [args.only] if args.only else ["kube-scheduler", "kai"]
    results = []
    for name in which:
        gang = args.gang if name == "kai" else 1
        results.append(
            run_one(name, args.nodes, args.pods, gang, bin_dir, args.period, args.bind_workers)
        )
        print(json.dumps(results[-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
