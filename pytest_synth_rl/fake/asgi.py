"""An ASGI adapter over a request handler, so any HTTP client can reach the fake backend: the
handler runs on worker threads; hostile input gets a 413, 408, 414, 400 or 503, never a 500."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable

import httpx

from pytest_synth_rl.fake.api import EventStream
from pytest_synth_rl.fake.handler import MAX_BODY_BYTES, RequestHandler, match_route
from pytest_synth_rl.fake.wire import at_most, error_response
from pytest_synth_rl.taskapp.asgi import OffLoop, Receive, Scope, Send, serve_lifespan

#: Seconds a client has to send a whole request body once its headers arrived.
DEFAULT_READ_TIMEOUT = 30.0
#: Requests answered at once; more wait on the event loop for a worker.
MAX_WORKERS = 64
#: Event streams one served fake keeps open at once, so streams never take every worker.
MAX_STREAMS = MAX_WORKERS // 4
#: Longest request target (path and query) the fake takes, in characters.
MAX_TARGET_CHARS = 8 * 1024
#: Request body bytes every served fake in the process holds at once, until answered.
MAX_BUFFERED_BYTES = 64 * 2**20
#: Seconds a request refused for want of budget is told to wait (``Retry-After``).
BUSY_RETRY_AFTER = 1


class _Refused(Exception):
    """The request is answered with :attr:`response`, its handler never called."""

    def __init__(self, status: int, code: str, what: str, most: object = None, busy: bool = False) -> None:
        headers = [("connection", "close")] + ([("retry-after", str(BUSY_RETRY_AFTER))] if busy else [])
        retry = f"retry after {BUSY_RETRY_AFTER}s" if busy else ""
        message = what if most is None else at_most(what, most, retry)
        self.response = error_response(status, code, message, headers)


class BodyBudget:
    """Request body bytes held at once, process-wide (taking never waits)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._held = 0

    @property
    def held(self) -> int:
        with self._changed:
            return self._held

    def take(self, size: int) -> bool:
        """Take *size* bytes if they fit under :data:`MAX_BUFFERED_BYTES` (negative: give back)."""
        with self._changed:
            if size > 0 and self._held + size > MAX_BUFFERED_BYTES:
                return False
            self._held += size
            self._changed.notify_all()
            return True

    def wait_for(self, condition: Callable[[int], bool], timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: condition(self._held), timeout)


BODY_BUDGET = BodyBudget()


async def _read_body(receive: Receive, scope: Scope, limit: int, taken: list[int]) -> bytes:
    """The whole body, its bytes taken from :data:`BODY_BUDGET` and added to ``taken[0]``; refused
    (413, 503) as soon as it is known not to fit: the rest is never read."""
    length = next((v for k, v in scope.get("headers", []) if k.lower() == b"content-length"), b"")
    declared = int(length) if length.isdigit() else None

    def take(size: int, what: str) -> None:
        what = f"the request body is {what}"
        if size > limit:
            raise _Refused(413, "body_too_large", what, f"{limit} bytes")
        if size and not BODY_BUDGET.take(size):
            what += f", with {BODY_BUDGET.held - taken[0]} bytes of other bodies held"
            raise _Refused(503, "too_many_bodies", what, f"{MAX_BUFFERED_BYTES} bytes at once", True)
        taken[0] += size

    if declared is not None:
        take(declared, f"{declared} bytes")
    chunks: list[bytes] = []
    size = 0
    while True:
        event = await receive()
        if event["type"] == "http.disconnect":
            break
        chunk = event.get("body", b"")
        size += len(chunk)
        if size > limit:
            take(size, f"more than {limit} bytes (read no further)")
        if declared is None:
            take(len(chunk), f"at least {size} bytes (read no further)")
        chunks.append(chunk)
        if not event.get("more_body", False):
            break
    return b"".join(chunks)


