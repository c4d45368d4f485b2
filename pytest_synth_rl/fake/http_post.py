"""Blocking POSTs over kept-alive HTTP/1.1 connections: the fake's rollout calls.

Rollouts are posted from the fake's rollout threads while the task app, the stub model and the
fake itself all run in the same interpreter and take turns on its lock, so every bit of CPU a
rollout call spends is taken from the task app under test. An ``httpx.Client`` spends about
0.8 ms of CPU per call (and passes through respx when a fake is mounted there), the standard
library's ``http.client`` about 0.2 ms and two writes per request (each one wakes the server
and hands the lock over). This client writes each request whole, in one system call, and reads
the answer with a few lines of parsing, about 0.1 ms a call; what the rollout driver needs comes
with it:

* connections kept per origin and reused (an idle one the server has closed is dropped before
  use, as httpcore does), at most ``max_idle`` kept per origin;
* one deadline for the whole exchange: connecting, sending the request and reading the answer
  until its body is complete must all be done within ``timeout`` seconds of the call (the
  pool's, or the call's own), so an answer that trickles in a byte at a time fails as timed out
  instead of holding the caller for as long as the server keeps sending (httpx bounds each read
  only);
* bounds on the answer's head and body, read as they come, so a runaway answer cannot exhaust
  memory; bodies framed by ``Content-Length``, chunks, or the end of the connection;
* one exception, :class:`PostFailure`, saying which step failed (``kind``) in words;
* :meth:`PostPool.close` from any thread, also shutting connections in use, so a call blocked
  on a hung server returns at once instead of at its timeout.
"""

from __future__ import annotations

import contextlib
import re
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

__all__ = ["PostFailure", "PostPool", "PostResponse"]

#: What failed: reaching the server, a timeout, a broken exchange, or an oversized answer.
FailureKind = Literal["connect", "timeout", "protocol", "too_large"]

MAX_HEAD_BYTES = 64 * 1024
_READ_SIZE = 256 * 1024
_STATUS_LINE = re.compile(rb"HTTP/1\.([01]) (\d{3})(?: [^\r\n]*)?")
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,8})(?:;[^\r\n]*)?")
_UNSAFE_HEADER = re.compile(r"[\r\n\x00]")


class PostFailure(Exception):
    """A POST that got no usable answer; ``str()`` says what happened, ``kind`` what class of
    failure it was (``connect``, ``timeout``, ``protocol`` or ``too_large``)."""

    def __init__(self, kind: FailureKind, message: str) -> None:
        super().__init__(message)
        self.kind: FailureKind = kind


@dataclass(frozen=True)
class PostResponse:
    """The status and the whole body of an answer."""

    status_code: int
    content: bytes


@dataclass(frozen=True)
class _Origin:
    scheme: str
    host: str
    port: int

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


