"""Keep-alive connections to the API server for the writes on the hot path.

A bind is one small POST, thousands of them a cycle.  Through the generated client each
one builds a model, serialises it by introspection and walks urllib3's pool manager:
about three times the CPU of the request itself, and the GIL it holds is the one the
scheduling loop needs.  :class:`DirectConnections` sends prepared JSON over one
keep-alive connection per thread, with the same TLS settings, credentials and headers
as the client it was made from.

Each request is one write of bytes prepared at once, and each answer is read from a
buffer kept for the connection's life: ``http.client`` writes the head and the body
apart, opens a new reader per answer and parses headers with the ``email`` package,
which took most of a bind's CPU.
"""

from __future__ import annotations

import http.client
import logging
import socket
import ssl
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import orjson
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

JSON = "application/json"

# How long credentials are reused before the client's refresh hook is asked again (a
# token file or an exec plugin may have renewed them; client-go re-reads a token file
# every minute).  Asking on every request re-reads the kubeconfig each time.
AUTH_TTL_SECONDS = 10.0

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
        default_port = 443 if self._https else 80
        self._port = url.port or default_port
        self._prefix = url.path.rstrip("/")
        host = f"[{self._host}]" if ":" in self._host else self._host
        self._host_header = host if self._port == default_port else f"{host}:{self._port}"
        self._cfg = cfg
        self._headers = {**api_client.default_headers, "Accept": JSON}
        self._timeout = timeout
        self._ssl = self._ssl_context(cfg) if self._https else None
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open: set[_Connection] = set()
        self._auth: tuple[float, dict[str, str]] | None = None  # (monotonic expiry, headers)

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

    def _connect(self) -> _Connection:
        conn = _Connection(self._host, self._port, self._timeout, self._ssl)
        with self._lock:
            self._open.add(conn)
        return conn

    def _drop(self, conn: _Connection) -> None:
        conn.close()
        self._local.conn = None
        with self._lock:
            self._open.discard(conn)

    def _auth_headers(self) -> dict[str, str]:
        cached = self._auth
        now = time.monotonic()
        if cached is None or now >= cached[0]:
            headers = dict(self._headers)
            for auth in self._cfg.auth_settings().values():
                if auth.get("in") == "header" and auth.get("value"):
                    headers[auth["key"]] = auth["value"]
            cached = self._auth = (now + AUTH_TTL_SECONDS, headers)
        return dict(cached[1])

    def request(self, method: str, path: str, body: Any = None, content_type: str = JSON) -> bytes:
        """Send one request (``body``: JSON-serialisable, or bytes sent as they are); the
        answer's body, or :class:`ApiException` for an answer
        that is not 2xx (status, reason and body as the generated client gives them)."""
        payload = b"" if body is None else body if isinstance(body, bytes) else orjson.dumps(body)
        headers = self._auth_headers()
        if body is not None:
            headers["Content-Type"] = content_type
        lines = [f"{method} {self._prefix}{path} HTTP/1.1", f"Host: {self._host_header}"]
        lines.extend(f"{k}: {v}" for k, v in headers.items())
        if payload or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(payload)}")
        message = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload
        conn = getattr(self._local, "conn", None)
        fresh = conn is None
        while True:
            if conn is None:
                conn = self._local.conn = self._connect()
            try:
                resp = conn.exchange(message, head_only=method == "HEAD")
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
                return resp.body
            if resp.status == 401:
                self._auth = None  # credentials may have been renewed: read them again
            raise api_error(resp.status, resp.reason, resp.body, resp.headers)

    def close(self) -> None:
        """Close every thread's connection."""
        with self._lock:
            conns, self._open = self._open, set()
        for conn in conns:
            conn.close()


#: The longest status or header line read (as http.client's limit).
_MAX_LINE = 65536


class _Answer:
    __slots__ = ("status", "reason", "headers", "body", "will_close")

    def __init__(
        self, status: int, reason: str, headers: dict[str, str], body: bytes, will_close: bool
    ) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers  # names in lower case
        self.body = body
        self.will_close = will_close


class _Connection:
    """One HTTP/1.1 keep-alive connection (TLS when given a context)."""

    def __init__(
        self, host: str, port: int, timeout: float, context: ssl.SSLContext | None
    ) -> None:
        sock = socket.create_connection((host, port), timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if context is not None:
                sock = context.wrap_socket(sock, server_hostname=host)
        except BaseException:
            sock.close()
            raise
        self.sock = sock
        self.rfile = sock.makefile("rb")

    def close(self) -> None:
        self.rfile.close()
        self.sock.close()

    def _line(self) -> bytes:
        line = self.rfile.readline(_MAX_LINE + 1)
        if len(line) > _MAX_LINE:
            raise http.client.LineTooLong("header line")
        return line

    def exchange(self, message: bytes, *, head_only: bool = False) -> _Answer:
        """Send one request and read its answer (informational answers skipped)."""
        self.sock.sendall(message)
        while True:
            line = self._line()
            if not line:
                raise http.client.RemoteDisconnected(
                    "Remote end closed connection without response"
                )
            parts = line.decode("latin-1").rstrip("\r\n").split(None, 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
                raise http.client.BadStatusLine(line.decode("latin-1"))
            version, status = parts[0], int(parts[1])
            reason = parts[2] if len(parts) > 2 else ""
            headers: dict[str, str] = {}
            while True:
                header = self._line()
                if header in (b"\r\n", b"\n", b""):
                    break
                name, _, value = header.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip()
            if 100 <= status < 200 and status != 101:
                continue  # 100 Continue and the like: the answer follows
            break
        connection = headers.get("connection", "").lower()
        will_close = connection == "close" or (version == "HTTP/1.0" and connection != "keep-alive")
        if head_only or status in (204, 304):
            body = b""
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            body = self._chunked()
        elif "content-length" in headers:
            length = int(headers["content-length"])
            body = self.rfile.read(length)
            if len(body) < length:
                raise http.client.IncompleteRead(body, length - len(body))
        else:
            body = self.rfile.read()  # until the server closes
            will_close = True
        return _Answer(status, reason, headers, body, will_close)

    def _chunked(self) -> bytes:
        parts: list[bytes] = []
        while True:
            size_line = self._line()
            if not size_line:
                raise http.client.IncompleteRead(b"".join(parts))
            size = int(size_line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                while self._line() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            chunk = self.rfile.read(size)
            if len(chunk) < size:
                raise http.client.IncompleteRead(b"".join(parts) + chunk, size - len(chunk))
            parts.append(chunk)
            self._line()  # the CRLF after the chunk
