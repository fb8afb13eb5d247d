"""Keep-alive connections to the API server for the writes on the hot path.

A bind is one small POST, thousands of them a cycle.  Through the generated client each
one builds a model, serialises it by introspection and walks urllib3's pool manager:
about three times the CPU of the request itself, and the GIL it holds is the one the
scheduling loop needs.  :class:`DirectConnections` sends prepared JSON over one
``http.client`` connection per thread, with the same TLS settings, credentials and
headers as the client it was made from.
"""

from __future__ import annotations

import http.client
import logging
import ssl
import threading
from typing import Any
from urllib.parse import urlsplit

import orjson
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

JSON = "application/json"

# Failures of a kept-alive connection that the server closed while it was idle: the
# request never reached it, so sending it again on a new connection is safe.
_STALE = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)


def api_error(status: int, reason: str | None, body: bytes, headers: Any) -> ApiException:
    """An answer that is not 2xx, as the generated client reports it."""
    err = ApiException(status=status, reason=reason)
    err.body = body.decode("utf-8", "replace")
    err.headers = headers
    return err


class DirectConnections:
    """Requests with JSON bodies on per-thread keep-alive connections."""

    def __init__(self, api_client: k8s.ApiClient, timeout: float) -> None:
        cfg = api_client.configuration
        url = urlsplit(str(cfg.host))
        self._https = url.scheme == "https"
        self._host = url.hostname or "localhost"
        self._port = url.port or (443 if self._https else 80)
        self._prefix = url.path.rstrip("/")
        self._cfg = cfg
        self._headers = {**api_client.default_headers, "Accept": JSON}
        self._timeout = timeout
        self._ssl = self._ssl_context(cfg) if self._https else None
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open: set[http.client.HTTPConnection] = set()

    @staticmethod
    def usable(api_client: k8s.ApiClient) -> bool:
        """False where the generated client must do it: through a proxy, or with a TLS
        server name other than the host's."""
        cfg = api_client.configuration
        if getattr(cfg, "proxy", None) or getattr(cfg, "tls_server_name", None):
            return False
        return urlsplit(str(cfg.host)).scheme in ("http", "https")

    @staticmethod
    def _ssl_context(cfg: Any) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert or None)
        if cfg.cert_file:
            ctx.load_cert_chain(cfg.cert_file, cfg.key_file or None)
        if not cfg.verify_ssl:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        elif cfg.assert_hostname is False:
            ctx.check_hostname = False
        return ctx

    def _connect(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection
        if self._https:
            conn = http.client.HTTPSConnection(
                self._host, self._port, timeout=self._timeout, context=self._ssl
            )
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
        with self._lock:
            self._open.add(conn)
        return conn

    def _drop(self, conn: http.client.HTTPConnection) -> None:
        conn.close()
        self._local.conn = None
        with self._lock:
            self._open.discard(conn)

    def _auth_headers(self) -> dict[str, str]:
        # Asked per request: a token file or exec plugin may refresh it.
        headers = dict(self._headers)
        for auth in self._cfg.auth_settings().values():
            if auth.get("in") == "header" and auth.get("value"):
                headers[auth["key"]] = auth["value"]
        return headers

    def request(self, method: str, path: str, body: Any = None, content_type: str = JSON) -> bytes:
        """Send one request; the answer's body, or :class:`ApiException` for an answer
        that is not 2xx (status, reason and body as the generated client gives them)."""
        payload = None if body is None else orjson.dumps(body)
        headers = self._auth_headers()
        if payload is not None:
            headers["Content-Type"] = content_type
        conn = getattr(self._local, "conn", None)
        fresh = conn is None
        while True:
            if conn is None:
                conn = self._local.conn = self._connect()
            try:
                conn.request(method, self._prefix + path, body=payload, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            except _STALE:
                self._drop(conn)
                conn = None
                if fresh:
                    raise
                fresh = True  # once more, on a new connection
                continue
            except Exception:
                self._drop(conn)
                raise
            if resp.will_close:
                self._drop(conn)
            if 200 <= resp.status < 300:
                return data
            raise api_error(resp.status, resp.reason, data, resp.headers)

    def close(self) -> None:
        """Close every thread's connection."""
        with self._lock:
            conns, self._open = self._open, set()
        for conn in conns:
            conn.close()
