"""An ASGI adapter over a request handler, so any HTTP client can reach the fake backend.

The blocking handler runs on daemon worker threads, never on the event loop. Hostile input gets
an HTTP answer (413, 408, 414, 400, or 503 when too many bodies or streams are held at once),
never a 500 or a socket held open.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Callable
from typing import TypeVar

import httpx

from pytest_synth_rl.fake.handler import MAX_BODY_BYTES
from pytest_synth_rl.fake.stream import EventStream
from pytest_synth_rl.taskapp.asgi import Receive, Scope, Send, serve_lifespan

__all__ = [
    "BODY_BUDGET",
    "BUSY_RETRY_AFTER",
    "DEFAULT_READ_TIMEOUT",
    "MAX_BODY_BYTES",
    "MAX_BUFFERED_BYTES",
    "MAX_STREAMS",
    "MAX_TARGET_CHARS",
    "MAX_WORKERS",
    "BodyBudget",
    "FakeASGIApp",
]

T = TypeVar("T")

#: Seconds a client has to send a whole request body once its headers arrived.
DEFAULT_READ_TIMEOUT = 30.0
#: Requests answered at once; more wait on the event loop for a worker.
MAX_WORKERS = 64
#: Event streams one served fake keeps open at once, so streams never take every worker.
MAX_STREAMS = MAX_WORKERS // 4
#: Longest request target (path and query) the fake takes, in characters.
MAX_TARGET_CHARS = 8 * 1024
#: Request body bytes every served fake in the process holds at once, until answered: without
#: it, each open connection could hold :data:`MAX_BODY_BYTES` before any key is checked.
MAX_BUFFERED_BYTES = 64 * 2**20
#: Seconds a request refused for want of budget is told to wait (``Retry-After``).
BUSY_RETRY_AFTER = 1


class _TooLarge(Exception):
    """The body is over the limit: ``str()`` says how large it is."""


class _Busy(Exception):
    """The body does not fit in what :data:`BODY_BUDGET` has left: ``str()`` says how large it is."""


class BodyBudget:
    """The request body bytes held at once, process-wide, against :data:`MAX_BUFFERED_BYTES`
    (taking never waits, so the event loop never blocks on it)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._held = 0

    @property
    def held(self) -> int:
        """Bytes taken and not yet given back."""
        with self._changed:
            return self._held

    def take(self, size: int) -> bool:
        """Take *size* bytes if they fit under :data:`MAX_BUFFERED_BYTES`."""
        with self._changed:
            if self._held + size > MAX_BUFFERED_BYTES:
                return False
            self._held += size
            self._changed.notify_all()
            return True

    def give(self, size: int) -> None:
        with self._changed:
            self._held -= size
            self._changed.notify_all()

    def wait_for(self, condition: Callable[[int], bool], timeout: float) -> bool:
        """Block until ``condition(held)`` is true (False after *timeout* seconds)."""
        with self._changed:
            return self._changed.wait_for(lambda: condition(self._held), timeout)


BODY_BUDGET = BodyBudget()


class _Holding:
    """What one request took from :data:`BODY_BUDGET`, to give back when it is answered."""

    def __init__(self) -> None:
        self.taken = 0

    def take(self, size: int, what: str) -> None:
        """Take *size* more bytes; :class:`_Busy` (saying *what*) if they do not fit."""
        if size and not BODY_BUDGET.take(size):
            raise _Busy(what)
        self.taken += size

    def give_back(self) -> None:
        BODY_BUDGET.give(self.taken)
        self.taken = 0


def _declared_length(scope: Scope) -> int | None:
    """The request's ``Content-Length`` (None when absent; the server already refused a bad one)."""
    for name, value in scope.get("headers", []):
        if name.lower() == b"content-length":
            return int(value) if value.isdigit() else None
    return None


