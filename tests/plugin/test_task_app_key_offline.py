"""Offline, rollouts carry the key the test's own task app enforces, whatever the environment says."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

SUITE = """
import pytest

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
