"""``python -m pytest_synth_rl merge`` / ``merge-baselines`` with files that cannot be read or
written: one ``error:`` line naming the file and the problem, exit code 2, no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_synth_rl.__main__ import main as cli
from pytest_synth_rl.baselines import BaselineStore
from pytest_synth_rl.merge import MergeError, merge_baselines, merge_reports
from pytest_synth_rl.report import JobRecord, RunReport


@pytest.fixture
def good(tmp_path: Path) -> Path:
    report = RunReport(mode="offline", backend="b")
    report.add(JobRecord(test_id="t.py::a", job_id="job_rl_000001", status="succeeded", backend="b"))
    return report.write_json(tmp_path / "good.json")


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return captured.err


def test_a_shard_that_is_not_utf8_or_nested_too_deeply_names_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    binary = tmp_path / "bin.json"
    binary.write_bytes(b'\xff\xfe{"version": 1}')
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000)
    assert cli(["merge", str(binary)]) == 2
    assert f"error: shard report {binary} is not UTF-8 text (byte 0xff at offset 0)" in _error(capsys)
    assert cli(["merge", str(deep)]) == 2
    assert f"error: shard report {deep} is nested too deeply to be a valid file" in _error(capsys)


def test_the_command_exits_2_without_a_traceback(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000)
    run = subprocess.run(
        [sys.executable, "-m", "pytest_synth_rl", "merge", str(deep)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2
    assert run.stderr.startswith(f"error: shard report {deep} is nested too deeply")
    assert "Traceback" not in run.stderr


def test_a_job_row_of_the_wrong_shape_names_the_file_and_field(tmp_path: Path) -> None:
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps({"version": 1, "jobs": [{"test_id": "t.py::a", "rewards": 5}]}))
    with pytest.raises(MergeError, match=r"odd\.json: jobs\[0\]\.rewards is 5, expected a list of numbers"):
        merge_reports([odd])


@pytest.mark.parametrize(
    ("option", "where", "reason"),
    [
        ("--report", "adir", "{dir}/adir is a directory"),
        ("--summary", "adir", "{dir}/adir is a directory"),
        ("--report", "good.json/x.json", "{dir}/good.json is a file, not a directory"),
        ("--summary", "good.json/x.md", "{dir}/good.json is a file, not a directory"),
        ("--summary", "nodir/x.md", "directory {dir}/nodir does not exist"),
    ],
)
def test_an_output_path_that_cannot_be_written_names_the_option(
    good: Path, capsys: pytest.CaptureFixture[str], option: str, where: str, reason: str
) -> None:
    (good.parent / "adir").mkdir()
    path = good.parent / where
    assert cli(["merge", str(good), option, str(path)]) == 2
    err = _error(capsys)
    assert f"error: {option} {path}: cannot write there: {reason.format(dir=good.parent)}" in err
    assert f"hint: give {option} a file path" in err
    assert capsys.readouterr().out == ""  # refused before the merged table is printed


def test_merge_baselines_into_a_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shard = BaselineStore(tmp_path / "s1")
    shard.save("t.py::a", {"reward.last": 0.8})
    into = tmp_path / "afile"
    into.write_text("")
    assert cli(["merge-baselines", str(shard.directory), "--into", str(into)]) == 2
    err = _error(capsys)
    assert f"error: cannot merge baselines into {into}: {into} is a file, not a directory" in err
    assert "hint: give --into a directory (it is created if missing)" in err
    assert cli(["merge-baselines", str(shard.directory), "--into", str(into / "sub")]) == 2
    assert f"{into} is a file, not a directory" in _error(capsys)


def test_an_unreadable_shard_baseline_names_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shard = tmp_path / "s1"
    shard.mkdir()
    (shard / "bad.json").write_bytes(b"\xff{}")
    (tmp_path / "s2").mkdir()
    (tmp_path / "s2" / "deep.json").write_text("[" * 100_000)
    assert cli(["merge-baselines", str(shard), "--into", str(tmp_path / "out")]) == 2
    err = _error(capsys)
    assert f"error: baseline file {shard / 'bad.json'} is not UTF-8 text (byte 0xff at offset 0)" in err
    assert cli(["merge-baselines", str(tmp_path / "s2"), "--into", str(tmp_path / "out")]) == 2
    assert "deep.json is nested too deeply to be a valid file" in _error(capsys)
    assert not (tmp_path / "out").exists()


def test_a_missing_shard_baseline_directory_is_an_error_and_an_empty_one_is_noted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gone, empty, into = tmp_path / "gone", tmp_path / "empty", tmp_path / "out"
    assert cli(["merge-baselines", str(gone), "--into", str(into)]) == 2
    assert f"error: baseline directory {gone} does not exist" in _error(capsys)
    empty.mkdir()
    assert cli(["merge-baselines", str(empty), "--into", str(into)]) == 0
    captured = capsys.readouterr()
    assert f"synth-rl: shard baseline directory {empty} has no baseline files (*.json)" in captured.err
    assert f"synth-rl: 0 baseline files merged into {into}" in captured.out


def test_a_shard_baseline_directory_given_twice_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shard = BaselineStore(tmp_path / "s1")
    shard.save("t.py::a", {"reward.last": 0.8})
    again = tmp_path / "." / "s1"
    assert cli(["merge-baselines", str(shard.directory), str(again), "--into", str(tmp_path / "out")]) == 2
    err = _error(capsys)
    assert f"error: baseline directory {again} is given twice (also as {shard.directory})" in err
    assert "hint: pass each shard's baseline directory once" in err
    assert not (tmp_path / "out").exists()
    with pytest.raises(MergeError, match="is given twice"):
        merge_baselines([shard.directory, shard.directory], tmp_path / "out")


def test_the_merged_report_never_replaces_a_shard(good: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = good.read_text()
    assert cli(["merge", str(good), "--report", str(good)]) == 2
    err = _error(capsys)
    assert f"error: --report {good} is also a shard report being merged" in err
    assert "hint: write the merged report to a new file" in err
    assert good.read_text() == before
