"""A slow task app is given longer from the test's markers: ``synth_task_app(startup_timeout=)``
for its startup, ``synth_rl(rollout_timeout=)`` for each rollout against the offline fake."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

SLOW_APPS = """
import asyncio
import contextlib
import os

from fastapi import FastAPI, Request


@contextlib.asynccontextmanager
async def slow_lifespan(app):
    await asyncio.sleep(float(os.environ["SLOW_START"]))
    yield


starting = FastAPI(lifespan=slow_lifespan)
hanging = FastAPI()


@starting.get("/health")
@starting.get("/task_info")
@hanging.get("/health")
@hanging.get("/task_info")
async def health():
    return {"ok": True, "taskset": {"env_name": "math"}}


@hanging.post("/rollout")
async def rollout(request: Request):
    body = await request.json()
    await asyncio.sleep(float(os.environ["SLOW_ROLLOUT"]))
    return {"trace_correlation_id": body["trace_correlation_id"], "metrics": {"outcome_reward": 1.0}}
"""

SUITE = """
import pytest


@pytest.mark.synth_task_app("slow_apps.py:starting", scope="test", startup_timeout={startup})
@pytest.mark.synth_rl(config="arithmetic.toml")
def test_starts(synth_rl_job):
    synth_rl_job()


@pytest.mark.synth_task_app("slow_apps.py:hanging")
@pytest.mark.synth_rl(config="arithmetic.toml", rollout_timeout={rollout})
@pytest.mark.synth_scenario(immediate=True)
def test_rolls_out(synth_rl_job, synth_expect):
    job = synth_rl_job()
    job.submit()
    synth_expect(job).to_succeed(within=7200)
"""


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    shutil.copy(EXAMPLES / "arithmetic.toml", pytester.path / "arithmetic.toml")
    pytester.makepyfile(slow_apps=SLOW_APPS)
    # The app's startup and each rollout take 0.5 s; the markers give them less, then more.
    monkeypatch.setenv("SLOW_START", "0.5")
    monkeypatch.setenv("SLOW_ROLLOUT", "0.5")
    return pytester


def test_too_little_time_fails_each_naming_the_marker_argument(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_slow=SUITE.format(startup=0.1, rollout=0.1))
    result = suite.runpytest_subprocess("-p", "no:randomly")
    result.assert_outcomes(failed=1, errors=1)
    text = result.stdout.str()
    assert (
        "TaskAppError: the task app did not start within 0.1s: its lifespan startup is still running, "
        'waiting at slow_apps.py:10 in slow_lifespan: await asyncio.sleep(float(os.environ["SLOW_START"]))'
    ) in text
    assert "@pytest.mark.synth_task_app(..., startup_timeout=...) in a test" in text
    assert "timed out after 0.1s" in text
    assert "@pytest.mark.synth_rl(rollout_timeout=...) in a test" in text


def test_enough_time_passes(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLOW_ROLLOUT", "0.15")  # a job runs a few dozen rollouts: keep them short
    suite.makepyfile(test_slow=SUITE.format(startup=30, rollout=30))
    suite.runpytest("-p", "no:randomly").assert_outcomes(passed=2)


SERVED_SUITE = """
import httpx
import pytest


@pytest.mark.synth_task_app("slow_apps.py:hanging")
@pytest.mark.synth_rl(config="arithmetic.toml", rollout_timeout=0.1)
@pytest.mark.synth_scenario(immediate=True)
def test_served(synth_fake_server, synth_task_app, synth_rl_config):
    payload = synth_rl_config.build(task_url=synth_task_app.url)
    headers = {"Authorization": f"Bearer {synth_fake_server.api_key.value}"}
    with httpx.Client(base_url=synth_fake_server.url, headers=headers) as client:
        job_id = client.post("/api/rl/jobs", json=payload).json()["job_id"]
        status = client.get(f"/api/rl/jobs/{job_id}").json()
    assert status["status"] == "failed"
    assert "timed out after 0.1s" in status["error"]
"""


def test_the_served_fake_gives_rollouts_the_tests_timeout_too(suite: pytest.Pytester) -> None:
    # Before, synth_fake_server took the test's policy but not its rollout_timeout (30 s).
    suite.makepyfile(test_served=SERVED_SUITE)
    suite.runpytest_subprocess("-p", "no:randomly").assert_outcomes(passed=1)
