"""The run report: one :class:`JobRecord` per RL job; :class:`RunReport` collects them and renders
the terminal table, the JSON report and the GitHub step summary with Mermaid charts."""

from __future__ import annotations

import html
import json
import math
import os
import reprlib
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from pytest_synth_rl.reporting.render import format_duration, format_reward, sparkline, table
from pytest_synth_rl.secrets.masking import redact

JOB_PROPERTY = "synth_rl_job"


@dataclass
class JobRecord:
    test_id: str
    job_id: str | None
    status: str | None
    backend: str
    final_reward: float | None = None
    rewards: list[float] = field(default_factory=list)
    clock_seconds: float | None = None
    wall_seconds: float | None = None
    error: str | None = None
    cancelled_by_plugin: bool = False
    orphaned: bool = False
    timeline: list[list[Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.test_id, self.error = redact(self.test_id), self.error and redact(self.error)

    @property
    def status_label(self) -> str:
        return self.status or ("status unknown" if self.job_id else "not submitted")

    @classmethod
    def from_json(cls, data: Any) -> JobRecord:
        if not isinstance(data, dict) or "test_id" not in data:
            raise ValueError(" is not a job row (no test_id)")
        if unknown := sorted(set(data) - {f.name for f in fields(cls)}):
            raise ValueError(f" has unknown keys {', '.join(unknown)}")
        for f in fields(cls):
            kind, fits = _JSON_TYPES[str(f.type)]
            if f.name in data and not fits(data[f.name]):
                raise ValueError(f".{f.name} is {reprlib.repr(data[f.name])}, expected {kind}")
        pending: list[tuple[str, Any]] = [(f".{name}", data[name]) for name in reversed(list(data))]
        while pending:
            path, value = pending.pop()
            if type(value) is int and abs(value) > sys.float_info.max:
                value = -math.inf if value < 0 else math.inf
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(
                    f"{path} is {json.dumps(value)}, expected a finite number (standard JSON has no NaN "
                    "or Infinity; a report holding one cannot be written again)"
                )
            if isinstance(value, list):
                pending.extend((f"{path}[{i}]", item) for i, item in reversed(list(enumerate(value))))
        return cls(**{"job_id": None, "status": None, "backend": "", **data})

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(json.dumps(vars(self)), parse_constant=lambda _: None)
        return data | {"rewards": [r for r in data["rewards"] if r is not None]}


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_runs(value: object) -> bool:
    return isinstance(value, list) and all(
        isinstance(run, list)
        and len(run) == 3
        and isinstance(run[0], str)
        and all(seconds is None or _is_number(seconds) for seconds in run[1:])
        for run in value
    )


_JSON_TYPES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "str": ("a string", lambda v: isinstance(v, str)),
    "str | None": ("a string or null", lambda v: v is None or isinstance(v, str)),
    "float | None": ("a number or null", lambda v: v is None or _is_number(v)),
    "list[float]": ("a list of numbers", lambda v: isinstance(v, list) and all(map(_is_number, v))),
    "bool": ("true or false", lambda v: isinstance(v, bool)),
    "list[list[Any]]": ("a list of [status, first_seconds, last_seconds] runs", _is_runs),
}


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
    """A record of an ``RLJob``-like object: its last poll result, else *status_payload*."""
    from pytest_synth_rl.client.results import add_status_run, extract_error, extract_final_reward, job_status

    result = getattr(job, "last_result", None)
    timeline = [list(run) for run in getattr(job, "observed_statuses", None) or ()]
    if not timeline:
        for poll in getattr(result, "history", ()) if result is not None else getattr(job, "last_polls", ()):
            add_status_run(timeline, poll.status, poll.elapsed)
    status: str | None = timeline[-1][0] if timeline else None
    final_reward: float | None = None
    error: str | None = None
    if result is not None:
        status, final_reward, error = result.status, result.final_reward, result.error
    elif status_payload:
        status = job_status(status_payload) or status
        final_reward, error = extract_final_reward(status_payload), extract_error(status_payload)

    def since(start: float | None, now: float | None) -> float | None:
        return max(0.0, now - start) if start is not None and now is not None else None

    return JobRecord(
        test_id=test_id,
        job_id=getattr(job, "job_id", None),
        status=status,
        backend=backend,
        final_reward=final_reward,
        rewards=list(rewards),
        clock_seconds=since(getattr(job, "submitted_at", None), now_clock),
        wall_seconds=since(getattr(job, "submitted_wall", None), now_wall),
        error=error,
        cancelled_by_plugin=cancelled_by_plugin,
        timeline=timeline,
    )


class LiveJobs:
    """Submitted jobs not known to have ended; in an xdist worker also kept in a file the controller
    reads if the worker dies."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._jobs: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()

    def add(self, test_id: str, job_id: str, backend: str) -> None:
        with self._lock:
            self._jobs[job_id] = {"test": redact(test_id), "job_id": job_id, "backend": redact(backend)}
            self._save()

    def discard(self, job_id: str) -> None:
        with self._lock:
            if self._jobs.pop(job_id, None) is not None:
                self._save()

    def described(self) -> list[str]:
        return [f"{entry['job_id']} ({entry['test']})" for entry in list(self._jobs.values())]

    def _save(self) -> None:
        from pytest_synth_rl.reporting.files import atomic_write_text

        if self.path is not None and self._jobs:
            # Read back only if this worker dies, never after a machine's crash: no fsync (0.3 ms a job).
            atomic_write_text(self.path, json.dumps(list(self._jobs.values()), sort_keys=True), sync=False)
        elif self.path is not None:
            self.path.unlink(missing_ok=True)


MAX_CHART_POINTS = 100
_PLAIN_LIMIT = 1e12
_SPAN_DIGITS = 6
_FLOAT_DIGITS = 15


def _quoted(text: str) -> str:
    return '"' + text.replace('"', "'").replace("\n", " ") + '"'


def _plain(value: float, decimals: int) -> str:
    text = f"{value:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def mermaid_chart(record: JobRecord, max_points: int = MAX_CHART_POINTS) -> str:
    points = [(step, r) for step, r in enumerate(record.rewards, start=1) if math.isfinite(r)]
    if len(points) > max_points:
        picks = sorted({round(i * (len(points) - 1) / (max_points - 1)) for i in range(max_points)})
        points = [points[i] for i in picks]
    steps = [step for step, _ in points]
    rewards = [r for _, r in points]
    largest = max((abs(r) for r in rewards), default=0.0)
    exponent = math.floor(math.log10(largest)) if largest > _PLAIN_LIMIT else 0
    rewards = [r / 10.0**exponent for r in rewards]
    unit = f" (×10^{exponent})" if exponent else ""
    low, high = (min(rewards), max(rewards)) if rewards else (0.0, 0.0)
    if high - low < 1e-12 * max(1.0, abs(low), abs(high)):
        low, high = low - 0.5, high + 0.5
    wanted = _SPAN_DIGITS - 1 - math.floor(math.log10(high - low))
    most = _FLOAT_DIGITS - 1 - math.floor(math.log10(max(abs(low), abs(high))))
    decimals = max(0, min(wanted, most))
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


RULE_WIDTH = 80
_HEADERS = ("test", "job", "status", "duration", "wall", "final reward", "reward curve")


class RunReport:
    """Every job of a run, in the order their tests finished (thread-safe)."""

    def __init__(self, *, mode: str = "offline", backend: str = "") -> None:
        self.mode = mode
        self.backend = backend
        self._records: list[JobRecord] = []
        self._lock = threading.Lock()

    def add(self, record: JobRecord) -> None:
        self.extend([record])

    def extend(self, records: Iterable[JobRecord]) -> None:
        with self._lock:
            self._records.extend(records)

    @property
    def records(self) -> list[JobRecord]:
        with self._lock:
            return list(self._records)

    def _table_rows(self) -> list[list[Any]]:
        time_label = "virtual" if self.mode == "offline" else "clock"
        return [
            [
                r.test_id,
                r.job_id or "-",
                r.status_label
                + (" (cancelled by plugin)" if r.cancelled_by_plugin else "")
                + (" (orphaned: its worker died)" if r.orphaned else ""),
                f"{format_duration(r.clock_seconds)} {time_label}" if r.clock_seconds is not None else "-",
                format_duration(r.wall_seconds),
                format_reward(r.final_reward) if r.final_reward is not None else "-",
                sparkline(r.rewards, width=20) or "-",
            ]
            for r in self.records
        ]

    @property
    def title(self) -> str:
        where = f"fake of {self.backend}" if self.mode == "offline" else self.backend
        return f"synth-rl jobs ({self.mode}, {where})"

    def render_terminal(self, *, titled: bool = False) -> str:
        body = table(_HEADERS, self._table_rows()) if self.records else "no RL jobs were submitted"
        if not titled:
            return body
        return f"= {self.title} =".center(RULE_WIDTH, "=") + f"\n{body}"

    def render_markdown(self) -> str:
        count = len(self.records)

        def row(cells: Iterable[Any]) -> str:
            escaped = (html.escape(str(c), quote=False).replace("|", "\\|") for c in cells)
            return "| " + " | ".join(escaped) + " |"

        heading = f"### RL jobs ({self.mode}, {count} {'job' if count == 1 else 'jobs'})"
        lines = [heading, "", row(_HEADERS), "|" + "---|" * len(_HEADERS), *map(row, self._table_rows())]
        charts = [mermaid_chart(r) for r in self.records if any(map(math.isfinite, r.rewards))]
        if charts:
            lines += ["", "#### Reward curves", "", "\n\n".join(charts)]
        return "\n".join(lines) + "\n"

    @classmethod
    def from_json(cls, data: Any, *, where: str = "report") -> RunReport:
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
        return {
            "version": 1,
            "mode": self.mode,
            "backend": self.backend,
            "summary": {"jobs": len(records), "by_status": dict(Counter(r.status_label for r in records))},
            "jobs": [r.to_json() for r in records],
        }

    def write_json(self, path: str | os.PathLike[str]) -> Path:
        from pytest_synth_rl.reporting.files import atomic_write_text

        text = json.dumps(self.to_json(), indent=2, sort_keys=True, allow_nan=False)
        return atomic_write_text(path, redact(text) + "\n")

    def append_github_summary(self, path: str | os.PathLike[str]) -> None:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(redact(self.render_markdown()))
