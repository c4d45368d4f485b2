"""SIGTERM ends a run the way Ctrl-C does, so an interrupted run still cancels and reports. Once
interrupted, a second SIGINT or SIGTERM lets the teardown finish (its cancels have a deadline), a
third ends the process at once, naming the jobs left running. Only Python's default handlers are
replaced, for the session; the previous ones are restored after.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

#: Seconds from the first interrupt after which the teardown starts no more cancels or reads.
CANCEL_SECONDS = 30.0


class RunInterrupts:
    """The session's signal handling (a plugin, registered online or with a report)."""

    def __init__(self, left_running: Callable[[], list[str]]) -> None:
        self._left_running = left_running
        self._previous: dict[int, Any] = {}
        self._interrupted_at: float | None = None
        self._again = 0

    def install(self) -> None:
        """Make SIGTERM raise ``KeyboardInterrupt`` (only over its default action)."""
        self._take(signal.SIGTERM, signal.SIG_DFL, self._on_term)

    def deadline(self) -> float | None:
        """When an interrupted run's teardown stops cancelling (``time.monotonic()``), or None."""
        return None if self._interrupted_at is None else self._interrupted_at + CANCEL_SECONDS

    def pytest_keyboard_interrupt(self) -> None:
        """The teardown begins: from now on SIGINT and SIGTERM are counted, not raised."""
        self._interrupted_at = time.monotonic()
        self._take(signal.SIGINT, signal.default_int_handler, self._on_again)
        self._take(signal.SIGTERM, self._on_term, self._on_again)

    def pytest_unconfigure(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for signum, previous in self._previous.items():
                signal.signal(signum, previous)
            self._previous.clear()

    def _take(self, signum: int, expected: object, handler: Callable[[int, FrameType | None], None]) -> None:
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signum) == expected:
            self._previous.setdefault(signum, signal.signal(signum, handler))

    @staticmethod
    def _on_term(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"terminated by signal {signal.Signals(signum).name}")

    def _on_again(self, signum: int, frame: FrameType | None) -> None:
        self._again += 1
        if self._again == 1:
            _say(
                "synth-rl: interrupted again: still cancelling online jobs (for "
                f"{CANCEL_SECONDS:g}s from the first interrupt) and writing the report; interrupt "
                "once more to stop now"
            )
            return
        left = ", ".join(self._left_running())
        _say(f"synth-rl: stopped at once; RL jobs maybe left running, to cancel on the backend: {left}"
             if left else "synth-rl: stopped at once; no RL job was left running")  # fmt: skip
        signal.signal(signum, signal.SIG_DFL)  # end as the signal ends a process: at once
        os.kill(os.getpid(), signum)


def _say(line: str) -> None:
    """Write *line* to stderr unbuffered (a signal handler may have interrupted a buffered write)."""
    with contextlib.suppress(OSError):
        os.write(2, (line + "\n").encode("utf-8", "replace"))
