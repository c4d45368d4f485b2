"""The run report: one row per RL job, in the terminal, as JSON, and as a GitHub step summary.

A CI run of RL tests is read by people who were not there: which job did each test start, how did
it end, how long did it "take" (virtual seconds offline, real seconds online) and where did the
reward go. :class:`JobRecord` is that row; :class:`RunReport` collects rows (thread-safe, since
fixtures may finish from several threads) and renders them. Nothing here needs pytest.
"""

from __future__ import annotations

import html
import json
import math
import os
import reprlib
import sys
import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pytest_synth_rl.reporting.render import format_duration, format_reward, sparkline, table
from pytest_synth_rl.secrets.masking import redact

__all__ = ["JOB_PROPERTY", "JobRecord", "RunReport", "job_record", "mermaid_chart", "status_runs"]

#: The ``user_properties`` name under which a test report carries one job row (as JSON).
JOB_PROPERTY = "synth_rl_job"


@dataclass
class JobRecord:
    """How one job went, as far as the test that started it saw."""

    test_id: str
    job_id: str | None
    status: str | None
    backend: str
    final_reward: float | None = None
    rewards: list[float] = field(default_factory=list)
    clock_seconds: float | None = None  # virtual offline, real online
    wall_seconds: float | None = None
    error: str | None = None
    cancelled_by_plugin: bool = False
    #: The statuses the polls saw: ``[status, first_seconds, last_seconds]`` runs.
    timeline: list[list[Any]] = field(default_factory=list)

    @property
    def status_label(self) -> str:
        """The status as people read it: a job submitted but never read is "unknown", not absent."""
        if self.status:
            return self.status
        return "status unknown" if self.job_id else "not submitted"

    @classmethod
    def from_json(cls, row: Any) -> JobRecord:
        """A record read back from :meth:`to_json` output (a report, a test's JUnit property, an
        xdist worker's spool). :class:`ValueError` says what is wrong, as the end of a sentence
        naming where it was read (``.rewards is 'x', expected a list of numbers``)."""
        problem = _row_problem(row)
        if problem is not None:
            raise ValueError(problem)
        return cls(**{"job_id": None, "status": None, "backend": "", **row})

    def to_json(self) -> dict[str, Any]:
        """The row as standard JSON: a NaN or infinity (a backend can send one) is written as null,
        and left out of the reward curve, since JSON has no such numbers and readers refuse them."""
        data: dict[str, Any] = _finite(asdict(self))
        data["rewards"] = [r for r in data["rewards"] if r is not None]
        if data["error"]:
            data["error"] = redact(data["error"])
        return data


