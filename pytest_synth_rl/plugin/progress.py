"""Live progress of jobs being waited on: what a person watching a terminal or a CI log sees.

An online job test waits hours on one job. Without output, a person cannot tell a job that trains
from one stuck in the queue, and CI systems kill steps that stay silent. :class:`ProgressReporter`
watches every status poll (through :func:`~pytest_synth_rl.client.polling.observe_polls`) and
turns it into a :class:`ProgressUpdate`: either one line rewritten in place (a terminal), or a
plain heartbeat line every *interval* seconds (CI logs, ``-q``, xdist workers). Polls on a virtual
clock are ignored: offline there is nothing to wait for. Nothing here needs pytest.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pytest_synth_rl.client.poll_watch import observe_polls
from pytest_synth_rl.reporting.render import format_duration

if TYPE_CHECKING:
    from pytest_synth_rl.client.polling import Poller
    from pytest_synth_rl.client.results import PollRecord

__all__ = [
    "DEFAULT_HEARTBEAT_INTERVAL",
    "ProgressReporter",
    "ProgressUpdate",
    "choose_mode",
    "fit_line",
    "progress_update",
]

DEFAULT_HEARTBEAT_INTERVAL = 60.0


@dataclass(frozen=True)
class ProgressUpdate:
    """Where one job stands after a poll."""

    job_id: str
    status: str
    step: int | None
    total_steps: int | None
    reward: float | None
    elapsed: float
    remaining: float

    @property
    def terminal(self) -> bool:
        from pytest_synth_rl.client.results import (
            is_terminal,
        )  # loaded with the first poll, not at pytest start

        return is_terminal(self.status)

    def describe(self, *, wait_ended: bool = False) -> str:
        """``job_1 running step 3/10 reward 0.450 elapsed 1m00s left 1h59m``; with *wait_ended*
        (nobody polls the job any more, though it had no final status) that is said instead of
        the time left."""
        parts = [self.job_id, self.status or "<no status>"]
        if self.step is not None:
            total = f"/{self.total_steps}" if self.total_steps is not None else ""
            parts.append(f"step {self.step}{total}")
        if self.reward is not None:
            parts.append(f"reward {self.reward:.3f}")
        parts.append(f"elapsed {format_duration(self.elapsed)}")
        if wait_ended and not self.terminal:
            parts.append("(wait ended)")
        elif not self.terminal:
            parts.append(f"left {format_duration(max(0.0, self.remaining))}")
        return " ".join(parts)


def progress_update(poller: Poller, record: PollRecord) -> ProgressUpdate:
    """The update one poll of *poller* means."""
    from pytest_synth_rl.client.status_numbers import (
        REWARD_PATHS,
        STEP_PATHS,
        TOTAL_STEPS_PATHS,
        number_at,
    )  # not at start

    step = number_at(record.payload, STEP_PATHS)
    total = number_at(record.payload, TOTAL_STEPS_PATHS)
    return ProgressUpdate(
        job_id=poller.job_id,
        status=record.status,
        step=int(step) if step is not None else None,
        total_steps=int(total) if total is not None else None,
        reward=number_at(record.payload, REWARD_PATHS),
        elapsed=record.elapsed,
        remaining=poller.timeout - record.elapsed,
    )


class ProgressReporter:
    """Turns polls on real time into a live line or heartbeat lines.

    *write_line* prints one finished line (a heartbeat); *rewrite* replaces the live line
    (``final=True`` ends it with a newline). *label* names what is waiting (the running test).
    *now* is the wall clock the heartbeat interval is measured on (injectable for tests).
    """

    def __init__(
        self,
        mode: Literal["line", "heartbeat"],
        *,
        interval: float = DEFAULT_HEARTBEAT_INTERVAL,
        write_line: Callable[[str], None],
        rewrite: Callable[[str, bool], None] | None = None,
        label: Callable[[], str] = lambda: "",
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        if mode == "line" and rewrite is None:
            raise ValueError("line mode needs a rewrite function")
        self.mode = mode
        self.interval = interval
        self._write_line = write_line
        self._rewrite = rewrite
        self._label = label
        self._now = now
        self._lock = threading.Lock()
        self._last_beat: dict[str, float] = {}  # job id -> when its last heartbeat was printed
        self._waiting: dict[str, ProgressUpdate] = {}  # job id -> its last update, not yet final
        self._stop: Callable[[], None] | None = None

    def start(self) -> ProgressReporter:
        if self._stop is None:
            self._stop = observe_polls(self.on_poll)
        return self

    def stop(self) -> None:
        if self._stop is not None:
            self._stop()
            self._stop = None

    def on_poll(self, poller: Poller, record: PollRecord) -> None:
        if getattr(poller.clock, "is_virtual", False):
            return  # offline: the wait takes no real time
        self.show(progress_update(poller, record))

    def end_waits(self) -> None:
        """Close the story of every job shown without a final status (its wait timed out or
        failed): one last line each, so a log does not end on "running ... left 0s"."""
        with self._lock:
            waiting, self._waiting = list(self._waiting.values()), {}
            for update in waiting:
                self._last_beat.pop(update.job_id, None)
        for update in waiting:
            self._emit(update, update.describe(wait_ended=True), final=True)

    def show(self, update: ProgressUpdate) -> None:
        with self._lock:
            if update.terminal:
                self._waiting.pop(update.job_id, None)
            else:
                self._waiting[update.job_id] = update
        self._emit(update, update.describe(), final=update.terminal)

    def _emit(self, update: ProgressUpdate, facts: str, *, final: bool) -> None:
        label = self._label()
        text = f"{label} {facts}" if label else facts
        if self.mode == "line":
            assert self._rewrite is not None
            self._rewrite(f"synth-rl: {text}", final)
            return
        with self._lock:
            now = self._now()
            last = self._last_beat.get(update.job_id)
            due = last is None or final or now - last >= self.interval
            if not due:
                return
            if final:
                self._last_beat.pop(update.job_id, None)
            else:
                self._last_beat[update.job_id] = now
        self._write_line(f"synth-rl heartbeat: {text}")


def fit_line(text: str, label: str, width: int) -> str:
    """*text* within *width* columns: the *label* in it (the test id) gives way first, cut in its
    middle, so the job's facts (status, step, reward, elapsed, time left) stay on a narrow
    terminal; only a line still too long is cut at its end."""
    if len(text) <= width:
        return text
    excess = len(text) - width
    if label and label in text and len(label) - excess - 1 >= _MIN_LABEL:
        keep = len(label) - excess - 1
        head = keep // 3
        short = label[:head] + "…" + label[len(label) - (keep - head) :]
        text = text.replace(label, short, 1)
    elif label and label in text:
        text = text.replace(label + " ", "", 1)
    return text[:width]


#: The fewest characters of a test id worth showing (its end names the test).
_MIN_LABEL = 16


def choose_mode(
    setting: str, *, xdist_worker: bool, quiet: bool, isatty: bool
) -> Literal["line", "heartbeat"] | None:
    """What to print for ``--synth-progress=setting``; ``None`` prints nothing.

    A live line needs a terminal of its own: an xdist worker shares the controller's, so it
    always sends heartbeats; ``auto`` also falls back to heartbeats under ``-q`` and in CI logs.
    """
    if setting == "off":
        return None
    if setting == "heartbeat" or xdist_worker:
        return "heartbeat"
    if setting == "line":
        return "line"
    return "line" if isatty and not quiet else "heartbeat"
