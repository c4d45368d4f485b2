"""The example workflow's split and merge, run here: a small suite on the example task app and TOML
runs whole, then as three pytest-split shards (each in its own copy of the project, as CI checks
out one per shard), and ``python -m pytest_synth_rl merge`` / ``merge-baselines`` of the shards
give the whole run's report and baselines."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SPLITS = 3

CURVES = """
import pytest

pytestmark = [
    pytest.mark.synth_task_app("arithmetic_task_app.py"),
    pytest.mark.synth_rl(config="arithmetic.toml"),
]


def test_the_default_run_keeps_its_numbers(synth_rl_job, synth_expect, synth_baseline):
    job = synth_rl_job()
    job.submit()
    synth_baseline(synth_expect(job).to_succeed(within=7200).result)


def test_a_longer_run_keeps_its_numbers(synth_rl_job, synth_expect, synth_baseline):
    job = synth_rl_job(overrides={"training.iterations_per_epoch": 6})
    job.submit()
    synth_baseline(synth_expect(job).to_succeed(within=7200).result)
"""

REGRESSION = "test_arithmetic_regression.py::"
STATUSES = {
    REGRESSION + "test_training_succeeds_and_the_reward_improves": "succeeded",
    REGRESSION + "test_a_shrunk_config_still_trains": "succeeded",
    REGRESSION + "test_a_failed_run_reports_the_backend_error": "failed",
    REGRESSION + "test_a_running_job_can_be_cancelled": "cancelled",
    "test_curves.py::test_the_default_run_keeps_its_numbers": "succeeded",
    "test_curves.py::test_a_longer_run_keeps_its_numbers": "succeeded",
}
#: The suite's tests: the job tests above and the example's contract check, which starts no job.
TESTS = {*STATUSES, REGRESSION + "test_task_app_honours_the_trainer_contract"}


def _project(path: Path) -> Path:
    """A fresh checkout of the small project: the example task app, its TOML, two test files."""
    path.mkdir()
    for name in ("arithmetic_task_app.py", "arithmetic.toml", "test_arithmetic_regression.py"):
        shutil.copy(EXAMPLES / name, path / name)
    (path / "test_curves.py").write_text(CURVES, encoding="utf-8")
    (path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")  # the rootdir
    return path


def _environment() -> dict[str, str]:
    """This process's environment without what would steer the runs elsewhere: a backend or task
    app from the environment, a step summary, or this pytest's own (xdist) variables."""
    steering = ("SYNTH_", "PYTEST_", "BACKEND_BASE_URL", "TASK_APP_URL", "ENVIRONMENT_API_KEY", "GITHUB_")
    return {name: value for name, value in os.environ.items() if not name.startswith(steering)}


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _pytest(project: Path, *args: str) -> set[str]:
    """Run the project's suite as the workflow's shards do; the ids of the tests that passed."""
    run = _run(project, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "-rA", *args)
    assert run.returncode == 0, run.stdout + run.stderr
    return set(re.findall(r"^PASSED (\S+)$", run.stdout, re.M))


def _comparable(report: dict[str, Any]) -> dict[str, Any]:
    """*report* without what differs between two runs of the same jobs: the wall-clock time each
    job took (real time of this machine); jobs in test-id order, as the merge writes them."""
    jobs = sorted(({**job, "wall_seconds": None} for job in report["jobs"]), key=lambda j: j["test_id"])
    return {**report, "jobs": jobs}


def _baselines(directory: Path) -> dict[str, Any]:
    return {path.name: json.loads(path.read_text(encoding="utf-8")) for path in directory.glob("*.json")}


@pytest.mark.slow
def test_pytest_split_shards_merge_into_the_unsharded_report_and_baselines(tmp_path: Path) -> None:
    whole = _project(tmp_path / "whole")
    passed = _pytest(whole, "--synth-update-baselines", "--synth-report", "synth-report.json")
    assert passed == TESTS

    shards = []
    for group in range(1, SPLITS + 1):
        shard = _project(tmp_path / f"shard-{group}")
        ran = _pytest(
            shard,
            *("--splits", str(SPLITS), "--group", str(group)),
            *("--synth-update-baselines", "-o", "synth_baseline_dir=shard-baselines"),
            *("--synth-report", "synth-report.json"),
        )
        assert ran, f"shard {group} ran no test"
        shards.append((shard, ran))
    # pytest-split (no .test_durations: the even split) gave each test to exactly one shard.
    assert sum(len(ran) for _, ran in shards) == len(TESTS)
    assert set().union(*(ran for _, ran in shards)) == TESTS

    reports = [str(shard / "synth-report.json") for shard, _ in shards]
    merge = _run(tmp_path, "-m", "pytest_synth_rl", "merge", *reports[::-1], "--report", "merged.json")
    assert merge.returncode == 0, merge.stderr
    merge = _run(tmp_path, "-m", "pytest_synth_rl", "merge", *reports, "--summary", "summary.md")
    assert merge.returncode == 0, merge.stderr
    merged = json.loads((tmp_path / "merged.json").read_text(encoding="utf-8"))
    unsharded = json.loads((whole / "synth-report.json").read_text(encoding="utf-8"))

    # What a reader relies on: every job test once, in test-id order, with its status and rewards.
    jobs = {job["test_id"]: job for job in merged["jobs"]}
    assert [job["test_id"] for job in merged["jobs"]] == sorted(STATUSES)
    assert {test: job["status"] for test, job in jobs.items()} == STATUSES
    assert merged["summary"] == {"jobs": 6, "by_status": {"succeeded": 4, "failed": 1, "cancelled": 1}}
    assert "CUDA out of memory" in jobs[REGRESSION + "test_a_failed_run_reports_the_backend_error"]["error"]
    for test, status in STATUSES.items():
        assert bool(jobs[test]["rewards"]) == (status != "cancelled"), test
    # Offline job ids come from the test id, so shards need no distinct prefixes: no two collide.
    assert len({job["job_id"] for job in merged["jobs"]}) == 6
    # And it is the unsharded run's report: same job ids, statuses, rewards, virtual times, errors.
    assert _comparable(merged) == _comparable(unsharded)

    summary = (tmp_path / "summary.md").read_text(encoding="utf-8")
    assert "### RL jobs (offline, 6 jobs)" in summary
    for test, status in STATUSES.items():
        assert f"| {test} | {jobs[test]['job_id']} | {status} |" in summary

    refreshed = [shard / "shard-baselines" for shard, _ in shards if (shard / "shard-baselines").is_dir()]
    assert len(refreshed) == 2, "the two baseline tests should fall into different shards"
    into = tmp_path / "merged-baselines"
    command = ["-m", "pytest_synth_rl", "merge-baselines", *map(str, refreshed), "--into", str(into)]
    merge = _run(tmp_path, *command)
    assert merge.returncode == 0, merge.stderr
    assert "2 baseline files merged into" in merge.stdout
    assert _baselines(into) == _baselines(whole / "tests" / "baselines")
    assert len(_baselines(into)) == 2
