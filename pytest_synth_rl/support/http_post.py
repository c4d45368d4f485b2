"""Blocking POSTs over kept-alive HTTP/1.1 connections: the fake's rollout calls.

Rollouts are posted from the fake's rollout threads while the task app, the stub model and the
fake itself all run in the same interpreter and take turns on its lock, so every bit of CPU a
rollout call spends slows the others down. The standard library's ``http.client`` spends about
a quarter of the CPU of an ``httpx.Client`` per call, and it does not pass through respx when a
fake is mounted there. This module adds what the rollout driver needs on top of it:

* connections kept per origin and reused (an idle one the server has closed is dropped before
  use, as httpcore does), at most ``max_idle`` kept per origin;
* the timeout on each operation (connect, send, each read), as httpx applies it;
* a bound on the response body, read in slices, so a runaway answer cannot exhaust memory;
* one exception, :class:`PostFailure`, saying which step failed (``kind``) in words;
* :meth:`PostPool.close` from any thread, also shutting connections in use, so a call blocked
  on a hung server returns at once instead of at its timeout.
"""

from __future__ import annotations

import contextlib
import http.client
import select
import socket
import ssl
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

__all__ = ["PostFailure", "PostPool", "PostResponse"]

#: What failed: reaching the server, a timeout, a broken exchange, or an oversized answer.
FailureKind = Literal["connect", "timeout", "protocol", "too_large"]

_READ_SLICE = 256 * 1024


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


def _split(url: str) -> tuple[_Origin, str]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PostFailure("connect", f"not an http(s) URL: {url!r}")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise PostFailure("connect", f"bad port in {url!r}: {exc}") from None
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return _Origin(parts.scheme, parts.hostname, port), target


def _stale(connection: http.client.HTTPConnection) -> bool:
    """True if an idle connection cannot carry a request: closed, or the server closed it (a
    readable idle socket means EOF or stray bytes, either way not a fresh answer to us)."""
    sock = connection.sock
    if sock is None:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


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
        self._idle: dict[_Origin, list[http.client.HTTPConnection]] = {}
        self._busy: set[http.client.HTTPConnection] = set()
        self._origins: dict[str, tuple[_Origin, str]] = {}
        self._closed = False

    def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> PostResponse:
        """POST *body* to *url*; raises :class:`PostFailure` when no whole answer came back."""
        with self._lock:
            split = self._origins.get(url)
        if split is None:
            split = _split(url)
            with self._lock:
                if len(self._origins) < 1024:
                    self._origins[url] = split
        origin, target = split
        connection = self._acquire(origin)
        reusable = False
        try:
            response, reusable = self._exchange(connection, target, body, headers)
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
            sock = connection.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    # -- one exchange ---------------------------------------------------------------------------
    def _exchange(
        self, connection: http.client.HTTPConnection, target: str, body: bytes, headers: Mapping[str, str]
    ) -> tuple[PostResponse, bool]:
        if connection.sock is None:
            try:
                connection.connect()
            except TimeoutError:
                raise PostFailure("timeout", self._timed_out("connecting")) from None
            except OSError as exc:
                raise PostFailure("connect", str(exc) or type(exc).__name__) from None
        try:
            connection.request("POST", target, body=body, headers=headers)
        except TimeoutError:
            raise PostFailure("timeout", self._timed_out("sending the request")) from None
        except (OSError, http.client.HTTPException) as exc:
            raise PostFailure("protocol", f"sending the request failed: {_describe(exc)}") from None
        except ValueError as exc:  # a header value http.client refuses (e.g. a line break in it)
            raise PostFailure("protocol", f"the request could not be sent: {exc}") from None
        try:
            response = connection.getresponse()
            content = self._read_body(response)
        except TimeoutError:
            raise PostFailure("timeout", self._timed_out("waiting for the response")) from None
        except (OSError, http.client.HTTPException) as exc:
            raise PostFailure("protocol", f"no complete response: {_describe(exc)}") from None
        return PostResponse(response.status, content), not response.will_close

    def _read_body(self, response: http.client.HTTPResponse) -> bytes:
        declared = response.length
        if declared is not None and declared > self.max_body:
            raise PostFailure("too_large", self._too_large(f"{declared} bytes (Content-Length)"))
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = response.read(_READ_SLICE)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > self.max_body:
                raise PostFailure("too_large", self._too_large(f"more than {self.max_body} bytes"))
            chunks.append(chunk)

    def _timed_out(self, doing: str) -> str:
        return f"timed out after {self.timeout:g}s {doing}"

    def _too_large(self, size: str) -> str:
        return f"the response body is {size}; at most {self.max_body} bytes are read"

    # -- the pool -------------------------------------------------------------------------------
    def _acquire(self, origin: _Origin) -> http.client.HTTPConnection:
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
            if not _stale(connection):
                return connection
            self._discard(connection)
        connection = self._open(origin)
        with self._lock:
            if self._closed:
                raise PostFailure("connect", "the connection pool is closed")
            self._busy.add(connection)
        return connection

    def _open(self, origin: _Origin) -> http.client.HTTPConnection:
        if origin.scheme == "https":
            context = self._ssl_context() if self._ssl_context is not None else None
            return http.client.HTTPSConnection(
                origin.host, origin.port, timeout=self.timeout, context=context
            )
        return http.client.HTTPConnection(origin.host, origin.port, timeout=self.timeout)

    def _release(self, origin: _Origin, connection: http.client.HTTPConnection, reusable: bool) -> None:
        with self._lock:
            self._busy.discard(connection)
            idle = self._idle.setdefault(origin, [])
            if reusable and not self._closed and connection.sock is not None and len(idle) < self.max_idle:
                idle.append(connection)
                return
        connection.close()

    def _discard(self, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            self._busy.discard(connection)
        connection.close()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, http.client.RemoteDisconnected):
        return "the server closed the connection without answering"
    if isinstance(exc, http.client.IncompleteRead):
        return f"the server closed the connection mid-body ({len(exc.partial)} bytes read)"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
