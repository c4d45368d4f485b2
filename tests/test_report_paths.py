"""Report paths that cannot be written: --synth-report is refused before tests run when its path
cannot be a file; a JSON report or step summary that fails at the end of the run is a red error
line naming the option (or GITHUB_STEP_SUMMARY), the path and the reason, never a traceback, and
the other of the two is still written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

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
    return suite.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider", *args, timeout=600)


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
