"""Who watches status polls: a process-wide list of observers, importable without httpx, so a
progress display can register at pytest start for every job's polls, user code's included."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: Called as ``observer(poller, record)`` after every status poll of every job in the process.
PollObserver = Callable[[Any, Any], None]
_observers: list[PollObserver] = []


def observe_polls(observer: PollObserver) -> Callable[[], None]:
    """Watch every poll of every job; returns the function that stops it."""
    _observers.append(observer)

    def stop() -> None:
        if observer in _observers:
            _observers.remove(observer)

    return stop


def poll_observers() -> tuple[PollObserver, ...]:
    """A snapshot of the observers, safe to iterate while one unregisters."""
    return tuple(_observers)
