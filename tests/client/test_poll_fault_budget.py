"""A wait survives polls that fail after all their retries, up to a documented failure budget.

Faults fire on the fake per call; the client waits on a :class:`VirtualClock`. A job with time
left must not be abandoned because one poll's retries ran out; the wait ends on its timeout or
after ``max_failed_polls`` failed polls in a row, with every attempt in the error.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from pytest_synth_rl.assertions import expect_job
from pytest_synth_rl.client import RetryPolicy, RLJob
from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.errors import BackendError, JobTimeoutError, SynthUsageError
from pytest_synth_rl.fake import FakeSynthBackend
from pytest_synth_rl.taskapp import InProcessTaskApp

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "rl_minimal.toml"
STATUS_URL = "https://api.usesynth.ai/api/rl/jobs/job_rl_000001"


def _load_bench() -> ModuleType:
    name = "bench_faults_under_test"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / "bench_faults.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses resolve annotations through sys.modules
        spec.loader.exec_module(module)
    return module


def _job(fake: FakeSynthBackend, clock: VirtualClock) -> RLJob:
    return RLJob.from_config(
        CONFIG,
        backend_url=fake.base_url,
        api_key=fake.api_key,
        task_app_url="https://task-app.example.com",
        task_app_api_key="poll-budget-task-key",
        skip_health_check=True,
        clock=clock,
        retry=RetryPolicy(max_attempts=3, seed=0),
    )


@pytest.fixture
def fake() -> Iterator[FakeSynthBackend]:
    clock = VirtualClock()
    with FakeSynthBackend(clock=clock, rollouts=False) as backend:
        backend.scenario(duration=600.0, steps=2)
        yield backend
    backend.close()


def test_a_poll_whose_retries_ran_out_does_not_end_the_wait(fake: FakeSynthBackend) -> None:
    with _job(fake, fake.clock) as job:  # type: ignore[arg-type]
        job.submit()
        # Two whole polls (3 attempts each) fail, then the third poll's second attempt gets through.
        fake.fault("status", status=503, fail_next=7)
        result = job.poll_until_complete(timeout=7200.0, interval=10.0)
    assert result.status == "succeeded"
    assert [j.id for j in fake.jobs] == ["job_rl_000001"]
    assert [r.fault is not None for r in fake.calls("status")][:8] == [True] * 7 + [False]


def test_consecutive_failed_polls_spend_the_failure_budget(fake: FakeSynthBackend) -> None:
    with _job(fake, fake.clock) as job:  # type: ignore[arg-type]
        job.submit()
        fake.fault("status", status=503)
        with pytest.raises(BackendError) as caught:
            job.poll_until_complete(timeout=7200.0, interval=10.0, max_failed_polls=2)
    error = caught.value
    assert str(error).splitlines()[0] == (
        "polling RL job job_rl_000001 failed: 2 consecutive poll(s) failed after their retries "
        "(failure budget max_failed_polls=2); last: reading the status of job 'job_rl_000001' "
        "failed: HTTP 503 after 3 attempts; retry limit RetryPolicy.max_attempts=3 reached"
    )
    assert len(error.attempts) == 6
    assert [a.status_code for a in error.attempts] == [503] * 6
    assert "attempts (6):" in str(error)
    assert "raise poll_until_complete(max_failed_polls=...)" in str(error)
    assert len(fake.calls("status")) == 6


def test_a_successful_poll_resets_the_run_of_failures(fake: FakeSynthBackend) -> None:
    with _job(fake, fake.clock) as job:  # type: ignore[arg-type]
        job.submit()
        # fail a poll (3 calls), answer one, fail a poll again: never 2 in a row.
        fake.fault("status", status=503, pattern="1110111")
        result = job.poll_until_complete(timeout=7200.0, interval=10.0, max_failed_polls=2)
    assert result.status == "succeeded"


def test_a_wait_that_keeps_failing_ends_on_its_timeout_with_the_failures_named(
    fake: FakeSynthBackend,
) -> None:
    with _job(fake, fake.clock) as job:  # type: ignore[arg-type]
        job.submit()
        fake.fault("status", status=503, pattern="000111111111")  # polls 1-3 answer, then all fail
        with pytest.raises(JobTimeoutError) as caught:
            job.poll_until_complete(timeout=40.0, interval=10.0, max_failed_polls=100)
    error = caught.value
    # Equal answers in a row keep their first and latest poll, the latest counting the rest.
    assert [(record.elapsed, record.polls) for record in error.history] == [(0.0, 1), (20.0, 2)]
    assert "did not finish within 40s" in str(error)
    assert (
        "3 polls every 10s; statuses: running x3 (0-20s); 2 poll(s) failed after their retries, "
        "the last one in a row: reading the status of job 'job_rl_000001' failed: HTTP 503 after 3 attempts"
    ) in str(error)


def test_a_non_transient_poll_failure_ends_the_wait_at_once(fake: FakeSynthBackend) -> None:
    with _job(fake, fake.clock) as job:  # type: ignore[arg-type]
        job.submit()
        fake.fault("status", status=404)
        with pytest.raises(BackendError) as caught:
            job.poll_until_complete(timeout=7200.0, interval=10.0)
    assert caught.value.status_code == 404
    assert len(fake.calls("status")) == 1


def test_the_failure_budget_must_be_a_positive_integer(fake: FakeSynthBackend) -> None:
    with _job(fake, fake.clock) as job:  # type: ignore[arg-type]
        job.submit()
        with pytest.raises(
            SynthUsageError, match=r"poll_until_complete.max_failed_polls: must be an integer >= 1, got 0"
        ):
            job.poll_until_complete(max_failed_polls=0)


def test_expect_job_timeout_shows_the_polls_it_made(fake: FakeSynthBackend) -> None:
    fake.scenario(duration=10_000.0, steps=2)
    with _job(fake, fake.clock) as job:  # type: ignore[arg-type]
        job.submit()
        with pytest.raises(AssertionError) as caught:
            expect_job(job, interval=10.0).to_succeed(within=30.0)
    message = str(caught.value)
    expected = "expected job job_rl_000001 to finish within 30.0s, but it was still 'running' after 4 polls"
    assert message.startswith(expected + "\n")
    assert "\n  statuses: running x4 (0s-30.0s)\n" in message
    assert "(no polls)" not in message


def test_twenty_seeded_lifecycles_complete_at_30_percent_faults_with_one_job_each() -> None:
    bench = _load_bench()
    with InProcessTaskApp(bench.load_example_app(), api_key=bench.TASK_KEY, export_api_key=False) as app:
        tally = bench.run_rate(app, 0.3, seeds=20, steps=1)
    failures = [(o.seed, o.error) for o in tally.outcomes if not o.completed]
    assert failures == []
    assert [o.jobs for o in tally.outcomes] == [1] * 20
