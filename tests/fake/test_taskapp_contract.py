"""The contract check passes a good task app and names exactly what a broken one gets wrong.

Broken apps are the example app with one defect each, injected by a small ASGI wrapper that
rewrites one route's JSON answer, so every other check still sees a correct app and the report
must list exactly the one problem.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from test_fake_support import url_building_app

from pytest_synth_rl.errors import TaskAppError
from pytest_synth_rl.fake.contract import (
    ContractReport,
    TaskAppContractError,
    assert_task_app_contract,
    check_task_app_contract,
)
from pytest_synth_rl.fake.model.inference import ArithmeticPolicy
from pytest_synth_rl.taskapp import (
    InProcessTaskApp,
)
from pytest_synth_rl.taskapp.loading import load_module_from_path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "arithmetic_task_app.py"
KEY = "contract-test-key-abcdef0123456789"

Rewrite = Callable[[int, Any], tuple[int, Any]]


@pytest.fixture(scope="module")
def example() -> Any:
    return load_module_from_path(EXAMPLE)


def rewriting(app: Any, path: str, rewrite: Rewrite, *, when_query: bool | None = None) -> Any:
    """Wrap *app* so that *path*'s successful JSON response goes through ``rewrite(status, body)``.

    ``when_query``: only rewrite requests with (True) or without (False) a query string.
    """

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        has_query = bool(scope.get("query_string")) if scope["type"] == "http" else False
        if (
            scope["type"] != "http"
            or scope["path"] != path
            or (when_query is not None and has_query != when_query)
        ):
            await app(scope, receive, send)
            return
        start: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def capture(message: Any) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await app(scope, receive, capture)
        if start["status"] != 200:  # e.g. the check's probe without a key: left as the app said
            await send(start)
            await send({"type": "http.response.body", "body": b"".join(chunks)})
            return
        status, body = rewrite(start["status"], json.loads(b"".join(chunks)))
        encoded = json.dumps(body).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(encoded)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": encoded})

    return wrapped


def run_check(app: Any, **kwargs: Any) -> ContractReport:
    with InProcessTaskApp(app, api_key=KEY) as task_app:
        return check_task_app_contract(task_app.url, task_app.api_key, **kwargs)


def problem_names(report: ContractReport) -> list[str]:
    return [check.name for check in report.problems]


# -- passing --------------------------------------------------------------------------------------
def test_example_app_passes_every_check(example: Any) -> None:
    report = run_check(example.create_app())
    assert report.ok, report.render()
    names = [check.name for check in report.checks]
    assert names == [
        "GET / (no auth)",
        "GET /health",
        "auth enforced",
        "GET /task_info",
        "GET /task_info?seed=0",
        "GET /info",
        "POST /rollout",
        "rollout echoes its id",
        "rollout reward is numeric",
        "rollout response era",
        "rollout trace shape",
        "rollout called the model",
        "model calls keep the inference URL",
    ]
    assert all(check.passed for check in report.checks)
    assert report.check("model calls keep the inference URL").got == "every call carried it"
    assert (
        report.check("rollout reward is numeric").got
        == "reward_info.outcome_reward = 1.0; metrics.outcome_reward = 1.0"
    )
    assert report.eras == ("0.4.4–0.4.11", "0.4.12", "0.5.0")
    assert report.check("rollout called the model").got == "1 chat completion request(s)"
    assert report.warnings == []
    rendered = report.render()
    assert "(ok)" in rendered
    assert rendered.count("PASS") == len(report.checks)
    report.raise_for_problems()  # no problems: no exception


def test_example_loaded_from_its_file_passes_via_assert_helper() -> None:
    with InProcessTaskApp(task_app_path=EXAMPLE) as task_app:
        report = assert_task_app_contract(task_app.url, task_app.api_key, seed=42)
    assert report.check("GET /task_info?seed=42").passed


def test_policy_argument_drives_the_stub_model(example: Any) -> None:
    # A wrong-answering model is still a contract-abiding rollout: reward 0.0 is numeric.
    report = run_check(example.create_app(), policy=ArithmeticPolicy(accuracy=0.0))
    assert report.ok, report.render()
    assert (
        report.check("rollout reward is numeric").got
        == "reward_info.outcome_reward = 0.0; metrics.outcome_reward = 0.0"
    )


# -- failing, one defect at a time ----------------------------------------------------------------
def _set_metric(value: Any) -> Rewrite:
    def rewrite(status: int, body: Any) -> tuple[int, Any]:
        body["metrics"]["outcome_reward"] = value
        return status, body

    return rewrite


def _wrong_echo(status: int, body: Any) -> tuple[int, Any]:
    body["trace_correlation_id"] = "trace_someone-else"
    body.pop("run_id", None)
    return status, body


def _no_echo(status: int, body: Any) -> tuple[int, Any]:
    body.pop("trace_correlation_id", None)
    body.pop("run_id", None)
    return status, body


def _bad_history(status: int, body: Any) -> tuple[int, Any]:
    body["trace"]["event_history"] = "one event"
    return status, body


def _trace_not_object(status: int, body: Any) -> tuple[int, Any]:
    body["trace"] = ["event"]
    return status, body


def _server_error(status: int, body: Any) -> tuple[int, Any]:
    return 500, {"detail": "rollout exploded: KeyError 'seed'"}


def _ignores_seed(status: int, body: Any) -> tuple[int, Any]:
    return 200, {"taskset": {"id": "arithmetic"}}


@pytest.mark.parametrize(
    ("path", "rewrite", "when_query", "problem", "got_fragment"),
    [
        ("/rollout", _wrong_echo, None, "rollout echoes its id", "trace_someone-else"),
        ("/rollout", _no_echo, None, "rollout echoes its id", "no id in the response"),
        ("/rollout", _set_metric("1.0"), None, "rollout reward is numeric", "'1.0' (str)"),
        ("/rollout", _set_metric(None), None, "rollout reward is numeric", "outcome_reward is null"),
        ("/rollout", _bad_history, None, "rollout trace shape", "event_history is str"),
        ("/rollout", _trace_not_object, None, "rollout trace shape", "trace is list"),
        ("/rollout", _server_error, None, "POST /rollout", "HTTP 500"),
        ("/task_info", _ignores_seed, True, "GET /task_info?seed=0", "seed parameter was ignored"),
    ],
    ids=[
        "wrong-id-echo",
        "no-id-echo",
        "reward-string",
        "reward-null",
        "history-not-list",
        "trace-not-object",
        "rollout-500",
        "task-info-ignores-seed",
    ],
)
def test_each_defect_is_the_one_problem_reported(
    example: Any, path: str, rewrite: Rewrite, when_query: bool | None, problem: str, got_fragment: str
) -> None:
    report = run_check(rewriting(example.create_app(), path, rewrite, when_query=when_query))
    assert problem_names(report) == [problem], report.render()
    assert got_fragment in report.check(problem).got
    assert not report.ok


def test_app_that_does_not_enforce_auth(example: Any) -> None:
    report = run_check(example.create_app(require_api_key=False))
    assert problem_names(report) == ["auth enforced"], report.render()
    assert report.check("auth enforced").got == (
        "/task_info=HTTP 200, /rollout=HTTP 200, /task_info with a wrong key=HTTP 200, "
        "/rollout with a wrong key=HTTP 200"
    )


def test_an_app_that_takes_any_key_fails_auth(example: Any) -> None:
    # Before, only requests without a key were probed: an app checking that some key is there
    # passed, though it lets anyone in.
    async def any_key(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] in ("/task_info", "/rollout"):
            headers = dict(scope["headers"])
            if b"x-api-key" in headers:  # present: replaced by the app's own, whatever it was
                headers[b"x-api-key"] = KEY.encode()
                scope = {**scope, "headers": list(headers.items())}
        await app(scope, receive, send)

    app = example.create_app()
    report = run_check(any_key)
    assert problem_names(report) == ["auth enforced"], report.render()
    auth = report.check("auth enforced")
    assert auth.got == (
        "/task_info=HTTP 400, /rollout=HTTP 400, /task_info with a wrong key=HTTP 200, "
        "/rollout with a wrong key=HTTP 200"
    )
    assert auth.expected == "400/401/403 for /task_info and /rollout without a key or with a wrong one"


def test_rollout_500_skips_the_checks_that_need_its_body(example: Any) -> None:
    report = run_check(rewriting(example.create_app(), "/rollout", _server_error))
    names = [check.name for check in report.checks]
    assert "rollout reward is numeric" not in names
    assert "rollout trace shape" not in names
    assert "rollout exploded" in report.check("POST /rollout").got


def test_a_crashed_rollout_names_the_apps_line_and_its_model_calls(example: Any) -> None:
    # Before: "HTTP 500: Internal Server Error" alone.
    def crash(status: int, body: Any) -> tuple[int, Any]:
        raise ValueError("the board is full")

    report = run_check(rewriting(example.create_app(), "/rollout", crash))
    got = report.check("POST /rollout").got
    line = crash.__code__.co_firstlineno + 1
    assert (
        "; the task app raised ValueError: the board is full at test_taskapp_contract.py:"
        f"{line} in crash: raise ValueError"
    ) in got
    assert "test_taskapp_contract.py:" in got.partition(" <- ")[2]  # the caller: the wrapper's line
    assert got.endswith("; 1 model call(s) made in this rollout before it failed")


def test_legacy_reward_and_trajectories_are_accepted(example: Any) -> None:
    def legacy(status: int, body: Any) -> tuple[int, Any]:
        reward = body["metrics"].pop("outcome_reward")
        body["metrics"]["mean_return"] = reward
        body.pop("trace")
        body["trajectories"] = [{"env_id": "e", "policy_id": "p", "steps": [], "length": 0}]
        return status, body

    report = run_check(rewriting(example.create_app(), "/rollout", legacy))
    assert report.ok, report.render()
    assert "legacy metrics.mean_return" in report.check("rollout reward is numeric").got


def test_missing_trace_is_fine(example: Any) -> None:
    def no_trace(status: int, body: Any) -> tuple[int, Any]:
        body.pop("trace")
        return status, body

    report = run_check(rewriting(example.create_app(), "/rollout", no_trace))
    assert report.ok
    assert report.check("rollout trace shape").got == "no trace (optional)"


def lazy_app() -> FastAPI:
    """A minimal app that keeps the contract but never asks the model."""
    app = FastAPI()
    app.get("/")(lambda: {"status": "ok"})

    @app.api_route("/{path:path}", methods=["GET", "POST"])
    async def everything(path: str, request: Request) -> Any:
        if request.headers.get("x-api-key") != KEY:
            return JSONResponse({"detail": "bad key"}, status_code=400)
        if path == "task_info" and "seed" in request.query_params:
            return {"task": {"id": "t", "name": "T"}}
        if path == "rollout":
            payload = await request.json()
            return {
                "trace_correlation_id": payload["trace_correlation_id"],
                "metrics": {"outcome_reward": 0.5},
            }
        return {"taskset": {}} if path == "task_info" else {"ok": True}

    return app


def test_app_that_never_calls_the_model_is_only_a_warning() -> None:
    report = run_check(lazy_app())
    assert report.ok, report.render()
    warning = report.check("rollout called the model")
    assert not warning.passed
    assert not warning.required
    assert warning.got == "0 chat completion request(s)"
    assert "WARN" in report.render()


def test_several_defects_are_each_listed_once(example: Any) -> None:
    app = rewriting(example.create_app(require_api_key=False), "/rollout", _wrong_echo)
    app = rewriting(app, "/info", lambda status, body: (503, {"detail": "warming up"}))
    report = run_check(app)
    assert problem_names(report) == ["auth enforced", "GET /info", "rollout echoes its id"]
    with pytest.raises(TaskAppContractError) as info:
        report.raise_for_problems()
    error = info.value
    assert isinstance(error, AssertionError)
    assert isinstance(error, TaskAppError)
    message = str(error)
    assert "3 problem(s)" in message
    for name in ("auth enforced", "GET /info", "rollout echoes its id"):
        assert message.count(f"- {name}:") == 1
    assert error.details["problems"] == ["auth enforced", "GET /info", "rollout echoes its id"]
    assert error.report is report
    assert KEY not in message
    assert KEY not in report.render()


def test_assert_helper_raises(example: Any) -> None:
    task_app = InProcessTaskApp(example.create_app(require_api_key=False), api_key=KEY)
    with task_app, pytest.raises(TaskAppContractError, match="auth enforced"):
        assert_task_app_contract(task_app.url, task_app.api_key)


def test_a_refused_key_is_reported_once_with_the_fix_not_as_content_problems(example: Any) -> None:
    with InProcessTaskApp(example.create_app(), api_key=KEY) as task_app:
        wrong = check_task_app_contract(task_app.url, "not-the-right-key-000000")
        missing = check_task_app_contract(task_app.url, None)
    for report in (wrong, missing):
        assert problem_names(report) == ["task app key accepted"]
        assert "GET /task_info answered HTTP 400" in report.check("task app key accepted").got
    assert wrong.check("task app key accepted").got.startswith("the task app rejected the key not-…00")
    assert missing.check("task app key accepted").got.startswith(
        "no task-app key was sent: set ENVIRONMENT_API_KEY to the key the task app expects, or pass "
        "check_task_app_contract(url, api_key=...)"
    )
    assert "env_name" not in missing.render()  # nothing judged from the refused answers


def test_unreachable_url_is_one_problem() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    report = check_task_app_contract(url, KEY, timeout=2.0)
    assert problem_names(report) == ["reachable"]
    assert "ConnectError" in report.checks[0].got


@pytest.mark.parametrize("url", ["not a url", "ftp://127.0.0.1/x", ""])
def test_malformed_url_is_a_task_app_error(url: str) -> None:
    with pytest.raises(TaskAppError, match="URL"):
        check_task_app_contract(url, KEY)


def _no_env_name(status: int, body: Any) -> tuple[int, Any]:
    if isinstance(body.get("taskset"), dict):
        body["taskset"].pop("env_name", None)
    body.pop("environment", None)
    return status, body


def test_a_guessed_env_name_is_named_in_the_rollout_problem(example: Any) -> None:
    report = run_check(rewriting(example.create_app(), "/task_info", _no_env_name))
    assert problem_names(report) == ["POST /rollout"], report.render()
    expected = report.check("POST /rollout").expected
    assert "the request's env_name='default' is a guess" in expected
    assert "pass check_task_app_contract(..., env_name=...)" in expected
    fixed = run_check(rewriting(example.create_app(), "/task_info", _no_env_name), env_name="arithmetic")
    assert fixed.ok, fixed.render()


@pytest.mark.parametrize(
    "build",
    [
        lambda url: url.rstrip("/") + "/chat/completions",
        lambda url: f"{url}/v1/chat/completions",
        lambda url: f"{url}/openai/v1/chat/completions?api-version=1",
    ],
    ids=["appended", "v1 appended", "path and query appended"],
)
def test_model_urls_built_under_the_handed_out_url_pass(build: Callable[[str], str]) -> None:
    report = run_check(url_building_app(build, KEY))
    assert report.ok, report.render()
    assert report.check("model calls keep the inference URL").got == "every call carried it"


def test_a_model_url_that_drops_the_handed_out_path_fails_naming_the_fix() -> None:
    # Before, the check handed out the stub's root URL, so an app that threw the path away
    # (and with it the correlation id the trainer attributes model calls by) passed.
    from urllib.parse import urljoin

    report = run_check(url_building_app(lambda url: urljoin(url, "/v1/chat/completions"), KEY))
    assert problem_names(report) == ["POST /rollout", "model calls keep the inference URL"]
    got = report.check("model calls keep the inference URL").got
    assert got.startswith("1 call(s) to POST /v1/chat/completions without it; build the model URL from ")
    assert "policy.config.inference_url keeping its path and query" in got


@pytest.mark.parametrize(("status", "ok"), [(201, True), (204, False), (302, False)])
def test_a_rollout_answered_with_any_2xx_json_object_passes_as_the_fake_takes_it(
    example: Any, status: int, ok: bool
) -> None:
    # Before, the check wanted exactly 200 while the fake's jobs took any 2xx: one app, two verdicts.
    def answer(code: int, body: Any) -> tuple[int, Any]:
        return (status, None if status == 204 else body)

    report = run_check(rewriting(example.create_app(), "/rollout", answer))
    check = report.check("POST /rollout")
    assert check.passed is ok, report.render()
    if status == 201:
        assert check.got == "HTTP 201"
    elif status == 204:
        assert check.got == "HTTP 204 but not a JSON object"
    else:
        assert check.got.startswith("HTTP 302: ")
