"""The contract check on task apps shaped like upstream's: a demo app with an open ``/health``,
the SDK template answering ``[]`` for a seed, and rollout answers of every SDK era.

Each app is written here from the contract (plain FastAPI), served with InProcessTaskApp on
loopback, and really rolled out (it calls the check's stub model once).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from pytest_synth_rl.fake.contract import (
    ROLLOUT_ERAS,
    ContractReport,
    TaskAppContractError,
    check_task_app_contract,
)
from pytest_synth_rl.taskapp import (
    InProcessTaskApp,
)

KEY = "upstream-shape-key-0123456789abcdef"

Shape = Callable[[dict[str, Any], float], dict[str, Any]]


def _authorized(request: Request) -> bool:
    return KEY in (request.headers.get("x-api-key"), request.headers.get("authorization", "")[7:])


def _rejection() -> JSONResponse:
    return JSONResponse({"detail": {"error": {"code": "unauthorised"}}}, status_code=400)


def shape_0_4_4(request: dict[str, Any], reward: float) -> dict[str, Any]:
    return {"run_id": request["run_id"], "metrics": {"outcome_reward": reward, "num_steps": 1}}


def shape_0_4_12(request: dict[str, Any], reward: float) -> dict[str, Any]:
    return {"trace_correlation_id": request["trace_correlation_id"], "metrics": {"outcome_reward": reward}}


def shape_0_4_4_legacy_dump(request: dict[str, Any], reward: float) -> dict[str, Any]:
    """A 0.4.4 app setting only legacy fields: pydantic dumps the unset ones as null."""
    metrics = {
        "outcome_reward": None,
        "reward_mean": reward,
        "episode_rewards": [reward],
        "outcome_score": None,
    }
    return {"run_id": request["run_id"], "metrics": metrics, "trace_correlation_id": None}


def shape_0_5_0_null_metrics(request: dict[str, Any], reward: float) -> dict[str, Any]:
    return {**shape_0_5_0(request, reward), "metrics": None}


def shape_0_5_0(request: dict[str, Any], reward: float) -> dict[str, Any]:
    return {
        "trace_correlation_id": request["trace_correlation_id"],
        "reward_info": {"outcome_reward": reward},
        "success_status": "success",
    }


def shape_neither(request: dict[str, Any], reward: float) -> dict[str, Any]:
    return {"trace_correlation_id": request["trace_correlation_id"], "score": reward}


def task_app(
    *,
    open_health: bool = False,
    with_root: bool = True,
    seed_answer: Any = None,
    shape: Shape = shape_0_4_12,
) -> FastAPI:
    """A small task app from the contract; ``open_health`` answers /health without a key the
    way upstream's demo does; ``seed_answer`` replaces the TaskInfo for ``?seed=N``."""
    app = FastAPI()

    if with_root:

        @app.get("/")
        async def root() -> dict[str, Any]:
            return {"status": "ok", "service": "upstream-shape"}

    @app.get("/health")
    async def health(request: Request) -> Any:
        if open_health:
            return {"status": "healthy", "authorized": _authorized(request)}
        if not _authorized(request):
            return _rejection()
        return {"healthy": True}

    @app.get("/task_info")
    async def task_info(request: Request) -> Any:
        if not _authorized(request):
            return _rejection()
        if "seed" not in request.query_params:
            return {"taskset": {"env_name": "math"}}
        if seed_answer is not None:
            return seed_answer
        return {"task": {"id": "math", "name": "Math"}, "environment": "math"}

    @app.get("/info")
    async def info(request: Request) -> Any:
        return {"service": {"task": "math"}} if _authorized(request) else _rejection()

    @app.post("/rollout")
    async def rollout(request: Request) -> Any:
        if not _authorized(request):
            return _rejection()
        body = await request.json()
        url = body["policy"]["config"]["inference_url"].rstrip("/") + "/chat/completions"
        async with httpx.AsyncClient(trust_env=False) as client:
            answer = await client.post(
                url, json={"model": "m", "messages": [{"role": "user", "content": "1+1"}]}
            )
        reward = 1.0 if answer.status_code == 200 else 0.0
        return shape(body, reward)

    return app


