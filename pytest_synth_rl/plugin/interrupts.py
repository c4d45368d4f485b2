"""SIGTERM ends a run the way Ctrl-C does, so an interrupted run still cancels and reports.

Installed only for the session, and only over SIGTERM's default action (an ignored or someone
else's handler stays); the previous handler is restored after.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any


class TerminationAsInterrupt:
    """Installs a SIGTERM handler raising ``KeyboardInterrupt``; :meth:`restore` undoes it."""

    def __init__(self) -> None:
        self._previous: Any = None
        self._installed = False

    def install(self) -> bool:
        if self._installed or threading.current_thread() is not threading.main_thread():
            return False
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return False
        self._previous = signal.signal(signal.SIGTERM, self._on_term)
        self._installed = True
        return True

    def restore(self) -> None:
        if self._installed and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._previous)
            self._installed = False

    @staticmethod
    def _on_term(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"terminated by signal {signal.Signals(signum).name}")
