"""One picture of a sharded CI run: merge the shards' job reports and their baselines.

Suites outgrow one machine; a CI matrix runs slices of them (``-k`` slices, pytest-split), each
writing its own ``--synth-report`` JSON and maybe refreshing baselines. :func:`merge_reports`
joins the reports into one :class:`~pytest_synth_rl.report.RunReport` (jobs ordered by test id,
so the result does not depend on which shard finished first); :func:`merge_baselines` joins
baseline directories, refusing to pick a winner when two shards wrote different numbers for
the same test. ``python -m pytest_synth_rl merge ...`` and ``merge-baselines ...`` run them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from .baselines import Baseline, BaselineError
from .errors import SynthError
from .report import RunReport
from .support.files import atomic_write_text

__all__ = ["MergeError", "merge_baselines", "merge_reports", "read_report"]


class MergeError(SynthError):
    """Shard reports or baselines that cannot be merged; the message names the file and why."""


def read_report(path: str | os.PathLike[str]) -> RunReport:
    """One shard's ``--synth-report`` JSON."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MergeError(
            f"shard report {file} does not exist",
            hint="pass the files each shard wrote with --synth-report=PATH (download the CI artifacts first)",
        ) from None
    except OSError as error:
        raise MergeError(f"cannot read shard report {file}: {error.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise MergeError(
            f"shard report {file} is not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})",
            hint="was the shard's upload cut short? re-run that shard",
        ) from None
    try:
        return RunReport.from_json(data, where=f"shard report {file}")
    except ValueError as error:
        raise MergeError(str(error), hint="pass files written by --synth-report") from None


def merge_reports(paths: Sequence[str | os.PathLike[str]]) -> RunReport:
    """The shards' jobs as one report, ordered by test id (stable within a test)."""
    if not paths:
        raise MergeError("no shard reports given", hint="pass at least one --synth-report file")
    reports = [(Path(p), read_report(p)) for p in paths]
    first_path, first = reports[0]
    for path, report in reports[1:]:
        if (report.mode, report.backend) != (first.mode, first.backend):
            raise MergeError(
                f"shard report {path} ran {report.mode} against {report.backend!r}, but {first_path} "
                f"ran {first.mode} against {first.backend!r}",
                hint="merge only shards of the same run",
            )
    _refuse_overlaps(reports)
    merged = RunReport(mode=first.mode, backend=first.backend)
    records = [record for _, report in reports for record in report.records]
    merged.extend(sorted(records, key=lambda r: r.test_id))
    return merged


def _refuse_overlaps(reports: Sequence[tuple[Path, RunReport]]) -> None:
    """Shards are disjoint slices: a file given twice, or a test in two shards, would count its
    jobs twice in the merged table, so either is an error naming both places."""
    seen_files: dict[Path, Path] = {}
    owner: dict[str, Path] = {}
    for path, report in reports:
        resolved = path.resolve()
        if resolved in seen_files:
            raise MergeError(
                f"shard report {path} is given twice (also as {seen_files[resolved]})",
                hint="pass each shard's report once",
            )
        seen_files[resolved] = path
        for test_id in {record.test_id for record in report.records}:
            if test_id in owner:
                raise MergeError(
                    f"test {test_id} has jobs in two shard reports, {owner[test_id]} and {path}",
                    hint="the shards' slices overlap: give each test to one shard, then merge again",
                )
            owner[test_id] = path


def merge_baselines(
    directories: Sequence[str | os.PathLike[str]], into: str | os.PathLike[str]
) -> list[Path]:
    """Copy every shard's baseline files into *into*; returns the files written.

    The same file from two shards must hold the same baseline; if not, :class:`MergeError` names
    the file and the first key whose values differ, since only a person can tell which is right.
    """
    chosen: dict[str, tuple[Path, Baseline, str]] = {}
    for directory in map(Path, directories):
        if not directory.is_dir():
            raise MergeError(
                f"baseline directory {directory} does not exist", hint="pass each shard's baseline dir"
            )
        for file in sorted(directory.glob("*.json")):
            text = file.read_text(encoding="utf-8")
            try:
                baseline = Baseline.from_json(text, path=file)
            except BaselineError as error:
                raise MergeError(error.message) from None
            earlier = chosen.get(file.name)
            if earlier is None:
                chosen[file.name] = (file, baseline, text)
                continue
            key = _first_difference(earlier[1], baseline)
            if key is not None:
                raise MergeError(
                    f"baseline conflict in {file.name}: {earlier[0]} and {file} disagree on {key!r}",
                    hint="two shards refreshed the same test's baseline differently; keep one file by "
                    "hand (or run that test in one shard only) and merge again",
                )
    target = Path(into)
    written = []
    for name, (_, _, text) in sorted(chosen.items()):
        written.append(atomic_write_text(target / name, text))
    return written


def _first_difference(a: Baseline, b: Baseline) -> str | None:
    if a.test_id != b.test_id:
        return "test_id"
    for name in sorted(set(a.metrics) | set(b.metrics)):
        if a.metrics.get(name) != b.metrics.get(name):
            return f"metrics.{name}"
    for name in sorted(set(a.tolerances) | set(b.tolerances)):
        if a.tolerances.get(name) != b.tolerances.get(name):
            return f"tolerances.{name}"
    if a.reward_curve != b.reward_curve:
        return "reward_curve"
    return None
