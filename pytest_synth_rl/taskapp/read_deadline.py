"""A deadline for receiving each request's headers, which stock uvicorn does not have.

uvicorn's keep-alive timer runs only between requests and any byte cancels it, so a client that
sends half a request holds its connection open for as long as it likes. Here a timer is armed
when a connection opens and after each answer, and disarmed when the app receives a request.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from typing import Any, cast

from pytest_synth_rl.taskapp.asgi import Receive, Scope, Send

__all__ = ["MAX_REQUEST_LINE", "header_deadline_app", "header_deadline_protocol"]

#: Longest request line, in bytes (as much of an unfinished head as h11 keeps by default).
MAX_REQUEST_LINE = 16 * 1024

_ANSWER = (
    b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s"
)
# The connection whose bytes are being handed to the HTTP protocol; the request task the protocol
# starts then copies it with the rest of the context, which is how the app finds its connection.
_connection: contextvars.ContextVar[_HeaderDeadline | None] = contextvars.ContextVar(
    "synth_connection", default=None
)


class _HeaderDeadline(asyncio.Protocol):
    """Wraps an uvicorn protocol: a request whose headers have not all arrived in time gets 408
    and a closed connection; a request line over :data:`MAX_REQUEST_LINE` bytes gets 414."""

    inner_class: Callable[..., asyncio.Protocol]
    read_timeout: float

    def __init__(self, **kwargs: Any) -> None:
        self.inner = self.inner_class(**kwargs)
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.got_bytes = False
        self.line_bytes: int | None = 0  # of the request line so far; None once it ended

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.inner.connection_made(transport)
        self.arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self.disarm()
        self.inner.connection_lost(exc)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def data_received(self, data: bytes) -> None:
        if self.timer is not None and self.line_bytes is not None:
            end = data.find(b"\n")
            self.line_bytes = None if end >= 0 else self.line_bytes + len(data)
            if self.line_bytes is not None and self.line_bytes > MAX_REQUEST_LINE:
                self._refuse(
                    414,
                    b"URI Too Long",
                    f"the request line is longer than {MAX_REQUEST_LINE} bytes: send a shorter "
                    "target (path and query)",
                )
                return
        self.got_bytes = self.got_bytes or bool(data)
        token = _connection.set(self)
        try:
            self.inner.data_received(data)
        finally:
            _connection.reset(token)

    def arm(self) -> None:
        self.disarm()
        if self.transport is None or self.transport.is_closing():
            return
        self.got_bytes = False
        self.line_bytes = 0
        self.timer = asyncio.get_running_loop().call_later(self.read_timeout, self._expire)

    def disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _expire(self) -> None:
        self.timer = None
        if self.transport is None or self.transport.is_closing():
            return
        if self.got_bytes:
            self._refuse(
                408, b"Request Timeout", f"the request headers did not arrive within {self.read_timeout:g}s"
            )
        else:
            self.transport.close()

    def _refuse(self, status: int, reason: bytes, message: str) -> None:
        """Answer *status* with *message* and close, before the protocol has seen a request."""
        self.disarm()
        assert self.transport is not None
        body = message.encode()
        self.transport.write(_ANSWER % (status, reason, len(body), body))
        self.transport.close()


def header_deadline_protocol(inner: type[asyncio.Protocol], read_timeout: float) -> type[asyncio.Protocol]:
    """*inner* (an uvicorn ``http=`` protocol class) with a deadline of *read_timeout* seconds on
    each request's headers; serve the app through :func:`header_deadline_app`."""
    attrs = {"inner_class": inner, "read_timeout": float(read_timeout)}
    return type("HeaderDeadlineProtocol", (_HeaderDeadline,), attrs)


def header_deadline_app(app: Any) -> Any:
    """*app*, telling its connection when a request has reached it and when it was answered."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        connection = _connection.get()
        if connection is None or scope["type"] != "http":
            return await app(scope, receive, send)  # type: ignore[no-any-return]
        connection.disarm()

        async def send_then_rearm(message: Any) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                connection.arm()

        await app(scope, receive, send_then_rearm)

    return wrapped
