"""Creating jobs: resolution of URLs and keys, submission, its errors, and the task app probe."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from client_support import (
    API,
    API_KEY,
    BACKEND,
    TASK_KEY,
    TASK_URL,
    free_port,
    job_kwargs,
    make_job,
    serve_app,
    write_config,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from pytest_synth_rl.client import AsyncRLJob, RetryPolicy, RLJob, RLJobConfig
from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.errors import (
    BackendError,
    ConfigError,
    JobSubmitError,
    SynthError,
    SynthUsageError,
    TaskAppError,
)


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    return write_config(tmp_path)


# -- submission --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("status", "body"),
    [(200, {"job_id": "rl-123"}), (201, {"id": "rl-123"}), (201, {"job_id": "rl-123", "id": "other"})],
)
def test_submit_success(config_path: Path, status: int, body: dict[str, str]) -> None:
    with respx.mock() as router, make_job(config_path) as job:
        route = router.post(f"{API}/rl/jobs").respond(status, json=body)
        assert job.job_id is None
        assert job.submit() == "rl-123"
        assert job.job_id == "rl-123"
    request = route.calls.last.request
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.headers["content-type"] == "application/json"
    assert request.headers["idempotency-key"] == job.idempotency_key
    sent = json.loads(request.content)
    assert sent == job.payload
    assert sent["job_type"] == "rl"
    assert sent["data"]["endpoint_base_url"] == TASK_URL
    assert sent["tags"] == {"source": "train-cli"}
    assert sent["metadata"] == {"backend_base_url": API}


def test_submit_without_job_id_in_answer(config_path: Path) -> None:
    with respx.mock() as router, make_job(config_path) as job:
        router.post(f"{API}/rl/jobs").respond(201, json={"status": "queued"})
        with pytest.raises(JobSubmitError, match="no job id under 'job_id' or 'id'") as info:
            job.submit()
        assert job.job_id is None
    assert info.value.status_code == 201
    assert "queued" in info.value.response_excerpt


def test_submit_404_hints_at_backend_url(config_path: Path) -> None:
    with respx.mock() as router, make_job(config_path) as job:
        router.post(f"{API}/rl/jobs").respond(404, json={"detail": "Not Found"})
        with pytest.raises(JobSubmitError) as info:
            job.submit()
    err = info.value
    assert err.status_code == 404
    assert "HTTP 404" in str(err)
    assert "backend_url" in (err.hint or "")
    assert "/api" in (err.hint or "")
    assert len(err.attempts) == 1  # a 404 is not retried


@pytest.mark.parametrize("status", [401, 403])
def test_submit_auth_error_hints_at_key_and_masks_it(config_path: Path, status: int) -> None:
    with respx.mock() as router, make_job(config_path) as job:
        router.post(f"{API}/rl/jobs").respond(status, json={"detail": f"invalid key {API_KEY}"})
        with pytest.raises(JobSubmitError) as info:
            job.submit()
    text = str(info.value)
    assert "SYNTH_API_KEY" in text
    assert API_KEY not in text
    assert API_KEY not in info.value.response_excerpt
    assert "sk_t…ef" in text


def test_submit_422_lists_every_problem(config_path: Path) -> None:
    body = {
        "detail": [
            {"loc": ["body", "data", "config", "rollout", "env_name"], "msg": "field required"},
            {"loc": ["body", "compute", "gpu_count"], "msg": "must be > 0"},
        ]
    }
    with respx.mock() as router, make_job(config_path) as job:
        router.post(f"{API}/rl/jobs").respond(422, json=body)
        with pytest.raises(JobSubmitError) as info:
            job.submit()
    text = str(info.value)
    assert "HTTP 422\n  problems:\n    - body.data.config.rollout.env_name: field required\n" in text
    assert "\n    - body.compute.gpu_count: must be > 0" in text
    assert "RL config" in (info.value.hint or "")


def test_submit_422_without_problems_says_so(config_path: Path) -> None:
    with respx.mock() as router, make_job(config_path) as job:
        router.post(f"{API}/rl/jobs").respond(422, json={"detail": []})
        with pytest.raises(JobSubmitError) as info:
            job.submit()
    assert "HTTP 422\n  problems:\n    - (the answer lists no problems)" in str(info.value)


def test_submit_to_a_missing_route_says_where_the_job_api_lives(config_path: Path) -> None:
    with respx.mock() as router, make_job(config_path) as job:
        router.post(f"{API}/rl/jobs").respond(404)
        with pytest.raises(JobSubmitError) as info:
            job.submit()
    assert "; the job API lives under /api, which is appended when missing" in (info.value.hint or "")


def test_submit_exhausted_5xx_is_submit_error_with_history(config_path: Path) -> None:
    job = make_job(config_path, retry=RetryPolicy(jitter=False, max_attempts=3))
    with respx.mock() as router, job:
        route = router.post(f"{API}/rl/jobs").respond(503, text="upstream unavailable")
        with pytest.raises(JobSubmitError) as info:
            job.submit()
    assert route.call_count == 3
    err = info.value
    assert [a.status_code for a in err.attempts] == [503, 503, 503]
    assert "after 3 attempts" in str(err)
    assert "retried per RetryPolicy" in (err.hint or "")


def test_second_submit_is_refused(config_path: Path) -> None:
    with respx.mock() as router, make_job(config_path) as job:
        route = router.post(f"{API}/rl/jobs").respond(200, json={"job_id": "rl-1"})
        job.submit()
        with pytest.raises(JobSubmitError, match="already submitted as rl-1"):
            job.submit()
    assert route.call_count == 1


def test_attached_job_cannot_submit() -> None:
    job = RLJob.from_job_id("rl-9", backend_url=BACKEND, api_key=API_KEY)
    with job, pytest.raises(JobSubmitError, match="already submitted as rl-9"):
        job.submit()
    assert job.job_id == "rl-9"


@pytest.mark.parametrize("action", ["get_status", "poll_until_complete", "get_results", "cancel", "events"])
def test_operations_before_submit_are_clear_errors(config_path: Path, action: str) -> None:
    with respx.mock() as router, make_job(config_path) as job:
        with pytest.raises(SynthError, match="has not been submitted yet") as info:
            getattr(job, action)()
        assert not router.calls
    assert "submit()" in (info.value.hint or "")


# -- idempotency -------------------------------------------------------------------------------
def test_idempotency_key_is_stable_across_retries(config_path: Path) -> None:
    job = make_job(config_path, retry=RetryPolicy(jitter=False))
    with respx.mock() as router, job:
        route = router.post(f"{API}/rl/jobs").mock(
            side_effect=[
                httpx.ConnectError("reset"),
                httpx.Response(502),
                httpx.Response(201, json={"job_id": "rl-7"}),
            ]
        )
        assert job.submit() == "rl-7"
    keys = [call.request.headers["idempotency-key"] for call in route.calls]
    assert len(keys) == 3
    assert len(set(keys)) == 1
    assert keys[0] == job.idempotency_key
    assert job.clock.sleeps == [0.5, 1.0]  # type: ignore[attr-defined]


def test_each_job_object_gets_its_own_key(config_path: Path) -> None:
    with make_job(config_path) as one, make_job(config_path) as two:
        assert one.idempotency_key != two.idempotency_key
        assert len(one.idempotency_key) == 32


def test_given_idempotency_key_is_sent(config_path: Path) -> None:
    with respx.mock() as router, make_job(config_path, idempotency_key="run-42") as job:
        route = router.post(f"{API}/rl/jobs").respond(200, json={"job_id": "x"})
        job.submit()
    assert route.calls.last.request.headers["idempotency-key"] == "run-42"
    assert "run-42" not in route.calls.last.request.content.decode()


# -- payload ------------------------------------------------------------------------------------
def test_tags_merge_into_payload_tags(config_path: Path) -> None:
    with make_job(config_path, tags={"suite": "nightly", "source": "pytest"}) as job:
        assert job.payload["tags"] == {"source": "pytest", "suite": "nightly"}
    with make_job(config_path) as plain:
        assert plain.payload["tags"] == {"source": "train-cli"}


def test_bad_tags_are_config_errors(config_path: Path) -> None:
    with pytest.raises(SynthUsageError) as info:
        make_job(config_path, tags={"n": 1})
    assert info.value.keys == ["RLJob.from_config.tags"]
    assert "tags={'n': 1}), a dict; expected a mapping of str to str" in str(info.value)


def test_a_task_url_override_wins_over_the_jobs_task_app_url(config_path: Path) -> None:
    # Before: the job wrote its own task app URL over the caller's override (as the SDK did),
    # so overrides={"task_url": ...} was dropped without a word.
    with make_job(config_path, overrides={"task_url": "http://127.0.0.1:9/"}) as job:
        assert job.payload["data"]["endpoint_base_url"] == "http://127.0.0.1:9"
        assert job.payload["data"]["config"]["services"]["task_url"] == "http://127.0.0.1:9/"
        assert job.build().task_url == "http://127.0.0.1:9/"  # what the health check probes
    with make_job(config_path, overrides={"task_url": "  "}) as blank:
        assert blank.payload["data"]["endpoint_base_url"] == TASK_URL


def test_a_backend_override_naming_another_backend_is_refused(config_path: Path) -> None:
    with pytest.raises(SynthUsageError) as info:
        make_job(config_path, overrides={"backend": "https://staging.example.com"})
    assert str(info.value) == (
        "invalid arguments: overrides[\"backend\"]: is 'https://staging.example.com', but this job is sent "
        "to 'https://api.usesynth.ai' (hint: choose the backend with backend_url= (or --synth-backend under "
        'pytest) and drop overrides["backend"])'
    )
    with make_job(config_path, overrides={"backend": f"{BACKEND}/api/"}) as same:
        assert same.payload["metadata"] == {"backend_base_url": f"{BACKEND}/api"}


def test_overrides_are_not_mutated(config_path: Path) -> None:
    overrides = {"model": "rl:Qwen/Qwen3-0.6B:abc"}
    snapshot = dict(overrides)
    with make_job(config_path, overrides=overrides):
        pass
    assert overrides == snapshot


def test_invalid_config_fails_at_construction(tmp_path: Path) -> None:
    path = write_config(tmp_path)  # task_url "" in the TOML and no other source
    with pytest.raises(ConfigError) as info:
        RLJob.from_config(path, **job_kwargs(task_app_url=None))
    assert str(path) in str(info.value)


# -- resolution -------------------------------------------------------------------------------
def test_missing_config_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as info:
        RLJob.from_config(missing, **job_kwargs())
    assert str(missing) in str(info.value)
    assert info.value.path == str(missing)
    assert "does not exist" in str(info.value)


def test_missing_api_key_is_usage_error(config_path: Path) -> None:
    with pytest.raises(SynthUsageError) as info:
        RLJob.from_config(config_path, **job_kwargs(api_key=None))
    assert info.value.keys == ["api_key"]
    assert "SYNTH_API_KEY" in str(info.value)
    assert "api_key=" in str(info.value)


def test_env_fallbacks(config_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYNTH_API_KEY", API_KEY)
    monkeypatch.setenv("TASK_APP_URL", "http://127.0.0.1:9999/")
    monkeypatch.setenv("ENVIRONMENT_API_KEY", TASK_KEY)
    monkeypatch.setenv("SYNTH_BACKEND_URL", "http://127.0.0.1:8000")
    with RLJob.from_config(config_path) as job:
        assert job.config.api_key.value == API_KEY
        assert job.config.task_app_url == "http://127.0.0.1:9999/"
        assert job.payload["data"]["endpoint_base_url"] == "http://127.0.0.1:9999"
        assert job.config.task_app_api_key is not None
        assert job.config.task_app_api_key.value == TASK_KEY
        assert job.api_base == "http://127.0.0.1:8000/api"
    monkeypatch.setenv("BACKEND_BASE_URL", "http://127.0.0.1:7000/api/")
    with RLJob.from_config(config_path) as job:
        # SYNTH_BACKEND_URL beats BACKEND_BASE_URL, as for --synth-backend: one environment, one
        # backend for a suite's jobs and a script's (the library once read them the other way)
        assert job.api_base == "http://127.0.0.1:8000/api"
    monkeypatch.delenv("SYNTH_BACKEND_URL")
    with RLJob.from_config(config_path) as job:
        assert job.api_base == "http://127.0.0.1:7000/api"
    with RLJob.from_config(config_path, backend_url="http://127.0.0.1:6000") as job:
        assert job.api_base == "http://127.0.0.1:6000/api"  # the argument beats both


def test_default_backend(config_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYNTH_API_KEY", API_KEY)
    with RLJob.from_config(config_path, task_app_url=TASK_URL) as job:
        assert job.api_base == "https://api.usesynth.ai/api"
        assert job.config.task_app_api_key is None


def test_arguments_beat_environment(config_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYNTH_API_KEY", "sk_env_key_should_lose_000")
    monkeypatch.setenv("TASK_APP_URL", "http://127.0.0.1:1111")
    with make_job(config_path, task_app_api_key=TASK_KEY) as job:
        assert job.config.api_key.value == API_KEY
        assert job.config.task_app_url == TASK_URL


@pytest.mark.parametrize("bad", ["api.usesynth.ai", "ftp://x.example", "http://"])
def test_bad_backend_url(config_path: Path, bad: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SynthUsageError) as info:
        RLJob.from_config(config_path, **job_kwargs(backend_url=bad))
    assert info.value.keys == ["backend_url"]
    monkeypatch.setenv("BACKEND_BASE_URL", bad)
    with pytest.raises(SynthUsageError) as env_info:
        RLJob.from_config(config_path, **job_kwargs(backend_url=None))
    assert env_info.value.keys == ["BACKEND_BASE_URL"]


def test_http_client_and_transport_are_exclusive(config_path: Path) -> None:
    with httpx.Client() as client, pytest.raises(SynthError, match="not both"):
        make_job(
            config_path, http_client=client, transport=httpx.MockTransport(lambda r: httpx.Response(200))
        )


def test_injected_transport_is_used(config_path: Path) -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url}")
        return httpx.Response(201, json={"job_id": "via-transport"})

    with make_job(config_path, transport=httpx.MockTransport(handler)) as job:
        assert job.submit() == "via-transport"
    assert seen == [f"POST {API}/rl/jobs"]


def test_injected_client_stays_open(config_path: Path) -> None:
    client = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200, json={"id": "c"})))
    with make_job(config_path, http_client=client) as job:
        assert job.submit() == "c"
    assert not client.is_closed
    client.close()


# -- secrets -----------------------------------------------------------------------------------
def test_repr_masks_keys(config_path: Path) -> None:
    with make_job(config_path, task_app_api_key=TASK_KEY) as job:
        text = repr(job)
        assert API_KEY not in text
        assert TASK_KEY not in text
        assert "sk_t…ef" in text
        assert "env_…ef" in text
        assert API_KEY not in repr(job.config)


def test_key_echoed_in_error_body_is_masked() -> None:
    with respx.mock() as router, RLJob.from_job_id("rl-1", **_attach_kwargs()) as job:
        router.get(f"{API}/rl/jobs/rl-1").respond(400, json={"error": f"bad token {API_KEY}"})
        with pytest.raises(BackendError) as info:
            job.get_status()
    assert API_KEY not in str(info.value)
    assert API_KEY not in info.value.response_excerpt
    assert "sk_t…ef" in str(info.value)


def _attach_kwargs() -> dict[str, Any]:
    return {"backend_url": BACKEND, "api_key": API_KEY, "clock": VirtualClock()}


# -- task app health check before submission (real loopback task app) ---------------------------
def _task_app(*, task_info_status: int = 200) -> Starlette:
    async def health(request: Request) -> Response:
        if request.headers.get("x-api-key") != TASK_KEY:
            return JSONResponse({"detail": {"error": {"code": "unauthorised"}}}, status_code=400)
        return JSONResponse({"healthy": True})

    async def task_info(request: Request) -> Response:
        if request.headers.get("authorization") != f"Bearer {TASK_KEY}":
            return JSONResponse({"detail": {"error": {"code": "unauthorised"}}}, status_code=400)
        return JSONResponse({"taskset": {}}, status_code=task_info_status)

    return Starlette(routes=[Route("/health", health), Route("/task_info", task_info)])


def test_health_check_passes_then_submits(config_path: Path) -> None:
    with serve_app(_task_app()) as url, respx.mock() as router:
        router.route(host="127.0.0.1").pass_through()
        submit = router.post(f"{API}/rl/jobs").respond(201, json={"job_id": "rl-h"})
        job = RLJob.from_config(
            config_path, **job_kwargs(task_app_url=url, task_app_api_key=TASK_KEY, skip_health_check=False)
        )
        with job:
            assert job.submit() == "rl-h"
    assert submit.call_count == 1
    assert json.loads(submit.calls.last.request.content)["data"]["endpoint_base_url"] == url


def test_health_check_wrong_key_blocks_submission(config_path: Path) -> None:
    with serve_app(_task_app()) as url, respx.mock(assert_all_called=False) as router:
        router.route(host="127.0.0.1").pass_through()
        submit = router.post(f"{API}/rl/jobs").respond(201, json={"job_id": "never"})
        job = RLJob.from_config(
            config_path,
            **job_kwargs(task_app_url=url, task_app_api_key="wrong_key_000000", skip_health_check=False),
        )
        with job, pytest.raises(TaskAppError) as info:
            job.submit()
        assert job.job_id is None
    assert submit.call_count == 0
    err = info.value
    assert err.url == url
    assert err.details["health_status"] == 400
    assert err.details["task_info_status"] == 400
    assert "/health=400, /task_info=400" in str(err)
    assert (err.hint or "").startswith(
        "the task app rejected the key wron…00, sent as X-API-Key, X-API-Keys and Authorization: Bearer: "
        "pass task_app_api_key= or set ENVIRONMENT_API_KEY to the key the task app expects; a task app "
        "that reads its key from another header must accept one of these"
    )
    assert "wrong_key_000000" not in str(err)


def test_health_check_task_info_404(config_path: Path) -> None:
    with serve_app(_task_app(task_info_status=404)) as url, respx.mock() as router:
        router.route(host="127.0.0.1").pass_through()
        job = RLJob.from_config(
            config_path, **job_kwargs(task_app_url=url, task_app_api_key=TASK_KEY, skip_health_check=False)
        )
        with job, pytest.raises(TaskAppError, match="/health=200, /task_info=404") as info:
            job.submit()
    assert "/task_info" in (info.value.hint or "")


def test_health_check_unreachable_task_app(config_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with respx.mock() as router:
        router.route(host="127.0.0.1").pass_through()
        job = RLJob.from_config(
            config_path, **job_kwargs(task_app_url=url, task_app_api_key=TASK_KEY, skip_health_check=False)
        )
        with job, pytest.raises(TaskAppError, match="ConnectError") as info:
            job.submit()
    assert info.value.details["health_status"] is None
    assert "is the task app running" in (info.value.hint or "")


def test_the_library_and_the_plugin_read_the_backend_variables_in_one_order() -> None:
    from pytest_synth_rl.client.jobconfig import BACKEND_URL_ENV_VARS
    from pytest_synth_rl.plugin.settings import OPTIONS

    backend = next(option for option in OPTIONS if option.name == "backend")
    assert BACKEND_URL_ENV_VARS == backend.env == ("SYNTH_BACKEND_URL", "BACKEND_BASE_URL")


# -- argument values ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("job_class", "name", "value", "expected"),
    [
        (RLJob, "backend_url", 5, "an int; expected an http(s) URL string or None"),
        (RLJob, "task_app_url", 5, "an int; expected an http(s) URL string or None"),
        (RLJob, "idempotency_key", 7, "an int; expected a string or None"),
        (RLJob, "clock", "x", "a str; expected a Clock or None"),
        (RLJob, "retry", 3, "an int; expected a RetryPolicy or None"),
        (RLJob, "request_timeout", "slow", "a str; expected a finite number of seconds > 0"),
        (RLJob, "overrides", 5, "an int; expected a mapping of dotted config keys to values"),
        (RLJob, "tags", {"team": 1}, "a dict; expected a mapping of str to str or None"),
        (RLJob, "allow_new_keys", "no", "a str; expected True or False"),
        (RLJob, "skip_health_check", 1, "an int; expected True or False"),
        (RLJob, "http_client", httpx.AsyncClient(), "expected an httpx.Client or None"),
        (AsyncRLJob, "http_client", httpx.Client(), "expected an httpx.AsyncClient or None"),
    ],
)
def test_a_wrong_argument_value_is_refused_naming_the_call_and_what_it_takes(
    config_path: Path, job_class: type[RLJob] | type[AsyncRLJob], name: str, value: object, expected: str
) -> None:
    with pytest.raises(SynthUsageError) as caught:
        job_class.from_config(config_path, **job_kwargs(**{name: value}))
    call = f"{job_class.__name__}.from_config"
    assert caught.value.keys == [f"{call}.{name}"]
    assert f"got {call}({name}=" in str(caught.value)
    assert expected in str(caught.value)
    assert f"or leave {name} out" in str(caught.value)


def test_a_key_of_the_wrong_type_is_refused_without_showing_it() -> None:
    with pytest.raises(SynthUsageError) as caught:
        RLJob.from_job_id("rl-1", api_key=12345678901234, backend_url=BACKEND)  # type: ignore[arg-type]
    assert caught.value.keys == ["RLJob.from_job_id.api_key"]
    assert "got RLJob.from_job_id(api_key=...), an int; expected a key string or a Secret" in str(
        caught.value
    )
    assert "12345678901234" not in str(caught.value)


@pytest.mark.parametrize(
    ("body", "problems"),
    [
        (
            {"problems": [{"key": "training.batch_size", "message": "must be > 0"}]},
            ["training.batch_size: must be > 0"],
        ),
        ({"errors": [{"path": "model", "msg": "unknown"}, "plain text"]}, ["model: unknown", "plain text"]),
        ({"detail": "the config is not valid"}, ["the config is not valid"]),
        ({"detail": [{"msg": "no location"}]}, ["no location"]),
    ],
)
def test_submit_422_reads_the_problems_of_every_answer_shape(
    config_path: Path, body: dict[str, Any], problems: list[str]
) -> None:
    with respx.mock() as router, make_job(config_path) as job:
        router.post(f"{API}/rl/jobs").respond(422, json=body)
        with pytest.raises(JobSubmitError) as info:
            job.submit()
    listed = str(info.value).split("problems:\n")[1].split("\n  request:")[0]
    assert listed.splitlines() == [f"    - {problem}" for problem in problems]


@pytest.mark.parametrize(
    ("answer", "note"),
    [
        (
            httpx.Response(200, text="<html>proxy</html>", headers={"content-type": "text/html"}),
            "unreadable JSON body (",
        ),
        (httpx.Response(200, content=b"<html>"), "; content-type 'not set') treated as {}"),
        (httpx.Response(200, json=["rl-1"]), "(JSON list where an object was expected, treated as {})"),
    ],
)
def test_an_accepted_submission_without_a_readable_job_id_says_why(
    config_path: Path, answer: httpx.Response, note: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING), respx.mock() as router, make_job(config_path) as job:
        router.post(f"{API}/rl/jobs").mock(return_value=answer)
        with pytest.raises(JobSubmitError) as info:
            job.submit()
    assert (
        "the backend accepted the job (HTTP 200) but its answer has no job id under 'job_id' or 'id'"
        in str(info.value)
    )
    assert note in str(info.value)
    assert (info.value.hint or "").startswith("check that backend_url points at the Synth API")
    unreadable = "unreadable" in note or "not set" in note
    assert (f"POST {API}/rl/jobs: unreadable JSON body (" in caplog.text) is unreadable


@pytest.mark.parametrize("tags", [{"suite": 1}, {2: "x"}, ["suite"]])
def test_a_config_resolved_directly_refuses_tags_that_are_not_strings(config_path: Path, tags: Any) -> None:
    with pytest.raises(SynthUsageError) as info:
        RLJobConfig.resolve(config_path, api_key=API_KEY, task_app_url=TASK_URL, tags=tags)
    text = str(info.value)
    assert info.value.keys == ["RLJobConfig.resolve.tags"]
    assert "expected a mapping of str to str" in text
    assert "tags={'team': 'rl'}" in text


def test_a_config_resolved_directly_never_shows_a_key_of_the_wrong_type(config_path: Path) -> None:
    with pytest.raises(SynthUsageError) as info:
        RLJobConfig.resolve(config_path, api_key=API_KEY, task_app_api_key=b"sk_bytes_do_not_print_0123")
    assert info.value.keys == ["RLJobConfig.resolve.task_app_api_key"]
    assert "do_not_print" not in str(info.value)
