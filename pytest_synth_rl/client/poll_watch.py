"""Who watches status polls: a process-wide list of observers, importable without the client.

A progress display registers here at pytest start; the client's poll loop reports to it. Kept
apart from the client package so that registering costs no import of httpx or the config layer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["PollObserver", "observe_polls", "poll_observers"]

#: Called as ``observer(poller, record)`` after every status poll of every job in the process.
PollObserver = Callable[[Any, Any], None]
_observers: list[PollObserver] = []


def observe_polls(observer: PollObserver) -> Callable[[], None]:
    """Watch every poll of every job (a progress display); returns the function that stops it.

    Process-wide on purpose: a progress line must see jobs made by user code too, not only the
    fixture's. An observer that raises is reported like a failing ``on_status`` callback.
    """
    _observers.append(observer)

    def stop() -> None:
        if observer in _observers:
            _observers.remove(observer)

    return stop


def poll_observers() -> tuple[PollObserver, ...]:
    """The observers registered now (a snapshot, safe to iterate while one unregisters)."""
    return tuple(_observers)
