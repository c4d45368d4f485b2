"""The run's job table: job rows travel on test reports (so xdist workers' jobs reach the
controller) and are printed, written as JSON and appended to a GitHub step summary at the end.

Under xdist, workers also append their rows to a spool file the controller reads at the end:
after Ctrl-C the controller stops reading workers' reports, but the workers still cancel their
jobs and write the rows, and "cancelled and reported" must hold there too.

The report module is loaded only once a job row arrives, so runs without RL jobs never pay for it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_synth_rl.plugin.settings import SynthSettings
from pytest_synth_rl.reporting.report import JOB_PROPERTY

if TYPE_CHECKING:
    from pytest_synth_rl.reporting.report import JobRecord, RunReport

__all__ = ["JOB_PROPERTY", "WORKER_ROW_SPOOL", "RunSummary", "job_properties"]

#: Where an xdist controller tells its workers to spool their job rows (``workerinput``).
WORKER_ROW_SPOOL = "synth_row_spool"


def job_properties(records: list[JobRecord]) -> list[tuple[str, str]]:
    """The user properties for *records*: the JSON row, plus id/status/reward columns for JUnit."""
    properties = []
    for record in records:
        properties.append((JOB_PROPERTY, json.dumps(record.to_json(), sort_keys=True)))
        properties.append(("synth_job_id", record.job_id or ""))
        properties.append(("synth_job_status", record.status or ""))
        if record.final_reward is not None:
            properties.append(("synth_final_reward", f"{record.final_reward:.6g}"))
    return properties


class RunSummary:
    """Collects job rows from test reports and prints them at the end of the run."""

    def __init__(self, config: pytest.Config, settings: SynthSettings) -> None:
        self.config = config
        self.settings = settings
        self._report: RunReport | None = None
        #: Rows of tests whose teardown report has not arrived: an interrupted test's fixtures
        #: are torn down at session end, after which no report is made; they are added then.
        self._unreported: dict[str, list[JobRecord]] = {}
        #: Tests whose teardown report arrived (the controller takes their rows from it).
        self._reported: set[str] = set()
        #: Controller: the folder its workers spool rows to. Worker: its own spool file.
        self._spool_dir: Path | None = None
        self._spool: Path | None = None
        workerinput = getattr(config, "workerinput", None) or {}
        if workerinput.get(WORKER_ROW_SPOOL):
            name = f"{workerinput.get('workerid', 'worker')}.jsonl"
            self._spool = Path(workerinput[WORKER_ROW_SPOOL]) / name

    def spool_for_workers(self) -> str:
        """Controller: the folder workers spool their rows to (made on the first call)."""
        if self._spool_dir is None:
            self._spool_dir = Path(tempfile.mkdtemp(prefix="synth-rl-rows-"))
        return str(self._spool_dir)

    def hold(self, nodeid: str, records: list[JobRecord]) -> None:
        """Keep *records* until the test's teardown report carries them (or the run ends)."""
        if not records:
            return
        self._unreported.setdefault(nodeid, []).extend(records)
        if self._spool is not None:
            from pytest_synth_rl.secrets.masking import redact

            rows = [json.dumps({"test": nodeid, "row": r.to_json()}, sort_keys=True) for r in records]
            lines = "".join(redact(row) + "\n" for row in rows)
            with open(self._spool, "a", encoding="utf-8") as out:
                out.write(lines)

    @property
    def report(self) -> RunReport:
        if self._report is None:
            from pytest_synth_rl.reporting.report import RunReport

            self._report = RunReport(mode=self.settings.mode, backend=self.settings.backend_url)
        return self._report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "teardown":
            return
        self._reported.add(report.nodeid)
        self._unreported.pop(report.nodeid, None)
        for name, value in report.user_properties:
            if name == JOB_PROPERTY:
                from pytest_synth_rl.reporting.report import JobRecord

                self.report.add(JobRecord.from_json(json.loads(str(value))))

    @property
    def report_path(self) -> Path | None:
        """Where ``--synth-report`` writes (relative paths are taken from the rootdir)."""
        file = self.settings.report_file(self.config.rootpath)
        return Path(file) if file is not None else None

    def pytest_unconfigure(self) -> None:
        self.drop_spool()  # also when the terminal summary never ran

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if hasattr(self.config, "workerinput"):  # an xdist worker: the controller reports
            return
        for held in self._unreported.values():
            for record in held:
                self.report.add(record)
        self._unreported.clear()
        unreadable = self._take_spooled_rows()
        if unreadable:
            terminalreporter.write_line(
                f"synth-rl: {unreadable} job row(s) of interrupted xdist workers could not be read"
            )
        records = self._report.records if self._report is not None else []
        if records:
            terminalreporter.write_sep("=", self.report.title)
            terminalreporter.write_line(self.report.render_terminal())
        self._write_report(terminalreporter)
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary and records:
            self._append_step_summary(terminalreporter, summary)

    def _write_report(self, terminalreporter: Any) -> None:
        path = self.report_path
        if path is None:
            return
        try:
            written = self.report.write_json(path)
        except OSError as error:
            from pytest_synth_rl.reporting.files import write_error_reason

            _write_error(
                terminalreporter,
                f"{self.settings.origin('report')}: could not write the JSON report to {path}: "
                f"{write_error_reason(path, error)}",
                "point it at a file path you can write (missing directories are created)",
            )
        else:
            terminalreporter.write_line(f"synth-rl: JSON report written to {written}")

    def _append_step_summary(self, terminalreporter: Any, summary: str) -> None:
        try:
            self.report.append_github_summary(summary)
        except OSError as error:
            from pytest_synth_rl.reporting.files import write_error_reason

            _write_error(
                terminalreporter,
                f"GITHUB_STEP_SUMMARY={summary}: could not append the job table to the step summary: "
                f"{write_error_reason(summary, error, make_parents=False)}",
                "GitHub Actions sets GITHUB_STEP_SUMMARY to a file it made; outside Actions, unset it "
                "or point it at a file in an existing directory",
            )

    def _take_spooled_rows(self) -> int:
        """Controller: add the workers' spooled rows of tests whose reports never came (an
        interrupted run), then drop the spool. Returns how many lines could not be read (a
        worker killed mid-write)."""
        if self._spool_dir is None:
            return 0
        from pytest_synth_rl.reporting.report import JobRecord

        unreadable = 0
        for spool in sorted(self._spool_dir.glob("*.jsonl")):
            for line in spool.read_text(encoding="utf-8").splitlines():
                try:
                    entry = json.loads(line)
                    test, row = entry["test"], entry["row"]
                    if test not in self._reported:
                        self.report.add(JobRecord.from_json(row))
                except (ValueError, KeyError, TypeError):
                    unreadable += 1
        self.drop_spool()
        return unreadable

    def drop_spool(self) -> None:
        """Remove the controller's spool folder (safe to call twice)."""
        if self._spool_dir is not None:
            shutil.rmtree(self._spool_dir, ignore_errors=True)
            self._spool_dir = None


def _write_error(terminalreporter: Any, message: str, hint: str) -> None:
    """A report that could not be written, shown at the end of the run (red, not a traceback);
    the run's exit status stays the tests' and the other report outputs are still written."""
    terminalreporter.write_line(f"synth-rl: ERROR: {message}", red=True, bold=True)
    terminalreporter.write_line(f"  hint: {hint}", red=True)
