"""Reward curves in pytest-html reports (only when pytest-html is installed): each job a test
started becomes an inline SVG among the extras of the test's row, with its baseline curve when
the test used ``synth_baseline``."""

from __future__ import annotations

import json
from collections.abc import Generator
from typing import Any

import pytest

from pytest_synth_rl.baselines import BaselineError, BaselineStore
from pytest_synth_rl.plugin.settings import SynthSettings
from pytest_synth_rl.reporting.report import JOB_PROPERTY, JobRecord
from pytest_synth_rl.reporting.svg import reward_chart_svg

__all__ = ["HtmlCurves", "job_chart"]


def job_chart(record: JobRecord, baseline: list[float]) -> str:
    """The HTML of one job's chart: a caption and the SVG."""
    title = f"{record.job_id or '-'} ({record.status_label})"
    svg = reward_chart_svg(
        record.rewards,
        baseline=baseline,
        failed=record.status == "failed",
        timeline=record.timeline,
        title=title,
    )
    return f'<div class="synth-rl-job"><p>RL job {title}</p>{svg}</div>'


class HtmlCurves:
    """Adds each job's chart to the teardown report, where the job records travel (also via xdist)."""

    def __init__(self, config: pytest.Config, settings: SynthSettings) -> None:
        self.store = BaselineStore(config.rootpath / settings.baseline_dir)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: Any) -> Generator[None, Any, Any]:
        report = yield
        if report.when == "teardown":
            records = [
                JobRecord.from_json(json.loads(str(value)))
                for name, value in report.user_properties
                if name == JOB_PROPERTY
            ]
            if records:
                from pytest_html import extras  # type: ignore[import-untyped]

                baseline = self._baseline_curve(item)
                charts = [extras.html(job_chart(record, baseline)) for record in records]
                report.extras = [*getattr(report, "extras", []), *charts]
        return report

    def _baseline_curve(self, item: pytest.Item) -> list[float]:
        if "synth_baseline" not in getattr(item, "fixturenames", ()):
            return []
        try:
            baseline = self.store.load(item.nodeid)
        except BaselineError:
            return []  # the test itself already failed on the unreadable file, with the reason
        return baseline.reward_curve if baseline is not None else []
