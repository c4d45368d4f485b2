"""Real rollouts: the fake calls live task apps over loopback, and broken ones fail the job."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from test_fake_support import TASK_KEY, no_real_sleep, poll_to_end, rl_payload, submit, url_building_app

from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.errors import SynthUsageError
from pytest_synth_rl.fake import FakeSynthBackend, extract_reward
from pytest_synth_rl.fake.model.inference import tool_call
from pytest_synth_rl.taskapp import InProcessTaskApp


@pytest.fixture
def backend() -> Iterator[FakeSynthBackend]:
    with FakeSynthBackend(clock=VirtualClock(), task_app_api_key=TASK_KEY) as fake:
        yield fake
    fake.close()


# -- the happy path against the example app ------------------------------------------------
def test_two_hour_job_with_real_rollouts_has_a_rising_curve_and_waits_for_nothing(
    backend: FakeSynthBackend,
    client: httpx.Client,
    example_task_app: InProcessTaskApp,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend.scenario(duration=7200.0, steps=10)
    job_id = submit(client, backend, rl_payload(example_task_app.url))
    with no_real_sleep(monkeypatch) as slept:
        body, polls = poll_to_end(client, backend, job_id, interval=10.0)
    assert slept == []
    assert body["status"] == "succeeded", body.get("error")
    assert polls == 721
    job = backend.job(job_id)
    assert job.uses_rollouts
    train = [r for r in job.rollouts if r.mode == "rl"]
    evals = [r for r in job.rollouts if r.mode == "eval"]
    assert len(train) == 10 * 4  # episodes_per_batch = 4, capped by max_rollouts_per_step = 4
    assert len(evals) == 4
    # rewards are the task app's grades, averaged per step
    for step in range(1, 11):
        graded = [r.reward for r in train if r.step == step]
        assert job.rewards[step - 1] == pytest.approx(sum(graded) / 4)  # type: ignore[arg-type]
    assert set(job.rewards) <= {0.0, 0.25, 0.5, 0.75, 1.0}
    assert sum(job.rewards[-3:]) > sum(job.rewards[:3])  # the stub model improves as training goes
    assert body["final_reward"] == pytest.approx(sum(r.reward for r in evals) / 4)  # type: ignore[misc]
    steps = [e["data"] for e in job.events if e["type"] == "rl.train.step"]
    assert [s["reward"] for s in steps] == job.rewards


def test_rollout_requests_carry_both_ids_env_policy_and_mode(
    backend: FakeSynthBackend, client: httpx.Client, example_task_app: InProcessTaskApp
) -> None:
    backend.scenario(immediate=True, steps=2)
    job_id = submit(client, backend, rl_payload(example_task_app.url))
    job = backend.job(job_id)
    assert job.status == "succeeded"
    first = job.rollouts[0]
    request = first.request
    assert request["run_id"] != request["trace_correlation_id"]
    assert job_id in request["run_id"]
    assert request["env"] == {"env_name": "arithmetic", "seed": 0, "config": {}}
    assert request["policy"]["policy_name"] == "arithmetic-solver"
    assert request["policy"]["config"]["model"] == "Qwen/Qwen3-0.6B"
    assert request["policy"]["config"]["inference_url"].startswith("http://127.0.0.1:")
    assert request["mode"] == "rl"
    assert first.url == f"{example_task_app.url}/rollout"
    assert first.response["trace_correlation_id"] == request["trace_correlation_id"]
    assert first.response["run_id"] == request["run_id"]
    assert [r.seed for r in job.rollouts if r.step == 2 and r.mode == "rl"] == [4, 5, 6, 7]
    # the task app really asked the stub model, once per rollout
    assert len(backend.inference.requests) == len(job.rollouts)


def test_wrong_task_app_key_fails_the_job_with_the_apps_answer(
    client: httpx.Client, example_task_app: InProcessTaskApp
) -> None:
    with FakeSynthBackend(clock=VirtualClock(), task_app_api_key="not-the-key-0123456789") as fake:
        fake.scenario(immediate=True)
        job = fake.job(submit(client, fake, rl_payload(example_task_app.url)))
        assert job.status == "failed"
        assert job.error is not None
        assert "HTTP 400" in job.error
        assert "unauthorised" in job.error
        assert "not-the-key-0123456789" not in job.error
    fake.close()


def test_task_app_key_defaults_to_environment(
    client: httpx.Client, example_task_app: InProcessTaskApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVIRONMENT_API_KEY", TASK_KEY)
    with FakeSynthBackend(clock=VirtualClock()) as fake:
        fake.scenario(immediate=True, steps=1)
        assert fake.job(submit(client, fake, rl_payload(example_task_app.url))).status == "succeeded"
    fake.close()


def test_custom_policy_and_canned_replies_drive_the_rewards(
    client: httpx.Client, example_task_app: InProcessTaskApp
) -> None:
    def always_wrong(request: dict[str, Any]) -> dict[str, Any]:
        return {"role": "assistant", "tool_calls": [tool_call("submit_answer", {"answer": -99999})]}

    with FakeSynthBackend(clock=VirtualClock(), task_app_api_key=TASK_KEY, policy=always_wrong) as fake:
        fake.scenario(immediate=True, steps=2)
        job = fake.job(submit(client, fake, rl_payload(example_task_app.url)))
        assert job.rewards == [0.0, 0.0]
        assert job.final_reward == 0.0
    fake.close()
    with FakeSynthBackend(clock=VirtualClock(), task_app_api_key=TASK_KEY, replies=["no idea"]) as fake:
        fake.scenario(immediate=True, steps=1)
        job = fake.job(submit(client, fake, rl_payload(example_task_app.url)))
        assert job.status == "succeeded"
        assert job.rewards == [0.0]
    fake.close()


def test_rollouts_can_be_turned_off_or_forced(
    client: httpx.Client, example_task_app: InProcessTaskApp, backend: FakeSynthBackend
) -> None:
    with FakeSynthBackend(clock=VirtualClock(), rollouts=False) as fake:
        fake.scenario(immediate=True, steps=2)
        job = fake.job(submit(client, fake, rl_payload(example_task_app.url)))
        assert not job.uses_rollouts
        assert job.rollouts == []
        assert job.status == "succeeded"
    fake.close()
    # A real backend would refuse such a payload (422); with validation off, forcing rollouts
    # without a task app URL fails the job and says why.
    with FakeSynthBackend(clock=VirtualClock(), validate=False) as fake:
        fake.scenario(immediate=True, steps=2, reward_curve="rollouts")
        forced = fake.job(submit(client, fake, rl_payload("placeholder")))
        assert forced.status == "failed"
        assert forced.error is not None
        assert "data.endpoint_base_url is 'placeholder'" in forced.error
    fake.close()
    backend.scenario(immediate=True, steps=2, reward_curve="rollouts")
    live = backend.job(submit(client, backend, rl_payload(example_task_app.url)))
    assert live.status == "succeeded"
    assert len(live.rollouts) == 2 * 4 + 4


def test_an_unscripted_rollout_job_runs_its_configs_steps_and_a_scripted_one_its_own(
    backend: FakeSynthBackend, client: httpx.Client, example_task_app: InProcessTaskApp
) -> None:
    training: dict[str, Any] = {
        **rl_payload()["data"]["config"]["training"],
        "num_epochs": 2,
        "iterations_per_epoch": 3,
    }
    unscripted = backend.job(submit(client, backend, rl_payload(example_task_app.url, training=training)))
    poll_to_end(client, backend, unscripted.id, interval=10.0)
    assert unscripted.status == "succeeded", unscripted.error
    assert unscripted.scenario.steps == 6  # num_epochs * iterations_per_epoch
    assert sorted({r.step for r in unscripted.rollouts if r.mode == "rl"}) == [1, 2, 3, 4, 5, 6]
    # More steps than the default's 10 are capped at 10.
    long_run = {**training, "num_epochs": 50}
    capped = backend.job(submit(client, backend, rl_payload(example_task_app.url, training=long_run)))
    assert capped.scenario.steps == 10
    # A scenario someone set keeps its own steps, even the default count of 10 ...
    backend.scenario(outcome="succeeded")
    scripted = backend.job(submit(client, backend, rl_payload(example_task_app.url, training=training)))
    assert scripted.scenario.steps == 10
    # ... and fake.scenario() with no arguments is the plain default again.
    backend.scenario()
    reset = backend.job(submit(client, backend, rl_payload(example_task_app.url, training=training)))
    assert reset.scenario.steps == 6
    # Scripted rewards (no rollouts) keep the scenario's steps.
    offline = backend.job(submit(client, backend, rl_payload(training=training)))
    assert not offline.uses_rollouts
    assert offline.scenario.steps == 10


# -- broken task apps ------------------------------------------------
def _broken_app(kind: str, release: threading.Event) -> FastAPI:
    app = FastAPI()
    app.state.run_ids = []  # of every rollout it was sent

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"healthy": True}

    @app.post("/rollout", response_model=None)
    async def rollout(request: Request) -> Response | dict[str, Any]:
        body = await request.json()
        trace = body["trace_correlation_id"]
        app.state.run_ids.append(body["run_id"])
        if kind == "http_500":
            return JSONResponse({"detail": "kaboom in the env"}, status_code=500)
        if kind == "wrong_echo":
            return {"trace_correlation_id": "trace-someone-else", "metrics": {"outcome_reward": 1.0}}
        if kind == "non_numeric":
            return {"trace_correlation_id": trace, "metrics": {"outcome_reward": "high"}}
        if kind == "not_json":
            return PlainTextResponse("all good")
        if kind == "no_metrics":
            return {"trace_correlation_id": trace}
        if kind == "no_echo":
            return {"metrics": {"outcome_reward": 1.0}}
        if kind == "hang":
            await asyncio.get_running_loop().run_in_executor(None, release.wait)
            return {"trace_correlation_id": trace, "metrics": {"outcome_reward": 1.0}}
        if kind == "legacy_040":
            return {
                "run_id": body["run_id"],
                "trajectories": [],
                "metrics": {"episode_returns": [1.0, 0.0], "mean_return": 0.5, "num_steps": 1},
            }
        if kind == "legacy_044":
            return {"run_id": body["run_id"], "metrics": {"reward_mean": 0.25, "num_steps": 1}}
        if kind == "huge_reward":
            return {"trace_correlation_id": trace, "reward_info": {"outcome_reward": 1e308}}
        raise AssertionError(kind)

    return app


@pytest.fixture
def broken() -> Iterator[Any]:
    release = threading.Event()
    servers: list[InProcessTaskApp] = []

    def serve(kind: str) -> str:
        server = InProcessTaskApp(_broken_app(kind, release), api_key=TASK_KEY, export_api_key=False)
        server.start()
        servers.append(server)
        return server.url

    yield serve
    release.set()
    for server in servers:
        server.stop()


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("http_500", 'HTTP 500: {"detail":"kaboom in the env"}'),
        ("wrong_echo", "id echo mismatch: response trace_correlation_id='trace-someone-else'"),
        ("non_numeric", "metrics.outcome_reward is 'high' (str); expected a finite number"),
        ("not_json", "response is not JSON: all good"),
        ("no_metrics", "response has neither 'reward_info' nor 'metrics'"),
        ("no_echo", "response echoes neither run_id nor trace_correlation_id"),
    ],
)
def test_a_broken_task_app_fails_the_job_with_a_clear_message(
    backend: FakeSynthBackend, client: httpx.Client, broken: Any, kind: str, reason: str
) -> None:
    url = broken(kind)
    backend.scenario(steps=3, duration=300.0)
    job_id = submit(client, backend, rl_payload(url))
    body, _ = poll_to_end(client, backend, job_id)
    assert body["status"] == "failed"
    error = body["error"]
    assert reason in error
    assert f"POST {url}/rollout" in error
    assert "at step 1" in error
    assert "seed 0" in error
    assert f"run_id {job_id}-rl-s1-0" in error
    assert "hint:" in error
    failed = backend.job(job_id).events[-1]
    assert failed["type"] == "rl.train.failed"
    assert failed["data"]["url"] == f"{url}/rollout"
    assert failed["data"]["seed"] == 0
    assert failed["data"]["step"] == 1
    assert backend.job(job_id).rollouts[0].error == error  # seed order: the first failed seed


def test_a_rollout_reward_past_the_bound_fails_the_job_naming_the_field(
    backend: FakeSynthBackend, client: httpx.Client, broken: Any
) -> None:
    # Before, four rollouts of 1e308 averaged to inf and the job's status could not be sent.
    url = broken("huge_reward")
    backend.scenario(steps=2, duration=300.0)
    job_id = submit(client, backend, rl_payload(url))
    body, _ = poll_to_end(client, backend, job_id)
    run_id = f"{job_id}-rl-s1-0"
    assert (body["status"], body["final_reward"]) == ("failed", None)
    assert body["error"] == (
        f"task app rollout failed at step 1 (rl; seed 0, run_id {run_id}, trace_correlation_id "
        f"trace_{run_id}): POST {url}/rollout: reward_info.outcome_reward is 1e+308 (float); expected "
        "a finite number from -1e+12 to 1e+12 (hint: set reward_info.outcome_reward to a float from "
        "-1e+12 to 1e+12)"
    )


def test_unreachable_task_app_fails_the_job(backend: FakeSynthBackend, client: httpx.Client) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    backend.scenario(immediate=True)
    job = backend.job(submit(client, backend, rl_payload(url)))
    assert job.status == "failed"
    assert job.error is not None
    assert "task app unreachable" in job.error
    assert f"{url}/rollout" in job.error


def test_task_app_timeout_fails_the_job(client: httpx.Client, broken: Any) -> None:
    url = broken("hang")
    with FakeSynthBackend(clock=VirtualClock(), task_app_api_key=TASK_KEY, rollout_timeout=0.2) as fake:
        fake.scenario(immediate=True)
        job = fake.job(submit(client, fake, rl_payload(url)))
        assert job.status == "failed"
        assert job.error is not None
        assert "timed out after 0.2s" in job.error
    fake.close()


@pytest.mark.parametrize(("kind", "reward"), [("legacy_040", 0.5), ("legacy_044", 0.25)])
def test_older_rollout_schema_eras_are_understood(
    backend: FakeSynthBackend, client: httpx.Client, broken: Any, kind: str, reward: float
) -> None:
    backend.scenario(immediate=True, steps=2)
    job = backend.job(submit(client, backend, rl_payload(broken(kind))))
    assert job.status == "succeeded", job.error
    assert job.rewards == [reward, reward]


@pytest.mark.parametrize(
    ("metrics", "expected"),
    [
        ({"outcome_reward": 0.75, "reward_mean": 0.0}, 0.75),
        ({"mean_return": 2, "episode_returns": [1.0]}, 2.0),
        ({"reward_mean": 0.5}, 0.5),
        ({"episode_returns": [1, 0, 0, 1]}, 0.5),
        ({"outcome_score": 0.9}, 0.9),
        ({"outcome_reward": None, "outcome_score": 0.1}, 0.1),
    ],
)
def test_extract_reward_reads_every_era(metrics: dict[str, Any], expected: float) -> None:
    assert extract_reward(metrics) == expected


@pytest.mark.parametrize(
    ("metrics", "message"),
    [
        ({"outcome_reward": True}, "expected a finite number"),
        ({"outcome_reward": float("nan")}, "expected a finite number"),
        ({"episode_returns": []}, "non-empty list"),
        ({"episode_returns": [1, "x"]}, "only numbers"),
        ({"details": {}}, "has no reward"),
        ([1.0], "must be an object"),
    ],
)
def test_extract_reward_explains_what_is_wrong(metrics: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        extract_reward(metrics)


@pytest.mark.parametrize(
    ("metrics", "message"),
    [
        (
            {"outcome_reward": 1e308},
            "metrics.outcome_reward is 1e+308 (float); expected a finite number from -1e+12 to 1e+12",
        ),
        (
            {"reward_mean": -(10**400)},
            f"metrics.reward_mean is -{'1' + '0' * 78} (int); expected a finite number from -1e+12 to 1e+12",
        ),
        (
            {"episode_returns": [1e308, 1e308]},
            "metrics.episode_returns must hold only numbers, each a finite number from -1e+12 to 1e+12, "
            "got [1e+308, 1e+308]",
        ),
    ],
)
def test_extract_reward_refuses_rewards_past_the_bound(metrics: dict[str, Any], message: str) -> None:
    # Before, 1e308 was taken (a mean of two is inf), and a huge int raised OverflowError.
    with pytest.raises(ValueError, match="from -1e\\+12 to 1e\\+12") as raised:
        extract_reward(metrics)
    assert str(raised.value) == message
    assert extract_reward({"outcome_reward": -1e12, "episode_returns": [1e308]}) == -1e12  # inclusive


def test_stub_model_stops_with_the_fake(client: httpx.Client, example_task_app: InProcessTaskApp) -> None:
    fake = FakeSynthBackend(clock=VirtualClock(), task_app_api_key=TASK_KEY)
    with fake:
        fake.scenario(immediate=True, steps=1)
        assert fake.job(submit(client, fake, rl_payload(example_task_app.url))).status == "succeeded"
        url = fake.inference.base_url
        assert url is not None
        assert httpx.get(url.removesuffix("/v1") + "/health").status_code == 200
    assert fake.inference.base_url is None
    with pytest.raises(httpx.ConnectError):
        httpx.get(url.removesuffix("/v1") + "/health")
    fake.close()


def test_a_fake_reused_across_tests_keeps_its_stub_and_repeats_its_rewards(
    client: httpx.Client, example_task_app: InProcessTaskApp
) -> None:
    # The plugin's pattern: one fake per session, reset onto each test's clock.
    fake = FakeSynthBackend(task_app_api_key=TASK_KEY)
    runs: list[list[float]] = []
    stub_urls: list[str | None] = []
    for _ in range(2):
        clock = VirtualClock()
        fake.reset(clock=clock)
        assert fake.clock is clock
        fake.start()
        fake.scenario(duration=100.0, steps=3)
        job_id = submit(client, fake, rl_payload(example_task_app.url))
        clock.advance(100.0)  # the fake follows the new clock without being polled
        assert fake.store.get(job_id).status == "succeeded"  # the raw record, not synced by reading
        runs.append(fake.job(job_id).rewards)
        stub_urls.append(fake.inference.base_url)
    assert runs[0] == runs[1]  # the same job after a reset gets the same answers from the model
    assert stub_urls[0] is not None
    assert stub_urls[0] == stub_urls[1]  # one stub server for both
    fake.close()
    assert fake.inference.base_url is None


def test_a_task_app_that_drops_the_inference_urls_path_fails_its_job_naming_the_fix(
    backend: FakeSynthBackend, client: httpx.Client
) -> None:
    # Before, the stand-in model answered calls that had lost the rollout's '/trace_...' segment
    # (the correlation id the trainer attributes model calls by): the job passed offline.
    from urllib.parse import urljoin

    app = url_building_app(lambda url: urljoin(url, "/v1/chat/completions"), TASK_KEY)
    with InProcessTaskApp(app, api_key=TASK_KEY) as task_app:
        backend.scenario(steps=2, duration=300.0)
        job_id = submit(client, backend, rl_payload(task_app.url))
        body, _ = poll_to_end(client, backend, job_id)
    run_id = f"{job_id}-rl-s1-0"
    assert body["status"] == "failed"
    assert body["error"] == (
        f"task app rollout failed at step 1 (rl; seed 0, run_id {run_id}, trace_correlation_id "
        f"trace_{run_id}): POST {task_app.url}/rollout: the stand-in model refused model calls that "
        "carried no correlation id (POST /v1/chat/completions: not under policy.config.inference_url); "
        f'the task app\'s rollout then failed: HTTP 502: {{"detail":"model said 400"}} (hint: build the '
        "model URL from policy.config.inference_url keeping its path and query, e.g. "
        "f\"{inference_url}/chat/completions\"; urljoin(inference_url, '/v1/chat/completions') drops the "
        "segment the trainer attributes model calls by)"
    )
    refused = backend.inference.calls(None)  # each rollout of the step tried once
    assert {(call.path, call.status, call.response["error"]["code"]) for call in refused} == {
        ("/v1/chat/completions", 400, "missing_correlation_id")
    }


def test_the_stand_in_model_lists_its_model_under_any_path(backend: FakeSynthBackend) -> None:
    # Before, only /v1/models at the root answered: an OpenAI client based at the handed-out URL got 404.
    with backend.inference.serve() as base:
        root = base.removesuffix("/v1")
        for path in ("/v1/models", "/models", "/trace_x/v1/models", "/trace_x/models"):
            answer = httpx.get(root + path)
            assert (path, answer.status_code, answer.json()["data"][0]["id"]) == (path, 200, "stub-model")


def test_a_timed_out_rollout_is_not_run_again_alone_and_says_how_to_give_it_longer(
    client: httpx.Client,
) -> None:
    # Before, the failed rollout was retried alone to diagnose concurrency: a hanging app cost
    # twice the timeout, and the hint named only FakeSynthBackend(rollout_timeout=...).
    release = threading.Event()
    app = _broken_app("hang", release)
    try:
        with InProcessTaskApp(app, api_key=TASK_KEY, export_api_key=False) as task_app:
            with FakeSynthBackend(clock=VirtualClock(), task_app_api_key=TASK_KEY) as fake:
                fake.use_rollout_timeout(0.2)
                fake.scenario(immediate=True)
                job = fake.job(submit(client, fake, rl_payload(task_app.url)))
                status, error = job.status, job.error  # the job runs when it is looked at
            fake.close()
            release.set()
    finally:
        release.set()
    assert status == "failed"
    assert error is not None
    assert "timed out after 0.2s" in error
    assert error.endswith(
        "(hint: make the rollout faster, or give it longer: @pytest.mark.synth_rl(rollout_timeout=...) in a "
        "test, FakeSynthBackend(rollout_timeout=...) or fake.use_rollout_timeout(...) outside one)"
    )
    assert app.state.run_ids
    assert not [run_id for run_id in app.state.run_ids if run_id.endswith("-alone")]


@pytest.mark.parametrize("seconds", [0, -1, float("nan"), float("inf"), True, "30"])
def test_a_rollout_timeout_that_is_not_a_positive_number_is_refused(seconds: object) -> None:
    with pytest.raises(SynthUsageError) as info:
        FakeSynthBackend().use_rollout_timeout(seconds)  # type: ignore[arg-type]
    assert str(info.value).startswith(
        f"invalid arguments: FakeSynthBackend.use_rollout_timeout: must be a finite number of seconds > 0, "
        f"got {seconds!r}"
    )
    with pytest.raises(SynthUsageError, match=r"FakeSynthBackend\.rollout_timeout: must be a finite number"):
        FakeSynthBackend(rollout_timeout=seconds)  # type: ignore[arg-type]
