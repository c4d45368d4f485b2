"""The run's job table: job rows travel on test reports (so xdist workers' jobs reach the
controller) and are printed, written as JSON and appended to a GitHub step summary at the end.

The report module is loaded only once a job row arrives, so runs without RL jobs never pay for it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .report import JOB_PROPERTY
from .settings import SynthSettings

if TYPE_CHECKING:
    from .report import JobRecord, RunReport

__all__ = ["JOB_PROPERTY", "RunSummary", "job_properties"]


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

    def hold(self, nodeid: str, records: list[JobRecord]) -> None:
        """Keep *records* until the test's teardown report carries them (or the run ends)."""
        if records:
            self._unreported.setdefault(nodeid, []).extend(records)

    @property
    def report(self) -> RunReport:
        if self._report is None:
            from .report import RunReport

            self._report = RunReport(mode=self.settings.mode, backend=self.settings.backend_url)
        return self._report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "teardown":
            return
        self._unreported.pop(report.nodeid, None)
        for name, value in report.user_properties:
            if name == JOB_PROPERTY:
                from .report import JobRecord

                self.report.add(JobRecord(**json.loads(str(value))))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if hasattr(self.config, "workerinput"):  # an xdist worker: the controller reports
            return
        settings = self.settings
        for held in self._unreported.values():
            for record in held:
                self.report.add(record)
        self._unreported.clear()
        records = self._report.records if self._report is not None else []
        if records:
            terminalreporter.write_sep("=", f"synth-rl jobs ({settings.mode}, {settings.backend_url})")
            terminalreporter.write_line(self.report.render_terminal())
        if settings.report:
            path = self.report.write_json(Path(self.config.rootpath) / settings.report)
            terminalreporter.write_line(f"synth-rl: JSON report written to {path}")
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary and records:
            self.report.append_github_summary(summary)
