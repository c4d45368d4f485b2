"""The live event stream (``GET /rl/jobs/{id}/events/stream``): open until the job is terminal.

Each :meth:`EventStream.step` observes the job once, sends what is new and says how long to wait:
a :class:`VirtualClock` paced by the clock is advanced to the next stage instead. The ASGI adapter
runs steps off its event loop and waits between them on the loop.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx

from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.fake.jobs import JobState
from pytest_synth_rl.fake.lifecycle import Lifecycle

_SLICE = 0.25  # longest real-time wait between looks at a job on a real or scaled clock
_HEARTBEAT = 10.0  # real seconds between keep-alive comments
_IDLE_LIMIT = 600.0  # real seconds without a new event before the stream gives up


def sse_event(event: dict[str, Any]) -> bytes:
    """One server-sent event for *event* (the ``data:`` line carries the event as JSON)."""
    return f"id: {event['seq']}\nevent: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


class EventStream(httpx.SyncByteStream, httpx.AsyncByteStream):
    """SSE bytes for one job's events after *since_seq*, until the job is terminal."""

    def __init__(self, lifecycle: Lifecycle, job: JobState, since_seq: int) -> None:
        self._lifecycle = lifecycle
        self._job = job
        self._seq = max(0, since_seq)
        self._closed = False
        self._idle_since = self._last_beat = time.monotonic()

    def _tick(self) -> tuple[list[dict[str, Any]], bool, float | None]:
        lifecycle = self._lifecycle
        with lifecycle.store.lock:
            lifecycle.observe(self._job)
            page: list[dict[str, Any]] = self._job.events_page(self._seq, 10**9)["events"]
            return page, self._job.terminal, lifecycle.next_due(self._job)

    def _pause(self, due: float | None) -> float:
        """Real seconds to wait before the next look (a clock-paced virtual clock is advanced instead)."""
        clock = self._lifecycle.clock
        if isinstance(clock, VirtualClock) and self._lifecycle.pacing == "clock" and due is not None:
            clock.advance(max(0.0, due - clock.now()))
            return 0.0
        if due is not None and not isinstance(clock, VirtualClock):
            speed = float(getattr(clock, "speed", 1.0))
            return min(max((due - clock.now()) / speed, 0.005), _SLICE)
        return 0.05  # a job that moves only by status polls (or not at all): let them happen

    def step(self) -> tuple[list[bytes], float | None]:
        """One look at the job: the chunks to send now, and the seconds to wait (None: the end)."""
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
