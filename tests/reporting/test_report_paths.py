"""Report paths that cannot be written: --synth-report is refused before tests run when its path
cannot be a file; a JSON report or step summary that fails at the end of the run is a red error
line naming the option (or GITHUB_STEP_SUMMARY), the path and the reason, never a traceback, and
the other of the two is still written."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from fifo_support import FifoReader, full_device

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

SUITE = """
import pytest

pytestmark = [
    pytest.mark.synth_task_app("arithmetic_task_app.py"),
    pytest.mark.synth_rl(config="arithmetic.toml"),
]


def test_job(synth_rl_job, request):
    (request.config.rootpath / "ran").write_text("")
    job = synth_rl_job()
    job.submit()
    job.poll_until_complete(timeout=7200, interval=10)
"""


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    for name in ("arithmetic_task_app.py", "arithmetic.toml"):
        shutil.copy(EXAMPLES / name, pytester.path / name)
    pytester.makepyfile(test_jobs=SUITE)
    for name in ("GITHUB_STEP_SUMMARY", "SYNTH_REPORT"):
        monkeypatch.delenv(name, raising=False)
    (pytester.path / "afile").write_text("not a directory\n")
    return pytester


def _run(suite: pytest.Pytester, *args: str) -> pytest.RunResult:
    # In-process: these runs patch nothing global, and the environment is the monkeypatched one.
    return suite.runpytest("-p", "no:randomly", "-p", "no:cacheprovider", *args)


@pytest.mark.parametrize(
    ("how", "named"),
    [
        ("option", "--synth-report=afile/r.json"),
        ("env", "SYNTH_REPORT=afile/r.json"),
        ("ini", "ini synth_report = afile/r.json"),
    ],
)
def test_a_report_path_under_a_file_is_a_usage_error_before_any_test_runs(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, how: str, named: str
) -> None:
    args: list[str] = []
    if how == "option":
        args.append("--synth-report=afile/r.json")
    elif how == "env":
        monkeypatch.setenv("SYNTH_REPORT", "afile/r.json")
    else:
        suite.makeini("[pytest]\nsynth_report = afile/r.json\n")
    result = _run(suite, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert (
        f"ERROR: {named}: cannot write the run report to {suite.path / 'afile' / 'r.json'}: "
        f"{suite.path / 'afile'} is a file, not a directory. Point it at a JSON file path"
    ) in err
    assert "Traceback" not in err + result.stdout.str()
    assert not (suite.path / "ran").exists(), "the tests ran before the report path was refused"


@pytest.mark.parametrize(
    ("summary", "reason"),
    [
        ("adir", "adir is a directory"),
        ("afile/x.md", "afile is a file, not a directory"),
        ("nodir/x.md", "directory nodir does not exist"),
    ],
)
def test_an_unwritable_step_summary_is_an_error_line_and_the_json_report_is_still_written(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, summary: str, reason: str
) -> None:
    (suite.path / "adir").mkdir()
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", summary)
    result = _run(suite, "--synth-report=r.json")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            f"synth-rl: ERROR: GITHUB_STEP_SUMMARY={summary}: could not append the job table to the "
            f"step summary: {reason}",
            "  hint: GitHub Actions sets GITHUB_STEP_SUMMARY to a file it made; outside Actions, unset "
            "it or point it at a file in an existing directory",
        ]
    )
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    report = json.loads((suite.path / "r.json").read_text(encoding="utf-8"))
    assert [job["test_id"] for job in report["jobs"]] == ["test_jobs.py::test_job"]


def test_a_json_report_that_fails_at_the_end_is_an_error_line_and_the_step_summary_is_still_written(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The path is fine at startup; the test itself then puts a file where the directory would go.
    suite.makepyfile(
        test_jobs=SUITE.replace('(request.config.rootpath / "ran")', '(request.config.rootpath / "out")')
    )
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(suite.path / "summary.md"))
    result = _run(suite, "--synth-report=out/r.json")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            f"synth-rl: ERROR: --synth-report=out/r.json: could not write the JSON report to "
            f"{suite.path / 'out' / 'r.json'}: {suite.path / 'out'} is a file, not a directory",
            "  hint: point it at a file path you can write (missing directories are created)",
        ]
    )
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert "| test_jobs.py::test_job |" in (suite.path / "summary.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("how", "named"),
    [
        ("option", "--synth-report=newdir/"),
        ("env", "SYNTH_REPORT=newdir/"),
        ("ini", "ini synth_report = newdir/"),
    ],
)
def test_a_report_path_ending_in_a_slash_is_a_usage_error_before_any_test_runs(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, how: str, named: str
) -> None:
    # Before, the slash was dropped and a file named "newdir" written.
    args: list[str] = []
    if how == "option":
        args.append("--synth-report=newdir/")
    elif how == "env":
        monkeypatch.setenv("SYNTH_REPORT", "newdir/")
    else:
        suite.makeini("[pytest]\nsynth_report = newdir/\n")
    result = _run(suite, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    where = f"{suite.path / 'newdir'}/"
    assert (
        f"ERROR: {named}: cannot write the run report to {where}: {where} ends with a slash, so it "
        "names a directory, not a file. Point it at a JSON file path"
    ) in err
    assert "Traceback" not in err + result.stdout.str()
    assert not (suite.path / "ran").exists(), "the tests ran before the report path was refused"
    assert not (suite.path / "newdir").exists()


@pytest.mark.parametrize("how", ["env", "ini"])
def test_a_leading_tilde_from_the_environment_or_ini_is_the_home_directory(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    # Before, a folder literally named "~" was made under the rootdir.
    home = suite.path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    if how == "env":
        monkeypatch.setenv("SYNTH_REPORT", "~/r.json")
    else:
        suite.makeini("[pytest]\nsynth_report = ~/r.json\n")
    result = _run(suite)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines([f"synth-rl: JSON report written to {home / 'r.json'}"])
    report = json.loads((home / "r.json").read_text(encoding="utf-8"))
    assert [job["test_id"] for job in report["jobs"]] == ["test_jobs.py::test_job"]
    assert not (suite.path / "~").exists()


def test_the_json_report_is_written_through_a_symlink(suite: pytest.Pytester) -> None:
    # Before, the link became a regular file and the file it pointed to kept its old text.
    (suite.path / "kept").mkdir()
    target = suite.path / "kept" / "r.json"
    target.write_text("old\n")
    (suite.path / "link.json").symlink_to(Path("kept") / "r.json")
    result = _run(suite, "--synth-report=link.json")
    assert result.ret == pytest.ExitCode.OK
    assert (suite.path / "link.json").is_symlink()
    report = json.loads(target.read_text(encoding="utf-8"))
    assert [job["test_id"] for job in report["jobs"]] == ["test_jobs.py::test_job"]


def test_the_json_report_is_written_into_a_special_file_in_place(suite: pytest.Pytester) -> None:
    # Before, a device node (here a FIFO standing in for one) was replaced by a regular file.
    with FifoReader(suite.path / "device") as device:
        result = _run(suite, "--synth-report=device")
    assert result.ret == pytest.ExitCode.OK
    assert stat.S_ISFIFO(os.lstat(device.path).st_mode)
    report = json.loads(device.data)
    assert [job["test_id"] for job in report["jobs"]] == ["test_jobs.py::test_job"]


def test_a_json_report_the_device_does_not_take_is_an_error_line_not_written(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before, a full device was replaced by a regular file and the run said "JSON report written".
    with FifoReader(suite.path / "device") as device:
        full_device(monkeypatch, device.path)
        result = _run(suite, "--synth-report=device")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            f"synth-rl: ERROR: --synth-report=device: could not write the JSON report to "
            f"{device.path}: No space left on device",
            "  hint: point it at a file path you can write (missing directories are created)",
        ]
    )
    assert "JSON report written" not in result.stdout.str()
    assert stat.S_ISFIFO(os.lstat(device.path).st_mode)
    assert device.data == b""
