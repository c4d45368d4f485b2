"""One picture of a sharded CI run: merge the shards' job reports and their baselines.

Suites outgrow one machine; a CI matrix runs slices of them (``-k`` slices, pytest-split), each
writing its own ``--synth-report`` JSON and maybe refreshing baselines. :func:`merge_reports`
joins the reports into one :class:`~pytest_synth_rl.reporting.report.RunReport` (jobs ordered by test id,
so the result does not depend on which shard finished first); :func:`merge_baselines` joins
baseline directories, refusing to pick a winner when two shards wrote different numbers for
the same test. ``python -m pytest_synth_rl merge ...`` and ``merge-baselines ...`` run them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from pytest_synth_rl.baselines import Baseline, BaselineError
from pytest_synth_rl.errors import SynthError
from pytest_synth_rl.reporting.files import (
    UnreadableDocument,
    atomic_write_text,
    directory_path_problem,
    file_path_problem,
    parse_json_document,
    write_error_reason,
)
from pytest_synth_rl.reporting.report import RunReport

__all__ = [
    "MergeError",
    "append_summary",
    "check_output_file",
    "merge_baselines",
    "merge_reports",
    "read_report",
    "write_report",
]


class MergeError(SynthError):
    """Shard reports or baselines that cannot be merged; the message names the file and why."""


def read_report(path: str | os.PathLike[str]) -> RunReport:
    """One shard's ``--synth-report`` JSON."""
    file = Path(path)
    try:
        raw = file.read_bytes()
    except FileNotFoundError:
        raise MergeError(
            f"shard report {file} does not exist",
            hint="pass the files each shard wrote with --synth-report=PATH (download the CI artifacts first)",
        ) from None
    except OSError as error:
        raise MergeError(
            f"cannot read shard report {file}: {error.strerror or error}",
            hint="pass the files each shard wrote with --synth-report=PATH",
        ) from None
    try:
        data = parse_json_document(raw)
    except UnreadableDocument as error:
        raise MergeError(
            f"shard report {file} {error}",
            hint="pass the JSON file the shard wrote with --synth-report; if its upload was cut short, "
            "re-run that shard",
        ) from None
    try:
        report = RunReport.from_json(data, where=f"shard report {file}")
    except ValueError as error:
        raise MergeError(str(error), hint="pass files written by --synth-report") from None
    return report


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


def _also_as(first: Path, again: Path) -> str:
    """Where the first mention was, when it was spelled differently (``./a.json`` and ``a.json``
    print alike once parsed, so then the file itself is named)."""
    if str(first) != str(again):
        return f" (also as {first})"
    return f" (both name {first.resolve()})"


def _refuse_overlaps(reports: Sequence[tuple[Path, RunReport]]) -> None:
    """Shards are disjoint slices: a file given twice, or a test in two shards, would count its
    jobs twice in the merged table, so either is an error naming both places."""
    seen_files: dict[Path, Path] = {}
    owner: dict[str, Path] = {}
    for path, report in reports:
        resolved = path.resolve()
        if resolved in seen_files:
            raise MergeError(
                f"shard report {path} is given twice{_also_as(seen_files[resolved], path)}",
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
    directories: Sequence[str | os.PathLike[str]],
    into: str | os.PathLike[str],
    *,
    on_empty: Callable[[Path], None] | None = None,
) -> list[Path]:
    """Copy every shard's baseline files into *into*; returns the files written.

    The same file from two shards must hold the same baseline; if not, :class:`MergeError` names
    the file and the first key whose values differ, since only a person can tell which is right.
    A missing shard directory, one given twice, or an unreadable baseline file is an error too;
    *on_empty* is called with each shard directory that holds no baseline files.
    """
    target = Path(into)
    problem = directory_path_problem(target)
    if problem is not None:
        raise MergeError(
            f"cannot merge baselines into {target}: {problem}",
            hint="give --into a directory (it is created if missing), such as tests/baselines",
        )
    shards = _shard_directories(directories)
    chosen: dict[str, tuple[Path, Baseline, str]] = {}
    for directory in shards:
        files = sorted(directory.glob("*.json"))
        if not files and on_empty is not None:
            on_empty(directory)
        for file in files:
            baseline, text = _read_baseline(file)
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
    written = []
    for name, (_, _, text) in sorted(chosen.items()):
        path = target / name
        try:
            written.append(atomic_write_text(path, text))
        except OSError as error:
            raise MergeError(
                f"cannot write merged baseline {path}: {write_error_reason(path, error)}",
                hint="give --into a directory you can write",
            ) from None
    return written