def _finite(value: Any) -> Any:
    """*value* (a row's dicts and lists) with every NaN and infinity replaced by None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


def _non_finite(row: dict[str, Any]) -> tuple[str, float] | None:
    """The first NaN or infinity in a job *row* read from JSON, as ``(path, value)``: in a number
    field, a reward or a timeline run's seconds (JSON has no such numbers; Python reads them). An
    integer too large for a float counts as the infinity it would become."""
    pending: list[tuple[str, Any]] = [(f".{name}", row[name]) for name in reversed(list(row))]
    while pending:
        path, value = pending.pop()
        if isinstance(value, float) and not math.isfinite(value):
            return path, value
        if type(value) is int and abs(value) > sys.float_info.max:  # no float can hold it
            return path, -math.inf if value < 0 else math.inf
        if isinstance(value, list):
            pending.extend((f"{path}[{i}]", item) for i, item in reversed(list(enumerate(value))))
    return None


def job_record(
    test_id: str,
    job: Any,
    *,
    backend: str,
    rewards: Iterable[float] = (),
    status_payload: dict[str, Any] | None = None,
    now_clock: float | None = None,
    now_wall: float | None = None,
    cancelled_by_plugin: bool = False,
) -> JobRecord:
    """Build a record from an ``RLJob``-like object: its last poll result, else a status payload
    (else the last status it read). The timeline is every status the job's handle read, across
    all its waits; for an object that does not keep them, the polls of its last wait."""
    result = getattr(job, "last_result", None)
    status: str | None = None
    final_reward: float | None = None
    error: str | None = None
    clock_seconds: float | None = None
    observed = getattr(job, "observed_statuses", None)
    if observed:
        timeline = [list(run) for run in observed]
    else:
        polls = getattr(result, "history", ()) if result is not None else getattr(job, "last_polls", ())
        timeline = status_runs((r.status, r.elapsed) for r in polls)
    if result is not None:
        status = result.status
        final_reward = result.final_reward
        error = result.error
    else:
        # a wait that timed out or was interrupted: the last status read stands
        status = timeline[-1][0] if timeline else None
    if result is None and status_payload:
        from pytest_synth_rl.client.results import extract_error, extract_final_reward, job_status

        status = job_status(status_payload) or status
        final_reward = extract_final_reward(status_payload)
        error = extract_error(status_payload)
    submitted_at = getattr(job, "submitted_at", None)
    if submitted_at is not None and now_clock is not None:
        clock_seconds = max(0.0, now_clock - submitted_at)
    submitted_wall = getattr(job, "submitted_wall", None)
    wall_seconds = max(0.0, now_wall - submitted_wall) if submitted_wall is not None and now_wall else None
    return JobRecord(
        test_id=test_id,
        job_id=getattr(job, "job_id", None),
        status=status,
        backend=backend,
        final_reward=final_reward,
        rewards=list(rewards),
        clock_seconds=clock_seconds,
        wall_seconds=wall_seconds,
        error=error,
        cancelled_by_plugin=cancelled_by_plugin,
        timeline=timeline,
    )


def status_runs(samples: Iterable[tuple[str, float]]) -> list[list[Any]]:
    """``(status, elapsed)`` polls collapsed into ``[status, first, last]`` runs."""
    from pytest_synth_rl.client.results import add_status_run

    runs: list[list[Any]] = []
    for status, elapsed in samples:
        add_status_run(runs, status, elapsed)
    return runs


#: GitHub's Mermaid renders long x axes unreadably; longer curves are sampled evenly for the chart.
MAX_CHART_POINTS = 100


def _markdown_cell(value: object) -> str:
    """*value* as literal text in a GitHub table cell: a ``|`` would end the cell and
    ``<b>`` in a test id would render as markup."""
    return html.escape(str(value), quote=False).replace("|", "\\|")


def _quoted(text: str) -> str:
    return '"' + text.replace('"', "'").replace("\n", " ") + '"'


#: The largest reward the chart writes as it is. The offline fake refuses larger ones, but a
#: backend or a merged shard can hold any finite value (1e308 is 309 digits as a plain decimal):
#: such a chart counts in a power of ten, named in the y axis title.
_PLAIN_LIMIT = 1e12
#: Significant digits of the chart's span kept per number: far finer than a chart can show.
_SPAN_DIGITS = 6
#: Significant digits a float holds: more would print its binary noise (0.30000000000000004).
_FLOAT_DIGITS = 15


def _chart_decimals(low: float, high: float) -> int:
    """Decimals that show *low*..*high* to :data:`_SPAN_DIGITS` digits of its span, and no more
    than a float of that magnitude holds (*low* < *high*, both finite and within ±1e13)."""
    wanted = _SPAN_DIGITS - 1 - math.floor(math.log10(high - low))
    magnitude = max(abs(low), abs(high))
    most = _FLOAT_DIGITS - 1 - math.floor(math.log10(magnitude))
    return max(0, min(wanted, most))


def _plain(value: float, decimals: int) -> str:
    """*value* as Mermaid's xychart grammar reads a number: a plain decimal such as ``-0.00005``,
    never with an exponent (``5e-05`` or ``1e+12`` stop GitHub drawing the chart)."""
    text = f"{value:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def mermaid_chart(record: JobRecord, max_points: int = MAX_CHART_POINTS) -> str:
    """A Mermaid ``xychart-beta`` block of the job's reward per step (GitHub renders it).

    Every number is a plain decimal with enough digits for the curve's shape; NaN and infinities
    (which the JSON report leaves out too) are not charted, and the other points keep their steps.
    """
    points = [(step, r) for step, r in enumerate(record.rewards, start=1) if math.isfinite(r)]
    if len(points) > max_points:
        picks = sorted({round(i * (len(points) - 1) / (max_points - 1)) for i in range(max_points)})
        points = [points[i] for i in picks]
    steps = [step for step, _ in points]
    rewards = [r for _, r in points]
    unit = ""
    largest = max((abs(r) for r in rewards), default=0.0)
    if largest > _PLAIN_LIMIT:
        exponent = math.floor(math.log10(largest))
        rewards = [r / 10.0**exponent for r in rewards]
        unit = f" (×10^{exponent})"
    low, high = (min(rewards), max(rewards)) if rewards else (0.0, 0.0)
    if high - low < 1e-12 * max(1.0, abs(low), abs(high)):  # flat: a range around the level
        low, high = low - 0.5, high + 0.5
    decimals = _chart_decimals(low, high)
    title = f"{record.test_id} ({record.job_id or '-'}, {record.status_label})"
    return "\n".join(
        [
            "```mermaid",
            "xychart-beta",
            f"    title {_quoted(title)}",
            f"    x-axis {_quoted('step')} [{', '.join(str(s) for s in steps)}]",
            f"    y-axis {_quoted('reward' + unit)} {_plain(low, decimals)} --> {_plain(high, decimals)}",
            f"    line [{', '.join(_plain(r, decimals) for r in rewards)}]",
            "```",
        ]
    )


#: The JSON type of each job row field, as :meth:`RunReport.to_json` writes it.
_ROW_TYPES = {
    "test_id": "a string",
    "job_id": "a string or null",
    "status": "a string or null",
    "backend": "a string",
    "final_reward": "a number or null",
    "rewards": "a list of numbers",
    "clock_seconds": "a number or null",
    "wall_seconds": "a number or null",
    "error": "a string or null",
    "cancelled_by_plugin": "true or false",
    "timeline": "a list of [status, first_seconds, last_seconds] runs",
}


def _has_type(value: object, kind: str) -> bool:
    if value is None:
        return kind.endswith(" or null")
    if kind.startswith("a string"):
        return isinstance(value, str)
    if kind.startswith("a number"):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "a list of numbers":
        return isinstance(value, list) and all(_has_type(item, "a number") for item in value)
    if kind.endswith(" runs"):
        return isinstance(value, list) and all(_is_run(item) for item in value)
    return isinstance(value, bool)


def _is_run(item: object) -> bool:
    """``[status, first_seconds, last_seconds]``, as written (a list nested deeper is not; null
    seconds are what :meth:`JobRecord.to_json` writes for a NaN)."""
    return (
        isinstance(item, list)
        and len(item) == 3
        and isinstance(item[0], str)
        and all(_has_type(seconds, "a number or null") for seconds in item[1:])
    )


def _row_problem(job: Any) -> str | None:
    """What is wrong with one job row read from JSON (to follow ``jobs[i]``), or None."""
    if not isinstance(job, dict) or "test_id" not in job:
        return " is not a job row (no test_id)"
    unknown = sorted(set(job) - set(JobRecord.__dataclass_fields__))
    if unknown:
        return f" has unknown keys {', '.join(unknown)}"
    for name, kind in _ROW_TYPES.items():
        if name in job and not _has_type(job[name], kind):
            return f".{name} is {reprlib.repr(job[name])}, expected {kind}"
    bad = _non_finite(job)
    if bad is not None:
        return (
            f"{bad[0]} is {json.dumps(bad[1])}, expected a finite number (standard JSON has no NaN "
            "or Infinity; a report holding one cannot be written again)"
        )
    return None


#: The width of a terminal rule: pytest's when it cannot tell the terminal's.
RULE_WIDTH = 80


def _rule(title: str, width: int = RULE_WIDTH) -> str:
    """``==== title ====``, *width* wide, drawn like pytest's section rules."""
    fill = "=" * max((width - len(title) - 2) // 2, 1)
    line = f"{fill} {title} {fill}"
    return line + "=" if len(line) < width else line


class RunReport:
    """Every job of a run, in the order their tests finished."""

    def __init__(self, *, mode: str = "offline", backend: str = "") -> None:
        self.mode = mode
        self.backend = backend
        self._records: list[JobRecord] = []
        self._lock = threading.Lock()

    def add(self, record: JobRecord) -> None:
        with self._lock:
            self._records.append(record)

    def extend(self, records: Iterable[JobRecord]) -> None:
        with self._lock:
            self._records.extend(records)

    @property
    def records(self) -> list[JobRecord]:
        with self._lock:
            return list(self._records)

    # -- renderings -------------------------------------------------------------------------
    def _rows(self) -> list[list[Any]]:
        time_label = "virtual" if self.mode == "offline" else "clock"
        rows = []
        for r in self.records:
            rows.append(
                [
                    r.test_id,
                    r.job_id or "-",
                    r.status_label + (" (cancelled by plugin)" if r.cancelled_by_plugin else ""),
                    f"{format_duration(r.clock_seconds)} {time_label}"
                    if r.clock_seconds is not None
                    else "-",
                    format_duration(r.wall_seconds),
                    format_reward(r.final_reward) if r.final_reward is not None else "-",
                    sparkline(r.rewards, width=20) or "-",
                ]
            )
        return rows

    _HEADERS = ("test", "job", "status", "duration", "wall", "final reward", "reward curve")

    @property
    def title(self) -> str:
        """What the table is, as a pytest run titles it: ``synth-rl jobs (offline, fake of URL)``."""
        where = f"fake of {self.backend}" if self.mode == "offline" else self.backend
        return f"synth-rl jobs ({self.mode}, {where})"

    def render_terminal(self, *, titled: bool = False) -> str:
        """The job table; *titled* puts :attr:`title` above it in a ``===`` rule, as a pytest
        run's terminal summary does (for output printed outside pytest, such as a merge's)."""
        body = table(self._HEADERS, self._rows()) if self.records else "no RL jobs were submitted"
        return f"{_rule(self.title)}\n{body}" if titled else body

    def render_markdown(self) -> str:
        count = len(self.records)
        lines = [
            f"### RL jobs ({self.mode}, {count} {'job' if count == 1 else 'jobs'})",
            "",
            "| " + " | ".join(self._HEADERS) + " |",
            "|" + "---|" * len(self._HEADERS),
        ]
        for row in self._rows():
            cells = [_markdown_cell(c) for c in row]
            lines.append("| " + " | ".join(cells) + " |")
        charts = [mermaid_chart(r) for r in self.records if any(map(math.isfinite, r.rewards))]
        if charts:
            lines.extend(["", "#### Reward curves", ""])
            for chart in charts:
                lines.extend([chart, ""])
        return "\n".join(lines).rstrip("\n") + "\n"

    @classmethod
    def from_json(cls, data: Any, *, where: str = "report") -> RunReport:
        """A report read back from :meth:`to_json` output; :class:`ValueError` names what is wrong."""
        if not isinstance(data, dict) or not isinstance(data.get("jobs"), list):
            raise ValueError(f'{where}: expected a JSON object with a "jobs" list (a --synth-report file)')
        if data.get("version") != 1:
            raise ValueError(f"{where}: report format version {data.get('version')!r}; this reads version 1")
        report = cls(mode=str(data.get("mode", "offline")), backend=str(data.get("backend", "")))
        for index, job in enumerate(data["jobs"]):
            try:
                report.add(JobRecord.from_json(job))
            except ValueError as exc:
                raise ValueError(f"{where}: jobs[{index}]{exc}") from None
        return report

    def to_json(self) -> dict[str, Any]:
        records = self.records
        counts: dict[str, int] = {}
        for r in records:
            counts[r.status_label] = counts.get(r.status_label, 0) + 1
        return {
            "version": 1,
            "mode": self.mode,
            "backend": self.backend,
            "summary": {"jobs": len(records), "by_status": counts},
            "jobs": [r.to_json() for r in records],
        }

    def write_json(self, path: str | os.PathLike[str]) -> Path:
        """Write the JSON report atomically (a reader never sees half a file)."""
        from pytest_synth_rl.reporting.files import atomic_write_text

        text = json.dumps(self.to_json(), indent=2, sort_keys=True, allow_nan=False)  # never a NaN
        return atomic_write_text(path, redact(text) + "\n")

    def append_github_summary(self, path: str | os.PathLike[str]) -> None:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(redact(self.render_markdown()))
