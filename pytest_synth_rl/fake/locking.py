"""The job store's lock: reentrant, and set aside by its holder while it waits on the network.

A rollout batch runs under the store's lock, inside a stage of a job; holding it for the batch
would stop every other client of a served fake. :meth:`StoreLock.set_aside` releases it at any
depth for the slow part and takes it back at the same depth.
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
        self._lock = threading.RLock()
        self._released = threading.Condition(self._lock)
        self._owner: int | None = None
        self._depth = 0
        self._waiting = 0  # threads in wait_until: a release with none skips the notify

    def acquire(self) -> None:
        self._lock.acquire()
        self._owner = threading.get_ident()
        self._depth += 1

    def release(self) -> None:
        if self._owner != threading.get_ident():
            raise RuntimeError("cannot release a StoreLock this thread does not hold")
        self._depth -= 1
        if not self._depth:
            self._owner = None
            if self._waiting:
                self._released.notify_all()
        self._lock.release()

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
        return self._owner == threading.get_ident()

    @contextlib.contextmanager
    def set_aside(self) -> Iterator[None]:
        """Release the lock entirely for the block, then take it back at the same depth (a thread
        that does not hold it just runs the block)."""
        depth = self._depth if self.held else 0
        for _ in range(depth):
            self.release()
        try:
            yield
        finally:
            for _ in range(depth):
                self.acquire()

    def wait_until(self, ready: Callable[[], bool]) -> None:
        """Hold the lock with *ready()* true: until then, set the lock aside and wait for a release."""
        if not self.held:
            raise RuntimeError("StoreLock.wait_until needs the lock held")
        depth = self._depth
        while not ready():
            self._owner, self._depth = None, 0
            self._waiting += 1
            self._released.notify_all()
            try:
                self._released.wait()  # releases the lock at any depth, takes it back at the same
            finally:
                self._waiting -= 1
            self._owner, self._depth = threading.get_ident(), depth
