"""Synth-shaped inference routing and concurrent rollouts, against task apps served on loopback."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from test_fake_support import TASK_KEY, poll_to_end, rl_payload, submit

from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.fake import FakeSynthBackend
from pytest_synth_rl.fake.model import ChatRequest, LearningPolicy, Progress, RolloutIdentity, linear
from pytest_synth_rl.taskapp import InProcessTaskApp

ROLLOUT = {"env_name": "arithmetic", "policy_name": "p", "max_turns": 1, "episodes_per_batch": 4}


def _echo_app(suffix: str, shared: dict[str, Any] | None = None) -> FastAPI:
    """A task app that asks the model ``{inference_url}{suffix}`` and rewards the answer "right".

    With *shared*, it keeps the rollout's id in that dict across an awaited environment step:
    unsafe when two rollouts overlap (the second overwrites the first's id).
    """
    app = FastAPI()

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"healthy": True}

    @app.post("/rollout")
    async def rollout(request: Request) -> dict[str, Any]:
        body = await request.json()
        state = shared if shared is not None else {}
        state["trace"] = body["trace_correlation_id"]
        url = body["policy"]["config"]["inference_url"] + suffix
        async with httpx.AsyncClient(trust_env=False) as http:
            reply = await http.post(url, json={"messages": [{"role": "user", "content": "go"}]})
        reply.raise_for_status()
        await asyncio.sleep(0.01)  # an environment step
        content = reply.json()["choices"][0]["message"]["content"]
        return {
            "trace_correlation_id": state["trace"],
            "metrics": {"outcome_reward": float(content == "right")},
        }

    return app


def _right_policy(request: ChatRequest) -> str:
    return "right"


@pytest.fixture
def fake() -> Iterator[FakeSynthBackend]:
    with FakeSynthBackend(clock=VirtualClock(), task_app_api_key=TASK_KEY, policy=_right_policy) as backend:
        backend.scenario(steps=2, polls=4)
        yield backend
    backend.close()


def _serve(app: FastAPI) -> InProcessTaskApp:
    return InProcessTaskApp(app, api_key=TASK_KEY, export_api_key=False)


@pytest.mark.parametrize("suffix", ["/v1/chat/completions", "/chat/completions"])
def test_task_apps_building_either_url_complete_rollouts(
    fake: FakeSynthBackend, client: httpx.Client, suffix: str
) -> None:
    with _serve(_echo_app(suffix)) as app:
        job_id = submit(client, fake, rl_payload(app.url, rollout={**ROLLOUT, "max_concurrent_rollouts": 2}))
        body, _ = poll_to_end(client, fake, job_id)
    assert body["status"] == "succeeded", body.get("error")
    job = fake.job(job_id)
    assert [r.reward for r in job.rollouts] == [1.0] * len(job.rollouts)
    first = job.rollouts[0]
    cid = first.request["trace_correlation_id"]
    assert cid == f"trace_{job_id}-rl-s1-0"
    root = fake.inference.base_url.removesuffix("/v1")  # type: ignore[union-attr]
    assert first.request["policy"]["config"]["inference_url"] == f"{root}/{cid}"
    calls = fake.inference.calls(cid)
    assert [c.path for c in calls] == [f"/{cid}{suffix}"]
    assert calls[0].rollout == RolloutIdentity(
        correlation_id=cid, seed=0, env_name="arithmetic", mode="rl", run_id=f"{job_id}-rl-s1-0"
    )
    assert calls[0].progress == Progress(step=1, steps=2)


@pytest.mark.parametrize(
    ("path", "cid"),
    [
        ("/v1/chat/completions", None),
        ("/chat/completions", None),
        ("/trace_abc/chat/completions", "trace_abc"),
        ("/v1/trace_abc/v1/chat/completions", "trace_abc"),
        ("/cid_7/chat/completions", "cid_7"),
        ("/eval_9/v1/chat/completions", "eval_9"),
        ("/v1/chat/completions?cid=trace_q", "trace_q"),
        ("/chat/completions?trace_correlation_id=trace_r", "trace_r"),
        ("/chat/completions?trace=trace_s", "trace_s"),
        # §10.2: any path under the handed-out base that ends in /chat/completions
        ("/trace_abc/openai/v1/chat/completions", "trace_abc"),
        ("/trace_abc/api/chat/completions", "trace_abc"),
        ("/v2/chat/completions", None),
        ("/proxy/cid_8/deployments/m/chat/completions?api-version=1", "cid_8"),
    ],
)
def test_every_synth_chat_path_is_served_and_recorded_under_its_correlation_id(
    path: str, cid: str | None
) -> None:
    from pytest_synth_rl.fake.model.inference import StubInference

    stub = StubInference(replies=["ok"])
    with stub.serve() as base:
        root = base.removesuffix("/v1")
        response = httpx.post(root + path, json={"messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == 200, response.text
    assert [c.path for c in stub.calls(cid)] == [path.split("?")[0]]


def test_unknown_paths_get_a_404_listing_what_is_served() -> None:
    from pytest_synth_rl.fake.model.inference import StubInference

    with StubInference().serve() as base:
        root = base.removesuffix("/v1")
        response = httpx.post(root + "/v1/embeddings", json={"input": "x"})
    assert response.status_code == 404
    assert response.json()["error"]["message"] == (
        "no route POST /v1/embeddings; the stub serves POST <any path>/chat/completions "
        "(correlation id from a /trace_<id>, /cid_<id> or /eval_<id> segment, or ?cid=<id>), "
        "GET <any path>/models, GET /health"
    )


def test_a_concurrency_unsafe_task_app_fails_offline_and_passes_one_at_a_time(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    with _serve(_echo_app("/chat/completions", shared={})) as app:
        concurrent = submit(
            client, fake, rl_payload(app.url, rollout={**ROLLOUT, "max_concurrent_rollouts": 4})
        )
        failed, _ = poll_to_end(client, fake, concurrent)
        at_one = rl_payload(app.url, rollout={**ROLLOUT, "max_concurrent_rollouts": 1})
        serial = submit(client, fake, at_one)
        passed, _ = poll_to_end(client, fake, serial)
    assert failed["status"] == "failed"
    assert "id echo mismatch" in failed["error"]
    assert (
        "with 4 rollouts in flight at once it failed, but the same rollout passes when run alone: "
        "the task app is not safe under concurrency"
    ) in failed["error"]
    assert "set rollout.max_concurrent_rollouts = 1 to confirm" in failed["error"]
    assert passed["status"] == "succeeded", passed.get("error")


def _overlap_raising_app() -> FastAPI:
    """A task app that raises (its framework answers 500, then uvicorn hangs up) whenever two of
    its rollouts overlap."""
    app = FastAPI()
    in_flight = [0]

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"healthy": True}

    @app.post("/rollout")
    async def rollout(request: Request) -> dict[str, Any]:
        body = await request.json()
        in_flight[0] += 1
        try:
            await asyncio.sleep(0.01)  # an environment step
            if in_flight[0] > 1:
                raise RuntimeError("two rollouts at once")
            return {"trace_correlation_id": body["trace_correlation_id"], "metrics": {"outcome_reward": 1.0}}
        finally:
            in_flight[0] -= 1

    return app


def test_the_concurrency_hint_survives_connections_the_app_left_open_earlier(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    # A serial job first leaves kept-alive connections, as a contract check does; the raising
    # rollouts then make the server hang up on connections the lone retry may pick.
    with _serve(_overlap_raising_app()) as app:
        serial = submit(client, fake, rl_payload(app.url, rollout={**ROLLOUT, "max_concurrent_rollouts": 1}))
        passed, _ = poll_to_end(client, fake, serial)
        concurrent = submit(
            client, fake, rl_payload(app.url, rollout={**ROLLOUT, "max_concurrent_rollouts": 4})
        )
        failed, _ = poll_to_end(client, fake, concurrent)
    assert passed["status"] == "succeeded", passed.get("error")
    assert "RuntimeError: two rollouts at once" in failed["error"]
    assert "the task app is not safe under concurrency" in failed["error"]


def test_the_lone_retry_is_a_rollout_of_its_own_that_the_model_starts_at_turn_zero(
    client: httpx.Client,
) -> None:
    # Before: the retry reused the failed rollout's ids, so the stand-in model saw it as that
    # rollout's second call (turn 1), and a policy answering by turn sent it down another branch.
    def first_turn_only(request: ChatRequest) -> str:
        if request.turn:
            raise AssertionError(f"one call per rollout, got turn {request.turn}")
        return "right"

    with (
        FakeSynthBackend(clock=VirtualClock(), task_app_api_key=TASK_KEY, policy=first_turn_only) as fake,
        _serve(_echo_app("/chat/completions", shared={})) as app,
    ):
        fake.scenario(steps=2, polls=4)
        job_id = submit(client, fake, rl_payload(app.url, rollout={**ROLLOUT, "max_concurrent_rollouts": 4}))
        failed, _ = poll_to_end(client, fake, job_id)
        (failed_rollout,) = [r for r in fake.job(job_id).rollouts if "not safe" in (r.error or "")]
        failed_cid = failed_rollout.request["trace_correlation_id"]
        retried = fake.inference.calls(f"{failed_cid}-alone")
    assert "the task app is not safe under concurrency" in failed["error"]
    assert [call.status for call in retried] == [200]
    assert retried[0].rollout.run_id == f"{failed_rollout.run_id}-alone"
    assert [call.status for call in fake.inference.calls(failed_cid)] == [200]


def test_a_policy_that_raises_is_named_as_the_cause_not_the_task_app_nor_concurrency(
    client: httpx.Client,
) -> None:
    def solver(request: ChatRequest) -> str:
        if request.rollout.seed == 2:
            return {"known": "right"}["unknown prompt"]
        return "right"

    with (
        FakeSynthBackend(clock=VirtualClock(), task_app_api_key=TASK_KEY, policy=solver) as fake,
        _serve(_echo_app("/chat/completions")) as app,
    ):
        fake.scenario(steps=2, polls=4)
        job_id = submit(client, fake, rl_payload(app.url, rollout={**ROLLOUT, "max_concurrent_rollouts": 4}))
        failed, _ = poll_to_end(client, fake, job_id)
        cid = f"trace_{job_id}-rl-s1-2"
        (call,) = fake.inference.calls(cid)
    error = failed["error"]
    assert failed["status"] == "failed"
    line = solver.__code__.co_firstlineno + 2
    assert (
        "the stand-in model's policy raised KeyError: 'unknown prompt' "
        f"(test_fake_routing_concurrency.py:{line} in solver), on model call 1 of the rollout; "
        "the task app's rollout then failed: HTTP 500"
    ) in error
    assert "fix the policy (given with synth_rl(policy=...), the synth_policy fixture or " in error
    assert f"fake.inference.calls('{cid}')" in error
    assert "not safe under concurrency" not in error
    assert fake.inference.calls(f"{cid}-alone") == []  # no retry: the policy is the cause
    assert call.policy_error == (
        f"raised KeyError: 'unknown prompt' (test_fake_routing_concurrency.py:{line} in solver)"
    )
    assert call.policy_traceback is not None
    assert call.policy_traceback.startswith("Traceback (most recent call last):")
    assert 'return {"known": "right"}["unknown prompt"]' in call.policy_traceback
    assert call.policy_traceback.rstrip().endswith("KeyError: 'unknown prompt'")
    assert "inference.py" not in call.policy_traceback  # the stub's own frame is left out


def test_a_policy_returning_no_reply_is_named_too(client: httpx.Client) -> None:
    with (
        FakeSynthBackend(clock=VirtualClock(), task_app_api_key=TASK_KEY, policy=lambda request: 42) as fake,
        _serve(_echo_app("/chat/completions")) as app,
    ):
        fake.scenario(steps=2, polls=4)
        job_id = submit(client, fake, rl_payload(app.url, rollout={**ROLLOUT, "max_concurrent_rollouts": 1}))
        failed, _ = poll_to_end(client, fake, job_id)
    assert (
        "the stand-in model's policy returned int; expected a str, Reply, ToolCall, PolicyError or a "
        "message dict, on model call 1 of the rollout; the task app's rollout then failed: HTTP 500"
    ) in failed["error"]


def _graded_app() -> FastAPI:
    """Rewards 1.0 when the model's answer is "right"; the answer depends on the rollout only."""
    return _echo_app("/chat/completions")


def test_same_seeds_give_the_same_curve_at_any_concurrency(client: httpx.Client) -> None:
    def solve(request: ChatRequest) -> str:
        return "right"

    curves = []
    with _serve(_graded_app()) as app:
        for concurrency in (1, 4):
            policy = LearningPolicy(solve, curve=linear(0.2, 0.8), seed=5)
            with FakeSynthBackend(clock=VirtualClock(), task_app_api_key=TASK_KEY, policy=policy) as fake:
                fake.scenario(steps=4, polls=6)
                rollout = {**ROLLOUT, "episodes_per_batch": 4, "max_concurrent_rollouts": concurrency}
                job_id = submit(client, fake, rl_payload(app.url, rollout=copy.deepcopy(rollout)))
                body, _ = poll_to_end(client, fake, job_id)
                assert body["status"] == "succeeded", body.get("error")
                curves.append((fake.job(job_id).rewards, [r.reward for r in fake.job(job_id).rollouts]))
            fake.close()
    assert curves[0] == curves[1]
    assert len(set(curves[0][1])) == 2  # some right, some wrong: the comparison means something


def _crashing_app() -> FastAPI:
    """A task app whose rollout asks the model twice, then crashes in its own code."""
    app = FastAPI()

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"healthy": True}

    @app.post("/rollout")
    async def rollout(request: Request) -> dict[str, Any]:
        body = await request.json()
        url = body["policy"]["config"]["inference_url"] + "/chat/completions"
        async with httpx.AsyncClient(trust_env=False) as http:
            for _ in range(2):
                await http.post(url, json={"messages": [{"role": "user", "content": "go"}]})
        board: dict[str, int] = {}
        return {"reward": board["missing square"]}

    return app


def test_a_crashed_rollout_names_the_apps_line_and_its_model_calls_not_the_servers_frames(
    fake: FakeSynthBackend, client: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    # Before: "HTTP 500: Internal Server Error ... see its server log", and the log held some 55
    # lines of uvicorn, Starlette and FastAPI frames per failed rollout.
    line = _crashing_app.__code__.co_firstlineno + 16
    with _serve(_crashing_app()) as app:
        job_id = submit(client, fake, rl_payload(app.url, rollout={**ROLLOUT, "max_concurrent_rollouts": 1}))
        failed, _ = poll_to_end(client, fake, job_id)
    error = failed["error"]
    assert failed["status"] == "failed"
    assert (
        "HTTP 500: Internal Server Error; the task app raised KeyError: 'missing square' at "
        f"test_fake_routing_concurrency.py:{line} in rollout: "
        'return {"reward": board["missing square"]}; '
        "2 model call(s) made in this rollout before it failed"
    ) in error
    logged = caplog.text
    assert f'test_fake_routing_concurrency.py", line {line}, in rollout' in logged
    assert "KeyError: 'missing square'" in logged
    for server_frame in ("starlette", "uvicorn/protocols", "fastapi/routing.py"):
        assert server_frame not in logged
