"""A small HTTP/1.1 server protocol for the plugin's own plain-ASGI apps (the stub model).

uvicorn's h11 protocol spends about 0.2 ms of CPU on each request in pure Python (h11's state
machine, per-header validation, flow control, a cycle object per request). The stub model
answers one request per rollout, and every bit of CPU it spends is taken from the task app under
test, which shares the interpreter lock with it. This protocol does the part of HTTP/1.1 that
clients of a JSON API use, about five times cheaper:

* requests framed by ``Content-Length`` or ``Transfer-Encoding: chunked``, with
  ``Expect: 100-continue`` answered; kept-alive connections (HTTP/1.1 unless ``Connection:
  close``; HTTP/1.0 only with ``keep-alive``) and pipelined requests, answered in order;
* bounds on everything: the request head (431), the body (413), bytes buffered behind a request
  in progress, and the time a whole request may take to arrive after the connection opened or
  the previous answer (the connection is then closed);
* malformed requests get a 400 and a closed connection; an app that raises gets a 500 (logged);
* an app that answers without waiting on anything (the stub model) is run to the end as the
  request is read, with no task and no second turn of the event loop; one that waits goes on as
  a task from where it waits.

It plugs into uvicorn (``uvicorn.Config(http=minimal_http_protocol(...))``), so starting,
stopping, draining and the captured log stay :class:`~.serving.ServerThread`'s. Task apps are
never served with it: the team's app gets uvicorn's own protocol, as in production.
"""

from __future__ import annotations

import asyncio
import http
import logging
import re
from collections.abc import Coroutine
from typing import Any
from urllib.parse import unquote

from pytest_synth_rl.taskapp.asgi import Message, Scope

__all__ = ["minimal_http_protocol"]

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 16 * 1024 * 1024
#: Longest request target (path and query); a longer one gets 414.
MAX_TARGET_BYTES = 8192

_REQUEST_LINE = re.compile(rb"([A-Z]{1,20}) (\S{1,%d}) HTTP/1\.([01])" % MAX_TARGET_BYTES)
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,8})(?:;[^\r\n]*)?")
_REASONS = {status.value: status.phrase.encode() for status in http.HTTPStatus}
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_log = logging.getLogger("uvicorn.error")


class _BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _Request:
    """One parsed request: its ASGI scope, body, and whether the connection stays open after."""

    __slots__ = ("_disconnected", "body", "keep_alive", "lost", "scope")

    def __init__(self, scope: Scope, body: bytes, keep_alive: bool) -> None:
        self.scope = scope
        self.body = body
        self.keep_alive = keep_alive
        self.lost = False
        self._disconnected: asyncio.Event | None = None  # made only if the app waits for it

    def disconnect(self) -> None:
        self.lost = True
        if self._disconnected is not None:
            self._disconnected.set()

    async def wait_disconnect(self) -> None:
        if not self.lost:
            if self._disconnected is None:
                self._disconnected = asyncio.Event()
            await self._disconnected.wait()


def _parse_head(head: bytes) -> tuple[bytes, bytes, str, list[tuple[bytes, bytes]]]:
    """(method, target, http version, headers with lower-case names) of a request head."""
    lines = head.split(b"\r\n")
    match = _REQUEST_LINE.fullmatch(lines[0])
    if match is None:
        target = lines[0].split(b" ")[1:2]
        if target and len(target[0]) > MAX_TARGET_BYTES:
            raise _BadRequest(
                414, f"the request target is {len(target[0])} bytes; at most {MAX_TARGET_BYTES} are accepted"
            )
        raise _BadRequest(400, "malformed request line")
    headers: list[tuple[bytes, bytes]] = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or _TOKEN.fullmatch(name) is None:
            raise _BadRequest(400, "malformed header line")
        value = value.strip(b" \t")
        if b"\r" in value or b"\n" in value or b"\x00" in value:
            raise _BadRequest(400, "malformed header value")
        headers.append((name.lower(), value))
    return match.group(1), match.group(2), "1." + match.group(3).decode(), headers


