"""Throughput against a real kube-apiserver: kai beside kube-scheduler, in one run.

A scheduler_perf-like workload: N Ready nodes (4 CPU, 32Gi, 110 pods) and M pending pods
(100m CPU, 500Mi), all created before the scheduler starts.  Each variant gets a fresh
control plane (etcd and kube-apiserver on loopback, from ``ci/control-plane
--with-scheduler``) and runs with the client rate limits lifted:

* ``kube-scheduler``: v1.31.4, a KubeSchedulerConfiguration with clientConnection qps and
  burst 5000, leader election off, the admin kubeconfig; pods name ``default-scheduler``;
* ``kai``: ``kai run --qps 0 --no-leader-elect``, the admin kubeconfig; pods name
  ``kai-scheduler``, in one queue;
* ``kai-gang``: as ``kai``, the pods in PodGroups of ``--gang`` (minMember the same).

Binds are read back from the API server by a watch of the pods that have a node
(``fieldSelector=spec.nodeName!=``).  Per variant: pods bound per second from the first
bind to the last, seconds from the scheduler's start to its first and last bind; for kai
also its longest cycle (``kai_e2e_scheduling_latency_milliseconds``, read every 0.5 s),
its cycles, and its mean bind latency (``kai_task_bind_latency_milliseconds``).

    python benchmarks/apiserver_throughput.py --nodes 1000 --pods 5000
    python benchmarks/apiserver_throughput.py --nodes 5000 --pods 10000 --json out.json
    python benchmarks/apiserver_throughput.py --variants kai --py-spy kai.txt
    python benchmarks/apiserver_throughput.py --variants kube-scheduler,kai --rounds 3

This is a benchmark, not a test: it prints one JSON line per variant and a table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kubernetes import client, config  # noqa: E402
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
VARIANTS = ("kube-scheduler", "kai", "kai-gang")
CAPACITY = {"cpu": "4", "memory": "32Gi", "pods": "110"}


def _setup(plane: ControlPlane, workdir: Path, nodes: int) -> tuple[client.ApiClient, Path]:
    """CRDs, the namespace with its default ServiceAccount, and N Ready, untainted nodes."""
    kubeconfig = plane.kubeconfig(ADMIN_TOKEN, workdir / "admin.kubeconfig")
    api = config.new_client_from_config(str(kubeconfig))
    api.configuration.connection_pool_maxsize = 32
    core = client.CoreV1Api(api)
    apply_manifests(api, REPO / "deploy" / "crds")
    core.create_namespace({"metadata": {"name": NAMESPACE}})
    # No controller-manager: nothing else creates it, and pods are refused without it.
    core.create_namespaced_service_account(NAMESPACE, {"metadata": {"name": "default"}})

    def node(i: int) -> None:
        name = f"node-{i:05d}"
        core.create_node({"metadata": {"name": name}})
        core.patch_node_status(name, {"status": {"capacity": CAPACITY, "allocatable": CAPACITY}})

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(node, range(nodes)))
    # Ready and without the not-ready taint admission gave them; no heartbeats are needed
    # after that (no node lifecycle controller runs), so the kubelet stops before pods come.
    kubelet = FakeKubelet(api, run_pods=False, workers=16).start()
    try:
        wait_for(lambda: _ready_nodes(api) == nodes, 900, f"{nodes} nodes Ready")
    finally:
        kubelet.stop()
    return api, kubeconfig


def _ready_nodes(api: client.ApiClient) -> int:
    resp = client.CoreV1Api(api).list_node(_preload_content=False)
    items = json.loads(resp.data)["items"]
    return sum(
        1
        for n in items
        if not (n.get("spec") or {}).get("taints")
        and (n.get("status") or {}).get("allocatable")
        and any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (n.get("status") or {}).get("conditions") or []
        )
    )


def _create_pods(api: client.ApiClient, pods: int, scheduler: str, gang: int) -> None:
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    if scheduler == "kai-scheduler":
        unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
        custom.create_cluster_custom_object(
            "scheduling.run.ai",
            "v2",
            "queues",
            {
                "apiVersion": "scheduling.run.ai/v2",
                "kind": "Queue",
                "metadata": {"name": QUEUE},
                "spec": {"resources": {r: unlimited for r in ("gpu", "cpu", "memory")}},
            },
        )

    def group(g: int) -> None:
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
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}},
                        }
                    ],
                },
            },
            _preload_content=False,
        )

    with ThreadPoolExecutor(16) as pool:
        if gang > 1:
            list(pool.map(group, range((pods + gang - 1) // gang)))
        list(pool.map(pod, range(pods)))


# Metadata only: the field selector does the work, and a smaller answer costs the API
# server and this process less (the same for every scheduler, on a shared machine).
_METADATA_ONLY = {"Accept": "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"}


class BindWatch:
    """When each pod was first seen bound: a watch of the pods that have a node
    (``ADDED`` once bound), metadata only, read as raw JSON lines."""

    def __init__(self, api: client.ApiClient) -> None:
        self.core = client.CoreV1Api(api)
        self.bound: dict[str, float] = {}
        self._stop = threading.Event()
        listed = self.core.list_namespaced_pod(
            NAMESPACE, field_selector="spec.nodeName!=", _preload_content=False
        )  # a list answers a PodList either way
        body = json.loads(listed.data)
        now = time.monotonic()
        for item in body["items"]:
            self.bound[item["metadata"]["name"]] = now
        self._rv = body["metadata"]["resourceVersion"]
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._watch()
            except Exception:  # noqa: BLE001 - reopened from the last version seen
                if not self._stop.is_set():
                    time.sleep(0.2)

    def _watch(self) -> None:
        resp = self.core.list_namespaced_pod(
            NAMESPACE,
            field_selector="spec.nodeName!=",
            watch=True,
            resource_version=self._rv,
            allow_watch_bookmarks=True,
            timeout_seconds=60,
            _preload_content=False,
            _headers=_METADATA_ONLY,
        )
        try:
            buf = b""
            for chunk in resp.stream(65536, decode_content=False):
                if self._stop.is_set():
                    return
                buf += chunk
                *lines, buf = buf.split(b"\n")
                now = time.monotonic()
                for line in lines:
                    if not line:
                        continue
                    event = json.loads(line)
                    meta = event["object"].get("metadata") or {}
                    self._rv = meta.get("resourceVersion", self._rv)
                    if event["type"] == "ADDED":
                        self.bound.setdefault(meta["name"], now)
        finally:
            resp.release_conn()

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
            "--v=1",
        ],
        stdout=open(workdir / "kube-scheduler.log", "wb"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
    )


def _start_kai(
    kubeconfig: Path, workdir: Path, port: int, args: argparse.Namespace
) -> subprocess.Popen:
    return subprocess.Popen(
        [
            str(Path(sys.executable).with_name("kai")),
            "run",
            f"--kubeconfig={kubeconfig}",
            "--qps=0",
            "--no-leader-elect",
            f"--listen-address=127.0.0.1:{port}",
            f"--schedule-period={args.period}",
            f"--bind-workers={args.bind_workers}",
            "--log-level=info",
        ],
        stdout=open(workdir / "kai.log", "wb"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
    )


def _cpu_s(pid: int) -> float:
    """User and system CPU seconds of a process (and its waited-for children)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
    return ticks / os.sysconf("SC_CLK_TCK")


