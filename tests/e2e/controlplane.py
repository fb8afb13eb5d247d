"""A real Kubernetes control plane on loopback: etcd and kube-apiserver, for the tests.

``ci/control-plane`` provides the binaries (kube-apiserver built once per machine and
cached by version, etcd from Debian's package).  :class:`ControlPlane` starts them on
free ports of 127.0.0.1 in a temporary directory, with:

* an admin token (static token file, group ``system:masters``) for the harness;
* service-account signing keys, so that TokenRequest gives kai the token of a
  ServiceAccount that only deploy/'s RBAC binds (authorization Node,RBAC);
* the default admission chain, as a user's cluster has it.

There is no controller-manager and no kubelet: :mod:`tests.e2e.kubelet` plays the
kubelet's part.  ``stop()`` kills both processes and removes the directory.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ADMIN_TOKEN = "kai-e2e-admin-token"


class ProvisionError(RuntimeError):
    """The control plane's binaries could not be had or did not start."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def provision_binaries(with_scheduler: bool = False) -> Path:
    """Run ci/control-plane (a no-op when the cache has the binaries); their directory."""
    cmd = ["bash", str(REPO / "ci" / "control-plane")]
    if with_scheduler:
        cmd.append("--with-scheduler")
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ProvisionError(f"ci/control-plane failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def _wait_until(check, timeout: float, what: str, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise ProvisionError(f"{what}: the process exited with {proc.returncode}")
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise ProvisionError(f"{what}: not ready after {timeout:.0f}s")


class ControlPlane:
    def __init__(self, bin_dir: Path, *, extra_apiserver_args: list[str] | None = None) -> None:
        self.bin_dir = bin_dir
        self.extra_apiserver_args = list(extra_apiserver_args or [])
        self.dir = Path(tempfile.mkdtemp(prefix="kai-e2e-"))
        self.etcd_port = free_port()
        self.etcd_peer_port = free_port()
        self.port = free_port()
        self.etcd: subprocess.Popen | None = None
        self.apiserver: subprocess.Popen | None = None

    # ------------------------------------------------------------------ addresses
    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_port}"

    @property
    def ca_file(self) -> Path:
        # The self-signed serving certificate, with its CA in the same file.
        return self.dir / "certs" / "apiserver.crt"

    def kubeconfig(self, token: str, path: Path) -> Path:
        """A kubeconfig for this API server with a bearer token (JSON is valid YAML)."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "e2e",
                    "cluster": {"server": self.url, "certificate-authority": str(self.ca_file)},
                }
            ],
            "users": [{"name": "e2e", "user": {"token": token}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "e2e"}}],
            "current-context": "e2e",
        }
        path.write_text(json.dumps(config, indent=1))
        return path

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> ControlPlane:
        self._start_etcd()
        self._write_credentials()
        self.start_apiserver()
        return self

    def _start_etcd(self) -> None:
        data = self.dir / "etcd"
        log = open(self.dir / "etcd.log", "wb")  # noqa: SIM115 - kept for the process
        env = {**os.environ, "ETCD_UNSUPPORTED_ARCH": os.environ.get("ETCD_UNSUPPORTED_ARCH", "")}
        self.etcd = subprocess.Popen(
            [
                "etcd",
                "--name=e2e",
                f"--data-dir={data}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{self.etcd_peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{self.etcd_peer_port}",
                f"--initial-cluster=e2e=http://127.0.0.1:{self.etcd_peer_port}",
                "--unsafe-no-fsync",  # a test cluster: durability is not the point
                "--log-level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        _wait_until(
            lambda: urllib.request.urlopen(f"{self.etcd_url}/health", timeout=1).status == 200,
            30,
            "etcd",
            self.etcd,
        )

    def _write_credentials(self) -> None:
        (self.dir / "certs").mkdir(exist_ok=True)
        key = self.dir / "sa.key"
        subprocess.run(
            ["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True
        )
        subprocess.run(
            ["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(self.dir / "sa.pub")],
            check=True,
            capture_output=True,
        )
        (self.dir / "tokens.csv").write_text(f'{ADMIN_TOKEN},admin,admin,"system:masters"\n')

    def start_apiserver(self) -> None:
        """Start (or restart, after :meth:`kill_apiserver`) kube-apiserver on its port."""
        log = open(self.dir / "kube-apiserver.log", "ab")  # noqa: SIM115
        self.apiserver = subprocess.Popen(
            [
                str(self.bin_dir / "kube-apiserver"),
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}",
                f"--cert-dir={self.dir / 'certs'}",
                f"--token-auth-file={self.dir / 'tokens.csv'}",
                "--authorization-mode=Node,RBAC",
                f"--service-account-key-file={self.dir / 'sa.pub'}",
                f"--service-account-signing-key-file={self.dir / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--allow-privileged=true",
                # Let an etcd compaction reach a watch of this kind (the 410 test).
                "--watch-cache-sizes=priorityclasses.scheduling.k8s.io#0",
                "--v=1",
                *self.extra_apiserver_args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        _wait_until(self._ready, 90, "kube-apiserver", self.apiserver)

    def _ready(self) -> bool:
        import ssl

        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        req = urllib.request.Request(
            f"{self.url}/readyz", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
        )
        try:
            with urllib.request.urlopen(req, timeout=2, context=ctx) as resp:
                return resp.status == 200
        except urllib.error.HTTPError:
            return False

    def kill_apiserver(self) -> None:
        """kill -9 the API server (etcd keeps the state)."""
        if self.apiserver is not None and self.apiserver.poll() is None:
            os.killpg(self.apiserver.pid, signal.SIGKILL)
            self.apiserver.wait(10)

    def compact_etcd(self) -> int:
        """Compact etcd at its current revision, through its JSON gateway; the revision."""

        def post(path: str, body: dict) -> dict:
            req = urllib.request.Request(
                f"{self.etcd_url}{path}",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(req, timeout=10) as resp:
                return json.loads(resp.read() or b"{}")

        # Any key's range answer carries the store's current revision.
        revision = int(post("/v3/kv/range", {"key": "AA=="})["header"]["revision"])
        post("/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    def stop(self) -> None:
        for proc in (self.apiserver, self.etcd):
            if proc is not None and proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)

    def logs(self, name: str = "kube-apiserver", tail: int = 4000) -> str:
        path = self.dir / f"{name}.log"
        return path.read_text(errors="replace")[-tail:] if path.exists() else ""