def _shard_directories(directories: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """The shards' baseline directories, each existing and given once (like shard reports)."""
    seen: dict[Path, Path] = {}
    for directory in map(Path, directories):
        if not directory.is_dir():
            what = "is not a directory" if directory.exists() else "does not exist"
            raise MergeError(
                f"baseline directory {directory} {what}",
                hint="pass each shard's baseline directory (its synth_baseline_dir, by default "
                "tests/baselines)",
            )
        resolved = directory.resolve()
        if resolved in seen:
            raise MergeError(
                f"baseline directory {directory} is given twice{_also_as(seen[resolved], directory)}",
                hint="pass each shard's baseline directory once",
            )
        seen[resolved] = directory
    return list(seen.values())


def _read_baseline(file: Path) -> tuple[Baseline, str]:
    """A shard's baseline file and its text; :class:`MergeError` names the file if it is broken."""
    try:
        raw = file.read_bytes()
    except OSError as error:
        raise MergeError(f"cannot read baseline file {file}: {error.strerror or error}") from None
    try:
        baseline = Baseline.from_json(raw, path=file)
    except BaselineError as error:
        raise MergeError(error.message, hint=error.hint) from None
    return baseline, raw.decode("utf-8")  # from_json has checked it is UTF-8


def refuse_overwriting_a_shard(
    output: str | os.PathLike[str], shards: Sequence[str | os.PathLike[str]]
) -> None:
    """``--report`` naming one of the shard reports would replace that shard with the merge."""
    target = Path(output).resolve()
    for shard in shards:
        if Path(shard).resolve() == target:
            raise MergeError(
                f"--report {output} is also a shard report being merged; writing it would replace that shard",
                hint="write the merged report to a new file, such as --report synth-report.json",
            )


def check_output_file(path: str | os.PathLike[str], option: str, *, make_parents: bool = True) -> None:
    """Refuse an output path that cannot be a file (empty, a directory, or under a file) before
    merging; the message names *option* as the user wrote it."""
    if not str(path).strip():  # ``--report "$OUT"`` with the variable unset: never quietly nothing
        raise MergeError(
            f"{option}= is empty",
            hint=f"give {option} a file path, or leave {option} out (an unset shell variable?)",
        )
    problem = file_path_problem(path, make_parents=make_parents)
    if problem is not None:
        raise MergeError(
            f"{option} {path}: cannot write there: {problem}",
            hint=f"give {option} a file path"
            + (" (missing directories are created)" if make_parents else " in an existing directory"),
        )


def write_report(report: RunReport, path: str | os.PathLike[str], option: str = "--report") -> Path:
    """Write the merged JSON report; a path that cannot be written is a :class:`MergeError`."""
    check_output_file(path, option)
    try:
        return report.write_json(path)
    except OSError as error:
        raise MergeError(
            f"{option} {path}: cannot write the merged report: {write_error_reason(path, error)}",
            hint=f"give {option} a file path you can write",
        ) from None


def append_summary(report: RunReport, path: str | os.PathLike[str], option: str = "--summary") -> None:
    """Append the merged Markdown summary; a path that cannot be appended to is a :class:`MergeError`."""
    check_output_file(path, option, make_parents=False)
    try:
        report.append_github_summary(path)
    except OSError as error:
        raise MergeError(
            f"{option} {path}: cannot append the merged summary: "
            f"{write_error_reason(path, error, make_parents=False)}",
            hint=f'give {option} a file path you can write ("$GITHUB_STEP_SUMMARY" in GitHub Actions)',
        ) from None


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
