"""The job store's lock: reentrant, and set aside by its holder while it waits on the network.

A rollout batch runs inside a stage of a job, which runs under the store's lock. Holding the
lock for the batch (up to the rollout timeout, or forever with a task app that hangs) would
stop every other client of a served fake: the request log, the admin routes, the status of
every other job. :meth:`StoreLock.set_aside` releases the lock completely (whatever the holder's
depth) for the slow part and takes it back at the same depth; the job whose batch is running is
marked busy meanwhile, so nothing else moves it (:meth:`StoreLock.wait_until` lets a writer wait
for that without holding the lock).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from types import TracebackType

__all__ = ["StoreLock"]


class StoreLock:
    """A reentrant lock whose holder can release it for a while, and wait on a condition."""

    def __init__(self) -> None:
        self._state = threading.Condition(threading.Lock())
        self._owner: int | None = None
        self._depth = 0
        # Threads waiting on the condition: a release with none (the usual case) skips the
        # notify, which costs more than the rest of an uncontended acquire and release.
        self._waiting = 0

    # Reentry and a release that keeps the lock skip the condition's own lock: only the owner
    # changes ``_owner`` away from itself or touches ``_depth`` while it holds the lock, so the
    # owner reads both safely, and no other thread can see ``_owner`` equal to its own id.
    # A request takes the lock about six times, all but the first as reentry.
    def acquire(self) -> None:
        me = threading.get_ident()
        if self._owner == me:
            self._depth += 1
            return
        with self._state:
            while self._owner is not None:
                self._wait()
            self._owner, self._depth = me, 1

    def release(self) -> None:
        if self._owner != threading.get_ident():
            raise RuntimeError("cannot release a StoreLock this thread does not hold")
        if self._depth > 1:
            self._depth -= 1
            return
        with self._state:
            self._depth = 0
            self._owner = None
            self._wake()

    def __enter__(self) -> StoreLock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    @property
    def held(self) -> bool:
        """Whether the calling thread holds the lock."""
        return self._owner == threading.get_ident()  # see acquire: the owner's own view is exact

    @contextlib.contextmanager
    def set_aside(self) -> Iterator[None]:
        """Release the lock entirely for the block, then take it back at the same depth.

        A thread that does not hold the lock has nothing to set aside: the block just runs.
        """
        me = threading.get_ident()
        with self._state:
            if self._owner != me:
                depth = 0
            else:
                depth, self._owner, self._depth = self._depth, None, 0
                self._wake()
        try:
            yield
        finally:
            if depth:
                with self._state:
                    while self._owner is not None:
                        self._wait()
                    self._owner, self._depth = me, depth

    def wait_until(self, ready: Callable[[], bool]) -> None:
        """Hold the lock with *ready()* true: until then, set the lock aside and wait for a release.

        *ready* is checked with the lock held; it must become true through another thread's work
        (which ends with a release, which wakes this one).
        """
        me = threading.get_ident()
        with self._state:
            if self._owner != me:
                raise RuntimeError("StoreLock.wait_until needs the lock held")
            depth = self._depth
            while not ready():
                self._owner, self._depth = None, 0
                self._wake()
                self._wait()
                while self._owner is not None:
                    self._wait()
                self._owner, self._depth = me, depth

    def _wait(self) -> None:
        """Wait for a wake-up, counted in ``_waiting`` (the condition's lock held, as for wait)."""
        self._waiting += 1
        try:
            self._state.wait()
        finally:
            self._waiting -= 1

    def _wake(self) -> None:
        """Wake every waiting thread, if any (the condition's lock held)."""
        if self._waiting:
            self._state.notify_all()
