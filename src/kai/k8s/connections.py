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

import contextlib
import http.client
import logging
import selectors
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import orjson
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from kai.k8s import protobuf

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
        self._headers = dict(api_client.default_headers)
        self._timeout = timeout
        self._ssl = self._ssl_context(cfg) if self._https else None
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open: set[_Connection] = set()
        # (monotonic expiry, the Host line and headers of every request, credentials in)
        self._auth: tuple[float, str] | None = None

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

    def message(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = JSON,
        accept: str = JSON,
    ) -> bytes:
        """The whole request, ready to write: ``body`` is JSON-serialisable, or bytes
        sent as they are."""
        payload = b"" if body is None else body if isinstance(body, bytes) else orjson.dumps(body)
        lines = [f"{method} {self._prefix}{path} HTTP/1.1\r\n{self._head()}Accept: {accept}\r\n"]
        if body is not None:
            lines.append(f"Content-Type: {content_type}\r\n")
        if payload or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(payload)}\r\n")
        lines.append("\r\n")
        return "".join(lines).encode("latin-1") + payload

    def _head(self) -> str:
        """The Host line and the headers of every request, credentials included: read
        again after AUTH_TTL_SECONDS or a 401."""
        cached = self._auth
        now = time.monotonic()
        if cached is None or now >= cached[0]:
            headers = dict(self._headers)
            for auth in self._cfg.auth_settings().values():
                if auth.get("in") == "header" and auth.get("value"):
                    headers[auth["key"]] = auth["value"]
            head = f"Host: {self._host_header}\r\n"
            head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            cached = self._auth = (now + AUTH_TTL_SECONDS, head)
        return cached[1]

    def body_of(self, answer: Answer) -> bytes:
        """The body of a 2xx answer; :class:`ApiException` for any other (status,
        reason and body as the generated client gives them)."""
        if 200 <= answer.status < 300:
            return answer.body
        if answer.status == 401:
            self._auth = None  # credentials may have been renewed: read them again
        body = answer.body
        if answer.headers.get("content-type", "").startswith(protobuf.PROTOBUF):
            body = protobuf.status_json(body)  # read as a JSON answer would be
        raise api_error(answer.status, answer.reason, body, answer.headers)

    def request(self, method: str, path: str, body: Any = None, content_type: str = JSON) -> bytes:
        """Send one request and wait for it (see :meth:`message`); the answer's body, or
        :class:`ApiException` for an answer that is not 2xx."""
        message = self.message(method, path, body, content_type)
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
            return self.body_of(resp)

    def connect(self) -> _Connection:
        """A new connection, not bound to the calling thread (see :class:`Pipeline`)."""
        return _Connection(self._host, self._port, self._timeout, self._ssl)

    @property
    def timeout(self) -> float:
        return self._timeout

    def close(self) -> None:
        """Close every thread's connection."""
        with self._lock:
            conns, self._open = self._open, set()
        for conn in conns:
            conn.close()


class PipelineRequest:
    """One request for a :class:`Pipeline`, and what to call with its outcome: the body
    of a 2xx answer, or the error (:class:`ApiException` for any other answer)."""

    __slots__ = ("message", "done", "deadline", "retried")

    def __init__(
        self, message: bytes, done: Callable[[bytes | None, BaseException | None], None]
    ) -> None:
        self.message = message
        self.done = done
        self.deadline = 0.0
        self.retried = False  # sent again once on a new connection (a stale keep-alive)


class _Slot:
    """A connection of the pipeline and the request it carries."""

    __slots__ = ("conn", "request", "out", "reused", "events")

    def __init__(self, conn: _Connection) -> None:
        self.conn = conn
        self.events = selectors.EVENT_READ  # those it is registered for
        self.request: PipelineRequest | None = None
        self.out = memoryview(b"")  # the part of the request not written yet
        self.reused = False  # it carried an answer before this request


