"""Signals: SIGTERM ends a run as Ctrl-C does; a second interrupt lets the teardown finish, a third
ends the process at once, naming the jobs left running."""

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
    def __init__(self, left_running: Callable[[], list[str]]) -> None:
        self._left_running = left_running
        self._previous: dict[int, Any] = {}
        self._interrupted_at: float | None = None
        self._again = 0

    def install(self) -> None:
        self._take(signal.SIGTERM, signal.SIG_DFL, self._on_term)

    def deadline(self) -> float | None:
        return None if self._interrupted_at is None else self._interrupted_at + CANCEL_SECONDS

    def pytest_keyboard_interrupt(self) -> None:
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
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _say(line: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, (line + "\n").encode("utf-8", "replace"))
