"""pytest wiring of what people look at while and after jobs run: live progress, HTML curves.

Registered by the main plugin in one call (:func:`register_views`). The pytest-html part is only
registered (and only imported) when pytest-html is installed and active.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Generator, Iterator
from typing import Any

import pytest

from pytest_synth_rl.plugin.progress import ProgressReporter, choose_mode, fit_line
from pytest_synth_rl.plugin.settings import SynthSettings

__all__ = ["ProgressPlugin", "register_views"]


def register_views(config: pytest.Config, settings: SynthSettings) -> None:
    """Register the progress display and, when a pytest-html report is being written
    (``--html``), the reward curves in it: without one, charting every job would be wasted work."""
    config.pluginmanager.register(ProgressPlugin(config, settings), "synth-rl-progress")
    if config.pluginmanager.hasplugin("html") and config.getoption("htmlpath", None):
        from pytest_synth_rl.reporting.html import HtmlCurves

        config.pluginmanager.register(HtmlCurves(config, settings), "synth-rl-html")


class ProgressPlugin:
    """Shows jobs waited on in real time: one live line on a terminal, else heartbeat lines.

    Under xdist, workers write heartbeats to their standard error, which xdist workers inherit
    from the controller: the lines appear live in the controller's output (the CI log).
    """

    def __init__(self, config: pytest.Config, settings: SynthSettings) -> None:
        self.config = config
        self.xdist_worker = hasattr(config, "workerinput")
        self.settings = settings
        self.test_id = ""
        self._live = False
        self.reporter: ProgressReporter | None = None

    def pytest_sessionstart(self) -> None:
        """Choose the display once the terminal reporter exists (it knows whether it is a TTY)."""
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
            if self.reporter is not None:  # a wait that timed out or failed gets its last line
                self.reporter.end_waits()
            self.test_id = ""
            if self._live:  # still open (a write failed half-way): end it
                with self._uncaptured():
                    self.config.get_terminal_writer().write("\n", flush=True)
                self._live = False

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """A wait that ended without a final status gets its last line before pytest writes the
        test's letter: after it, the letter would land at the end of the live line."""
        if report.when == "call" and self.reporter is not None:
            self.reporter.end_waits()

    @contextlib.contextmanager
    def _uncaptured(self) -> Iterator[None]:
        """Output capturing suspended, so the line reaches the terminal during a test."""
        capman: Any = self.config.pluginmanager.getplugin("capturemanager")
        if capman is None:
            yield
            return
        with capman.global_and_fixture_disabled():
            yield

    def _write_line(self, text: str) -> None:
        with self._uncaptured():
            if self.xdist_worker:
                sys.stderr.write(text + "\n")
                sys.stderr.flush()
            else:
                terminal: Any = self.config.pluginmanager.getplugin("terminalreporter")
                if self.config.get_terminal_writer().width_of_current_line:
                    terminal.write("\n")  # after -q's progress letters, which end no line
                terminal.write_line(text)
                terminal.flush()

    def _rewrite(self, text: str, final: bool) -> None:
        terminal: Any = self.config.pluginmanager.getplugin("terminalreporter")
        with self._uncaptured():  # the terminal's width is only known with capturing suspended
            width = max(20, self._width() - 1)
            if not self._live:
                terminal.ensure_newline()  # start below pytest's own progress output
            terminal.write("\r" + fit_line(text, self.test_id, width).ljust(width), flush=True)
            self._live = not final
            if final:
                terminal.write("\n", flush=True)

    def _width(self) -> int:
        return int(self.config.get_terminal_writer().fullwidth)
