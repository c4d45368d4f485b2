"""Waiting for something that must not hang, without timing it.

How long a call takes depends on the machine; whether it returns at all does not. These helpers
fail a test only when a call is still running after a limit no healthy run comes near.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: Seconds. Only a hang takes this long, on any machine, however loaded.
HANG_GUARD = 120.0


def finishes(call: Callable[[], T]) -> T:
    """Run *call* in a worker thread; fail the test if it hangs, re-raise what it raised."""
    outcome: list[T] = []
    failure: list[BaseException] = []

    def work() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:
            failure.append(exc)

    worker = threading.Thread(target=work, name="hang-guard", daemon=True)
    worker.start()
    worker.join(HANG_GUARD)
    assert not worker.is_alive(), f"{call!r} did not return within {HANG_GUARD:g}s: it hangs"
    if failure:
        raise failure[0]
    return outcome[0]
