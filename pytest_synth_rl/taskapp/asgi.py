"""ASGI chores shared by the plugin's own plain-ASGI servers."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, TypeVar

T = TypeVar("T")
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


async def serve_lifespan(receive: Receive, send: Send) -> None:
    """Answer a lifespan scope: nothing to start or stop, but uvicorn expects the handshake."""
    while (event := await receive())["type"] != "lifespan.shutdown":
        if event["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
    await send({"type": "lifespan.shutdown.complete"})


async def read_body(receive: Receive, limit: int | None = None) -> bytes:
    """The request body; past *limit* bytes the rest is read and dropped."""
    chunks: list[bytes] = []
    size = 0
    while (event := await receive())["type"] != "http.disconnect":
        size += len(chunk := event.get("body", b""))
        if limit is None or size <= limit:
            chunks.append(chunk)
        if not event.get("more_body", False):
            break
    return b"".join(chunks)


class OffLoop:
    """Blocking calls from an event loop on daemon threads (each kept until idle 0.1 s), *limit* at once."""

    def __init__(self, limit: int, name: str) -> None:
        self.limit, self.name = limit, name
        self._slots: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None
        self._calls: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)  # waiting threads that no queued call counts on

    async def run(self, call: Callable[..., T], *args: object) -> T:
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots[0] is not loop:  # a server served again has a new loop
            self._slots = (loop, asyncio.Semaphore(self.limit))
        async with self._slots[1]:
            done: concurrent.futures.Future[T] = concurrent.futures.Future()

            def work() -> None:
                with contextlib.suppress(concurrent.futures.InvalidStateError):  # cancelled: nobody waits
                    try:
                        done.set_result(call(*args))
                    except BaseException as exc:
                        done.set_exception(exc)

            if not self._idle.acquire(blocking=False):  # no waiting thread is free for it
                threading.Thread(target=self._serve, name=self.name, daemon=True).start()
            self._calls.put(work)
            return await asyncio.wrap_future(done)

    def _serve(self) -> None:
        while True:
            try:
                self._calls.get(timeout=0.1)()
                self._idle.release()
            except queue.Empty:
                if self._idle.acquire(blocking=False):  # no queued call counts on this thread
                    return
