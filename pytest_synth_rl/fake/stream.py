"""The live event stream (``GET /rl/jobs/{id}/events/stream``): open until the job is terminal.

The upstream CLI reads this stream once and never reconnects, so the stream must keep going
while the job runs and end right after the job's terminal event. Each tick observes the job
(which, on a served fake with observation-driven progress, moves it one stage), sends the events
that are new, and, when nothing is new, waits for the next stage the way the clock allows: a
:class:`~pytest_synth_rl.clock.VirtualClock` is advanced to it (in-process, reading the stream
is what moves time), any other clock is slept on in short slices.

One object serves sync and async readers (``httpx.Client`` and ``httpx.AsyncClient`` over
respx or a ``MockTransport``). Its :meth:`EventStream.step` is one look at the job (blocking: it
may run a stage) and says how long to wait before the next; the ASGI adapter runs each step off
its event loop and waits between steps on the loop, so a served stream holds a handler thread
only while it looks. A reconnecting client's ``Last-Event-ID`` is the *since_seq* it resumes
after (the route reads it).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx

from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.fake.jobs import JobRecord
from pytest_synth_rl.fake.store import JobStore

__all__ = ["EventStream", "sse_event"]

#: Longest real-time slice slept while a job on a real or scaled clock waits for its next stage.
_SLICE = 0.25
#: Real seconds between keep-alive comments while nothing happens.
_HEARTBEAT = 10.0
#: Real seconds a stream may go without a new event before it gives up (and says so).
_IDLE_LIMIT = 600.0


def sse_event(event: dict[str, Any]) -> bytes:
    """One server-sent event for *event* (the ``data:`` line carries the event as JSON)."""
    return f"id: {event['seq']}\nevent: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


class EventStream(httpx.SyncByteStream, httpx.AsyncByteStream):
    """SSE bytes for one job's events after *since_seq*, until the job is terminal."""

    def __init__(self, store: JobStore, job: JobRecord, since_seq: int) -> None:
        self._store = store
        self._job = job
        self._seq = max(0, since_seq)
        self._closed = False
        self._idle_since: float | None = None
        self._last_beat: float | None = None

    def _tick(self) -> tuple[list[dict[str, Any]], bool, float | None]:
        store = self._store
        with store.lock:
            store.observe(self._job)
            page: list[dict[str, Any]] = self._job.events_page(self._seq, 10**9)["events"]
            return page, self._job.terminal, store.next_due(self._job)

    def _pause(self, due: float | None) -> float:
        """Real seconds to wait before the next look (a virtual clock on ``pacing="clock"`` is
        advanced to *due* here instead, and the next look comes at once)."""
        clock = self._store.clock
        if isinstance(clock, VirtualClock) and self._store.pacing == "clock" and due is not None:
            clock.advance(max(0.0, due - clock.now()))
            return 0.0
        if due is not None and not isinstance(clock, VirtualClock):
            speed = float(getattr(clock, "speed", 1.0))
            return min(max((due - clock.now()) / speed, 0.005), _SLICE)
        return 0.05  # a job that moves only by status polls (or not at all): let them happen

    def step(self) -> tuple[list[bytes], float | None]:
        """One look at the job: the chunks to send now, and the real seconds to wait before the
        next step (None: the stream is over).

        Blocking (it observes the job, which may run a stage), but it never waits out time
        itself: a server can wait between steps without holding a thread.
        """
        now = time.monotonic()
        if self._idle_since is None or self._last_beat is None:
            self._idle_since = self._last_beat = now
        page, terminal, due = self._tick()
        chunks = []
        for event in page:
            self._seq = int(event["seq"])
            chunks.append(sse_event(event))
        if terminal:
            return chunks, None
        now = time.monotonic()
        if page:
            self._idle_since = self._last_beat = now
            return chunks, 0.0
        if now - self._idle_since > _IDLE_LIMIT:
            return [b": no new event for 600 s; closing (the job is still running)\n\n"], None
        if now - self._last_beat > _HEARTBEAT:
            self._last_beat = now
            chunks.append(f": waiting for job {self._job.id} (status {self._job.status})\n\n".encode())
        return chunks, self._pause(due)

    def __iter__(self) -> Iterator[bytes]:
        while not self._closed:
            chunks, pause = self.step()
            yield from chunks
            if pause is None:
                return
            if pause:
                time.sleep(pause)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while not self._closed:
            chunks, pause = await asyncio.to_thread(self.step)
            for chunk in chunks:
                yield chunk
            if pause is None:
                return
            if pause:
                await asyncio.sleep(pause)

    def close(self) -> None:
        self._closed = True

    async def aclose(self) -> None:
        self._closed = True