def run_check(app: FastAPI) -> ContractReport:
    with InProcessTaskApp(app, api_key=KEY) as served:
        return check_task_app_contract(served.url, served.api_key)


# -- auth ------------------------------------------------------------------------------------
def test_demo_app_with_open_health_passes() -> None:
    report = run_check(task_app(open_health=True))
    assert report.ok, report.render()
    assert report.problems == []
    assert report.warnings == []
    auth = report.check("auth enforced")
    assert auth.passed
    assert auth.got == (
        "/task_info=HTTP 400, /rollout=HTTP 400, /task_info with a wrong key=HTTP 400, "
        "/rollout with a wrong key=HTTP 400"
    )
    assert auth.expected == "400/401/403 for /task_info and /rollout without a key or with a wrong one"
    assert report.check("GET /health").got == "HTTP 200"


def test_app_open_on_rollout_fails_auth_and_names_the_route() -> None:
    app = task_app(open_health=True)
    guarded = app.router.routes

    async def unguarded_rollout(request: Request) -> Any:
        body = await request.json()
        return shape_0_4_12(body, 1.0)

    for route in guarded:
        if getattr(route, "path", None) == "/rollout":
            app.router.routes.remove(route)
            break
    app.post("/rollout")(unguarded_rollout)
    report = run_check(app)
    assert [p.name for p in report.problems] == ["auth enforced"]
    assert report.check("auth enforced").got == (
        "/task_info=HTTP 400, /rollout=HTTP 200, /task_info with a wrong key=HTTP 400, "
        "/rollout with a wrong key=HTTP 200"
    )


def test_app_without_a_root_route_is_a_warning_only() -> None:
    # Teams' own apps often serve only what the trainer calls; the trainer never calls ``/``.
    report = run_check(task_app(open_health=True, with_root=False))
    assert report.ok, report.render()
    assert [w.name for w in report.warnings] == ["GET / (no auth)"]
    assert report.check("GET / (no auth)").got.startswith("HTTP 404")
    report.raise_for_problems()


# -- empty task list ---------------------------------------------------------------------------
def test_template_app_with_empty_seed_list_is_a_warning_only() -> None:
    report = run_check(task_app(seed_answer=[]))
    assert report.ok, report.render()
    assert [w.name for w in report.warnings] == ["GET /task_info?seed=0"]
    warning = report.check("GET /task_info?seed=0")
    assert not warning.passed
    assert not warning.required
    assert warning.got == "HTTP 200 with an empty list: no TaskInfo for this seed"
    rendered = report.render()
    assert rendered.splitlines()[0].endswith("(ok, 1 warning(s))")
    assert "  WARN  GET /task_info?seed=0" in rendered
    report.raise_for_problems()  # warnings never raise


def test_warnings_are_listed_apart_in_the_failure_message() -> None:
    report = run_check(task_app(seed_answer=[], shape=shape_neither))
    assert [p.name for p in report.problems] == ["rollout reward is numeric"]
    assert [w.name for w in report.warnings] == ["GET /task_info?seed=0", "rollout response era"]
    assert report.summary() == "1 problem(s), 2 warning(s)"
    with pytest.raises(TaskAppContractError) as info:
        report.raise_for_problems()
    message = str(info.value)
    assert "- rollout reward is numeric: expected" in message
    assert "- (warning) GET /task_info?seed=0: expected" in message
    assert "- (warning) rollout response era: expected" in message
    assert message.count("GET /task_info?seed=0") == 1
    assert info.value.details == {
        "problems": ["rollout reward is numeric"],
        "warnings": ["GET /task_info?seed=0", "rollout response era"],
    }
    assert KEY not in message