_SAMPLE = re.compile(r"^(kai_[a-z0-9_]+)(?:\{[^}]*\})? (\S+)$", re.M)


def _kai_metrics(port: int) -> dict[str, float]:
    """kai's unlabelled samples (and the first of each labelled one) from /metrics."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return {}
    out: dict[str, float] = {}
    for name, value in _SAMPLE.findall(text):
        out.setdefault(name, float(value))
    return out


def run_variant(variant: str, args: argparse.Namespace, bin_dir: Path) -> dict[str, Any]:
    plane = ControlPlane(bin_dir).start()
    workdir = plane.dir
    proc: subprocess.Popen | None = None
    spy: subprocess.Popen | None = None
    try:
        t = time.monotonic()
        api, kubeconfig = _setup(plane, workdir, args.nodes)
        nodes_s = time.monotonic() - t
        scheduler = "default-scheduler" if variant == "kube-scheduler" else "kai-scheduler"
        gang = args.gang if variant == "kai-gang" else 1
        t = time.monotonic()
        _create_pods(api, args.pods, scheduler, gang)
        pods_s = time.monotonic() - t
        binds = BindWatch(api)
        port = free_port()
        server_cpu = {"kube-apiserver": plane.apiserver, "etcd": plane.etcd}
        cpu_before = {name: _cpu_s(p.pid) for name, p in server_cpu.items() if p is not None}
        start = time.monotonic()
        if variant == "kube-scheduler":
            proc = _start_kube_scheduler(bin_dir, kubeconfig, workdir)
        else:
            proc = _start_kai(kubeconfig, workdir, port, args)
            if args.py_spy:
                # The stacks of the thread holding the GIL, sampled from outside.
                out = args.py_spy.with_name(f"{args.py_spy.stem}-{variant}{args.py_spy.suffix}")
                spy = subprocess.Popen(
                    ["py-spy", "record", "--pid", str(proc.pid), "--format", "raw"]
                    + ["--rate", "200", "--gil", "--nonblocking", "-o", str(out)],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
        longest_cycle_ms = 0.0
        deadline = start + args.timeout
        while len(binds.bound) < args.pods and time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            if variant != "kube-scheduler":
                cycle = _kai_metrics(port).get("kai_e2e_scheduling_latency_milliseconds", 0.0)
                longest_cycle_ms = max(longest_cycle_ms, cycle)
            time.sleep(0.5)  # the gauge holds a cycle's time for a period at least
        end = time.monotonic()
        # CPU seconds each process used from the scheduler's start to here.
        cpu = {name: _cpu_s(p.pid) - cpu_before[name] for name, p in server_cpu.items() if p}
        cpu["scheduler"] = _cpu_s(proc.pid)
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
        metrics = _kai_metrics(port) if variant != "kube-scheduler" else {}
        binds.stop()
        times = sorted(t for t in binds.bound.values())
        result: dict[str, Any] = {
            "variant": variant,
            "nodes": args.nodes,
            "pods": args.pods,
            "gang": gang,
            "bound": len(times),
            "nodes_setup_s": round(nodes_s, 1),
            "pods_created_s": round(pods_s, 1),
        }
        result["cpu_s"] = {name: round(v, 1) for name, v in cpu.items()}
        if len(times) < args.pods:
            result["timed_out_after_s"] = round(end - start, 1)
        if len(times) >= 2:
            span = times[-1] - times[0]
            result["pods_per_s"] = round((len(times) - 1) / span, 1) if span else None
            result["start_to_first_bind_s"] = round(times[0] - start, 2)
            result["start_to_last_bind_s"] = round(times[-1] - start, 2)
            result["ms_per_pod"] = round(1000 * (times[-1] - start) / len(times), 3)
        if metrics:
            count = metrics.get("kai_task_bind_latency_milliseconds_count") or 0
            if count:
                total = metrics["kai_task_bind_latency_milliseconds_sum"]
                result["kai_bind_latency_ms_mean"] = round(total / count, 1)
            result["kai_longest_cycle_ms"] = round(longest_cycle_ms, 1)
            result["kai_cycles"] = metrics.get("kai_scheduling_cycles_total")
            result["kai_bind_failures"] = metrics.get("kai_bind_failures_total")
        return result
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()  # kai writes its profile on a clean exit
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        if args.keep_logs:
            for log in ("kai.log", "kube-scheduler.log"):
                if (workdir / log).exists():
                    (args.keep_logs / f"{variant}-{log}").write_bytes((workdir / log).read_bytes())
        plane.stop()


_COLUMNS = (
    ("round", "round"),
    ("variant", "variant"),
    ("nodes", "nodes"),
    ("pods", "pods"),
    ("bound", "bound"),
    ("pods/s", "pods_per_s"),
    ("first bind s", "start_to_first_bind_s"),
    ("last bind s", "start_to_last_bind_s"),
    ("ms/pod", "ms_per_pod"),
    ("kai longest cycle ms", "kai_longest_cycle_ms"),
    ("kai bind ms", "kai_bind_latency_ms_mean"),
)


def table(results: list[dict[str, Any]]) -> str:
    """The results, a row each; then, per round, kai's pods/s against kube-scheduler's
    and the gangs' time per pod against kai's, and over several rounds their medians."""
    rows = [[h for h, _ in _COLUMNS]]
    rows += [[str(r.get(k, "")) for _, k in _COLUMNS] for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in rows]
    ratios: list[float] = []
    gang_extra: list[float] = []
    for round_ in sorted({r.get("round", 1) for r in results}):
        by = {r["variant"]: r for r in results if r.get("round", 1) == round_}
        kube, kai, gang = by.get("kube-scheduler"), by.get("kai"), by.get("kai-gang")
        if kube and kai and kube.get("pods_per_s") and kai.get("pods_per_s"):
            ratios.append(kai["pods_per_s"] / kube["pods_per_s"])
        if kai and gang and kai.get("ms_per_pod") and gang.get("ms_per_pod"):
            gang_extra.append(gang["ms_per_pod"] / kai["ms_per_pod"] - 1)
    if ratios:
        each = ", ".join(f"{x:.2f}x" for x in ratios)
        lines.append(f"kai / kube-scheduler pods/s: {statistics.median(ratios):.2f}x ({each})")
    if gang_extra:
        each = ", ".join(f"{100 * x:+.0f}%" for x in gang_extra)
        extra = statistics.median(gang_extra)
        gang_size = next(r["gang"] for r in results if r["variant"] == "kai-gang")
        lines.append(f"gangs of {gang_size}: {100 * extra:+.0f}% time per pod ({each})")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--gang", type=int, default=8, help="pods per PodGroup in kai-gang")
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help=f"comma-separated, in this order (default: {','.join(VARIANTS)})",
    )
    parser.add_argument("--period", default="1s", help="kai's --schedule-period")
    parser.add_argument("--bind-workers", type=int, default=16, help="kai's --bind-workers")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per variant")
    parser.add_argument(
        "--py-spy",
        type=Path,
        help="sample kai with py-spy (collapsed stacks, FILE-<variant>.txt); pip install py-spy",
    )
    parser.add_argument("--keep-logs", type=Path, help="copy the schedulers' logs here")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run the variants in turn this many times (the machine's noise between runs "
        "is larger than some differences; the summary gives each round and the median)",
    )
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant(s) {unknown}; known: {', '.join(VARIANTS)}")
    if args.keep_logs:
        args.keep_logs.mkdir(parents=True, exist_ok=True)
    bin_dir = provision_binaries(with_scheduler=True)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    results = []
    for round_ in range(1, args.rounds + 1):
        for variant in variants:
            results.append({**run_variant(variant, args, bin_dir), "round": round_})
            print(json.dumps(results[-1]), flush=True)
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