class Pipeline:
    """Requests sent and answered by one thread: up to ``width`` at once, each on a
    keep-alive connection of its own (HTTP/1.1 answers one request at a time).

    Thousands of binds through as many blocking threads cost each bind two thread
    wake-ups and a turn at the GIL; here one ``select`` hands over every answer that
    has come.  The thread asks ``take`` for the next request whenever a connection is
    free, and :meth:`wake` tells it that there may be one.  ``reserve`` takes a token of
    the client's rate limit and says how long to wait for it.  ``done`` callbacks run on
    the pipeline's thread: they must be quick and must not block.
    """

    def __init__(
        self,
        direct: DirectConnections,
        width: int,
        take: Callable[[], PipelineRequest | None],
        *,
        reserve: Callable[[], float] = lambda: 0.0,
        name: str = "kai-pipeline",
    ) -> None:
        self.direct = direct
        self.width = max(1, width)
        self._take = take
        self._reserve = reserve
        self._name = name
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._stop_by = 0.0
        self._ended = False  # the thread has ended: connections made later are closed
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._idle: list[_Slot] = []
        # Connections with a request in flight, oldest first: every request waits as
        # long, so the first one is the next to time out.
        self._busy: dict[_Slot, None] = {}
        self._delayed: deque[tuple[float, PipelineRequest]] = deque()  # waiting for a token
        self._connecting = 0  # requests waiting for a new connection
        # New connections (or why there is none), from the connecting threads.
        self._connected: deque[tuple[PipelineRequest, _Connection | None, BaseException | None]] = (
            deque()
        )

    def request(
        self,
        method: str,
        path: str,
        body: Any,
        content_type: str,
        done: Callable[[bytes | None, BaseException | None], None],
        *,
        accept: str = JSON,
    ) -> PipelineRequest:
        """A request for ``take`` to return (see :meth:`DirectConnections.message`)."""
        message = self.direct.message(method, path, body, content_type, accept)
        return PipelineRequest(message, done)

    def wake(self) -> None:
        """There may be requests to take (from any thread)."""
        with self._lock:
            if self._stopping:
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # a wake-up is pending already, or the pipeline is closing

    def close(self, timeout: float) -> None:
        """Take no more requests; wait ``timeout`` seconds at most for those in flight,
        then fail the rest and close the connections."""
        with self._lock:
            self._stopping = True
            self._stop_by = time.monotonic() + timeout
            thread = self._thread
        if thread is None:
            self._close_all()
            return
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")
        thread.join(timeout + 1.0)

    # ------------------------------------------------------------------ the thread
    def _run(self) -> None:
        while True:
            with self._lock:
                stopping, stop_by = self._stopping, self._stop_by
            now = time.monotonic()
            if stopping:
                while self._delayed:
                    self._finish(self._delayed.popleft()[1], None, _closing())
                if (not self._busy and not self._connecting) or now >= stop_by:
                    break
            else:
                self._send_due(now)
                self._fill(now)
            wait = self._wait(now)
            if stopping:
                wait = max(0.0, min(stop_by - now, wait if wait is not None else stop_by - now))
            for key, _ in self._selector.select(wait):
                if key.data is None:
                    with contextlib.suppress(OSError):
                        while self._wake_r.recv(4096):
                            pass
                else:
                    self._ready(key.data)
            self._take_connected(stopping)
            self._expire(time.monotonic())
        with self._lock:
            self._ended = True
        self._take_connected(True)
        for slot in list(self._busy):
            request = slot.request
            self._drop(slot)
            if request is not None:
                self._finish(request, None, _closing())
        self._close_all()

    def _wait(self, now: float) -> float | None:
        """Seconds until the oldest request times out or the first delayed one is due."""
        oldest = next(iter(self._busy), None)
        due = [oldest.request.deadline] if oldest is not None and oldest.request else []
        if self._delayed:
            due.append(self._delayed[0][0])
        return max(0.0, min(due) - now) if due else None

    def _fill(self, now: float) -> None:
        while len(self._busy) + len(self._delayed) + self._connecting < self.width:
            try:
                request = self._take()
            except Exception:  # noqa: BLE001 - the thread must not die
                log.exception("%s: taking a request failed", self._name)
                return
            if request is None:
                return
            wait = self._reserve()
            if wait > 0 or self._delayed:  # in order, behind those waiting already
                self._delayed.append((now + wait, request))
            else:
                self._send(request)

    def _send_due(self, now: float) -> None:
        while self._delayed and self._delayed[0][0] <= now:
            self._send(self._delayed.popleft()[1])

    def _send(self, request: PipelineRequest, *, fresh: bool = False) -> None:
        if fresh or not self._idle:
            # Connecting (and the TLS handshake) blocks: on a thread of its own, so an
            # unreachable server holds up that request only.
            self._connecting += 1
            threading.Thread(
                target=self._connect, args=(request,), name=f"{self._name}-connect", daemon=True
            ).start()
            return
        slot = self._idle.pop()
        slot.reused = True
        self._start(slot, request)

    def _connect(self, request: PipelineRequest) -> None:
        """On a connecting thread: a new connection for ``request``, handed to the
        pipeline's thread."""
        conn: _Connection | None = None
        err: BaseException | None = None
        try:
            conn = self.direct.connect()
            conn.sock.setblocking(False)
        except Exception as exc:  # noqa: BLE001 - the request's outcome
            err = exc
        with self._lock:
            if not self._ended:
                self._connected.append((request, conn, err))
                with contextlib.suppress(OSError):
                    self._wake_w.send(b"\0")
                return
        # The pipeline's thread is gone: the request ends here.
        if conn is not None:
            conn.close()
        self._finish(request, None, err or _closing())

    def _take_connected(self, stopping: bool) -> None:
        while self._connected:
            request, conn, err = self._connected.popleft()
            self._connecting -= 1
            if conn is None or stopping:
                if conn is not None:
                    conn.close()
                self._finish(request, None, err or _closing())
                continue
            slot = _Slot(conn)
            self._selector.register(conn.sock, selectors.EVENT_READ, slot)
            self._start(slot, request)

    def _start(self, slot: _Slot, request: PipelineRequest) -> None:
        request.deadline = time.monotonic() + self.direct.timeout
        slot.request = request
        slot.out = memoryview(request.message)
        self._busy[slot] = None
        self._write(slot)

    def _write(self, slot: _Slot) -> None:
        try:
            while slot.out:
                slot.out = slot.out[slot.conn.sock.send(slot.out) :]
        except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
            pass
        except OSError as err:
            self._failed(slot, err)
            return
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if slot.out else 0)
        if events != slot.events:
            self._selector.modify(slot.conn.sock, events, slot)
            slot.events = events

    def _ready(self, slot: _Slot) -> None:
        if slot.out:
            self._write(slot)
            if slot.out or slot.request is None:
                return
        conn = slot.conn
        eof = False
        sock = conn.sock
        try:
            while True:
                data = sock.recv(_READ_SIZE)
                if not data:
                    eof = True
                    break
                conn.buf += data
                # Read on while TLS holds decrypted bytes or the read filled the buffer;
                # anything else shows as readable again (epoll is level-triggered).
                if (
                    sock.pending() == 0
                    if isinstance(sock, ssl.SSLSocket)
                    else len(data) < _READ_SIZE
                ):
                    break
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            pass
        except OSError as err:
            self._failed(slot, err)
            return
        request = slot.request
        if request is None:  # an idle connection the server closes (or talks on)
            self._idle.remove(slot)
            self._drop(slot)
            return
        try:
            parsed = parse_answer(conn.buf, eof=eof)
        except Exception as err:  # noqa: BLE001 - the request's outcome
            self._failed(slot, err)
            return
        if parsed is None:
            return
        answer, used = parsed
        del conn.buf[:used]
        slot.request = None
        del self._busy[slot]
        if answer.will_close or eof or conn.buf:
            self._drop(slot)
        else:
            self._idle.append(slot)
        try:
            body = self.direct.body_of(answer)
        except ApiException as err:
            self._finish(request, None, err)
        else:
            self._finish(request, body, None)

    def _failed(self, slot: _Slot, err: BaseException) -> None:
        request = slot.request
        stale = slot.reused and not slot.conn.buf
        self._drop(slot)
        if request is None:
            return
        if stale and isinstance(err, _STALE) and not request.retried:
            request.retried = True  # the server closed it while idle: never received
            self._send(request, fresh=True)
        else:
            self._finish(request, None, err)

    def _expire(self, now: float) -> None:
        while self._busy:
            slot = next(iter(self._busy))
            request = slot.request
            if request is not None and request.deadline > now:
                return
            self._drop(slot)
            if request is not None:
                self._finish(request, None, TimeoutError(f"no answer in {self.direct.timeout:g}s"))

    def _drop(self, slot: _Slot) -> None:
        slot.request = None
        self._busy.pop(slot, None)
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(slot.conn.sock)
        slot.conn.close()

    def _finish(
        self, request: PipelineRequest, body: bytes | None, err: BaseException | None
    ) -> None:
        try:
            request.done(body, err)
        except Exception:  # noqa: BLE001 - the thread must not die
            log.exception("%s: a request's callback failed", self._name)

    def _close_all(self) -> None:
        for slot in self._idle:
            self._drop(slot)
        self._idle.clear()
        with contextlib.suppress(OSError):
            self._selector.close()
        self._wake_r.close()
        self._wake_w.close()


