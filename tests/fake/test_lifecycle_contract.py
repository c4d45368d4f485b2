"""The fake job lifecycle, seen from outside: timing modes, stamps, rewards, losses, evaluations,
real rollouts and their failures, and the final reward of each outcome. The clock starts late so
"since submit" is not "since 0"."""

from __future__ import annotations

import math
import socket
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from hang_guard import finishes
from test_fake_support import API, TASK_KEY, auth, rl_payload, submit

from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.fake import FakeJob, FakeSynthBackend
from pytest_synth_rl.taskapp import InProcessTaskApp

START = 10_000.0


@pytest.fixture
def fake() -> Iterator[FakeSynthBackend]:
    with FakeSynthBackend(clock=VirtualClock(START), task_app_api_key=TASK_KEY) as backend:
        yield backend


@pytest.fixture
def lenient() -> Iterator[FakeSynthBackend]:
    """A fake that takes configs the SDK would refuse, to see what the lifecycle makes of them."""
    with FakeSynthBackend(clock=VirtualClock(START), task_app_api_key=TASK_KEY, validate=False) as backend:
        yield backend


def clock_of(fake: FakeSynthBackend) -> VirtualClock:
    clock = fake.clock
    assert isinstance(clock, VirtualClock)
    return clock


def offsets(job: FakeJob) -> list[tuple[str, float]]:
    """Each event's type and time since the job was created."""
    events = job.events
    created = datetime.fromisoformat(events[0]["created_at"])
    return [(e["type"], (datetime.fromisoformat(e["created_at"]) - created).total_seconds()) for e in events]


def status(client: httpx.Client, fake: FakeSynthBackend, job_id: str) -> dict[str, Any]:
    body = client.get(f"{API}/rl/jobs/{job_id}", headers=auth(fake)).json()
    assert isinstance(body, dict)
    return body


def data_of(job: FakeJob, type_: str) -> list[dict[str, Any]]:
    return [e["data"] for e in job.events if e["type"] == type_]