async def _read_limited(receive: Receive, scope: Scope, limit: int, holding: _Holding) -> bytes:
    """The whole body; :class:`_TooLarge` or :class:`_Busy` as soon as it is known to be over
    *limit* or not to fit in :data:`BODY_BUDGET` (from ``Content-Length``, else as chunks arrive):
    the rest is never read."""
    declared = _declared_length(scope)
    if declared is not None and declared > limit:
        raise _TooLarge(f"{declared} bytes")
    if declared is not None:
        holding.take(declared, f"{declared} bytes")
    chunks: list[bytes] = []
    size = 0
    while True:
        event = await receive()
        if event["type"] == "http.disconnect":
            break
        chunk = event.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _TooLarge(f"more than {limit} bytes (read no further)")
        if declared is None:
            holding.take(len(chunk), f"at least {size} bytes (read no further)")
        chunks.append(chunk)
        if not event.get("more_body", False):
            break
    return b"".join(chunks)


async def _plain_answer(send: Send, status: int, code: str, message: str, busy: bool = False) -> None:
    """An error answer in the fake's JSON shape, sent from the event loop (*busy*: with Retry-After)."""
    body = json.dumps({"detail": {"error": {"code": code, "message": message}}}).encode()
    headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
    headers += [(b"retry-after", str(BUSY_RETRY_AFTER).encode())] if busy else []
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class FakeASGIApp:
    """ASGI 3 application serving one ``httpx.Request -> httpx.Response`` handler."""

    def __init__(
        self,
        handler: Callable[[httpx.Request], httpx.Response],
        *,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        max_body: int = MAX_BODY_BYTES,
    ) -> None:
        self.handler = handler
        self.read_timeout = read_timeout
        self.max_body = max_body
        self._slots: asyncio.Semaphore | None = None
        self._streams = 0

    async def _off_loop(self, call: Callable[..., T], *args: object) -> T:
        """``call(*args)`` on a daemon worker thread; the event loop stays free meanwhile."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(MAX_WORKERS)
        async with self._slots:
            loop = asyncio.get_running_loop()
            done: asyncio.Future[T] = loop.create_future()

            def settle(result: T | None, error: BaseException | None) -> None:
                if done.cancelled():
                    return
                if error is not None:
                    done.set_exception(error)
                else:
                    done.set_result(result)  # type: ignore[arg-type]

            def work() -> None:
                outcome: tuple[T | None, BaseException | None]
                try:
                    outcome = (call(*args), None)
                except BaseException as exc:
                    outcome = (None, exc)
                # RuntimeError: the loop is gone (the server stopped), so nobody is waiting.
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(settle, *outcome)

            threading.Thread(target=work, name="synth-fake-request", daemon=True).start()
            return await done

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        target_chars = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
        if target_chars > MAX_TARGET_CHARS:
            # Answered before the body is read: the connection closes after the answer.
            await _plain_answer(
                send,
                414,
                "uri_too_long",
                f"the request target (path and query) is {target_chars} characters; this fake "
                f"backend accepts at most {MAX_TARGET_CHARS}: send a shorter one (its routes, such "
                "as /api/rl/jobs/<job id>, take short ids and a few query parameters)",
            )
            return
        # A stream is counted before its handler runs: one past the bound costs no body read, no worker.
        counted = scope.get("method") == "GET" and str(scope.get("path", "")).endswith("/events/stream")
        if counted and self._streams >= MAX_STREAMS:
            await self._too_many_streams(send)
            return
        self._streams += counted
        try:
            holding = _Holding()
            try:
                response = await self._handle(scope, receive, send, holding)
            finally:
                # However the request ended, its body is no longer held.
                holding.give_back()
            if response is not None:
                await self._respond(response, receive, send)
        finally:
            self._streams -= counted

    async def _too_many_streams(self, send: Send) -> None:
        await _plain_answer(
            send,
            503,
            "too_many_streams",
            f"this fake backend keeps at most {MAX_STREAMS} event streams open at once, and "
            f"{self._streams} are open: close one (a stream ends with its job's terminal event), "
            f"or retry after {BUSY_RETRY_AFTER}s (Retry-After); GET .../events?since_seq=<seq> "
            "reads the same events without holding a stream open",
            busy=True,
        )

    async def _handle(
        self, scope: Scope, receive: Receive, send: Send, holding: _Holding
    ) -> httpx.Response | None:
        """The handler's response; None when the request was answered here (its body refused
        or late, its target not a path, or an injected connection fault)."""
        body = await self._read_body(scope, receive, send, holding)
        if body is None:
            return None
        request = self._to_request(scope, body)
        if request is None:
            target = scope.get("raw_path") or b""
            await _plain_answer(
                send,
                400,
                "bad_request_target",
                f"the request target {target[:80]!r} is not a path; send an origin-form target "
                "such as /api/rl/jobs",
            )
            return None
        try:
            return await self._off_loop(self.handler, request)
        except httpx.ConnectError:
            # An injected connection fault: start a response and end it early, which clients see
            # as a broken connection (the server closes it), never as an HTTP answer.
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"100")]}
            )
            return None

    async def _read_body(self, scope: Scope, receive: Receive, send: Send, holding: _Holding) -> bytes | None:
        """The whole body, taken from :data:`BODY_BUDGET` into *holding*; None when it was
        answered instead (413 too large, 503 no room in the budget, 408 too slow)."""
        # A body larger than the whole budget would never fit: too large, not "retry later".
        limit = min(self.max_body, MAX_BUFFERED_BYTES)
        try:
            return await asyncio.wait_for(_read_limited(receive, scope, limit, holding), self.read_timeout)
        except _TooLarge as exc:
            # Answered without reading the rest; ``connection: close`` makes the server close
            # the connection after the answer, and the unread rest with it.
            await _plain_answer(
                send,
                413,
                "body_too_large",
                f"the request body is {exc}; this fake backend accepts at most {limit} bytes",
            )
        except _Busy as exc:
            held = BODY_BUDGET.held - holding.taken
            await _plain_answer(
                send,
                503,
                "too_many_bodies",
                f"the request body is {exc}, and this fake backend already holds {held} bytes of "
                f"other requests' bodies: it holds at most {MAX_BUFFERED_BYTES} bytes of request "
                f"bodies at once, across connections. Retry after {BUSY_RETRY_AFTER}s (Retry-After), "
                "or send fewer large bodies at once",
                busy=True,
            )
        except asyncio.TimeoutError:
            await _plain_answer(
                send,
                408,
                "request_timeout",
                f"the request body did not arrive within {self.read_timeout:g}s; send the whole request",
            )
        return None

    async def _respond(self, response: httpx.Response, receive: Receive, send: Send) -> None:
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers.multi_items()]
        if not isinstance(response.stream, EventStream):  # every other answer is in memory
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
            # Each look at the job on a worker, each wait between looks here (ended by a hang-up).
            while not watcher.done():
                chunks, pause = await self._off_loop(stream.step)
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
            await self._off_loop(response.close)

    @staticmethod
    def _to_request(scope: Scope, body: bytes) -> httpx.Request | None:
        """The handler's request (headers stay bytes); None when the target is not a path."""
        headers = list(scope.get("headers", []))
        host, port = scope.get("server") or ("127.0.0.1", 80)
        query = scope.get("query_string", b"")
        raw_path = scope.get("raw_path") or scope.get("path", "/").encode()
        if not raw_path.startswith(b"/"):
            return None
        target = raw_path + (b"?" + query if query else b"")
        try:
            url = httpx.URL(f"{scope.get('scheme', 'http')}://{host}:{port}{target.decode('latin-1')}")
            return httpx.Request(scope["method"], url, headers=headers, content=body)
        except (httpx.InvalidURL, ValueError, UnicodeError):
            return None