def _to_request(scope: Scope, body: bytes) -> httpx.Request:
    """The handler's request; refused (400) when the target is not a path."""
    host, port = scope.get("server") or ("127.0.0.1", 80)
    query = scope.get("query_string", b"")
    raw_path = scope.get("raw_path") or scope.get("path", "/").encode()
    target = raw_path + (b"?" + query if query else b"")
    with contextlib.suppress(httpx.InvalidURL, ValueError, UnicodeError):
        if raw_path.startswith(b"/"):
            url = httpx.URL(f"{scope.get('scheme', 'http')}://{host}:{port}{target.decode('latin-1')}")
            return httpx.Request(scope["method"], url, headers=list(scope.get("headers", [])), content=body)
    what = (
        f"the request target {raw_path[:80]!r} is not a path; send an origin-form target such as /api/rl/jobs"
    )
    raise _Refused(400, "bad_request_target", what)


class FakeASGIApp:
    """ASGI 3 application serving one fake's request handler."""

    def __init__(self, handler: RequestHandler, *, read_timeout: float = DEFAULT_READ_TIMEOUT) -> None:
        self.handler = handler
        self.read_timeout = read_timeout
        self._workers = OffLoop(MAX_WORKERS, "synth-fake-request")
        self._streams = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        # A stream is counted before its handler runs, by the handler's own route table.
        method = scope.get("method")
        path, root = str(scope.get("path", "")), self.handler.api_path
        found = match_route(method, path, root) if method == "GET" else None
        counted = found is not None and found.name == "events_stream"
        self._streams += counted
        taken = [0]
        try:
            try:
                response = await self._handle(scope, receive, counted, taken)
            except _Refused as refused:
                response = refused.response
            finally:
                BODY_BUDGET.take(-taken[0])
            if response is not None:
                await self._respond(response, receive, send)
            else:
                # An injected connection fault: a response cut short.
                start = {"type": "http.response.start", "status": 200}
                await send({**start, "headers": [(b"content-length", b"100")]})
        finally:
            self._streams -= counted

    async def _handle(
        self, scope: Scope, receive: Receive, counted: bool, taken: list[int]
    ) -> httpx.Response | None:
        target_chars = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
        if target_chars > MAX_TARGET_CHARS:
            what = f"the request target (path and query) is {target_chars} characters"
            raise _Refused(414, "uri_too_long", what, MAX_TARGET_CHARS)
        if counted and self._streams > MAX_STREAMS:
            what = f"{self._streams - 1} event streams are open (GET .../events?since_seq=N needs none)"
            raise _Refused(503, "too_many_streams", what, f"{MAX_STREAMS} event streams open at once", True)
        limit = min(MAX_BODY_BYTES, MAX_BUFFERED_BYTES)
        try:
            body = await asyncio.wait_for(_read_body(receive, scope, limit, taken), self.read_timeout)
        except asyncio.TimeoutError:
            what = f"the request body did not arrive within {self.read_timeout:g}s; send the whole request"
            raise _Refused(408, "request_timeout", what) from None
        try:
            return await self._workers.run(self.handler, _to_request(scope, body))
        except httpx.ConnectError:
            return None

    async def _respond(self, response: httpx.Response, receive: Receive, send: Send) -> None:
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers.multi_items()]
        if not isinstance(response.stream, EventStream):
            await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
            await send({"type": "http.response.body", "body": response.content})
            return
        stream = response.stream

        async def watch() -> None:
            while (await receive()).get("type") != "http.disconnect":
                pass

        watcher = asyncio.ensure_future(watch())
        headers = [(k, v) for k, v in headers if k.lower() != b"content-length"]
        try:
            await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
            while not watcher.done():
                chunks, pause = await self._workers.run(stream.step)
                for chunk in chunks:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                if pause is None:
                    break
                if pause:
                    await asyncio.wait({watcher}, timeout=pause)
            if not watcher.done():
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            watcher.cancel()
            await self._workers.run(response.close)