def _closing() -> BaseException:
    return ConnectionAbortedError("the pipeline is closing")


#: The longest head (status line and headers) read, as http.client's line limit.
_MAX_HEAD = 65536


class Answer:
    """One HTTP answer, read whole."""

    __slots__ = ("status", "reason", "headers", "body", "will_close")

    def __init__(
        self, status: int, reason: str, headers: dict[str, str], body: bytes, will_close: bool
    ) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers  # names in lower case
        self.body = body
        self.will_close = will_close


def parse_answer(
    buf: bytes | bytearray, *, head_only: bool = False, eof: bool = False
) -> tuple[Answer, int] | None:
    """The first whole answer at the start of ``buf`` and how many bytes it took, or
    None when more must be read.  Informational answers (100 Continue) are skipped.
    ``eof``: nothing more will come, so an answer cut short raises, and an answer
    without a length ends here."""
    pos = 0
    while True:
        end = buf.find(b"\r\n\r\n", pos)
        if end < 0:
            if len(buf) - pos > _MAX_HEAD:
                raise http.client.LineTooLong("header line")
            if not eof:
                return None
            if pos == len(buf):
                raise http.client.RemoteDisconnected(
                    "Remote end closed connection without response"
                )
            raise http.client.IncompleteRead(bytes(buf[pos:]))
        status_line, *header_lines = bytes(buf[pos:end]).decode("latin-1").split("\r\n")
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise http.client.BadStatusLine(status_line)
        version, status = parts[0], int(parts[1])
        reason = parts[2] if len(parts) > 2 else ""
        pos = end + 4
        if 100 <= status < 200 and status != 101:
            continue  # 100 Continue and the like: the answer follows
        break
    headers: dict[str, str] = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    connection = headers.get("connection", "").lower()
    will_close = connection == "close" or (version == "HTTP/1.0" and connection != "keep-alive")
    if head_only or status in (204, 304):
        return Answer(status, reason, headers, b"", will_close), pos
    if "chunked" in headers.get("transfer-encoding", "").lower():
        chunked = _chunked(buf, pos, eof)
        if chunked is None:
            return None
        body, pos = chunked
    elif "content-length" in headers:
        length = int(headers["content-length"])
        if len(buf) - pos < length:
            if eof:
                raise http.client.IncompleteRead(bytes(buf[pos:]), length - (len(buf) - pos))
            return None
        body, pos = bytes(buf[pos : pos + length]), pos + length
    else:
        if not eof:
            return None  # until the server closes
        body, pos, will_close = bytes(buf[pos:]), len(buf), True
    return Answer(status, reason, headers, body, will_close), pos


