"""Live progress of jobs waited on in real time: one line rewritten in place on a terminal, else a
heartbeat line every *interval* seconds (CI logs, ``-q``, xdist). Virtual-clock polls are ignored.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Generator
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import pytest

from pytest_synth_rl.client.results import (
    REWARD_PATHS,
    STEP_PATHS,
    TOTAL_STEPS_PATHS,
    is_terminal,
    number_at,
    observe_polls,
)
from pytest_synth_rl.plugin.settings import SynthSettings
from pytest_synth_rl.reporting.render import format_duration

if TYPE_CHECKING:
    from pytest_synth_rl.client.polling import Poller
    from pytest_synth_rl.client.results import PollRecord


@dataclass(frozen=True)
class ProgressUpdate:
    job_id: str
    status: str
    step: int | None
    total_steps: int | None
    reward: float | None
    elapsed: float
    remaining: float

    @property
    def terminal(self) -> bool:
        return is_terminal(self.status)

    def describe(self, *, wait_ended: bool = False) -> str:
        """``job_1 running step 3/10 reward 0.450 elapsed 1m00s left 1h59m``."""
        parts = [self.job_id, self.status or "<no status>"]
        if self.step is not None:
            parts.append(
                f"step {self.step}" + (f"/{self.total_steps}" if self.total_steps is not None else "")
            )
        if self.reward is not None:
            parts.append(f"reward {self.reward:.3f}")
        parts.append(f"elapsed {format_duration(self.elapsed)}")
        if not self.terminal:
            parts.append(
                "(wait ended)" if wait_ended else f"left {format_duration(max(0.0, self.remaining))}"
            )
        return " ".join(parts)


def progress_update(poller: Poller, record: PollRecord) -> ProgressUpdate:
    step, total = (number_at(record.payload, paths) for paths in (STEP_PATHS, TOTAL_STEPS_PATHS))
    return ProgressUpdate(
        poller.job_id,
        record.status,
        None if step is None else int(step),
        None if total is None else int(total),
        number_at(record.payload, REWARD_PATHS),
        record.elapsed,
        poller.timeout - record.elapsed,
    )


@dataclass(eq=False)
class ProgressReporter:
    """Turns real-time polls into a live line (*rewrite*) or heartbeat lines (*write_line*)."""

    mode: Literal["line", "heartbeat"]
    _: KW_ONLY
    interval: float = SynthSettings.heartbeat_interval
    write_line: Callable[[str], None]
    rewrite: Callable[[str, bool], None] | None = None
    label: Callable[[], str] = lambda: ""
    now: Callable[[], float] = time.monotonic
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _last_beat: dict[str, float] = field(default_factory=dict, init=False, repr=False)
    _waiting: dict[str, ProgressUpdate] = field(default_factory=dict, init=False, repr=False)
    _stop: Callable[[], None] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.mode == "line" and self.rewrite is None:
            raise ValueError("line mode needs a rewrite function")

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
            return
        self.show(progress_update(poller, record))

    def end_waits(self) -> None:
        """A last line for each job shown without a final status."""
        with self._lock:
            waiting, self._waiting = list(self._waiting.values()), {}
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
        label = self.label()
        text = f"{label} {facts}" if label else facts
        if self.mode == "line":
            assert self.rewrite is not None
            self.rewrite(f"synth-rl: {text}", final)
            return
        with self._lock:
            now = self.now()
            last = self._last_beat.get(update.job_id)
            if not (last is None or final or now - last >= self.interval):
                return
            if final:
                self._last_beat.pop(update.job_id, None)
            else:
                self._last_beat[update.job_id] = now
        self.write_line(f"synth-rl heartbeat: {text}")


_MIN_LABEL = 16


def fit_line(text: str, label: str, width: int) -> str:
    """*text* within *width* columns, cutting the middle of *label* (the test id) first."""
    keep = len(label) - (len(text) - width) - 1
    if len(text) <= width or not label or label not in text:
        return text[:width]
    if keep < _MIN_LABEL:
        return text.replace(label + " ", "", 1)[:width]
    head = keep // 3
    return text.replace(label, label[:head] + "…" + label[len(label) - (keep - head) :], 1)[:width]


def choose_mode(
    setting: str, *, xdist_worker: bool, quiet: bool, isatty: bool
) -> Literal["line", "heartbeat"] | None:
    """What to print for ``--synth-progress=setting`` (``None``: nothing)."""
    if setting == "off":
        return None
    if setting == "heartbeat" or xdist_worker:
        return "heartbeat"
    return "line" if setting == "line" or (isatty and not quiet) else "heartbeat"


def register_views(config: pytest.Config, settings: SynthSettings) -> None:
    """The progress display and, with a pytest-html report (``--html``), reward curves."""
    config.pluginmanager.register(ProgressPlugin(config, settings), "synth-rl-progress")
    if config.pluginmanager.hasplugin("html") and config.getoption("htmlpath", None):
        from pytest_synth_rl.reporting.html import HtmlCurves

        config.pluginmanager.register(HtmlCurves(config, settings), "synth-rl-html")


class ProgressPlugin:
    """Shows jobs waited on in real time (xdist workers write heartbeats to stderr)."""

    def __init__(self, config: pytest.Config, settings: SynthSettings) -> None:
        self.config = config
        self.xdist_worker = hasattr(config, "workerinput")
        self.settings = settings
        self.test_id = ""
        self._live = False
        self.reporter: ProgressReporter | None = None

    def pytest_sessionstart(self) -> None:
        terminal = self.config.pluginmanager.getplugin("terminalreporter")
        mode = choose_mode(
            self.settings.progress,
            xdist_worker=self.xdist_worker,
            quiet=self.config.get_verbosity() < 0,
            isatty=bool(terminal is not None and terminal.isatty()),
        )
        if mode is not None:
            self.reporter = ProgressReporter(
                mode,
                interval=self.settings.heartbeat_interval,
                write_line=self._write_line,
                rewrite=self._rewrite,
                label=lambda: self.test_id,
            ).start()

    def pytest_unconfigure(self) -> None:
        if self.reporter is not None:
            self.reporter.stop()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, object, object]:
        worker = getattr(self.config, "workerinput", {}).get("workerid")
        self.test_id = f"[{worker}] {item.nodeid}" if worker else item.nodeid
        try:
            return (yield)
        finally:
            if self.reporter is not None:
                self.reporter.end_waits()
            self.test_id = ""
            if self._live:
                with self._uncaptured():
                    self.config.get_terminal_writer().write("\n", flush=True)
                self._live = False

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" and self.reporter is not None:
            self.reporter.end_waits()

    def _uncaptured(self) -> contextlib.AbstractContextManager[object]:
        capman: Any = self.config.pluginmanager.getplugin("capturemanager")
        return contextlib.nullcontext() if capman is None else capman.global_and_fixture_disabled()

    def _write_line(self, text: str) -> None:
        with self._uncaptured():
            if self.xdist_worker:
                sys.stderr.write("\n" + text + "\n")
                sys.stderr.flush()
            else:
                terminal: Any = self.config.pluginmanager.getplugin("terminalreporter")
                if self.config.get_terminal_writer().width_of_current_line:
                    terminal.write("\n")
                terminal.write_line(text)
                terminal.flush()

    def _rewrite(self, text: str, final: bool) -> None:
        terminal: Any = self.config.pluginmanager.getplugin("terminalreporter")
        with self._uncaptured():
            width = max(20, int(self.config.get_terminal_writer().fullwidth) - 1)
            if not self._live:
                terminal.ensure_newline()
            terminal.write("\r" + fit_line(text, self.test_id, width).ljust(width), flush=True)
            self._live = not final
            if final:
                terminal.write("\n", flush=True)
