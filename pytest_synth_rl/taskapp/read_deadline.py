"""A deadline for receiving each request's headers, which stock uvicorn does not have."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from typing import Any, cast

from pytest_synth_rl.taskapp.asgi import Receive, Scope, Send

MAX_REQUEST_LINE = 16 * 1024

_ANSWER = (
    b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s"
)
_connection: contextvars.ContextVar[_HeaderDeadline | None] = contextvars.ContextVar(
    "synth_connection", default=None
)


class _HeaderDeadline(asyncio.Protocol):
    inner_class: Callable[..., asyncio.Protocol]
    read_timeout: float

    def __init__(self, **kwargs: Any) -> None:
        self.inner = self.inner_class(**kwargs)
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.received = 0  # bytes since the timer was armed
        self.line_ended = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.inner.connection_made(transport)
        self.arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self.disarm()
        self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.timer is not None:
            self.received += len(data)
            self.line_ended = self.line_ended or b"\n" in data
            if not self.line_ended and self.received > MAX_REQUEST_LINE:
                too_long = f"the request line is longer than {MAX_REQUEST_LINE} bytes: send a shorter "
                return self._refuse(414, b"URI Too Long", too_long + "target (path and query)")
        token = _connection.set(self)
        try:
            self.inner.data_received(data)
        finally:
            _connection.reset(token)

    def arm(self) -> None:
        self.disarm()
        if self.transport is not None and not self.transport.is_closing():
            self.received, self.line_ended = 0, False
            self.timer = asyncio.get_running_loop().call_later(self.read_timeout, self._expire)

    def disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _expire(self) -> None:
        self.timer = None
        if self.transport is None or self.transport.is_closing():
            return
        if not self.received:
            return self.transport.close()
        late = f"the request headers did not arrive within {self.read_timeout:g}s"
        self._refuse(408, b"Request Timeout", late)

    def _refuse(self, status: int, reason: bytes, message: str) -> None:
        self.disarm()
        assert self.transport is not None
        body = message.encode()
        self.transport.write(_ANSWER % (status, reason, len(body), body))
        self.transport.close()


for _name in ("eof_received", "pause_writing", "resume_writing"):
    setattr(_HeaderDeadline, _name, lambda self, _name=_name: getattr(self.inner, _name)())


def header_deadline_protocol(inner: type[asyncio.Protocol], read_timeout: float) -> type[asyncio.Protocol]:
    """*inner* (uvicorn's ``http=`` class) with a header deadline; serve via :func:`header_deadline_app`."""
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