# -- timing modes --------------------------------------------------------------------------
def test_duration_mode_stamps_scheduled_times_even_when_observed_late(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    fake.scenario(duration=300.0, steps=2, queue_time=30.0)
    job_id = submit(client, fake)
    clock_of(fake).advance(129.0)
    assert status(client, fake, job_id)["status"] == "running"
    assert fake.job(job_id).rewards == []
    clock_of(fake).advance(1.0)
    assert len(fake.job(job_id).rewards) == 1
    clock_of(fake).advance(5_000.0)
    job = fake.job(job_id)
    assert job.status == "succeeded"
    assert offsets(job) == [
        ("rl.job.created", 0.0),
        ("rl.train.started", 30.0),
        ("rl.train.step", 130.0),
        ("rl.train.step", 230.0),
        ("rl.eval.summary", 330.0),
        ("rl.train.completed", 330.0),
    ]


def test_immediate_mode_runs_everything_at_the_first_observation_and_stamps_that_time(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    fake.scenario(immediate=True, steps=2)
    job_id = submit(client, fake)
    clock_of(fake).advance(77.0)
    assert status(client, fake, job_id)["status"] == "succeeded"
    assert [t for _, t in offsets(fake.job(job_id))] == [0.0] + [77.0] * 5


def test_a_job_observed_right_at_submission_is_queued_in_duration_mode(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    fake.scenario(duration=300.0, steps=2, queue_time=30.0)
    job_id = submit(client, fake)
    assert status(client, fake, job_id)["status"] == "queued"
    clock_of(fake).advance(29.0)
    assert status(client, fake, job_id)["status"] == "queued"


def test_polls_mode_moves_one_slot_per_poll_whatever_the_clock(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    fake.scenario(polls=4, steps=2)
    job_id = submit(client, fake)
    clock_of(fake).advance(10_000.0)
    seen = [status(client, fake, job_id)["status"] for _ in range(4)]
    assert seen == ["running", "running", "running", "succeeded"]


def test_a_stage_is_due_up_to_a_nanosecond_early_and_no_earlier(client: httpx.Client) -> None:
    # The clock starts at 0 so the sums below are exact: 30.0 - 1e-9 + 1e-9 == 30.0 in floats.
    with FakeSynthBackend(clock=VirtualClock(), task_app_api_key=TASK_KEY) as fake:
        fake.scenario(duration=300.0, steps=2, queue_time=30.0)
        early, edge = submit(client, fake), submit(client, fake)
        clock_of(fake).advance(30.0 - 2e-9)
        assert status(client, fake, early)["status"] == "queued"
        clock_of(fake).advance(1e-9)
        assert clock_of(fake).now() == 30.0 - 1e-9
        assert status(client, fake, edge)["status"] == "running"
        assert status(client, fake, early)["status"] == "running"


def test_reading_the_event_stream_moves_the_virtual_clock_to_each_stage_and_no_further(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    fake.scenario(duration=300.0, steps=2, queue_time=30.0)
    job_id = submit(client, fake)
    url = f"{API}/rl/jobs/{job_id}/events/stream"
    response = finishes(lambda: client.get(url, headers=auth(fake)))
    assert clock_of(fake).elapsed == 330.0
    assert [line for line in response.text.splitlines() if line.startswith("event: ")] == [
        "event: rl.job.created",
        "event: rl.train.started",
        "event: rl.train.step",
        "event: rl.train.step",
        "event: rl.eval.summary",
        "event: rl.train.completed",
    ]
    assert offsets(fake.job(job_id))[-1] == ("rl.train.completed", 330.0)


# -- rewards, losses and the final reward ----------------------------------------------------
def test_each_step_reports_its_reward_and_a_loss_that_falls_with_reward_and_steps(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    fake.scenario(immediate=True, steps=4, reward_curve=[0.2, 0.5, 1.0, 0.995])
    job = fake.job(submit(client, fake))
    expected = [
        round(max(0.01, 1.0 - r) * 2.0 / math.sqrt(step + 1), 6)
        for step, r in enumerate([0.2, 0.5, 1.0, 0.995], start=1)
    ]
    assert expected == [1.131371, 0.57735, 0.01, 0.008944]
    steps = data_of(job, "rl.train.step")
    assert [s["loss"] for s in steps] == expected
    assert [s["reward"] for s in steps] == [0.2, 0.5, 1.0, 0.995]
    assert [(s["step"], s["total_steps"]) for s in steps] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert [e["message"] for e in job.events if e["type"] == "rl.train.step"] == [
        "step 1/4: reward=0.2000 loss=1.1314",
        "step 2/4: reward=0.5000 loss=0.5774",
        "step 3/4: reward=1.0000 loss=0.0100",
        "step 4/4: reward=0.9950 loss=0.0089",
    ]
    points = [
        (p["name"], p["step"], p["value"]) for p in job.metrics if p["name"] in ("train.loss", "train.reward")
    ]
    assert [p for p in points if p[0] == "train.loss"] == [
        ("train.loss", i + 1, v) for i, v in enumerate(expected)
    ]
    assert [p[2] for p in points if p[0] == "train.reward"] == [0.2, 0.5, 1.0, 0.995]
    # The status body reports the latest step's reward and loss.
    assert status(client, fake, job.id)["metrics"] == {"reward": 0.995, "loss": 0.008944}


def test_rewards_are_rounded_to_six_places(fake: FakeSynthBackend, client: httpx.Client) -> None:
    fake.scenario(immediate=True, steps=1, reward_curve=[1 / 3])
    assert fake.job(submit(client, fake)).rewards == [0.333333]


def test_a_succeeded_job_reports_the_final_evaluation_as_its_final_reward(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    fake.scenario(immediate=True, steps=3, reward_curve=[0.1, 0.2, 0.3])
    job = fake.job(submit(client, fake))
    assert job.final_reward == 0.3
    assert data_of(job, "rl.eval.summary") == [
        {"step": 3, "mean_reward": 0.3, "seeds": [0, 1, 2, 3], "rewards": [0.3]}
    ]
    [completed] = [e for e in job.events if e["type"] == "rl.train.completed"]
    assert completed["message"] == "Training completed: final_reward=0.3"
    assert completed["data"] == {"final_reward": 0.3, "model_id": completed["data"]["model_id"], "steps": 3}
    assert completed["data"]["model_id"]


def test_a_job_started_reports_its_plan(fake: FakeSynthBackend, client: httpx.Client) -> None:
    fake.scenario(immediate=True, steps=3)
    job = fake.job(submit(client, fake))
    [started] = [e for e in job.events if e["type"] == "rl.train.started"]
    assert started["message"] == "Training started: 3 steps on Qwen/Qwen3-0.6B"
    assert started["data"] == {"total_steps": 3, "model": "Qwen/Qwen3-0.6B", "rollouts": False}


def test_a_cancelled_job_keeps_its_last_reward(fake: FakeSynthBackend, client: httpx.Client) -> None:
    fake.scenario(immediate=True, steps=3, reward_curve=[0.1, 0.2, 0.3], outcome="cancelled")
    job = fake.job(submit(client, fake))
    assert (job.status, job.final_reward) == ("cancelled", 0.3)
    [cancelled] = [e for e in job.events if e["type"] == "rl.job.cancelled"]
    assert cancelled["message"] == "Job cancelled: cancelled by the scenario"
    assert cancelled["data"] == {"step": 3}
    assert cancelled["level"] == "warning"
    assert status(client, fake, job.id)["final_reward"] == 0.3


def test_a_job_cancelled_before_any_step_has_no_final_reward(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    fake.scenario(duration=300.0, steps=3)
    job = fake.job(submit(client, fake)).cancel()
    assert (job.status, job.final_reward) == ("cancelled", None)
    assert job.events[-1]["message"] == "Job cancelled: cancelled by the test"
    assert job.cancel().events == job.events  # a finished job stays as it ended


def test_a_scripted_failure_keeps_the_last_reward_and_names_the_failing_step(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    fake.scenario(immediate=True, steps=3, reward_curve=[0.1, 0.2, 0.3], outcome="failed", fail_at_step=3)
    job = fake.job(submit(client, fake))
    assert (job.status, job.rewards, job.final_reward) == ("failed", [0.1, 0.2], 0.2)
    assert job.error == "training failed (scripted by the FakeSynthBackend scenario)"
    [failed] = [e for e in job.events if e["type"] == "rl.train.failed"]
    assert failed["data"] == {"error": job.error, "step": 3}
    assert failed["level"] == "error"


def test_an_error_outcome_ends_in_the_error_status_with_the_last_reward(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    fake.scenario(
        immediate=True,
        steps=4,
        reward_curve=[0.1, 0.2, 0.3, 0.4],
        outcome="error",
        fail_at_step=4,
        error="node preempted",
    )
    job = fake.job(submit(client, fake))
    assert (job.status, job.rewards, job.final_reward) == ("error", [0.1, 0.2, 0.3], 0.3)
    assert job.error == "node preempted"
    [failed] = [e for e in job.events if e["type"] == "rl.train.failed"]
    assert (failed["message"], failed["level"]) == ("node preempted", "error")
    assert failed["data"] == {"error": "node preempted", "step": 4}
    body = status(client, fake, job.id)
    assert (body["status"], body["final_reward"], body["error"]) == ("error", 0.3, "node preempted")


def test_a_failure_before_any_step_has_no_final_reward(fake: FakeSynthBackend, client: httpx.Client) -> None:
    fake.scenario(immediate=True, steps=3, outcome="failed", fail_at_step=1, error="OOM at start")
    job = fake.job(submit(client, fake))
    assert (job.status, job.final_reward, job.error) == ("failed", None, "OOM at start")
    assert job.fail("again").error == "OOM at start"  # a finished job stays as it ended


def test_a_reward_curve_returning_a_non_number_fails_the_job_with_the_reason(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    fake.scenario(immediate=True, steps=2, reward_curve=lambda step: "high")
    job = fake.job(submit(client, fake))
    assert job.error == "step stage raised TypeError: reward_curve(1) returned 'high'; expected a float"


@pytest.mark.parametrize(
    ("value", "shown"), [(1e308, "1e+308"), (float("nan"), "nan"), (-(10**13), "-10000000000000")]
)
def test_a_reward_curve_returning_a_reward_past_the_bound_fails_the_job_with_the_reason(
    fake: FakeSynthBackend, client: httpx.Client, value: float, shown: str
) -> None:
    # Before, 1e308 ran: the job's mean reward overflowed to inf and its status could not be sent.
    fake.scenario(immediate=True, steps=2, reward_curve=lambda step: value)
    job = fake.job(submit(client, fake))
    assert job.error == (
        f"step stage raised ValueError: reward_curve(1) returned {shown}; expected a finite number "
        "from -1e+12 to 1e+12"
    )
    body = status(client, fake, job.id)
    assert (body["status"], body["final_reward"], body["results"]["metrics"]["mean_reward"]) == (
        "failed",
        None,
        None,
    )


# -- evaluations ------------------------------------------------------------------------------
def test_every_n_iters_one_evaluates_after_every_step(fake: FakeSynthBackend, client: httpx.Client) -> None:
    fake.scenario(immediate=True, steps=3, reward_curve=[0.25, 0.5, 0.75])
    payload = rl_payload(evaluation={"instances": 3, "every_n_iters": 1, "seeds": [5, 6, 7]})
    job = fake.job(submit(client, fake, payload))
    summaries = data_of(job, "rl.eval.summary")
    assert [(s["step"], s["mean_reward"], s["seeds"]) for s in summaries] == [
        (1, 0.25, [5, 6, 7]),
        (2, 0.5, [5, 6, 7]),
        (3, 0.75, [5, 6, 7]),
    ]
    assert next(e["message"] for e in job.events if e["type"] == "rl.eval.summary") == (
        "eval at step 1: mean_reward=0.2500 over 3 seeds"
    )
    assert [c["step"] for c in job.status_payload()["checkpoints"]] == [1, 2, 3]
    assert job.status_payload()["checkpoints"][0]["path"] == f"fake://checkpoints/{job.id}/step-00001"
    assert [p["value"] for p in job.metrics if p["name"] == "eval.reward"] == [0.25, 0.5, 0.75]


@pytest.mark.parametrize("every", [0, -1, True, "2", None])
def test_an_unusable_every_n_iters_evaluates_only_at_the_end(
    lenient: FakeSynthBackend, client: httpx.Client, every: object
) -> None:
    lenient.scenario(immediate=True, steps=3)
    evaluation = {"instances": 2, "every_n_iters": every, "seeds": [0]}
    job = lenient.job(submit(client, lenient, rl_payload(evaluation=evaluation)))
    assert [s["step"] for s in data_of(job, "rl.eval.summary")] == [3]


def test_the_scenarios_eval_every_wins_over_the_config(fake: FakeSynthBackend, client: httpx.Client) -> None:
    fake.scenario(immediate=True, steps=4, eval_every=4)
    evaluation = {"instances": 2, "every_n_iters": 1, "seeds": [0]}
    job = fake.job(submit(client, fake, rl_payload(evaluation=evaluation)))
    assert [s["step"] for s in data_of(job, "rl.eval.summary")] == [4]


@pytest.mark.parametrize(
    ("evaluation", "seeds"),
    [
        ({"seeds": [9, 8, 7, 6, 5, 4]}, [9, 8, 7, 6]),  # capped at max_rollouts_per_step
        ({"seeds": []}, [0, 1, 2, 3]),
        ({"seeds": [1, "2"]}, [0, 1, 2, 3]),
        ({"seeds": "1,2"}, [0, 1, 2, 3]),
    ],
)
def test_evaluation_seeds_come_from_the_config_or_the_batch(
    lenient: FakeSynthBackend, client: httpx.Client, evaluation: dict[str, Any], seeds: list[int]
) -> None:
    lenient.scenario(immediate=True, steps=1)
    job = lenient.job(
        submit(client, lenient, rl_payload(evaluation={"instances": 2, "every_n_iters": 1, **evaluation}))
    )
    assert data_of(job, "rl.eval.summary")[0]["seeds"] == seeds


# -- forced advances -------------------------------------------------------------------------
def test_advance_to_stops_at_the_target_and_stamps_the_current_time(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    fake.scenario(duration=300.0, steps=3, queue_time=30.0)
    job = fake.job(submit(client, fake))
    clock_of(fake).advance(5.0)
    job.advance_to("running")
    assert (job.status, job.rewards) == ("running", [])
    job.advance_to(2)
    assert (job.status, len(job.rewards)) == ("running", 2)
    assert [t for _, t in offsets(job)] == [0.0, 5.0, 5.0, 5.0]
    job.advance_to(1)  # already past: nothing happens
    assert len(job.rewards) == 2
    job.advance_to("end")
    assert job.status == "succeeded"
    assert job.advance_to("end").status == "succeeded"


# -- real rollouts -----------------------------------------------------------------------------
@pytest.mark.parametrize(("episodes", "per_step"), [(1, 1), (0, 1), (True, 1), (3, 3), (10, 4)])
def test_train_batches_take_episodes_per_batch_seeds_capped_by_the_backend(
    fake: FakeSynthBackend,
    client: httpx.Client,
    example_task_app: InProcessTaskApp,
    episodes: object,
    per_step: int,
) -> None:
    fake.scenario(immediate=True, steps=2)
    payload = rl_payload(example_task_app.url)
    payload["data"]["config"]["rollout"]["episodes_per_batch"] = episodes
    job = fake.job(submit(client, fake, payload))
    assert job.status == "succeeded", job.error
    train = [(r.step, r.seed) for r in job.rollouts if r.mode == "rl"]
    assert train == [(1, i) for i in range(per_step)] + [(2, per_step + i) for i in range(per_step)]
    evals = [r for r in job.rollouts if r.mode == "eval"]
    assert [r.seed for r in evals] == list(range(per_step))
    graded = [r.reward for r in job.rollouts if r.mode == "rl" and r.step == 2]
    assert job.rewards[1] == round(sum(graded) / per_step, 6)  # type: ignore[arg-type]
    assert job.final_reward == round(sum(r.reward for r in evals) / per_step, 6)  # type: ignore[misc]


@pytest.mark.parametrize("episodes", ["3", 2.5, None, True, 0, -2])
def test_an_unusable_episodes_per_batch_runs_one_rollout_per_step(
    lenient: FakeSynthBackend, client: httpx.Client, example_task_app: InProcessTaskApp, episodes: object
) -> None:
    lenient.scenario(immediate=True, steps=2)
    payload = rl_payload(example_task_app.url)
    rollout = payload["data"]["config"]["rollout"]
    if episodes is None:
        del rollout["episodes_per_batch"]
    else:
        rollout["episodes_per_batch"] = episodes
    job = lenient.job(submit(client, lenient, payload))
    assert job.status == "succeeded", job.error
    assert [(r.mode, r.step, r.seed) for r in job.rollouts] == [("rl", 1, 0), ("rl", 2, 1), ("eval", 2, 0)]


def test_rollouts_need_an_http_task_app_url(client: httpx.Client) -> None:
    with FakeSynthBackend(clock=VirtualClock(START), validate=False) as fake:
        fake.scenario(immediate=True, steps=2, reward_curve="rollouts")
        job = fake.job(submit(client, fake, rl_payload("grpc://task-app.example.com")))
        assert job.status == "failed"
        assert job.error == (
            "cannot run rollouts: data.endpoint_base_url is 'grpc://task-app.example.com', "
            "not an http(s) URL "
            "(hint: pass task_app_url= to the job, or script rewards with fake.scenario(reward_curve=...))"
        )
        assert job.rewards == []


def _graded_app(fail_mode: str = "", fail_seed: int = -1) -> FastAPI:
    """A task app grading every rollout 1/3, except that it crashes on one seed in one mode."""
    app = FastAPI()

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"healthy": True}

    @app.post("/rollout", response_model=None)
    async def rollout(request: Request) -> Response | dict[str, Any]:
        body = await request.json()
        if body["mode"] == fail_mode and body["env"]["seed"] == fail_seed:
            return JSONResponse({"detail": f"env crashed on seed {fail_seed}"}, status_code=500)
        return {"trace_correlation_id": body["trace_correlation_id"], "metrics": {"outcome_reward": 1 / 3}}

    return app


def test_a_rollout_rewards_mean_is_rounded_to_six_places(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    with InProcessTaskApp(_graded_app(), api_key=TASK_KEY, export_api_key=False) as app:
        fake.scenario(immediate=True, steps=1)
        job = fake.job(submit(client, fake, rl_payload(app.url)))
        assert (job.status, job.rewards, job.final_reward) == ("succeeded", [0.333333], 0.333333)
        assert data_of(job, "rl.train.step")[0]["reward"] == 0.333333
        assert data_of(job, "rl.eval.summary") == [
            {"step": 1, "mean_reward": 0.333333, "seeds": [0, 1, 2, 3], "rewards": [0.333333] * 4}
        ]


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_http_and_https_task_app_urls_both_get_rollouts(
    fake: FakeSynthBackend, client: httpx.Client, scheme: str
) -> None:
    with socket.socket() as refusing:  # bound, never listening: every connection is refused
        refusing.bind(("127.0.0.1", 0))
        url = f"{scheme}://127.0.0.1:{refusing.getsockname()[1]}"
        fake.scenario(immediate=True, steps=2)
        job = fake.job(submit(client, fake, rl_payload(url)))
        run_id = f"{job.id}-rl-s1-0"
        assert job.status == "failed"
        assert job.error is not None
        assert job.error.startswith(
            f"task app rollout failed at step 1 (rl; seed 0, run_id {run_id}, "
            f"trace_correlation_id trace_{run_id}): POST {url}/rollout: task app unreachable: "
        )


# -- a failing rollout -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("mode", "seed", "steps", "run", "rewards"),
    [
        ("rl", 5, 3, "rl-s2-1", [0.333333]),  # training step 2 runs seeds 4..7
        ("eval", 2, 2, "eval-s2-2", [0.333333, 0.333333]),  # the final evaluation runs seeds 0..3
    ],
)
def test_a_failed_rollout_fails_the_job_with_its_evidence_and_keeps_the_last_reward(
    fake: FakeSynthBackend,
    client: httpx.Client,
    mode: str,
    seed: int,
    steps: int,
    run: str,
    rewards: list[float],
) -> None:
    with InProcessTaskApp(_graded_app(mode, seed), api_key=TASK_KEY, export_api_key=False) as app:
        fake.scenario(immediate=True, steps=steps)
        job = fake.job(submit(client, fake, rl_payload(app.url)))
        run_id = f"{job.id}-{run}"
        url = f"{app.url}/rollout"
        error = (
            f"task app rollout failed at step 2 ({mode}; seed {seed}, run_id {run_id}, "
            f"trace_correlation_id trace_{run_id}): POST {url}: "
            f'HTTP 500: {{"detail":"env crashed on seed {seed}"}} '
            "(hint: the task app's /rollout must answer 2xx with a RolloutResponse; see its server log)"
        )
        assert (job.status, job.error, job.rewards, job.final_reward) == ("failed", error, rewards, 0.333333)
        [failed] = [e for e in job.events if e["type"] == "rl.train.failed"]
        assert (failed["message"], failed["level"]) == (error, "error")
        assert failed["data"] == {
            "error": error,
            "step": 2,
            "seed": seed,
            "run_id": run_id,
            "trace_correlation_id": f"trace_{run_id}",
            "url": url,
            "mode": mode,
        }
        assert job.event_types[-1] == "rl.train.failed"
