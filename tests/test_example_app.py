"""The arithmetic example task app, served for real and driven by the stub model."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from pytest_synth_rl.config import build_rl_payload
from pytest_synth_rl.fake.model.inference import SUBMIT_ANSWER_TOOL, ArithmeticPolicy, StubInference
from pytest_synth_rl.taskapp import InProcessTaskApp, task_app_auth_headers
from pytest_synth_rl.taskapp.loading import load_module_from_path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
EXAMPLE = EXAMPLES / "arithmetic_task_app.py"
KEY = "example-test-key-0123456789abcdef"


@pytest.fixture(scope="module")
def example() -> Any:
    return load_module_from_path(EXAMPLE)


@pytest.fixture(scope="module")
def task_app() -> Iterator[InProcessTaskApp]:
    # Loaded from the file the way users point at it; the key is pinned and exported.
    with InProcessTaskApp(task_app_path=EXAMPLE, api_key=KEY) as served:
        yield served


@pytest.fixture(scope="module")
def client(task_app: InProcessTaskApp) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=task_app.url, headers=task_app_auth_headers(KEY), timeout=10.0) as http:
        yield http


def rollout_body(inference_url: str, *, seed: int = 3, **overrides: Any) -> dict[str, Any]:
    token = uuid.uuid4().hex[:8]
    body: dict[str, Any] = {
        "run_id": f"run-{token}",
        "trace_correlation_id": f"trace-{token}",
        "env": {"env_name": "arithmetic", "seed": seed, "config": {}},
        "policy": {
            "policy_name": "arithmetic-solver",
            "config": {"model": "Qwen/Qwen3-0.6B", "inference_url": inference_url},
        },
    }
    body.update(overrides)
    return body


# -- the environment ----------------------------------------------------------------------------
def test_seed_determines_the_problem(example: Any) -> None:
    problems = [example.make_problem(seed) for seed in range(200)]
    assert [p.question for p in problems] == [example.make_problem(s).question for s in range(200)]
    assert {p.op for p in problems} == {"+", "-", "*"}
    assert len({p.question for p in problems}) > 150
    for p in problems:
        expected = {"+": p.left + p.right, "-": p.left - p.right, "*": p.left * p.right}[p.op]
        assert p.answer == expected


def test_task_info_without_seed_is_the_taskset(client: httpx.Client) -> None:
    body = client.get("/task_info").json()
    assert body["taskset"]["env_name"] == "arithmetic"


def test_task_info_for_one_and_many_seeds(client: httpx.Client, example: Any) -> None:
    one = client.get("/task_info", params={"seed": 5}).json()
    assert one["task"]["id"] == "arithmetic"
    assert one["task"]["name"]
    assert one["task_metadata"]["question"] == example.make_problem(5).question
    many = client.get("/task_info", params=[("seed", 1), ("seed", 2), ("seeds", "3,4")]).json()
    assert [item["task_metadata"]["seed"] for item in many] == [1, 2, 3, 4]
    assert client.get("/task_info", params={"seeds": "x"}).status_code == 422


def test_root_and_info(task_app: InProcessTaskApp, client: httpx.Client) -> None:
    root = httpx.get(task_app.url + "/")  # no key needed
    assert root.json() == {"status": "ok", "service": "arithmetic"}
    assert httpx.head(task_app.url + "/").status_code == 200
    info = client.get("/info").json()
    assert set(info) >= {"service", "dataset", "inference", "limits"}


# -- authentication (contract §4.2) -------------------------------------------------------------
@pytest.mark.parametrize(
    "headers",
    [{"X-API-Key": KEY}, {"X-API-Keys": f"other-key-xxxxxxxx,{KEY}"}, {"Authorization": f"Bearer {KEY}"}],
    ids=["x-api-key", "x-api-keys", "bearer"],
)
def test_each_key_header_alone_is_accepted(task_app: InProcessTaskApp, headers: dict[str, str]) -> None:
    assert httpx.get(task_app.url + "/health", headers=headers).status_code == 200


@pytest.mark.parametrize("headers", [{}, {"X-API-Key": "wrong-key-0123456789"}], ids=["missing", "wrong"])
def test_missing_or_wrong_key_is_a_400_with_the_documented_body(
    task_app: InProcessTaskApp, headers: dict[str, str]
) -> None:
    response = httpx.get(task_app.url + "/task_info", headers=headers)
    assert response.status_code == 400
    error = response.json()["detail"]["error"]
    assert error["code"] == "unauthorised"
    assert error["allowed_count"] == 1
    assert set(error) >= {"message", "allowed_first15", "got_first15", "got_lens"}
    assert error["got_lens"] == [len(v) for v in headers.values()]
    assert KEY not in response.text
    assert KEY[:10] not in response.text


def test_no_key_configured_is_a_503(example: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ENVIRONMENT_API_KEY", "DEV_ENVIRONMENT_API_KEY", "ENVIRONMENT_API_KEY_ALIASES"):
        monkeypatch.delenv(name, raising=False)
    with InProcessTaskApp(factory=example.create_app, export_api_key=False, health_path=None) as served:
        response = httpx.get(served.url + "/health", headers=task_app_auth_headers(served.api_key))
    assert response.status_code == 503
    assert response.json()["detail"]["error"]["code"] == "missing_environment_api_key"


def test_aliases_are_accepted(example: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVIRONMENT_API_KEY_ALIASES", "alias-key-one-111111, alias-key-two-222222")
    with InProcessTaskApp(factory=example.create_app) as served:
        ok = httpx.get(served.url + "/health", headers={"X-API-Key": "alias-key-two-222222"})
    assert ok.status_code == 200


# -- rollouts -----------------------------------------------------------------------------------
def test_correct_answer_scores_one(client: httpx.Client, example: Any) -> None:
    stub = StubInference()
    with stub.serve() as inference_url:
        body = rollout_body(inference_url, seed=7)
        response = client.post("/rollout", json=body)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["trace_correlation_id"] == body["trace_correlation_id"]
    assert result["run_id"] == body["run_id"]
    metrics = result["metrics"]
    assert metrics["outcome_reward"] == 1.0
    assert metrics["event_rewards"] == [1.0]
    assert metrics["details"]["expected"] == example.make_problem(7).answer
    assert metrics["details"]["answered_by"] == "tool_call"
    assert isinstance(result["trace"]["event_history"], list)
    assert result["trace"]["event_history"]
    assert result["trace"]["metadata"]["seed"] == 7
    # The model was really asked, with the tool, about this seed's question.
    (sent,) = stub.requests
    assert sent["model"] == "Qwen/Qwen3-0.6B"
    assert sent["tools"][0]["function"]["name"] == SUBMIT_ANSWER_TOOL
    assert example.make_problem(7).question in sent["messages"][-1]["content"]


def test_wrong_answer_scores_zero(client: httpx.Client, example: Any) -> None:
    with StubInference(policy=ArithmeticPolicy(accuracy=0.0)).serve() as inference_url:
        result = client.post("/rollout", json=rollout_body(inference_url, seed=11)).json()
    assert result["metrics"]["outcome_reward"] == 0.0
    details = result["metrics"]["details"]
    assert details["answer"] != details["expected"] == example.make_problem(11).answer
    assert details["correct"] is False


@pytest.mark.parametrize(
    ("reply", "reward", "how"),
    [
        ("The answer is 42", 0.0, "text"),
        ({"tool_calls": [{"name": "submit_answer", "arguments": "{oops"}]}, 0.0, "malformed tool call"),
        ("I don't know", 0.0, "no answer"),
    ],
)
def test_other_reply_shapes_are_graded(client: httpx.Client, reply: Any, reward: float, how: str) -> None:
    with StubInference(replies=[reply]).serve() as inference_url:
        result = client.post("/rollout", json=rollout_body(inference_url, seed=2)).json()
    assert result["metrics"]["outcome_reward"] == reward
    assert result["metrics"]["details"]["answered_by"] == how


def test_text_answer_that_is_right_scores_one(client: httpx.Client, example: Any) -> None:
    answer = example.make_problem(4).answer
    with StubInference(replies=[f"It is {answer}"]).serve() as inference_url:
        result = client.post("/rollout", json=rollout_body(inference_url, seed=4)).json()
    assert result["metrics"]["outcome_reward"] == 1.0


def test_only_run_id_is_echoed(client: httpx.Client) -> None:
    with StubInference().serve() as inference_url:
        body = rollout_body(inference_url)
        del body["trace_correlation_id"]
        result = client.post("/rollout", json=body).json()
    assert result["run_id"] == body["run_id"]
    assert result["trace_correlation_id"] == body["run_id"]


def test_rollout_without_any_id_is_a_422(client: httpx.Client) -> None:
    body = rollout_body("http://127.0.0.1:9/v1")
    del body["run_id"], body["trace_correlation_id"]
    response = client.post("/rollout", json=body)
    assert response.status_code == 422
    assert "trace_correlation_id" in response.text


def test_inference_url_with_query_string_is_kept(client: httpx.Client) -> None:
    stub = StubInference()
    with stub.serve() as inference_url:
        result = client.post("/rollout", json=rollout_body(inference_url + "?cid=trace-abc")).json()
    assert result["metrics"]["outcome_reward"] == 1.0
    assert len(stub.requests) == 1


def test_unreachable_model_is_a_clear_502(client: httpx.Client) -> None:
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    response = client.post("/rollout", json=rollout_body(dead))
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["code"] == "inference_unreachable"
    assert error["inference_url"].endswith("/v1/chat/completions")


def test_model_error_is_a_502_carrying_the_model_status(client: httpx.Client) -> None:
    def policy(request: dict[str, Any]) -> str:
        raise RuntimeError("CUDA out of memory")

    with StubInference(policy=policy).serve() as inference_url:
        response = client.post("/rollout", json=rollout_body(inference_url))
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["code"] == "inference_error"
    assert "HTTP 500" in error["message"]
    assert "CUDA out of memory" in error["body"]


def test_missing_inference_url_and_wrong_env(client: httpx.Client) -> None:
    body = rollout_body("x")
    body["policy"]["config"].pop("inference_url")
    missing = client.post("/rollout", json=body)
    assert missing.status_code == 422
    assert missing.json()["error"]["code"] == "missing_inference_url"
    wrong_env = client.post("/rollout", json=rollout_body("http://127.0.0.1:9/v1", env={"env_name": "chess"}))
    assert wrong_env.status_code == 400
    assert wrong_env.json()["error"]["code"] == "unknown_env"


def test_rollout_requires_the_key(task_app: InProcessTaskApp) -> None:
    response = httpx.post(task_app.url + "/rollout", json=rollout_body("http://127.0.0.1:9/v1"))
    assert response.status_code == 400


def test_module_exposes_app_and_create_app(example: Any) -> None:
    from fastapi import FastAPI

    assert isinstance(example.app, FastAPI)
    assert isinstance(example.create_app(), FastAPI)


# -- the example RL config ----------------------------------------------------------------------
def test_example_toml_builds_a_payload_for_the_served_app(
    task_app: InProcessTaskApp, client: httpx.Client
) -> None:
    result = build_rl_payload(EXAMPLES / "arithmetic.toml", task_url=task_app.url)
    payload = result.payload
    assert payload["job_type"] == "rl"
    assert payload["data"]["endpoint_base_url"] == task_app.url
    assert payload["data"]["base_model"] == "Qwen/Qwen3-0.6B"
    config = payload["data"]["config"]
    assert (config["algorithm"]["method"], config["algorithm"]["variety"]) == ("policy_gradient", "gspo")
    assert config["model"]["trainer_mode"] == "lora"
    rollout = config["rollout"]
    assert rollout["env_name"] == "arithmetic"
    assert rollout["policy_name"] == "arithmetic-solver"
    assert config["training"]["group_size"] >= 2
    # The evaluation seeds are ones the app can describe.
    seeds = config["evaluation"]["seeds"]
    assert config["evaluation"]["instances"] == len(seeds)
    infos = client.get("/task_info", params=[("seed", s) for s in seeds]).json()
    assert [info["task_metadata"]["seed"] for info in infos] == seeds
