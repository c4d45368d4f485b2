"""The stand-in model runs policies on worker threads: as many calls in flight as rollouts, and a
policy still blocked after its test ended delays no later test, nor is its late answer recorded.

Policies here block on threading events that the tests release; every wait has a bounded guard
that only a hang (or a missing fix) reaches. Task apps are served on loopback.
"""

from __future__ import annotations

import shutil
import threading
from typing import Any

import pytest
from test_fake_support import EXAMPLES, TASK_KEY

from pytest_synth_rl.client import RLJob
from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.fake import FakeSynthBackend
from pytest_synth_rl.fake.model import ArithmeticPolicy, ChatRequest
from pytest_synth_rl.taskapp import InProcessTaskApp

#: Seconds any wait may take: only a hang gets near it.
GUARD = 30.0


class Gathering:
    """Answers right, but holds its first *count* calls until all of them are in flight at once."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.gathered = threading.Barrier(count, timeout=GUARD)
        self.lock = threading.Lock()
        self.calls = self.in_flight = self.most_in_flight = 0
        self.answer = ArithmeticPolicy()

    def __call__(self, request: ChatRequest) -> Any:
        with self.lock:
            self.calls += 1
            first = self.calls <= self.count
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if first:
                self.gathered.wait()
            return self.answer(request)
        finally:
            with self.lock:
                self.in_flight -= 1


def test_as_many_model_calls_are_in_flight_as_rollouts(example_task_app: InProcessTaskApp) -> None:
    policy = Gathering(4)  # arithmetic.toml runs 4 rollouts at once
    with FakeSynthBackend(clock=VirtualClock(), task_app_api_key=TASK_KEY, policy=policy) as fake:
        fake.scenario(steps=1)
        job = RLJob.from_config(
            EXAMPLES / "arithmetic.toml",
            backend_url=fake.base_url,
            api_key=fake.api_key,
            task_app_url=example_task_app.url,
            task_app_api_key=example_task_app.api_key,
            clock=fake.clock,
            skip_health_check=True,
        )
        with job:
            job.submit()
            result = job.poll_until_complete(timeout=600, interval=10)
    fake.close()
    assert result.status == "succeeded", result.error
    assert policy.most_in_flight == 4
    assert not policy.gathered.broken


SUITE = """
import threading

import pytest
from pytest_synth_rl import RLJob

pytestmark = pytest.mark.synth_task_app("arithmetic_task_app.py")
GUARD = 30.0
entered, release = threading.Event(), threading.Event()
blocked = []


def stuck(request):
    blocked.append(request.rollout.correlation_id)
    entered.set()
    if not release.wait(GUARD):
        release.set()  # the guard: later calls do not wait again
    return "42"


def run_job(synth_rl_job):
    job = synth_rl_job("arithmetic.toml")
    job.submit()
    return job.poll_until_complete(timeout=7200, interval=10)


@pytest.mark.synth_rl(policy=stuck, rollout_timeout=0.5)
def test_a_policy_that_blocks_fails_its_own_job(synth_rl_job, synth_task_app):
    result = run_job(synth_rl_job)
    assert result.status == "failed"
    assert "timed out" in result.error
    assert entered.is_set() and not release.is_set()


@pytest.mark.synth_rl(rollout_timeout=10)
def test_b_runs_while_the_policy_of_test_a_is_still_blocked(synth_rl_job, synth_task_app, synth_fake):
    try:
        assert not release.is_set()  # test A's model calls are still in its policy
        result = run_job(synth_rl_job)
        assert result.status == "succeeded", result.error
        assert not release.is_set()
    finally:
        release.set()
    for thread in threading.enumerate():
        if thread.name == "synth-policy":
            thread.join(GUARD)  # test A's calls end, and would record their answers now
    assert blocked
    assert all(synth_fake.inference.calls(cid) == [] for cid in blocked)
"""


def test_a_blocked_policy_delays_no_later_test_and_its_late_answer_is_dropped(
    pytester: pytest.Pytester,
) -> None:
    for name in ("arithmetic_task_app.py", "arithmetic.toml"):
        shutil.copy(EXAMPLES / name, pytester.path / name)
    pytester.makepyfile(test_two=SUITE)
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
