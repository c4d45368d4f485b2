"""Time as a dependency.

Everything in the plugin that waits (polling, retry backoff, the fake backend's job lifecycles)
asks a :class:`Clock` instead of the ``time`` module. Offline, a :class:`VirtualClock` makes a
two-hour job poll to completion in milliseconds: ``sleep`` advances virtual time at once, the
requested sleeps are recorded for assertions, and listeners (the fake backend) advance their jobs
when time moves. Online, :class:`RealClock` is plain wall-clock time.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "RealClock", "ScaledClock", "TimeListener", "VirtualClock"]

#: Called as ``listener(previous_now, new_now)`` after virtual time moved forward.
TimeListener = Callable[[float, float], None]

# A fixed default epoch keeps virtual timestamps (``created_at`` in fake job events) reproducible:
# 2026-01-01T00:00:00Z.
DEFAULT_EPOCH = 1767225600.0


@runtime_checkable
class Clock(Protocol):
    """What the plugin needs from time.

    ``now`` is monotonic seconds (only differences matter); ``time`` is seconds since the Unix
    epoch, for timestamps that end up in payloads and reports.
    """

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


class ScaledClock:
    """Real time running *speed* times faster: sleeping ``s`` really sleeps ``s / speed``.

    For the served fake backend, whose clients (other processes) cannot share a virtual clock but
    should still not wait two real hours for a two-hour job.
    """

    is_virtual = False

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
        if seconds > 0:
            time.sleep(seconds / self.speed)

    async def async_sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds) / self.speed)

    def __repr__(self) -> str:
        return f"ScaledClock(speed={self.speed})"


class VirtualClock:
    """Time that only moves when someone sleeps or calls :meth:`advance`.

    Thread-safe: the fake backend may be driven from a server thread while the test sleeps.
    Listeners run after the clock has moved, outside the lock, in the thread that moved it.
    """

    is_virtual = True

    def __init__(self, start: float = 0.0, *, epoch: float = DEFAULT_EPOCH) -> None:
        self._now = float(start)
        self._start = float(start)
        self._epoch = float(epoch)
        self._lock = threading.Lock()
        self._listeners: list[TimeListener] = []
        #: Every duration passed to :meth:`sleep` / :meth:`async_sleep`, in order.
        self.sleeps: list[float] = []

    # -- reading ------------------------------------------------------------------------------
    def now(self) -> float:
        with self._lock:
            return self._now

    def time(self) -> float:
        with self._lock:
            return self._epoch + (self._now - self._start)

    @property
    def elapsed(self) -> float:
        """Virtual seconds since the clock was created."""
        with self._lock:
            return self._now - self._start

    @property
    def total_slept(self) -> float:
        return sum(self.sleeps)

    # -- moving -------------------------------------------------------------------------------
    def advance(self, seconds: float) -> None:
        """Move time forward by *seconds* (>= 0) and notify listeners."""
        if not math.isfinite(seconds):
            raise ValueError(f"virtual time moves by a finite number of seconds, not {seconds!r}")
        if seconds < 0:
            raise ValueError(f"virtual time cannot go backwards (advance by {seconds!r})")
        with self._lock:
            before = self._now
            self._now = before + seconds
            after = self._now
            listeners = list(self._listeners)
        if seconds:
            for listener in listeners:
                listener(before, after)

    def sleep(self, seconds: float) -> None:
        seconds = max(0.0, float(seconds))
        self.sleeps.append(seconds)
        self.advance(seconds)

    async def async_sleep(self, seconds: float) -> None:
        with self._lock:
            listened = bool(self._listeners)
        if listened:
            # Listeners (a fake's jobs) may do real work as time moves, such as rollouts against
            # a task app: done in a thread, so the event loop (and whatever it serves) stays free.
            import anyio.to_thread

            await anyio.to_thread.run_sync(self.sleep, seconds)
        else:
            self.sleep(seconds)
        # Yield once so other tasks get a turn, as a real sleep would allow.
        await asyncio.sleep(0)

    # -- listeners ----------------------------------------------------------------------------
    def subscribe(self, listener: TimeListener) -> Callable[[], None]:
        """Call *listener(before, after)* whenever time advances; returns an unsubscribe function."""
        with self._lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    def __repr__(self) -> str:
        return f"VirtualClock(now={self.now():.3f}, sleeps={len(self.sleeps)})"
