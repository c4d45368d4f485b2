"""The run's job table in pytest: job records travel on test reports (and xdist workers' spool
files) and are printed, written as JSON and appended to a GitHub step summary at the end."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_synth_rl.plugin.settings import SynthSettings
from pytest_synth_rl.reporting.report import JOB_PROPERTY, JobRecord, LiveJobs, RunReport
from pytest_synth_rl.secrets.masking import redact

__all__ = ["JOB_PROPERTY", "WORKER_ROW_SPOOL", "RunSummary", "job_properties"]

WORKER_ROW_SPOOL = "synth_row_spool"


def job_properties(records: list[JobRecord]) -> list[tuple[str, str]]:
    properties = []
    for record in records:
        properties += [(JOB_PROPERTY, json.dumps(record.to_json(), sort_keys=True))]
        properties += [("synth_job_id", record.job_id or ""), ("synth_job_status", record.status or "")]
        if record.final_reward is not None:
            properties.append(("synth_final_reward", f"{record.final_reward:.6g}"))
    return properties


def carried_records(report: pytest.TestReport) -> list[JobRecord]:
    from pytest_synth_rl.reporting.files import parse_json_document

    carried = [str(value) for name, value in report.user_properties if name == JOB_PROPERTY]
    return [JobRecord.from_json(parse_json_document(text)) for text in carried]


class RunSummary:
    def __init__(self, config: pytest.Config, settings: SynthSettings) -> None:
        self.config = config
        self.settings = settings
        self.report = RunReport(mode=settings.mode, backend=settings.backend_url)
        self._unreported: dict[str, list[JobRecord]] = {}
        self._reported: set[str] = set()
        self._spool_dir: Path | None = None
        self._spool: Path | None = None
        self.live = LiveJobs()
        workerinput = getattr(config, "workerinput", None) or {}
        if workerinput.get(WORKER_ROW_SPOOL):
            folder, worker = Path(workerinput[WORKER_ROW_SPOOL]), workerinput.get("workerid", "worker")
            self._spool = folder / f"{worker}.jsonl"
            self.live = LiveJobs(folder / f"{worker}.live.json")

    def spool_for_workers(self) -> str:
        if self._spool_dir is None:
            self._spool_dir = Path(tempfile.mkdtemp(prefix="synth-rl-records-"))
        return str(self._spool_dir)

    def hold(self, nodeid: str, records: list[JobRecord]) -> None:
        if not records:
            return
        self._unreported.setdefault(nodeid, []).extend(records)
        if self._spool is not None:
            lines = [json.dumps({"test": nodeid, "record": r.to_json()}, sort_keys=True) for r in records]
            with open(self._spool, "a", encoding="utf-8") as out:
                out.write("".join(redact(line) + "\n" for line in lines))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "teardown":
            return
        self._reported.add(report.nodeid)
        self._unreported.pop(report.nodeid, None)
        self.report.extend(carried_records(report))

    def pytest_unconfigure(self) -> None:
        self.drop_spool()

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if hasattr(self.config, "workerinput"):
            return
        self.report.extend(record for held in self._unreported.values() for record in held)
        self._unreported.clear()
        if unreadable := self._take_spooled_records():
            lost = f"synth-rl: {unreadable} job row(s) of interrupted xdist workers could not be read"
            terminalreporter.write_line(lost)
        records = self.report.records
        if records:
            terminalreporter.write_sep("=", self.report.title)
            terminalreporter.write_line(self.report.render_terminal())
        if (file := self.settings.report_file(self.config.rootpath)) is not None:
            path = Path(file)
            failed = f"{self.settings.origin('report')}: could not write the JSON report to {path}"
            hint = "point it at a file path you can write (missing directories are created)"
            with _failure_shown(terminalreporter, failed, path, hint):
                written = self.report.write_json(path)
                terminalreporter.write_line(f"synth-rl: JSON report written to {written}")
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary and records:
            failed = f"GITHUB_STEP_SUMMARY={summary}: could not append the job table to the step summary"
            hint = (
                "GitHub Actions sets GITHUB_STEP_SUMMARY to a file it made; outside Actions, unset it "
                "or point it at a file in an existing directory"
            )
            with _failure_shown(terminalreporter, failed, summary, hint, make_parents=False):
                self.report.append_github_summary(summary)

    def _take_spooled_records(self) -> int:
        if self._spool_dir is None:
            return 0
        from pytest_synth_rl.reporting.files import parse_json_document

        unreadable = 0
        for spool in sorted(self._spool_dir.glob("*.jsonl")):
            for line in spool.read_text(encoding="utf-8").splitlines():
                try:
                    entry = parse_json_document(line)
                    test, data = entry["test"], entry["record"]
                    if test not in self._reported:
                        self.report.add(JobRecord.from_json(data))
                except (ValueError, KeyError, TypeError):
                    unreadable += 1
        recorded = {record.job_id for record in self.report.records}
        orphans = []
        for live in sorted(self._spool_dir.glob("*.live.json")):
            try:
                entries = json.loads(live.read_text(encoding="utf-8"))
                orphans += [(e["test"], e["job_id"], e["backend"]) for e in entries]
            except (ValueError, KeyError, TypeError):
                unreadable += 1
        orphans = [orphan for orphan in orphans if orphan[1] not in recorded]
        if orphans:
            from pytest_synth_rl.plugin.jobs import orphan_records

            self.report.extend(orphan_records(orphans, self.settings))
        self.drop_spool()
        return unreadable

    def drop_spool(self) -> None:
        if self._spool_dir is not None:
            shutil.rmtree(self._spool_dir, ignore_errors=True)
            self._spool_dir = None


@contextlib.contextmanager
def _failure_shown(
    terminalreporter: Any, failed: str, path: str | Path, hint: str, *, make_parents: bool = True
) -> Iterator[None]:
    try:
        yield
    except OSError as error:
        from pytest_synth_rl.reporting.files import write_error_reason

        reason = write_error_reason(path, error, make_parents=make_parents)
        terminalreporter.write_line(f"synth-rl: ERROR: {failed}: {reason}", red=True, bold=True)
        terminalreporter.write_line(f"  hint: {hint}", red=True)
