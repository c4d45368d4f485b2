"""``python -m pytest_synth_rl merge`` / ``merge-baselines`` with files that cannot be read or
written: one ``error:`` line naming the file and the problem, exit code 2, no traceback."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from fifo_support import FifoReader, full_device

from pytest_synth_rl.__main__ import main as cli
from pytest_synth_rl.baselines import BaselineStore
from pytest_synth_rl.reporting.merge import MergeError, merge_baselines, merge_reports
from pytest_synth_rl.reporting.report import JobRecord, RunReport


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
    assert f"error: shard report {deep} is nested too deeply to parse (more than 200 levels)" in _error(
        capsys
    )


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


def test_a_timeline_nested_deeper_than_runs_is_refused(tmp_path: Path) -> None:
    # Before, it was read, and writing the merged report then failed with a RecursionError.
    deep = tmp_path / "deep.json"
    deep.write_text(json.dumps({"version": 1, "jobs": [{"test_id": "t", "timeline": [[["queued", 0, 1]]]}]}))
    with pytest.raises(MergeError) as raised:
        merge_reports([deep])
    assert raised.value.message == (
        f"shard report {deep}: jobs[0].timeline is [[['queued', 0, 1]]], expected a list of "
        "[status, first_seconds, last_seconds] runs"
    )


def test_large_finite_rewards_merge_into_a_table_a_summary_and_a_report(tmp_path: Path) -> None:
    # Before, the reward curve's span overflowed: "ValueError: cannot convert float NaN to integer".
    report = RunReport(mode="offline", backend="b")
    rewards = [1e308, 1e308, 1e308, -1e308]
    report.add(JobRecord("t.py::a", "job_rl_000001", "succeeded", "b", final_reward=1e308, rewards=rewards))
    huge = report.write_json(tmp_path / "huge.json")
    merged, summary = tmp_path / "merged.json", tmp_path / "summary.md"
    command = ["merge", str(huge), "--report", str(merged), "--summary", str(summary)]
    run = subprocess.run(
        [sys.executable, "-m", "pytest_synth_rl", *command],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (run.returncode, run.stderr) == (0, "")
    lines = run.stdout.splitlines()
    assert lines[0].strip("= ") == report.title  # titled like a pytest run's table
    assert lines[3] == "t.py::a  job_rl_000001  succeeded  -         -     1e+308        ███▁"
    assert json.loads(merged.read_text())["jobs"][0]["rewards"] == rewards
    assert '    y-axis "reward (×10^308)" -1 --> 1' in summary.read_text().splitlines()
    assert "    line [1, 1, 1, -1]" in summary.read_text().splitlines()


@pytest.mark.parametrize(
    ("field", "value", "written", "path"),
    [
        ("final_reward", float("nan"), "nan", "final_reward"),
        ("clock_seconds", float("inf"), "inf", "clock_seconds"),
        ("rewards", [0.5, 0.75, float("-inf")], "-inf", "rewards[2]"),
        (
            "timeline",
            [["running", 0.0, 50.0], ["succeeded", float("inf"), 60.0]],
            "inf",
            "timeline[1][1]",
        ),
    ],
)
def test_a_shard_holding_nan_or_infinity_is_refused_naming_the_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, value: object, written: str, path: str
) -> None:
    # Before, a NaN final reward was merged (the table showed "nan") and --report wrote NaN back.
    shard = tmp_path / "shard.json"
    row = {"test_id": "t.py::a", "job_id": "job_rl_000001", "status": "succeeded", field: value}
    shard.write_text(json.dumps({"version": 1, "jobs": [row]}))  # Python writes NaN and Infinity
    out = tmp_path / "out.json"
    assert cli(["merge", str(shard), "--report", str(out)]) == 2
    assert _error(capsys).startswith(
        f"error: shard report {shard} at jobs[0].{path}: must be a finite number, got {written}\n  hint: "
    )
    assert not out.exists()


def test_a_shard_holding_an_integer_no_float_can_hold_is_refused_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before, an integer no float can hold was merged and the sparkline crashed on it.
    shard = tmp_path / "shard.json"
    row = {"test_id": "t.py::a", "job_id": "job_rl_000001", "status": "ok", "rewards": [0.5, -(10**400)]}
    shard.write_text(json.dumps({"version": 1, "jobs": [row]}))
    assert cli(["merge", str(shard), "--report", str(tmp_path / "out.json")]) == 2
    assert _error(capsys) == (
        f"error: shard report {shard}: jobs[0].rewards[1] is -Infinity, expected a finite number (standard "
        "JSON has no NaN or Infinity; a report holding one cannot be written again)\n"
        "  hint: pass files written by --synth-report\n"
    )


def test_a_report_never_writes_nan_or_infinity(tmp_path: Path) -> None:
    # Before, a NaN reward from a backend was written as NaN, which no JSON parser but Python's reads.
    report = RunReport(mode="offline", backend="b")
    report.add(
        JobRecord(
            "t.py::a",
            "job_rl_000001",
            "succeeded",
            "b",
            final_reward=float("nan"),
            rewards=[0.5, float("inf"), 0.75],
            clock_seconds=float("-inf"),
            timeline=[["running", 0.0, float("nan")]],
        )
    )

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} written")

    path = report.write_json(tmp_path / "r.json")
    [job] = json.loads(path.read_text(), parse_constant=refuse)["jobs"]
    assert (job["final_reward"], job["rewards"], job["clock_seconds"]) == (None, [0.5, 0.75], None)
    assert job["timeline"] == [["running", 0.0, None]]
    assert merge_reports([path]).records[0].rewards == [0.5, 0.75]


@pytest.mark.parametrize(
    ("option", "where", "reason"),
    [
        ("--report", "adir", "{dir}/adir is a directory"),
        ("--summary", "adir", "{dir}/adir is a directory"),
        ("--report", "good.json/x.json", "{dir}/good.json is a file, not a directory"),
        ("--summary", "good.json/x.md", "{dir}/good.json is a file, not a directory"),
        ("--summary", "nodir/x.md", "directory {dir}/nodir does not exist"),
        # Before: the slash was dropped and a file named "newdir" written.
        ("--report", "newdir/", "{dir}/newdir/ ends with a slash, so it names a directory, not a file"),
    ],
)
def test_an_output_path_that_cannot_be_written_names_the_option(
    good: Path, capsys: pytest.CaptureFixture[str], option: str, where: str, reason: str
) -> None:
    (good.parent / "adir").mkdir()
    path = f"{good.parent / where}{'/' if where.endswith('/') else ''}"
    assert cli(["merge", str(good), option, path]) == 2
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
    assert "deep.json is nested too deeply to parse (more than 200 levels)" in _error(capsys)
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
    # ./s1 and s1 print alike once parsed: the message names the directory itself.
    assert f"error: baseline directory {again} is given twice (both name {shard.directory.resolve()})" in err
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


def test_a_shard_report_given_twice_under_another_spelling_names_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shard = tmp_path / "s1"
    shard.mkdir()
    report = shard / "shard.json"
    report.write_text('{"version": 1, "mode": "offline", "backend": "mock", "jobs": []}')
    other = tmp_path / "s1" / ".." / "s1" / "shard.json"
    assert cli(["merge", str(report), str(other)]) == 2
    assert f"error: shard report {other} is given twice (also as {report})" in _error(capsys)


def test_one_merged_baseline_is_counted_in_the_singular(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shard = BaselineStore(tmp_path / "s1")
    shard.save("t.py::a", {"reward.last": 0.8})
    into = tmp_path / "out"
    assert cli(["merge-baselines", str(shard.directory), "--into", str(into)]) == 0
    assert capsys.readouterr().out == f"synth-rl: 1 baseline file merged into {into}\n"


def test_the_merged_report_is_written_through_a_symlink(
    good: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before, the link became a regular file and the file it pointed to kept its old text.
    target = good.parent / "kept" / "synth-report.json"
    target.parent.mkdir()
    target.write_text("old\n")
    link = good.parent / "link.json"
    link.symlink_to(target)
    assert cli(["merge", str(good), "--report", str(link)]) == 0
    assert f"synth-rl: merged JSON report written to {link}\n" in capsys.readouterr().out
    assert link.is_symlink()
    assert [job["test_id"] for job in json.loads(target.read_text())["jobs"]] == ["t.py::a"]


@pytest.mark.parametrize("option", ["--report", "--summary"])
def test_a_special_file_is_written_in_place_not_replaced(
    good: Path, capsys: pytest.CaptureFixture[str], option: str
) -> None:
    # Before, --report replaced a device node (here a FIFO standing in for one) by a regular file.
    with FifoReader(good.parent / "device") as device:
        assert cli(["merge", str(good), option, str(device.path)]) == 0
    assert stat.S_ISFIFO(os.lstat(device.path).st_mode)
    text = device.data.decode()
    if option == "--report":
        assert [job["test_id"] for job in json.loads(text)["jobs"]] == ["t.py::a"]
    else:
        assert "| t.py::a | job_rl_000001 | succeeded |" in text
    assert _error(capsys) == ""


def test_a_full_device_is_an_error_naming_the_option_not_written(
    good: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before, the device was replaced by a regular file and the report said "written".
    with FifoReader(good.parent / "full") as device:
        full_device(monkeypatch, device.path)
        assert cli(["merge", str(good), "--report", str(device.path)]) == 2
        monkeypatch.undo()
    captured = capsys.readouterr()
    assert captured.err == (
        f"error: --report {device.path}: cannot write the merged report: No space left on device\n"
        "  hint: give --report a file path you can write\n"
    )
    assert "written" not in captured.out
    assert stat.S_ISFIFO(os.lstat(device.path).st_mode)
    assert device.data == b""


@pytest.mark.parametrize("option", ["--report", "--summary"])
@pytest.mark.parametrize("value", ["", "  "], ids=["empty", "blank"])
def test_an_empty_output_path_is_an_error_not_nothing_written(
    good: Path, capsys: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    # Before, ``--report ''`` exited 0 having written nothing (``--report "$OUT"``, OUT unset).
    assert cli(["merge", str(good), option, value]) == 2
    assert _error(capsys) == (
        f"error: {option}= is empty\n"
        f"  hint: give {option} a file path, or leave {option} out (an unset shell variable?)\n"
    )
    assert capsys.readouterr().out == ""  # refused before the merged table is printed
    assert sorted(p.name for p in good.parent.iterdir()) == ["good.json"]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["merg", "s.json"],
            "invalid choice: 'merg' (choose from 'merge', 'merge-baselines', 'serve') "
            "(did you mean 'merge'?)",
        ),
        (
            ["serv"],
            "invalid choice: 'serv' (choose from 'merge', 'merge-baselines', 'serve') "
            "(did you mean 'serve'?)",
        ),
        (
            ["merge", "s.json", "--reprot", "m.json"],
            "unrecognized arguments: --reprot m.json (did you mean '--report'?)",
        ),
        (
            ["merge", "s.json", "--sumary=x.md"],
            "unrecognized arguments: --sumary=x.md (did you mean '--summary'?)",
        ),
    ],
)
def test_a_misspelt_command_or_option_gets_a_did_you_mean(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli(argv)
    assert exited.value.code == 2
    assert said in capsys.readouterr().err
