"""The example regression suite: what a team would run on every PR (offline) and nightly (online).

It exercises the arithmetic task app (``arithmetic_task_app.py``) and its RL config
(``arithmetic.toml``) the way the hosted trainer would: the contract check, a training job that
must succeed with a rising reward, a shrunk config, a scripted failure and a cancel.

Offline (the default) the backend is the plugin's fake on a virtual clock, so "within 2 hours"
costs milliseconds and the reward curve comes from real ``/rollout`` calls to the task app.
Online (``--synth-backend=URL``) the same tests run against a real backend.
"""

from __future__ import annotations

import pytest

from pytest_synth_rl import ExpectJob, SynthJobFactory, TaskAppHandle, check_task_app_contract

pytestmark = [
    pytest.mark.synth_task_app("arithmetic_task_app.py"),
    pytest.mark.synth_rl(config="arithmetic.toml"),
]

TWO_HOURS = 2 * 3600


def test_task_app_honours_the_trainer_contract(synth_task_app: TaskAppHandle) -> None:
    report = check_task_app_contract(synth_task_app.url, synth_task_app.api_key)
    report.raise_for_problems()


def test_training_succeeds_and_the_reward_improves(
    synth_rl_job: SynthJobFactory, synth_expect: ExpectJob
) -> None:
    job = synth_rl_job()
    job.submit()
    (
        synth_expect(job)
        .to_succeed(within=TWO_HOURS)
        .to_emit_events(["rl.job.created", "rl.train.started", "rl.train.step", "rl.train.completed"])
        .to_improve_reward(by=0.2, window=2)
        .to_have_final_reward(at_least=0.6)
    )


def test_a_shrunk_config_still_trains(synth_rl_job: SynthJobFactory, synth_expect: ExpectJob) -> None:
    job = synth_rl_job(overrides={"training.batch_size": 2, "rollout.episodes_per_batch": 2})
    assert job.payload["data"]["config"]["training"]["batch_size"] == 2
    job.submit()
    synth_expect(job).to_succeed(within=TWO_HOURS)


@pytest.mark.synth_offline
@pytest.mark.synth_scenario(outcome="failed", fail_at_step=3, error="CUDA out of memory on rank 0")
def test_a_failed_run_reports_the_backend_error(
    synth_rl_job: SynthJobFactory, synth_expect: ExpectJob
) -> None:
    job = synth_rl_job()
    job.submit()
    synth_expect(job).to_fail(within=TWO_HOURS, error_contains="CUDA out of memory")


def test_a_running_job_can_be_cancelled(synth_rl_job: SynthJobFactory, synth_expect: ExpectJob) -> None:
    job = synth_rl_job()
    job.submit()
    synth_expect(job).to_reach_status("running", within=TWO_HOURS)
    job.cancel()
    synth_expect(job).to_be_cancelled(within=600)
