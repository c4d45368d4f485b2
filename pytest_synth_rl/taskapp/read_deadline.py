"""A deadline for receiving a request's headers, which stock uvicorn does not have.

uvicorn's keep-alive timer only runs between requests, and any byte received cancels it: a
client that sends half a request line, or headers without the blank line that ends them, holds
its connection (and a file descriptor) open for as long as it likes. A server that takes
connections from anything on the machine cannot afford that. This protocol arms a timer when a
connection opens and again after each response; a request whose headers have not all arrived
when it fires gets ``408 Request Timeout`` and the connection is closed. Once the headers are in,
the application owns the request (the served fake bounds the body read itself).

A request line that does not end within :data:`MAX_REQUEST_LINE` bytes (h11 keeps at most that
much of an unfinished head) gets ``414 URI Too Long`` naming the limit, where h11 would give a
bare "Invalid HTTP request received." 400: the only way to write such a line is a huge target.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["MAX_REQUEST_LINE", "header_deadline_protocol"]

#: Longest request line, in bytes: as much of an unfinished head as h11 keeps (its default
#: ``max_incomplete_event_size``, which uvicorn leaves as it is).
MAX_REQUEST_LINE = 16 * 1024

_ANSWER = (
    b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s"
)


class _HeaderDeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request's headers."""

    read_timeout: float = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._answered_cycle: object = None
        self._got_bytes = False
        self._line_bytes: int | None = 0  # of the request line so far; None once it ended

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._deadline is not None and self._line_bytes is not None:  # reading a request line
            end = data.find(b"\n")
            self._line_bytes = None if end >= 0 else self._line_bytes + len(data)
            if self._line_bytes is not None and self._line_bytes > MAX_REQUEST_LINE:
                self._refuse(
                    414,
                    b"URI Too Long",
                    f"the request line is longer than {MAX_REQUEST_LINE} bytes: send a shorter "
                    "target (path and query)",
                )
                return
        super().data_received(data)
        if self.cycle is not None and self.cycle is not self._answered_cycle:
            # The headers of a new request are in: the application owns it now.
            self._answered_cycle = self.cycle
            self._disarm()
        elif data:
            self._got_bytes = True

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()

    def _arm(self) -> None:
        self._disarm()
        self._got_bytes = False
        self._line_bytes = 0
        self._deadline = self.loop.call_later(self.read_timeout, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if self._got_bytes:
            self._refuse(
                408, b"Request Timeout", f"the request headers did not arrive within {self.read_timeout:g}s"
            )
        else:
            self.transport.close()

    def _refuse(self, status: int, reason: bytes, message: str) -> None:
        """Answer *status* with *message* and close, before h11 has seen the request."""
        self._disarm()
        body = message.encode()
        self.transport.write(_ANSWER % (status, reason, len(body), body))
        self.transport.close()


def header_deadline_protocol(read_timeout: float) -> type[asyncio.Protocol]:
    """An uvicorn ``http=`` protocol class whose requests must send their headers in *read_timeout*."""
    return type("HeaderDeadlineProtocol", (_HeaderDeadlineProtocol,), {"read_timeout": float(read_timeout)})
