"""``synth_fake_server`` answers each test the way ``synth_fake`` does: its policy, its scenario.

The server is shared by the session, so these run as one pytester suite in file order: a test
with a scenario marker must not leak it into the next test, and a ``conftest.py`` policy must
reach jobs submitted to the served fake from any client.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

CONFTEST = """
import pytest
from pytest_synth_rl import ScriptedPolicy


@pytest.fixture
def synth_policy():
    return ScriptedPolicy("no idea")
"""

SUITE = """
import pytest
from pytest_synth_rl import RLJob, VirtualClock
from pytest_synth_rl.fake.model import ArithmeticPolicy

pytestmark = pytest.mark.synth_task_app("arithmetic_task_app.py")


def run_job(served, app):
    job = RLJob.from_config(
        "arithmetic.toml",
        backend_url=served.url,
        api_key=served.api_key,
        task_app_url=app.url,
        task_app_api_key=app.api_key,
        clock=VirtualClock(),
    )
    job.submit()
    return job.poll_until_complete(timeout=7200, interval=5)


def test_conftest_policy_answers_the_served_fake(synth_fake_server, synth_task_app):
    result = run_job(synth_fake_server, synth_task_app)
    assert result.status == "succeeded"
    assert result.final_reward == 0.0
    rollouts = synth_fake_server.fake.job(result.job_id).rollouts
    assert len(rollouts) == 24 and {r.reward for r in rollouts} == {0.0}


@pytest.mark.synth_rl(policy=ArithmeticPolicy())
def test_the_marker_policy_wins_over_the_fixture(synth_fake_server, synth_task_app):
    result = run_job(synth_fake_server, synth_task_app)
    assert result.status == "succeeded"
    assert result.final_reward == 1.0


@pytest.mark.synth_scenario(outcome="failed", fail_at_step=2, error="CUDA OOM")
def test_scenario_marker_scripts_the_served_fake(synth_fake_server, synth_task_app):
    result = run_job(synth_fake_server, synth_task_app)
    assert result.status == "failed"
    assert "CUDA OOM" in result.error


def test_the_next_test_gets_the_default_scenario_again(synth_fake_server, synth_task_app):
    assert run_job(synth_fake_server, synth_task_app).status == "succeeded"
"""


def test_served_fake_follows_each_tests_policy_and_scenario(pytester: pytest.Pytester) -> None:
    for name in ("arithmetic_task_app.py", "arithmetic.toml"):
        shutil.copy(EXAMPLES / name, pytester.path / name)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_served=SUITE)
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)


LEAKS = """
import httpx
import pytest
from pytest_synth_rl import RLJob, ScriptedPolicy, VirtualClock

pytestmark = pytest.mark.synth_task_app("arithmetic_task_app.py")


def run_job(url, api_key, app, clock=None):
    job = RLJob.from_config(
        "arithmetic.toml",
        backend_url=url,
        api_key=api_key,
        task_app_url=app.url,
        task_app_api_key=app.api_key,
        clock=clock or VirtualClock(),
    )
    job.submit()
    return job.poll_until_complete(timeout=7200, interval=5)


def admin(url, key, path, body):
    answer = httpx.post(f"{url}/_fake/{path}", json=body, headers={"Authorization": f"Bearer {key}"})
    assert answer.status_code in (200, 201), answer.text


def test_a_scripts_the_served_fake(synth_fake_server):
    url, key = synth_fake_server.url, synth_fake_server.api_key.value
    admin(url, key, "faults", {"route": "submit", "status": 503, "fail_next": 50})
    admin(url, key, "scenario", {"job": "next", "outcome": "failed", "error": "scripted by test A"})
    admin(url, key, "scenario", {"outcome": "failed", "error": "default of test A"})
    fake = synth_fake_server.fake
    fake.fault("status", status=500, fail_next=50)
    fake.use_policy(ScriptedPolicy("no idea"))
    fake.use_rollout_timeout(1)
    fake.lifecycle.pacing = "clock"


def test_b_gets_a_fresh_served_fake(synth_fake_server, synth_task_app):
    fake = synth_fake_server.fake
    assert (fake.faults, fake.lifecycle.pacing, fake.driver.timeout) == ([], "observed", 30.0)
    result = run_job(synth_fake_server.url, synth_fake_server.api_key, synth_task_app)
    assert result.status == "succeeded", result.error
    assert result.final_reward > 0  # the built-in policy, not test A's


def test_c_scripts_the_mounted_fake(synth_fake, synth_backend):
    admin(synth_backend.url, synth_backend.api_key.value, "faults", {"route": "submit", "status": 503})
    admin(synth_backend.url, synth_backend.api_key.value, "scenario", {"job": "next", "outcome": "failed"})
    synth_fake.use_policy(ScriptedPolicy("no idea"))


def test_d_finds_the_mounted_fake_reset_at_the_end_of_test_c(_synth_run, synth_task_app):
    fake = _synth_run.fake_backend()  # as test C left it: no fixture of this test reset it
    assert (fake.faults, fake.jobs) == ([], [])
    with fake:
        result = run_job(fake.base_url, fake.api_key, synth_task_app, fake.clock)
    assert result.status == "succeeded", result.error
    assert result.final_reward > 0
"""


def test_nothing_a_test_sets_on_a_fake_reaches_the_next_test(pytester: pytest.Pytester) -> None:
    for name in ("arithmetic_task_app.py", "arithmetic.toml"):
        shutil.copy(EXAMPLES / name, pytester.path / name)
    pytester.makepyfile(test_leaks=LEAKS)
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)
