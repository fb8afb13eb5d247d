"""HTTP endpoints of the live scheduler: /metrics, /healthz, /readyz."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kai.k8s.metrics import CONTENT_TYPE_LATEST

log = logging.getLogger(__name__)


def parse_listen_address(value: str) -> tuple[str, int]:
    """``":8080"`` (all interfaces), ``"127.0.0.1:0"`` (an ephemeral port), ``"[::1]:80"``."""
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = "", value
    host = host.strip("[]")
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"listen address {value!r}: port must be a number") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"listen address {value!r}: port out of range")
    return host, number


class HealthServer:
    """Serves metrics and probes from a daemon thread.

    ``healthy()`` says the process is alive and its loop is not stuck (liveness);
    ``ready()`` says the cache has synced (readiness).
    """

    def __init__(
        self,
        address: str,
        *,
        metrics: Callable[[], bytes],
        healthy: Callable[[], tuple[bool, str]],
        ready: Callable[[], tuple[bool, str]],
    ) -> None:
        host, port = parse_listen_address(address)
        routes: dict[str, Callable[[], tuple[int, str, bytes]]] = {
            "/metrics": lambda: (200, CONTENT_TYPE_LATEST, metrics()),
            "/healthz": lambda: _probe(healthy),
            "/readyz": lambda: _probe(ready),
        }

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # probes every few seconds: quiet
                pass

            def do_GET(self) -> None:
                route = routes.get(self.path.split("?", 1)[0])
                if route is None:
                    code, ctype, body = 404, "text/plain", b"not found\n"
                else:
                    try:
                        code, ctype, body = route()
                    except Exception as err:  # noqa: BLE001 - report, keep serving
                        code, ctype, body = 500, "text/plain", f"error: {err}\n".encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name="kai-http", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def start(self) -> None:
        self._thread.start()
        log.info("serving /metrics, /healthz, /readyz on port %d", self.port)

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(5)


def _probe(check: Callable[[], tuple[bool, str]]) -> tuple[int, str, bytes]:
    ok, why = check()
    return (200 if ok else 503), "text/plain", (why or ("ok" if ok else "not ok")).encode() + b"\n"
