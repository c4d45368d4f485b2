"""Offline, rollouts carry the key the test's own task app enforces, whatever the environment says."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pytest_synth_rl.taskapp import InProcessTaskApp

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

SUITE = """
import pytest

from pytest_synth_rl.taskapp import InProcessTaskApp

pytestmark = pytest.mark.synth_rl(config="arithmetic.toml")


@pytest.mark.synth_task_app("arithmetic_task_app.py", scope="test", api_key="team-key-0123456789abcdef")
def test_marker_key(synth_rl_job, synth_expect, synth_fake):
    job = synth_rl_job()
    job.submit()
    synth_expect(job).to_succeed(within=7200)
    assert synth_fake.job(job.job_id).rollouts, "rewards came from real rollouts"


@pytest.mark.synth_task_app("arithmetic_task_app.py", scope="test")
def test_environment_key(synth_rl_job, synth_expect):
    job = synth_rl_job()
    job.submit()
    synth_expect(job).to_succeed(within=7200)
"""


@pytest.mark.parametrize("environment_key", [None, "envk_team_0123456789_456"])
def test_a_marker_api_key_reaches_the_rollouts(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, environment_key: str | None
) -> None:
    for name in ("arithmetic_task_app.py", "arithmetic.toml"):
        shutil.copy(EXAMPLES / name, pytester.path / name)
    if environment_key is None:
        monkeypatch.delenv("ENVIRONMENT_API_KEY", raising=False)
    else:
        monkeypatch.setenv("ENVIRONMENT_API_KEY", environment_key)
    pytester.makepyfile(test_keys=SUITE)
    # Both orders: the marker's key must not stay behind for the next test either.
    marker, environment = "test_keys.py::test_marker_key", "test_keys.py::test_environment_key"
    for order in ([marker, environment], [environment, marker]):
        result = pytester.runpytest_subprocess("-p", "no:randomly", *order)
        result.assert_outcomes(passed=2)


EXTERNAL_SUITE = """
import pytest

from pytest_synth_rl.taskapp import InProcessTaskApp
from pytest_synth_rl import check_task_app_contract

pytestmark = pytest.mark.synth_rl(config="arithmetic.toml")


def test_contract(synth_task_app):
    check_task_app_contract(synth_task_app.url, synth_task_app.api_key).raise_for_problems()


def test_job(synth_rl_job, synth_expect):
    job = synth_rl_job()
    job.submit()
    synth_expect(job).to_succeed(within=7200)
"""


def test_a_task_app_url_without_a_key_is_told_no_key_was_sent(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, example_task_app: InProcessTaskApp
) -> None:
    # Before, the header said the key was "generated per run", the contract check listed five
    # refusals and a false "advertises no env_name", and the job said "rejected the key <none>".
    shutil.copy(EXAMPLES / "arithmetic.toml", pytester.path / "arithmetic.toml")
    monkeypatch.delenv("ENVIRONMENT_API_KEY", raising=False)
    pytester.makepyfile(test_external=EXTERNAL_SUITE)
    result = pytester.runpytest_subprocess(
        "-p", "no:randomly", f"--synth-task-app-url={example_task_app.url}"
    )
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    assert f"ENVIRONMENT_API_KEY=<unset: no task-app key is sent to {example_task_app.url}" in out
    assert "generated per run" not in out
    assert "(1 problem(s))" in out
    assert "task app key accepted" in out
    assert (
        "no task-app key was sent: set ENVIRONMENT_API_KEY to the key the task app expects, or pass "
        "check_task_app_contract(url, api_key=...)"
    ) in out
    assert "is a guess" not in out  # the env_name note
    assert "GET /info: expected" not in out
    assert (
        "no task-app key was sent: set ENVIRONMENT_API_KEY to the key the task app expects, or pass "
        "task_app_api_key="
    ) in out
    assert "rejected the key <none>" not in out
