"""Joining a sharded CI run's ``--synth-report`` files and baseline directories; two shards that
wrote different numbers for one test are refused."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

from pytest_synth_rl.baselines import Baseline, BaselineError
from pytest_synth_rl.errors import SynthError
from pytest_synth_rl.reporting.files import (
    UnreadableDocument,
    atomic_write_text,
    parse_json_document,
    path_problem,
    write_error_reason,
)
from pytest_synth_rl.reporting.report import RunReport

T = TypeVar("T")
Pathish = str | os.PathLike[str]


class MergeError(SynthError):
    pass


def read_report(path: Pathish) -> RunReport:
    file = Path(path)
    raw = _read_bytes(file, "shard report", "pass the files each shard wrote with --synth-report=PATH")
    try:
        return RunReport.from_json(parse_json_document(raw), where=f"shard report {file}")
    except UnreadableDocument as error:
        hint = "pass the JSON file the shard wrote with --synth-report; if its upload was cut short, rerun it"
        raise MergeError(f"shard report {file} {error}", hint=hint) from None
    except ValueError as error:
        raise MergeError(str(error), hint="pass files written by --synth-report") from None


def merge_reports(paths: Sequence[Pathish]) -> RunReport:
    if not paths:
        raise MergeError("no shard reports given", hint="pass at least one --synth-report file")
    reports = _given_once("shard report", map(Path, paths), read_report, "pass each shard's report once")
    (first_path, first), owner = reports[0], dict[str, Path]()
    for path, report in reports:
        if (report.mode, report.backend) != (first.mode, first.backend):
            ran = f"ran {report.mode} against {report.backend!r}, but {first_path} ran {first.mode}"
            message = f"shard report {path} {ran} against {first.backend!r}"
            raise MergeError(message, hint="merge only shards of the same run")
        for test_id in {job.test_id for job in report.records}:
            if test_id in owner:
                hint = "the shards' slices overlap: give each test to one shard, then merge again"
                both = f"{owner[test_id]} and {path}"
                raise MergeError(f"test {test_id} has jobs in two shard reports, {both}", hint=hint)
            owner[test_id] = path
    merged = RunReport(mode=first.mode, backend=first.backend)
    merged.extend(sorted((job for _, report in reports for job in report.records), key=lambda r: r.test_id))
    return merged


def _given_once(
    what: str, paths: Iterable[Path], read: Callable[[Path], T], hint: str
) -> list[tuple[Path, T]]:
    seen: dict[Path, Path] = {}
    out = []
    for path in paths:
        resolved = path.resolve()
        if resolved in seen:
            first = seen[resolved]
            also = f" (also as {first})" if str(first) != str(path) else f" (both name {resolved})"
            raise MergeError(f"{what} {path} is given twice{also}", hint=hint)
        seen[resolved] = path
        out.append((path, read(path)))
    return out


def merge_baselines(
    directories: Sequence[Pathish],
    into: Pathish,
    *,
    on_empty: Callable[[Path], None] | None = None,
) -> list[Path]:
    """Copy every shard's baseline files into *into*; *on_empty* is called for a shard with none."""
    target = Path(into)
    if (problem := path_problem(target, directory=True)) is not None:
        hint = "give --into a directory (it is created if missing), such as tests/baselines"
        raise MergeError(f"cannot merge baselines into {target}: {problem}", hint=hint)
    once = "pass each shard's baseline directory once"
    shards = _given_once("baseline directory", map(Path, directories), _shard_files, once)
    chosen: dict[str, tuple[Path, Baseline, str]] = {}
    for directory, files in shards:
        if not files and on_empty is not None:
            on_empty(directory)
        for file in files:
            raw = _read_bytes(file, "baseline file")
            try:
                baseline = Baseline.from_json(raw, path=file)
            except BaselineError as error:
                raise MergeError(error.message, hint=error.hint) from None
            earlier = chosen.setdefault(file.name, (file, baseline, raw.decode("utf-8")))
            if (key := _first_difference(earlier[1], baseline)) is not None:
                raise MergeError(
                    f"baseline conflict in {file.name}: {earlier[0]} and {file} disagree on {key!r}",
                    hint="two shards refreshed the same test's baseline differently; keep one file by "
                    "hand (or run that test in one shard only) and merge again",
                )
    written = []
    for name, (_, _, text) in sorted(chosen.items()):
        try:
            written.append(atomic_write_text(target / name, text))
        except OSError as error:
            reason = write_error_reason(target / name, error)
            hint = "give --into a directory you can write"
            raise MergeError(f"cannot write merged baseline {target / name}: {reason}", hint=hint) from None
    return written


def _shard_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        what = "is not a directory" if directory.exists() else "does not exist"
        hint = "pass each shard's baseline directory (its synth_baseline_dir, by default tests/baselines)"
        raise MergeError(f"baseline directory {directory} {what}", hint=hint)
    return sorted(directory.glob("*.json"))


def _read_bytes(file: Path, what: str, hint: str | None = None) -> bytes:
    try:
        return file.read_bytes()
    except FileNotFoundError:
        missing = f"{hint} (download the CI artifacts first)" if hint else None
        raise MergeError(f"{what} {file} does not exist", hint=missing) from None
    except OSError as error:
        raise MergeError(f"cannot read {what} {file}: {error.strerror or error}", hint=hint) from None


def _first_difference(a: Baseline, b: Baseline) -> str | None:
    if a.test_id != b.test_id:
        return "test_id"
    for prefix, left, right in (
        ("metrics", a.metrics, b.metrics),
        ("tolerances", a.tolerances, b.tolerances),
    ):
        for name in sorted(set(left) | set(right)):
            if left.get(name) != right.get(name):
                return f"{prefix}.{name}"
    return "reward_curve" if a.reward_curve != b.reward_curve else None


def check_output_file(
    path: Pathish, option: str, *, make_parents: bool = True, shards: Sequence[object] = ()
) -> None:
    if not str(path).strip():
        hint = f"give {option} a file path, or leave {option} out (an unset shell variable?)"
        raise MergeError(f"{option}= is empty", hint=hint)
    if (problem := path_problem(path, make_parents=make_parents)) is not None:
        where = " (missing directories are created)" if make_parents else " in an existing directory"
        hint = f"give {option} a file path{where}"
        raise MergeError(f"{option} {path}: cannot write there: {problem}", hint=hint)
    if any(Path(str(shard)).resolve() == Path(path).resolve() for shard in shards):
        replaced = "is also a shard report being merged; writing it would replace that shard"
        hint = "write the merged report to a new file, such as --report synth-report.json"
        raise MergeError(f"--report {path} {replaced}", hint=hint)


def write_output(write: Callable[[Pathish], T], path: Pathish, option: str, *, append: bool = False) -> T:
    try:
        return write(path)
    except OSError as error:
        reason = write_error_reason(path, error, make_parents=not append)
        summary = ("append the merged summary", ' ("$GITHUB_STEP_SUMMARY" in GitHub Actions)')
        doing, where = summary if append else ("write the merged report", "")
        hint = f"give {option} a file path you can write{where}"
        raise MergeError(f"{option} {path}: cannot {doing}: {reason}", hint=hint) from None