def _dechunk(data: bytes, start: int, limit: int) -> tuple[bytes, int] | None:
    """The body of a chunked message starting at *start*, and where it ends; None if incomplete."""
    chunks: list[bytes] = []
    size = 0
    at = start
    while True:
        line_end = data.find(b"\r\n", at)
        if line_end < 0:
            if len(data) - at > 1024:
                raise _BadRequest(400, "malformed chunk size line")
            return None
        match = _CHUNK_SIZE.fullmatch(data, at, line_end)
        if match is None:
            raise _BadRequest(400, "malformed chunk size line")
        length = int(match.group(1), 16)
        at = line_end + 2
        if length == 0:
            # Trailer fields (ignored) up to an empty line.
            end = data.find(b"\r\n", at)
            while end > at:
                at = end + 2
                end = data.find(b"\r\n", at)
            if end < 0:
                return None
            return b"".join(chunks), end + 2
        size += length
        if size > limit:
            raise _BadRequest(413, f"the request body is larger than {limit} bytes")
        if len(data) < at + length + 2:
            return None
        if data[at + length : at + length + 2] != b"\r\n":
            raise _BadRequest(400, "malformed chunk")
        chunks.append(data[at : at + length])
        at += length + 2


class _MinimalHTTPProtocol(asyncio.Protocol):
    """One connection. uvicorn builds it with its config and shared server state."""

    request_timeout: float = 5.0
    max_body: int = MAX_BODY_BYTES

    def __init__(
        self,
        config: Any,
        server_state: Any,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        if not config.loaded:
            config.load()
        self.app = config.loaded_app
        self.loop = _loop or asyncio.get_event_loop()
        self.server_state = server_state
        self.app_state = app_state
        self.transport: asyncio.Transport | None = None
        self.client: tuple[str, int] | None = None
        self.server: tuple[str, int] | None = None
        self.buffer = b""
        self.current: _Request | None = None
        self.continued = False
        self.stopping = False
        self.deadline: asyncio.TimerHandle | None = None

    # -- connection events -------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.server_state.connections.add(self)
        self.client = _address(transport.get_extra_info("peername"))
        self.server = _address(transport.get_extra_info("sockname"))
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self.server_state.connections.discard(self)
        self._disarm()
        self.buffer = b""
        if self.current is not None:
            self.current.disconnect()

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        if self.transport.is_closing():
            return
        self.buffer += data
        if self.current is not None:
            # Pipelined behind a request still being answered: keep it, within bounds.
            if len(self.buffer) > MAX_HEAD_BYTES + self.max_body:
                self.transport.close()
            return
        self._next()

    def shutdown(self) -> None:
        """The server is stopping: close when idle, else after the answer in progress."""
        self.stopping = True
        if self.current is None and self.transport is not None:
            self.transport.close()

    # -- requests ------------------------------------------------------------------------------------
    def _next(self) -> None:
        """Start answering the next complete request in the buffer, if there is one."""
        assert self.transport is not None
        try:
            request = self._take_request()
        except _BadRequest as exc:
            self._refuse(exc.status, str(exc))
            return
        if request is None:
            return
        self._disarm()
        self.current = request
        # Run the answer eagerly: an app that never waits (the stub model) answers right here,
        # without a task and a second turn of the event loop; one that waits goes on as a task.
        answer = self._answer(request)
        try:
            waiting_on = answer.send(None)
        except StopIteration:
            return
        task = self.loop.create_task(_resume(answer, waiting_on))
        self.server_state.tasks.add(task)
        task.add_done_callback(self.server_state.tasks.discard)

    def _take_request(self) -> _Request | None:
        data = self.buffer
        head_end = data.find(b"\r\n\r\n")
        if head_end < 0:
            if len(data) > MAX_HEAD_BYTES:
                raise _BadRequest(431, f"the request head is larger than {MAX_HEAD_BYTES} bytes")
            return None
        if head_end > MAX_HEAD_BYTES:
            raise _BadRequest(431, f"the request head is larger than {MAX_HEAD_BYTES} bytes")
        method, target, version, headers = _parse_head(data[:head_end])
        if not target.startswith(b"/"):
            raise _BadRequest(400, "the request target must be a path such as /v1/chat/completions")
        fields: dict[bytes, bytes] = {}
        for name, value in headers:
            if name in (b"content-length", b"transfer-encoding") and name in fields:
                raise _BadRequest(400, f"more than one {name.decode()} header")
            fields[name] = value
        start = head_end + 4
        encoding = fields.get(b"transfer-encoding")
        if encoding is not None:
            if b"content-length" in fields:
                raise _BadRequest(400, "both content-length and transfer-encoding")
            if encoding.lower() != b"chunked":
                raise _BadRequest(501, "only the chunked transfer-encoding is supported")
            dechunked = _dechunk(data, start, self.max_body)
            if dechunked is None:
                self._maybe_continue(fields)
                return None
            body, end = dechunked
        else:
            length_text = fields.get(b"content-length", b"0")
            if not length_text.isdigit() or len(length_text) > 12:
                raise _BadRequest(400, "malformed content-length")
            length = int(length_text)
            if length > self.max_body:
                raise _BadRequest(413, f"the request body is larger than {self.max_body} bytes")
            end = start + length
            if len(data) < end:
                self._maybe_continue(fields)
                return None
            body = data[start:end]
        self.buffer = data[end:]
        self.continued = False
        connection = fields.get(b"connection", b"").lower()
        keep_alive = b"close" not in connection if version == "1.1" else b"keep-alive" in connection
        raw_path, _, query = target.partition(b"?")
        scope: Scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": version,
            "server": self.server,
            "client": self.client,
            "scheme": "http",
            "method": method.decode("ascii"),
            "root_path": "",
            "path": unquote(raw_path.decode("latin-1")),
            "raw_path": raw_path,
            "query_string": query,
            "headers": headers,
            "state": self.app_state.copy(),
        }
        return _Request(scope, body, keep_alive and not self.stopping)

    def _maybe_continue(self, fields: dict[bytes, bytes]) -> None:
        if not self.continued and fields.get(b"expect", b"").lower() == b"100-continue":
            self.continued = True
            assert self.transport is not None
            self.transport.write(_CONTINUE)

    async def _answer(self, request: _Request) -> None:
        response = _Response(self, request)
        delivered = False

        async def receive() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": request.body, "more_body": False}
            await request.wait_disconnect()
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            response.send(message)

        try:
            await self.app(request.scope, receive, send)
        except Exception:
            _log.exception(
                "the app raised while answering %s %s", request.scope["method"], request.scope["path"]
            )
            response.fail()
        else:
            if not response.complete:
                response.fail()
        finally:
            self._finished(response.complete and response.keep_alive)

    def _finished(self, reusable: bool) -> None:
        self.server_state.total_requests += 1
        self.current = None
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if not reusable or self.stopping:
            transport.close()
            return
        self._arm()
        if self.buffer:
            self._next()

    def _refuse(self, status: int, message: str) -> None:
        assert self.transport is not None
        body = message.encode()
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n%s" % (status, _REASONS.get(status, b""), len(body), body)
        )
        self.transport.close()

    # -- the deadline for a whole request ----------------------------------------------------------
    def _arm(self) -> None:
        self._disarm()
        self.deadline = self.loop.call_later(self.request_timeout, self._expire)

    def _disarm(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None

    def _expire(self) -> None:
        self.deadline = None
        if self.current is not None or self.transport is None or self.transport.is_closing():
            return
        if self.buffer:  # part of a request came, the rest did not: say so before closing
            self._refuse(408, f"the request did not arrive whole within {self.request_timeout:g}s")
        else:
            self.transport.close()


class _Response:
    """Writes one ASGI response: the head with the first body part, chunked if unsized."""

    __slots__ = ("chunked", "complete", "head", "keep_alive", "omit_body", "protocol", "started")

    def __init__(self, protocol: _MinimalHTTPProtocol, request: _Request) -> None:
        self.protocol = protocol
        self.keep_alive = request.keep_alive
        self.omit_body = request.scope["method"] == "HEAD"
        self.head: tuple[int, list[tuple[bytes, bytes]]] | None = None
        self.started = False
        self.chunked = False
        self.complete = False

    def send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            if self.head is not None or self.started:
                raise RuntimeError("the response has already started")
            self.head = (int(message["status"]), list(message.get("headers", [])))
        elif kind == "http.response.body":
            if self.complete:
                raise RuntimeError("the response is already complete")
            if self.head is None and not self.started:
                raise RuntimeError("http.response.body sent before http.response.start")
            self._body(bytes(message.get("body", b"")), bool(message.get("more_body", False)))
        else:
            raise RuntimeError(f"unexpected ASGI message {kind!r}")

    def fail(self) -> None:
        """The app raised or returned without a whole answer: a 500 if nothing was sent yet;
        either way the connection closes after it (a half-sent answer is cut there)."""
        self.keep_alive = False
        if not self.started:
            self.head = (500, [(b"content-type", b"text/plain; charset=utf-8")])
            self._body(b"Internal Server Error", False)

    def _body(self, body: bytes, more: bool) -> None:
        transport = self.protocol.transport
        out = b""
        if not self.started:
            assert self.head is not None
            status, headers = self.head
            names = {name.lower() for name, _ in headers}
            lines = [b"HTTP/1.1 %d %s" % (status, _REASONS.get(status, b""))]
            lines.extend(name + b": " + value for name, value in headers)
            if b"content-length" not in names:
                if more:
                    self.chunked = True
                    lines.append(b"transfer-encoding: chunked")
                else:
                    lines.append(b"content-length: %d" % (0 if self.omit_body else len(body)))
            if not self.keep_alive or self.protocol.stopping:
                lines.append(b"connection: close")
            out = b"\r\n".join(lines) + b"\r\n\r\n"
            self.started = True
            self.head = None
        if not self.omit_body:
            if self.chunked:
                if body:
                    out += b"%x\r\n%s\r\n" % (len(body), body)
                if not more:
                    out += b"0\r\n\r\n"
            else:
                out += body
        if out and transport is not None and not transport.is_closing():
            transport.write(out)
        if not more:
            self.complete = True


async def _resume(coroutine: Coroutine[Any, Any, None], waiting_on: Any) -> None:
    """Drive a coroutine that was started by hand and now waits on the future *waiting_on*, as an
    asyncio task would from here (``None``: it only let others run first)."""
    while True:
        try:
            if waiting_on is None:
                await asyncio.sleep(0)
            else:
                await asyncio.wait((waiting_on,))
        except asyncio.CancelledError as exc:
            # Like a task: cancel what the coroutine waits on, so that it sees the cancellation
            # where it waits; if that cannot be cancelled, raise it in the coroutine directly.
            if waiting_on is None or not waiting_on.cancel():
                try:
                    waiting_on = coroutine.throw(exc)
                except StopIteration:
                    return
                continue
        try:
            waiting_on = coroutine.send(None)
        except StopIteration:
            return


def _address(value: Any) -> tuple[str, int] | None:
    if isinstance(value, tuple) and len(value) >= 2:
        return str(value[0]), int(value[1])
    return None


def minimal_http_protocol(request_timeout: float = 5.0) -> type[asyncio.Protocol]:
    """An uvicorn ``http=`` protocol class (see the module docstring) whose requests must arrive
    whole within *request_timeout* seconds of the connection opening or the previous answer."""
    return type("MinimalHTTPProtocol", (_MinimalHTTPProtocol,), {"request_timeout": float(request_timeout)})
