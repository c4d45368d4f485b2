"""Time as a dependency: everything that waits asks a :class:`Clock`, not the ``time`` module;
offline a :class:`VirtualClock` makes a two-hour job finish in milliseconds."""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

#: Called as ``listener(previous_now, new_now)`` after virtual time moved forward.
TimeListener = Callable[[float, float], None]

#: 2026-01-01T00:00:00Z: a fixed epoch keeps virtual timestamps reproducible.
DEFAULT_EPOCH = 1767225600.0


@runtime_checkable
class Clock(Protocol):
    """``now``: monotonic seconds; ``time``: seconds since the Unix epoch, for timestamps."""

    def now(self) -> float: ...

    def time(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...

    async def async_sleep(self, seconds: float) -> None: ...


class RealClock:
    """Wall-clock time: ``time.monotonic`` and real sleeping."""

    is_virtual = False

    def now(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    async def async_sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    def __repr__(self) -> str:
        return "RealClock()"


class ScaledClock(RealClock):
    """Real time running *speed* times faster, for the served fake (its clients share no clock)."""

    def __init__(self, speed: float = 1.0) -> None:
        if speed <= 0:
            raise ValueError(f"ScaledClock speed must be > 0, got {speed!r}")
        self.speed = speed
        self._origin_mono = time.monotonic()
        self._origin_wall = time.time()

    def now(self) -> float:
        return self._origin_mono + (time.monotonic() - self._origin_mono) * self.speed

    def time(self) -> float:
        return self._origin_wall + (time.monotonic() - self._origin_mono) * self.speed

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds / self.speed)

    async def async_sleep(self, seconds: float) -> None:
        await super().async_sleep(seconds / self.speed)

    def __repr__(self) -> str:
        return f"ScaledClock(speed={self.speed})"


class VirtualClock:
    """Time that only moves on a sleep or :meth:`advance`; listeners run after it moved, unlocked."""

    is_virtual = True

    def __init__(self, start: float = 0.0, *, epoch: float = DEFAULT_EPOCH) -> None:
        self._now = self._start = float(start)
        self._epoch = float(epoch)
        self._lock = threading.Lock()
        self._listeners: list[TimeListener] = []
        #: Every duration passed to :meth:`sleep` / :meth:`async_sleep`, in order.
        self.sleeps: list[float] = []

    def now(self) -> float:
        with self._lock:
            return self._now

    def time(self) -> float:
        return self._epoch + self.elapsed

    @property
    def elapsed(self) -> float:
        with self._lock:
            return self._now - self._start

    @property
    def total_slept(self) -> float:
        return sum(self.sleeps)

    def advance(self, seconds: float) -> None:
        if not (math.isfinite(seconds) and seconds >= 0):
            raise ValueError(
                f"virtual time moves by a finite number of seconds, not {seconds!r} (nor backwards)"
            )
        with self._lock:
            before = self._now
            self._now = after = before + seconds
            listeners = list(self._listeners)
        if seconds:
            for listener in listeners:
                listener(before, after)

    def sleep(self, seconds: float) -> None:
        seconds = max(0.0, float(seconds))
        self.sleeps.append(seconds)
        self.advance(seconds)

    async def async_sleep(self, seconds: float) -> None:
        if self._listeners:  # listeners may run rollouts: in a thread, so the event loop stays free
            await asyncio.to_thread(self.sleep, seconds)
        else:
            self.sleep(seconds)
        await asyncio.sleep(0)  # a turn for other tasks, as a real sleep gives

    def subscribe(self, listener: TimeListener) -> Callable[[], None]:
        """Call *listener(before, after)* whenever time advances; returns the unsubscribe function."""
        with self._lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._lock, contextlib.suppress(ValueError):
                self._listeners.remove(listener)

        return unsubscribe

    def __repr__(self) -> str:
        return f"VirtualClock(now={self.now():.3f}, sleeps={len(self.sleeps)})"
