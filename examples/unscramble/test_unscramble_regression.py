"""Regression suite for the unscramble task app: what the team runs on every PR and nightly.

Offline, rewards come from real ``/rollout`` calls answered by the team's policy (conftest.py),
so "the reward improves" is a statement about this app's grading. Online
(``--synth-backend=URL``) the same tests run against a real backend.
"""

from __future__ import annotations

import pytest

from pytest_synth_rl import (
    ExpectJob,
    FakeSynthBackend,
    ScriptedPolicy,
    SynthJobFactory,
    TaskAppHandle,
    check_task_app_contract,
)

pytestmark = [
    pytest.mark.synth_task_app("unscramble_task_app.py"),
    pytest.mark.synth_rl(config="unscramble.toml"),
]

TWO_HOURS = 2 * 3600


def test_task_app_honours_the_trainer_contract(synth_task_app: TaskAppHandle) -> None:
    check_task_app_contract(synth_task_app.url, synth_task_app.api_key).raise_for_problems()


def test_training_succeeds_and_the_reward_improves(
    synth_rl_job: SynthJobFactory, synth_expect: ExpectJob
) -> None:
    job = synth_rl_job()
    job.submit()
    (
        synth_expect(job)
        .to_succeed(within=TWO_HOURS)
        .to_improve_reward(by=0.2, window=2)
        .to_have_final_reward(at_least=0.6)
    )


@pytest.mark.synth_offline
def test_rewards_come_from_the_apps_grading(
    synth_rl_job: SynthJobFactory, synth_fake: FakeSynthBackend
) -> None:
    job = synth_rl_job()
    job.submit()
    job.poll_until_complete(timeout=TWO_HOURS)
    rollouts = synth_fake.job(job.job_id).rollouts
    assert rollouts
    for rollout in rollouts:
        calls = synth_fake.inference.calls(rollout.request["trace_correlation_id"])
        assert len(calls) == 1  # one model call per rollout, routed by its correlation id
        answer = calls[0].response["choices"][0]["message"]["content"]
        assert rollout.response["details"]["answer"] == answer
        assert rollout.reward == (1.0 if rollout.response["details"]["correct"] else 0.0)


@pytest.mark.synth_offline
@pytest.mark.synth_rl(policy=ScriptedPolicy("no idea"))
def test_a_model_that_never_answers_right_earns_nothing(
    synth_rl_job: SynthJobFactory, synth_expect: ExpectJob
) -> None:
    job = synth_rl_job()
    job.submit()
    synth_expect(job).to_succeed(within=TWO_HOURS).to_have_final_reward(at_most=0.0)
