"""End to end: the plugin's RLJob client, a real TOML config, the example task app, and the fake."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from test_fake_support import EXAMPLES, TASK_KEY, no_real_sleep

from pytest_synth_rl.client import AsyncRLJob, RetryPolicy, RLJob
from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.errors import JobFailedError
from pytest_synth_rl.fake import FakeSynthBackend
from pytest_synth_rl.taskapp import InProcessTaskApp

ARITHMETIC = EXAMPLES / "arithmetic.toml"


def _job(
    fake: FakeSynthBackend, task_app: InProcessTaskApp, config: Path = ARITHMETIC, **kwargs: object
) -> RLJob:
    return RLJob.from_config(
        config,
        backend_url=fake.base_url,
        api_key=fake.api_key,
        task_app_url=task_app.url,
        task_app_api_key=task_app.api_key,
        clock=fake.clock,
        **kwargs,  # type: ignore[arg-type]
    )


def test_rljob_runs_a_two_hour_job_with_real_rollouts_without_waiting(
    example_task_app: InProcessTaskApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeSynthBackend(clock=VirtualClock(), task_app_api_key=TASK_KEY) as fake:
        fake.scenario(duration=7200.0, steps=8)
        with no_real_sleep(monkeypatch) as slept, _job(fake, example_task_app) as job:  # real health check
            job_id = job.submit()
            result = job.poll_until_complete(timeout=7300.0, interval=10.0)
        assert slept == []
        assert isinstance(fake.clock, VirtualClock)
        assert fake.clock.elapsed == 7200.0
        assert result.status == "succeeded"
        assert result.job_id == job_id
        fake_job = fake.job(job_id)
        assert result.final_reward == fake_job.final_reward
        assert result.polls == len(fake.calls("status")) == 721
        assert len(result.history) <= 2 * (8 + 3)  # first and latest poll of each answer (8 steps)
        # arithmetic.toml: episodes_per_batch 8 (capped at 4), eval every 2 steps on 4 seeds
        assert [r.seed for r in fake_job.rollouts if r.mode == "eval"][:4] == [100, 101, 102, 103]
        assert len(fake_job.rollouts) == 8 * 4 + 4 * 4
        payload = fake_job.payload
        assert payload["data"]["endpoint_base_url"] == example_task_app.url
        assert fake.requests[0].headers["authorization"] != f"Bearer {fake.api_key.value}"
    fake.close()


def test_rljob_reads_events_metrics_and_timeline(example_task_app: InProcessTaskApp) -> None:
    with FakeSynthBackend(clock=VirtualClock(), task_app_api_key=TASK_KEY) as fake:
        fake.scenario(steps=3, polls=4)
        with _job(fake, example_task_app, skip_health_check=True) as job:
            job.submit()
            result = job.poll_until_complete(interval=5.0)
            page = job.events()
            points = job.metrics()
            phases = [entry["phase"] for entry in job.timeline()]
        assert result.status == "succeeded"
        assert page.types[0] == "rl.job.created"
        assert page.types[-1] == "rl.train.completed"
        assert page.next_seq == len(page.events)
        assert sorted({p["name"] for p in points}) == ["eval.reward", "train.loss", "train.reward"]
        assert phases == ["queued", "running", "succeeded"]
    fake.close()


def test_rljob_retries_through_injected_faults(example_task_app: InProcessTaskApp) -> None:
    with FakeSynthBackend(clock=VirtualClock(), task_app_api_key=TASK_KEY) as fake:
        fake.scenario(steps=2, duration=60.0, reward_curve=[0.2, 0.4])
        fake.fault("submit", status=503, fail_next=1)
        fake.fault("status", status=429, retry_after=3, pattern="0101")
        fake.fault("status", connect_error=True, pattern="001")
        retry = RetryPolicy(jitter=False)
        with _job(fake, example_task_app, skip_health_check=True, retry=retry) as job:
            job.submit()
            result = job.poll_until_complete(timeout=600.0, interval=10.0)
        assert result.status == "succeeded"
        assert result.final_reward == 0.4
        faults = [r.fault for r in fake.requests if r.fault]
        assert faults == [
            "HTTP 503 on route 'submit'",
            "HTTP 429 on route 'status'",
            "connection error on route 'status'",
            "HTTP 429 on route 'status'",
        ]
        assert len(fake.jobs) == 1  # the retried submit did not create a second job
    fake.close()


def test_a_broken_task_app_surfaces_as_a_failed_job_in_the_client(example_task_app: InProcessTaskApp) -> None:
    with FakeSynthBackend(clock=VirtualClock(), task_app_api_key="wrong-key-for-this-app-0123") as fake:
        fake.scenario(steps=3, duration=90.0)
        with _job(fake, example_task_app) as job:
            job.submit()
            with pytest.raises(JobFailedError) as caught:
                job.poll_until_complete(interval=10.0, raise_on_failure=True)
        message = str(caught.value)
        assert "failed" in message
        assert f"{example_task_app.url}/rollout" in message
        assert caught.value.status == "failed"
    fake.close()


def test_rljob_against_the_served_fake_over_real_loopback(example_task_app: InProcessTaskApp) -> None:
    fake = FakeSynthBackend(clock=VirtualClock(), task_app_api_key=TASK_KEY)
    fake.scenario(steps=2, polls=3)
    with fake.serve() as url:
        job = RLJob.from_config(
            ARITHMETIC,
            backend_url=url,
            api_key=fake.api_key,
            task_app_url=example_task_app.url,
            task_app_api_key=example_task_app.api_key,
            clock=VirtualClock(),  # the client's own clock: the served fake moves per poll
        )
        with job:
            job.submit()
            result = job.poll_until_complete(interval=10.0)
    assert result.status == "succeeded"
    assert len(fake.job(result.job_id).rollouts) > 0
    fake.close()


def test_async_rljob_against_the_mounted_fake(example_task_app: InProcessTaskApp) -> None:
    async def main(fake: FakeSynthBackend) -> str:
        job = AsyncRLJob.from_config(
            ARITHMETIC,
            backend_url=fake.base_url,
            api_key=fake.api_key,
            task_app_url=example_task_app.url,
            task_app_api_key=example_task_app.api_key,
            clock=fake.clock,
            skip_health_check=True,
        )
        async with job:
            await job.submit()
            result = await job.poll_until_complete(interval=10.0)
        return result.status

    with FakeSynthBackend(clock=VirtualClock(), task_app_api_key=TASK_KEY) as fake:
        fake.scenario(steps=2, duration=100.0)
        assert asyncio.run(main(fake)) == "succeeded"
    fake.close()