def _split(url: str) -> tuple[_Origin, str]:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise PostFailure("connect", f"not a usable URL: {url!r} ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PostFailure("connect", f"not an http(s) URL: {url!r}")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return _Origin(parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80)), target


class _Connection:
    """One socket, the bytes read from it that are not consumed yet, and the deadline
    (``time.monotonic()``) of the exchange under way on it."""

    __slots__ = ("buffer", "deadline", "sock")

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.buffer = b""
        self.deadline = deadline

    def wait_at_most(self) -> None:
        """Let the next blocking call on the socket wait only until the deadline;
        ``TimeoutError`` if it has passed."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        self.sock.settimeout(remaining)

    def stale(self) -> bool:
        """True if the idle connection cannot carry a request: the server closed it (or sent
        bytes nobody asked for); either way its socket reads as ready."""
        if self.buffer:
            return True
        try:
            readable, _, _ = select.select([self.sock], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(readable)

    def fill(self) -> bool:
        """Read what is there (blocking up to the deadline); False at the end of the stream."""
        self.wait_at_most()
        data = self.sock.recv(_READ_SIZE)
        if not data:
            return False
        self.buffer += data
        return True

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


class PostPool:
    """POSTs to any number of origins, reusing connections; safe to share between threads."""

    def __init__(
        self,
        *,
        timeout: float,
        max_idle: int = 32,
        max_body: int = 64 * 1024 * 1024,
        ssl_context: Callable[[], ssl.SSLContext] | None = None,
    ) -> None:
        self.timeout = timeout
        self.max_idle = max_idle
        self.max_body = max_body
        self._ssl_context = ssl_context
        self._lock = threading.Lock()
        self._idle: dict[_Origin, list[_Connection]] = {}
        self._busy: set[_Connection] = set()
        self._origins: dict[str, tuple[_Origin, str]] = {}
        self._closed = False

    def post(
        self, url: str, body: bytes, headers: Mapping[str, str], *, timeout: float | None = None
    ) -> PostResponse:
        """POST *body* to *url*; raises :class:`PostFailure` when no whole answer came back
        within *timeout* seconds (the pool's ``timeout`` when None) of the call."""
        seconds = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + seconds
        with self._lock:
            split = self._origins.get(url)
        if split is None:
            split = _split(url)
            with self._lock:
                if len(self._origins) < 1024:
                    self._origins[url] = split
        origin, target = split
        request = self._request(origin, target, body, headers)
        connection = self._acquire(origin, deadline, seconds)
        reusable = False
        try:
            self._send(connection, request, seconds)
            response, reusable = self._receive(connection, seconds)
            return response
        finally:
            self._release(origin, connection, reusable)

    def close(self) -> None:
        """Close every connection, those in use too (their calls fail at once)."""
        with self._lock:
            self._closed = True
            idle = [c for connections in self._idle.values() for c in connections]
            busy = list(self._busy)
            self._idle.clear()
        for connection in idle:
            connection.close()
        for connection in busy:
            # Unblocks a thread waiting in recv(); that thread then closes the connection.
            with contextlib.suppress(OSError):
                connection.sock.shutdown(socket.SHUT_RDWR)

    # -- one exchange ---------------------------------------------------------------------------
    @staticmethod
    def _request(origin: _Origin, target: str, body: bytes, headers: Mapping[str, str]) -> bytes:
        lines = [f"POST {target} HTTP/1.1", f"Host: {origin.host_header}", f"Content-Length: {len(body)}"]
        for name, value in headers.items():
            if _UNSAFE_HEADER.search(name) or _UNSAFE_HEADER.search(value) or ":" in name:
                raise PostFailure("protocol", f"the request could not be sent: invalid header {name!r}")
            lines.append(f"{name}: {value}")
        try:
            head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        except UnicodeEncodeError as exc:
            raise PostFailure(
                "protocol", f"the request could not be sent: a header is not latin-1 ({exc})"
            ) from None
        return head + body

    def _send(self, connection: _Connection, request: bytes, seconds: float) -> None:
        try:
            connection.wait_at_most()
            connection.sock.sendall(request)  # the timeout bounds the whole of sendall
        except TimeoutError:
            raise PostFailure("timeout", _timed_out(seconds, "sending the request")) from None
        except OSError as exc:
            raise PostFailure("protocol", f"sending the request failed: {_describe(exc)}") from None

    def _receive(self, connection: _Connection, seconds: float) -> tuple[PostResponse, bool]:
        doing = "waiting for the response"
        try:
            while True:
                status, version, fields = self._read_head(connection)
                if not 100 <= status < 200:
                    break  # an interim answer (100 Continue, 103 Early Hints) is followed by the real one
            doing = "reading the response body"
            connection_field = fields.get("connection", "").lower()
            keep_alive = "close" not in connection_field if version == 1 else "keep-alive" in connection_field
            if status in (204, 304):
                return PostResponse(status, b""), keep_alive
            encoding = fields.get("transfer-encoding")
            if encoding is not None:
                if encoding.lower() != "chunked":
                    raise PostFailure(
                        "protocol", f"no complete response: unsupported transfer-encoding {encoding!r}"
                    )
                return PostResponse(status, self._read_chunked(connection)), keep_alive
            length = fields.get("content-length")
            if length is None:
                return PostResponse(status, self._read_to_end(connection)), False
            if not length.isdigit():
                raise PostFailure("protocol", f"no complete response: malformed content-length {length!r}")
            return PostResponse(status, self._read_exactly(connection, int(length))), keep_alive
        except TimeoutError:
            raise PostFailure("timeout", _timed_out(seconds, doing)) from None
        except OSError as exc:
            raise PostFailure("protocol", f"no complete response: {_describe(exc)}") from None

    def _read_head(self, connection: _Connection) -> tuple[int, int, dict[str, str]]:
        while True:
            end = connection.buffer.find(b"\r\n\r\n")
            if end >= 0:
                break
            if len(connection.buffer) > MAX_HEAD_BYTES:
                raise PostFailure("too_large", f"the response head is larger than {MAX_HEAD_BYTES} bytes")
            if not connection.fill():
                if connection.buffer:
                    raise PostFailure(
                        "protocol", "no complete response: the server closed the connection mid-head"
                    )
                raise PostFailure(
                    "protocol", "no complete response: the server closed the connection without answering"
                )
        if end > MAX_HEAD_BYTES:
            raise PostFailure("too_large", f"the response head is larger than {MAX_HEAD_BYTES} bytes")
        head = connection.buffer[:end].split(b"\r\n")
        connection.buffer = connection.buffer[end + 4 :]
        match = _STATUS_LINE.fullmatch(head[0])
        if match is None:
            raise PostFailure("protocol", f"no complete response: malformed status line {head[0][:80]!r}")
        fields: dict[str, str] = {}
        for line in head[1:]:
            name, colon, value = line.partition(b":")
            if not colon:
                raise PostFailure("protocol", f"no complete response: malformed header line {line[:80]!r}")
            key = name.strip().decode("latin-1").lower()
            text = value.strip().decode("latin-1")
            fields[key] = f"{fields[key]}, {text}" if key in fields else text
        return int(match.group(2)), int(match.group(1)), fields

    def _read_exactly(self, connection: _Connection, length: int) -> bytes:
        if length > self.max_body:
            raise PostFailure("too_large", self._too_large(f"{length} bytes (Content-Length)"))
        while len(connection.buffer) < length:
            if not connection.fill():
                raise PostFailure(
                    "protocol",
                    f"no complete response: the server closed the connection mid-body "
                    f"({len(connection.buffer)} of {length} bytes read)",
                )
        body, connection.buffer = connection.buffer[:length], connection.buffer[length:]
        return body

    def _read_to_end(self, connection: _Connection) -> bytes:
        while True:
            if len(connection.buffer) > self.max_body:
                raise PostFailure("too_large", self._too_large(f"more than {self.max_body} bytes"))
            if not connection.fill():
                break
        body, connection.buffer = connection.buffer, b""
        return body

    def _read_chunked(self, connection: _Connection) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            line = self._read_line(connection)
            match = _CHUNK_SIZE.fullmatch(line)
            if match is None:
                raise PostFailure(
                    "protocol", f"no complete response: malformed chunk size line {line[:80]!r}"
                )
            length = int(match.group(1), 16)
            if length == 0:
                while self._read_line(connection):  # trailer fields, up to an empty line
                    pass
                return b"".join(chunks)
            size += length
            if size > self.max_body:
                raise PostFailure("too_large", self._too_large(f"more than {self.max_body} bytes"))
            chunks.append(self._read_exactly(connection, length))
            if self._read_line(connection):
                raise PostFailure(
                    "protocol", "no complete response: a chunk does not end where its size says"
                )

    @staticmethod
    def _read_line(connection: _Connection) -> bytes:
        while True:
            end = connection.buffer.find(b"\r\n")
            if end >= 0:
                line, connection.buffer = connection.buffer[:end], connection.buffer[end + 2 :]
                return line
            if len(connection.buffer) > MAX_HEAD_BYTES:
                raise PostFailure("protocol", "no complete response: a chunk line is too long")
            if not connection.fill():
                raise PostFailure(
                    "protocol", "no complete response: the server closed the connection mid-body"
                )

    def _too_large(self, size: str) -> str:
        return f"the response body is {size}; at most {self.max_body} bytes are read"

    # -- the pool -------------------------------------------------------------------------------
    def _acquire(self, origin: _Origin, deadline: float, seconds: float) -> _Connection:
        while True:
            with self._lock:
                if self._closed:
                    raise PostFailure("connect", "the connection pool is closed")
                idle = self._idle.get(origin)
                connection = idle.pop() if idle else None
                if connection is not None:
                    self._busy.add(connection)
            if connection is None:
                break
            if not connection.stale():
                connection.deadline = deadline
                return connection
            self._discard(connection)
        connection = self._open(origin, deadline, seconds)
        with self._lock:
            if self._closed:
                connection.close()
                raise PostFailure("connect", "the connection pool is closed")
            self._busy.add(connection)
        return connection

    def _open(self, origin: _Origin, deadline: float, seconds: float) -> _Connection:
        try:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            sock = socket.create_connection((origin.host, origin.port), timeout=remaining)
        except TimeoutError:
            raise PostFailure("timeout", _timed_out(seconds, "connecting")) from None
        except OSError as exc:
            raise PostFailure("connect", str(exc) or type(exc).__name__) from None
        connection = _Connection(sock, deadline)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if origin.scheme == "https":
                context = (
                    self._ssl_context() if self._ssl_context is not None else ssl.create_default_context()
                )
                connection.wait_at_most()  # the handshake, within what is left
                connection.sock = context.wrap_socket(sock, server_hostname=origin.host)
        except TimeoutError:
            sock.close()
            raise PostFailure("timeout", _timed_out(seconds, "connecting")) from None
        except OSError as exc:
            sock.close()
            raise PostFailure("connect", str(exc) or type(exc).__name__) from None
        return connection

    def _release(self, origin: _Origin, connection: _Connection, reusable: bool) -> None:
        with self._lock:
            self._busy.discard(connection)
            idle = self._idle.setdefault(origin, [])
            if reusable and not self._closed and len(idle) < self.max_idle:
                idle.append(connection)
                return
        connection.close()

    def _discard(self, connection: _Connection) -> None:
        with self._lock:
            self._busy.discard(connection)
        connection.close()


def _timed_out(seconds: float, doing: str) -> str:
    return f"timed out after {seconds:g}s {doing}"


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
