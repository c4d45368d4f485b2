"""SIGTERM ends a run the way Ctrl-C does, so an interrupted run still cancels and reports.

CI systems cancel a run with SIGTERM, whose default action kills the process on the spot: online
jobs keep running (and costing) on the backend, and no job table or JSON report is written.
Turning SIGTERM into ``KeyboardInterrupt`` sends it down pytest's Ctrl-C path instead: fixtures
are torn down (cancelling online jobs), then the summary and report are written.

The handler is installed only for the session and the previous one restored after; never at
import. A SIGTERM the process ignores (``SIG_IGN``) or handles itself stays as it was.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

__all__ = ["TerminationAsInterrupt"]


class TerminationAsInterrupt:
    """Installs a SIGTERM handler raising ``KeyboardInterrupt``; :meth:`restore` undoes it."""

    def __init__(self) -> None:
        self._previous: Any = None
        self._installed = False

    def install(self) -> bool:
        """Install if SIGTERM has its default action and we are on the main thread."""
        if self._installed or threading.current_thread() is not threading.main_thread():
            return False
        previous = signal.getsignal(signal.SIGTERM)
        if previous is not signal.SIG_DFL:  # ignored, or someone else's handler: leave it
            return False
        self._previous = previous
        signal.signal(signal.SIGTERM, self._on_term)
        self._installed = True
        return True

    def restore(self) -> None:
        if self._installed and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._previous)
            self._installed = False

    @staticmethod
    def _on_term(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"terminated by signal {signal.Signals(signum).name}")
