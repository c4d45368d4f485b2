"""One job's rollout batches, run back to back on a bounded set of workers.

When the next batch is known (the next step's, or the evaluation after this step), a free worker
starts it while this batch's last rollouts finish. Each batch still returns its records in seed
order with its first failure, at most ``workers`` rollouts are in flight, and a failed batch
starts nothing more.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

RolloutResult = Any  # a RolloutRecord, or the RolloutFailure that carries one
#: Runs one body of the batch with the given key: a record, or a failure (``is_failure`` tells).
Attempt = Callable[[Any, dict[str, Any]], RolloutResult]


class FeedBatch:
    """One queued batch: its bodies, the results so far, and how far it got."""

    __slots__ = ("bodies", "error", "finished", "key", "results", "started", "stopped")

    def __init__(self, key: Hashable, bodies: list[dict[str, Any]]) -> None:
        self.key = key
        self.bodies = bodies
        self.results: list[RolloutResult | None] = [None] * len(bodies)
        self.started = 0
        self.finished = 0
        self.stopped = False
        self.error: BaseException | None = None

    @property
    def settled(self) -> bool:
        """Nothing of it is in flight and nothing more will start."""
        return self.finished == self.started and (self.stopped or self.started == len(self.bodies))


class RolloutFeed:
    """Queued batches of one job, run by up to *workers* tasks on *pool*."""

    def __init__(
        self,
        pool: Callable[[], ThreadPoolExecutor],
        attempt: Attempt,
        is_failure: Callable[[RolloutResult], bool],
        workers: int,
    ) -> None:
        self._pool = pool
        self._attempt = attempt
        self._is_failure = is_failure
        self.workers = max(1, workers)
        self._batches: list[FeedBatch] = []
        self._active = 0
        self._cond = threading.Condition()

    def add(self, key: Hashable, bodies: list[dict[str, Any]]) -> FeedBatch:
        """Queue a batch after those queued; free workers start it once earlier ones are all started."""
        batch = FeedBatch(key, bodies)
        with self._cond:
            self._batches.append(batch)
            spawn = max(0, min(self.workers - self._active, self._unstarted()))
            self._active += spawn
        for started in range(spawn):
            try:
                future = self._pool().submit(self._work)
            except RuntimeError:  # the pool is shut down: this worker and the rest never run
                self._ended(spawn - started)
                raise
            future.add_done_callback(self._cancelled)
        return batch

    def take(self, key: Hashable) -> FeedBatch | None:
        """The first queued batch if it is *key* (queued ahead); otherwise drop the queue, None."""
        with self._cond:
            first = self._batches[0] if self._batches else None
        if first is not None and first.key == key:
            return first
        self.stop()
        return None

    def wait(self, batch: FeedBatch) -> list[RolloutResult | None]:
        """Block until *batch* is settled; it leaves the queue, its results are returned."""
        with self._cond:
            while not batch.settled:
                if self._active == 0:
                    # Only when the pool refused or dropped our workers (the fake is closing).
                    raise RuntimeError("rollout workers stopped before the batch finished (fake closed)")
                self._cond.wait()
            if batch in self._batches:
                self._batches.remove(batch)
        if batch.error is not None:
            raise batch.error
        return batch.results

    def stop(self) -> None:
        """Start nothing more, wait for what is in flight, and forget every queued batch."""
        with self._cond:
            for batch in self._batches:
                batch.stopped = True
            while self._active:
                self._cond.wait()
            self._batches.clear()

    @property
    def running(self) -> int:
        """Worker tasks started and not yet ended (never more than :attr:`workers`)."""
        with self._cond:
            return self._active

    def _unstarted(self) -> int:
        stopped = next((i for i, batch in enumerate(self._batches) if batch.stopped), len(self._batches))
        return sum(len(batch.bodies) - batch.started for batch in self._batches[:stopped])

    def _cancelled(self, future: Future[None]) -> None:
        if future.cancelled():
            self._ended()

    def _ended(self, workers: int = 1) -> None:
        with self._cond:
            self._active -= workers
            self._cond.notify_all()

    def _next(self) -> tuple[FeedBatch, int] | None:
        for batch in self._batches:
            if batch.stopped:
                return None  # a failed batch holds back every later one
            if batch.started < len(batch.bodies):
                batch.started += 1
                return batch, batch.started - 1
        return None

    def _work(self) -> None:
        while True:
            with self._cond:
                picked = self._next()
                if picked is None:
                    self._ended()
                    return
            batch, index = picked
            try:
                result = self._attempt(batch.key, batch.bodies[index])
            except BaseException as exc:  # a bug, not a task app failure: the waiter re-raises it
                with self._cond:
                    batch.error = batch.error or exc
                    batch.finished += 1
                    batch.stopped = True
                    self._ended()
                return
            with self._cond:
                batch.results[index] = result
                batch.finished += 1
                if self._is_failure(result):
                    batch.stopped = True
                self._cond.notify_all()