def _chunked(buf: bytes | bytearray, pos: int, eof: bool) -> tuple[bytes, int] | None:
    """A chunked body starting at ``pos``: its bytes and where it ends, or None."""
    parts: list[bytes] = []
    while True:
        line_end = buf.find(b"\r\n", pos)
        if line_end < 0:
            break
        size = int(bytes(buf[pos:line_end]).split(b";", 1)[0].strip(), 16)
        pos = line_end + 2
        if size == 0:
            trailers_end = buf.find(b"\r\n", pos)
            while trailers_end > pos:  # trailers, up to an empty line
                pos = trailers_end + 2
                trailers_end = buf.find(b"\r\n", pos)
            if trailers_end < 0:
                break
            return b"".join(parts), trailers_end + 2
        if len(buf) < pos + size + 2:
            break
        parts.append(bytes(buf[pos : pos + size]))
        pos += size + 2  # the chunk and its CRLF
    if eof:
        raise http.client.IncompleteRead(b"".join(parts))
    return None


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
        self.buf = bytearray()  # read and not parsed yet

    def close(self) -> None:
        self.sock.close()

    def exchange(self, message: bytes, *, head_only: bool = False) -> Answer:
        """Send one request and wait for its answer."""
        self.sock.sendall(message)
        eof = False
        while True:
            parsed = parse_answer(self.buf, head_only=head_only, eof=eof)
            if parsed is not None:
                answer, used = parsed
                del self.buf[:used]
                return answer
            data = self.sock.recv(_READ_SIZE)
            if data:
                self.buf += data
            else:
                eof = True


#: How much one read asks for.
_READ_SIZE = 65536
