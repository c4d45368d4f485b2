"""The fake's rollout calls: blocking POSTs over kept-alive httpcore connections, one deadline per
exchange, answers capped in size; every failure is a :class:`PostFailure` naming the step that failed."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
import weakref
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

import httpcore

#: What failed: reaching the server, a timeout, a broken exchange, or an oversized answer.
FailureKind = Literal["connect", "timeout", "protocol", "too_large"]


class PostFailure(Exception):
    """A POST that got no usable answer; ``kind`` says which step failed."""

    def __init__(self, kind: FailureKind, message: str) -> None:
        super().__init__(message)
        self.kind: FailureKind = kind


@dataclass(frozen=True)
class PostResponse:
    status_code: int
    content: bytes


class _Remaining(dict[str, float]):
    """httpcore's ``timeout`` extension, read before each network operation: every operation may
    wait only for what is left of the exchange's deadline."""

    def __init__(self, deadline: float) -> None:
        super().__init__()
        self.deadline = deadline

    def get(self, key: str, default: Any = None) -> float:
        return max(self.deadline - time.monotonic(), 1e-6)


class _Backend(httpcore.SyncBackend):
    """httpcore's socket backend, remembering its sockets so that closing the pool can shut them
    down (closing a socket does not wake a thread blocked reading it; shutting it down does)."""

    def __init__(self) -> None:
        self.sockets: weakref.WeakSet[socket.socket] = weakref.WeakSet()
        self.connected = threading.local()  # ``fresh``: this thread's exchange opened a connection

    def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore.NetworkStream:
        stream = super().connect_tcp(*args, **kwargs)
        self.sockets.add(stream.get_extra_info("socket"))
        self.connected.fresh = True
        return _Corked(stream)


class _Corked(httpcore.NetworkStream):
    """Holds writes until the next read, so that a request's head and body leave in one send:
    each send wakes the in-process server's thread, which then takes the interpreter lock."""

    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self.stream = stream
        self.pending = bytearray()

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.pending += buffer

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if self.pending:
            self.stream.write(bytes(self.pending), timeout)
            self.pending.clear()
        return self.stream.read(max_bytes, timeout)

    def close(self) -> None:
        self.stream.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        return _Corked(self.stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self.stream.get_extra_info(info)


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
        self.max_body = max_body
        self._backend = _Backend()
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context() if ssl_context is not None else None,
            max_connections=None,
            max_keepalive_connections=max_idle,
            network_backend=self._backend,
        )
        self._closed = False

    def post(
        self, url: str, body: bytes, headers: Mapping[str, str], *, timeout: float | None = None
    ) -> PostResponse:
        """POST *body* to *url*; :class:`PostFailure` when no whole answer came back within
        *timeout* seconds (the pool's ``timeout`` when None)."""
        seconds = self.timeout if timeout is None else timeout
        remaining = _Remaining(time.monotonic() + seconds)
        if self._closed:
            raise PostFailure("connect", "the connection pool is closed")
        try:
            parsed = httpcore.URL(url)
        except (TypeError, ValueError) as exc:
            raise PostFailure("connect", f"not a usable URL: {url!r} ({exc})") from None
        if parsed.scheme not in (b"http", b"https") or not parsed.host:
            raise PostFailure("connect", f"not an http(s) URL: {url!r}")
        try:
            fields = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]
        except UnicodeEncodeError as exc:
            raise PostFailure(
                "protocol", f"the request could not be sent: a header is not latin-1 ({exc})"
            ) from None
        while True:
            self._backend.connected.fresh = False
            doing = "waiting for the response"
            try:
                with self._pool.stream(
                    "POST", parsed, headers=fields, content=body, extensions={"timeout": remaining}
                ) as response:
                    doing = "reading the response body"
                    return PostResponse(response.status, self._read(response, remaining.deadline, seconds))
            except httpcore.LocalProtocolError as exc:
                raise PostFailure("protocol", f"the request could not be sent: {exc}") from None
            except httpcore.TimeoutException as exc:
                steps = {httpcore.ConnectTimeout: "connecting", httpcore.WriteTimeout: "sending the request"}
                raise PostFailure("timeout", _timed_out(seconds, steps.get(type(exc), doing))) from None
            except httpcore.ConnectError as exc:
                if self._closed:
                    raise PostFailure("connect", "the connection pool is closed") from None
                raise PostFailure("connect", str(exc) or type(exc).__name__) from None
            except (httpcore.NetworkError, httpcore.RemoteProtocolError) as exc:
                if time.monotonic() >= remaining.deadline:
                    raise PostFailure("timeout", _timed_out(seconds, doing)) from None
                reused = not self._backend.connected.fresh and not self._closed
                if doing == "waiting for the response" and reused:
                    # The server closed a kept-alive connection as this request went out (uvicorn does
                    # after an app raised past its own 500): it was not answered; send it afresh.
                    continue
                text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                if "buffer too long" in str(exc).lower():
                    raise PostFailure("too_large", f"the response head is too large ({text})") from None
                raise PostFailure("protocol", f"no complete response: {text}") from None

    def _read(self, response: httpcore.Response, deadline: float, seconds: float) -> bytes:
        length = dict((k.lower(), v) for k, v in response.headers).get(b"content-length", b"")
        if length.isdigit() and int(length) > self.max_body:
            raise PostFailure("too_large", self._too_large(f"{int(length)} bytes (Content-Length)"))
        chunks: list[bytes] = []
        size = 0
        stream = cast(Generator[bytes, None, None], response.iter_stream())
        with contextlib.closing(stream):  # closed here, not whenever it is garbage collected
            for chunk in stream:
                size += len(chunk)
                if size > self.max_body:
                    raise PostFailure("too_large", self._too_large(f"more than {self.max_body} bytes"))
                if time.monotonic() >= deadline:
                    raise PostFailure("timeout", _timed_out(seconds, "reading the response body"))
                chunks.append(chunk)
        return b"".join(chunks)

    def _too_large(self, size: str) -> str:
        return f"the response body is {size}; at most {self.max_body} bytes are read"

    def close(self) -> None:
        """Close every connection, those in use too (their calls fail at once)."""
        self._closed = True
        for sock in list(self._backend.sockets):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._pool.close()


def _timed_out(seconds: float, doing: str) -> str:
    return f"timed out after {seconds:g}s {doing}"