# -- rollout response eras ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("shape", "eras", "reward"),
    [
        (shape_0_4_4, ("0.4.4–0.4.11",), "metrics.outcome_reward = 1.0"),
        (shape_0_4_12, ("0.4.12",), "metrics.outcome_reward = 1.0"),
        (shape_0_5_0, ("0.5.0",), "reward_info.outcome_reward = 1.0"),
        # Before: a null counted as a present, non-numeric reward, though the fake trains on these.
        (shape_0_4_4_legacy_dump, ("0.4.4–0.4.11",), "legacy metrics.reward_mean = 1.0"),
        (shape_0_5_0_null_metrics, ("0.5.0",), "reward_info.outcome_reward = 1.0"),
    ],
    ids=["0.4.4", "0.4.12", "0.5.0", "0.4.4-legacy-nulls", "0.5.0-null-metrics"],
)
def test_each_era_passes_and_is_named(shape: Shape, eras: tuple[str, ...], reward: str) -> None:
    report = run_check(task_app(shape=shape))
    assert report.ok, report.render()
    assert report.warnings == []
    assert report.eras == eras
    assert report.check("rollout reward is numeric").got == reward
    era = report.check("rollout response era")
    assert era.passed
    (label,) = eras
    id_key, reward_key = next((i, r) for name, i, r in ROLLOUT_ERAS if name == label)
    assert era.got == f"satisfies {label} ({id_key} + {reward_key})"


def test_response_with_both_keys_and_ids_satisfies_every_era() -> None:
    def both(request: dict[str, Any], reward: float) -> dict[str, Any]:
        metrics = {"outcome_reward": reward}
        return {
            "run_id": request["run_id"],
            "trace_correlation_id": request["trace_correlation_id"],
            "metrics": metrics,
            "reward_info": metrics,
        }

    report = run_check(task_app(shape=both))
    assert report.ok, report.render()
    assert report.eras == ("0.4.4–0.4.11", "0.4.12", "0.5.0")
    assert report.check("rollout response era").got == (
        "satisfies 0.4.4–0.4.11 (run_id + metrics), 0.4.12 (trace_correlation_id + metrics), "
        "0.5.0 (trace_correlation_id + reward_info)"
    )


def test_response_with_neither_key_fails_naming_both() -> None:
    report = run_check(task_app(shape=shape_neither))
    assert [p.name for p in report.problems] == ["rollout reward is numeric"]
    check = report.check("rollout reward is numeric")
    assert (
        check.got
        == "neither `reward_info` nor `metrics` in the response (keys ['score', 'trace_correlation_id'])"
    )
    assert (
        check.expected == "a numeric outcome_reward under `reward_info` (0.5.0) or `metrics` (0.4.x), or both"
    )
    assert report.eras == ()
    assert report.check("rollout response era").got == "satisfies none of the eras 0.4.4 to 0.5.0"
    with pytest.raises(TaskAppContractError) as info:
        report.raise_for_problems()
    assert "neither `reward_info` nor `metrics`" in str(info.value)


def test_bad_reward_under_one_of_two_keys_is_a_problem() -> None:
    def split(request: dict[str, Any], reward: float) -> dict[str, Any]:
        return {
            "trace_correlation_id": request["trace_correlation_id"],
            "reward_info": {"outcome_reward": reward},
            "metrics": {"outcome_reward": "high"},
        }

    report = run_check(task_app(shape=split))
    assert [p.name for p in report.problems] == ["rollout reward is numeric"]
    assert report.check("rollout reward is numeric").got == (
        "reward_info.outcome_reward = 1.0; metrics.outcome_reward is 'high' (str); expected a finite number "
        "from -1e+12 to 1e+12"
    )
    assert report.eras == ("0.5.0",)


def test_reward_info_without_the_correlation_id_satisfies_no_era() -> None:
    def run_id_only(request: dict[str, Any], reward: float) -> dict[str, Any]:
        return {"run_id": request["run_id"], "reward_info": {"outcome_reward": reward}}

    report = run_check(task_app(shape=run_id_only))
    assert report.ok, report.render()  # echo and reward hold; the era mismatch is a warning
    assert report.eras == ()
    assert [w.name for w in report.warnings] == ["rollout response era"]
