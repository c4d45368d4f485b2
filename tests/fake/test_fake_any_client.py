"""Any client, any process: env-key upload, task app verification, the 0.5.0 era, the live
event stream and the served-fake default (jobs move each time a client looks at them)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from nacl.public import PrivateKey, PublicKey, SealedBox
from test_fake_support import API, auth, poll_to_end, rl_payload, submit

from pytest_synth_rl.client import upload_environment_api_key, verify_task_app
from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.errors import TaskAppVerificationError
from pytest_synth_rl.fake import FakeSynthBackend
from pytest_synth_rl.taskapp import InProcessTaskApp

UPLOADED = "uploaded-task-app-key-7f3a9c0e5b"
SYNTH_KEY = "sk_test_any_client_0123456789"


@pytest.fixture(autouse=True)
def _no_env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    # The fake must learn the task app's key by upload, not from this process's environment.
    monkeypatch.delenv("ENVIRONMENT_API_KEY", raising=False)


def _era_app(era: str, key: str) -> FastAPI:
    """A task app answering /rollout in one schema era; a wrong key gets 400 like the SDK's."""
    app = FastAPI()

    def allowed(request: Request) -> bool:
        return request.headers.get("x-api-key") == key

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"healthy": True}

    @app.get("/task_info", response_model=None)
    async def task_info(request: Request) -> Any:
        if not allowed(request):
            return JSONResponse({"detail": {"error": {"code": "unauthorised"}}}, status_code=400)
        return {"taskset": {"name": "eras"}}

    @app.post("/rollout", response_model=None)
    async def rollout(request: Request) -> Any:
        if not allowed(request):
            return JSONResponse({"detail": {"error": {"code": "unauthorised"}}}, status_code=400)
        body = await request.json()
        reward = {"outcome_reward": 0.25 + 0.05 * body["env"]["seed"]}
        if era == "0.4.4":
            return {"run_id": body["run_id"], "metrics": reward}
        if era == "0.4.12":
            return {"trace_correlation_id": body["trace_correlation_id"], "metrics": reward}
        if era == "0.5.0":
            return {"trace_correlation_id": body["trace_correlation_id"], "reward_info": reward}
        if era == "invalid":
            return JSONResponse(
                {"detail": {"error": {"code": "invalid_rollout_response", "message": "reward_info missing"}}},
                status_code=422,
            )
        return {"trace_correlation_id": body["trace_correlation_id"]}

    return app


@pytest.fixture
def era_app() -> Iterator[Any]:
    servers: list[InProcessTaskApp] = []

    def serve(era: str, key: str = UPLOADED) -> str:
        server = InProcessTaskApp(_era_app(era, key), api_key=key, export_api_key=False)
        server.start()
        servers.append(server)
        return server.url

    yield serve
    for server in servers:
        server.stop()


@pytest.fixture
def plain() -> Iterator[FakeSynthBackend]:
    """A fake that knows no task app key until one is uploaded."""
    with FakeSynthBackend(clock=VirtualClock(), api_key=SYNTH_KEY) as fake:
        yield fake
    fake.close()


def _upload(fake: FakeSynthBackend, key: str = UPLOADED) -> None:
    upload_environment_api_key("https://api.usesynth.ai", SYNTH_KEY, key, clock=fake.clock)


# -- eras -------------------------------------------------------------------------------------
@pytest.mark.parametrize("era", ["0.4.4", "0.4.12", "0.5.0"])
def test_rollout_responses_of_every_era_train(
    plain: FakeSynthBackend, client: httpx.Client, era_app: Any, era: str
) -> None:
    url = era_app(era)
    _upload(plain)
    plain.scenario(steps=2, duration=60.0)
    job_id = submit(client, plain, rl_payload(url))
    body, _ = poll_to_end(client, plain, job_id)
    assert body["status"] == "succeeded", body.get("error")
    job = plain.job(job_id)
    assert job.rewards == [0.325, 0.525]  # seeds 0-3, then 4-7: reward 0.25 + 0.05 * seed
    assert {r.request["policy"]["config"]["model"] for r in job.rollouts} == {"Qwen/Qwen3-0.6B"}


def test_a_response_with_neither_reward_key_fails_naming_both(
    plain: FakeSynthBackend, client: httpx.Client, era_app: Any
) -> None:
    url = era_app("neither")
    _upload(plain)
    plain.scenario(steps=2)
    body, _ = poll_to_end(client, plain, submit(client, plain, rl_payload(url)))
    assert body["status"] == "failed"
    assert "response has neither 'reward_info' nor 'metrics'" in body["error"]
    assert "reward_info.outcome_reward (synth-ai 0.5.0) or metrics.outcome_reward (0.4.x)" in body["error"]


def test_a_422_invalid_rollout_response_is_a_contract_failure(
    plain: FakeSynthBackend, client: httpx.Client, era_app: Any
) -> None:
    url = era_app("invalid")
    _upload(plain)
    body, _ = poll_to_end(client, plain, submit(client, plain, rl_payload(url)))
    assert body["status"] == "failed"
    assert "HTTP 422" in body["error"]
    assert "contract failure: the task app's own RolloutResponse model rejected" in body["error"]


def test_a_rejected_key_fails_the_job_with_a_hint_naming_the_key_and_the_upload(
    plain: FakeSynthBackend, client: httpx.Client, era_app: Any
) -> None:
    url = era_app("0.5.0")  # enforces UPLOADED; nothing was uploaded, so the fake sends no key
    body, _ = poll_to_end(client, plain, submit(client, plain, rl_payload(url)))
    assert body["status"] == "failed"
    assert "HTTP 400" in body["error"]
    assert (
        "no task-app key was sent (none was uploaded, the fake has no task_app_api_key and "
        "ENVIRONMENT_API_KEY is unset): upload the task app's key"
    ) in body["error"]
    assert (
        "upload the task app's key (POST /api/v1/env-keys: this plugin's RLJob.upload_environment_api_key()"
        in body["error"]
    )
    assert "with the upstream SDK, set ENVIRONMENT_API_KEY before RLJob.from_config" in body["error"]


def test_a_key_replaced_by_another_runs_upload_is_named_as_the_cause(
    plain: FakeSynthBackend, client: httpx.Client, era_app: Any
) -> None:
    # Two runs sharing one backend, each with its own generated key: the later upload wins.
    url = era_app("0.5.0")  # enforces UPLOADED
    _upload(plain)
    _upload(plain, "another-runs-key-0000000001")
    body, _ = poll_to_end(client, plain, submit(client, plain, rl_payload(url)))
    assert body["status"] == "failed"
    assert body["error"].endswith(
        "this fake's uploaded key was replaced by a later upload of another key: runs that share one "
        "backend (CI shards, two terminals) must share one ENVIRONMENT_API_KEY)"
    )
    _upload(plain, "another-runs-key-0000000001")  # the same key again replaces nothing new
    assert plain.keys.key_replaced


def test_a_rejected_key_without_a_replaced_upload_says_nothing_of_other_runs(
    plain: FakeSynthBackend, client: httpx.Client, era_app: Any
) -> None:
    url = era_app("0.5.0")
    _upload(plain, "the-wrong-key-but-only-one-01")
    body, _ = poll_to_end(client, plain, submit(client, plain, rl_payload(url)))
    assert "rejected the environment key the fake sent" in body["error"]
    assert "replaced by a later upload" not in body["error"]
    assert not plain.keys.key_replaced


def test_the_uploaded_key_wins_over_the_configured_one(client: httpx.Client, era_app: Any) -> None:
    url = era_app("0.4.12")
    with FakeSynthBackend(
        clock=VirtualClock(), api_key=SYNTH_KEY, task_app_api_key="stale-key-000000000"
    ) as fake:
        _upload(fake)
        body, _ = poll_to_end(client, fake, submit(client, fake, rl_payload(url)))
        assert body["status"] == "succeeded"
        assert fake.job().rollouts[0].request["env"]["seed"] == 0
    fake.close()


# -- env-key routes ---------------------------------------------------------------------------
def test_the_env_key_routes_follow_the_contract(plain: FakeSynthBackend, client: httpx.Client) -> None:
    head = auth(plain)
    answer = client.get(f"{API}/v1/crypto/public-key", headers=head).json()
    assert answer["alg"] == "libsodium.sealedbox.v1"
    public = PublicKey(base64.b64decode(answer["public_key"]))
    assert client.get(f"{API}/v1/env-keys/verify", headers=head).json() == {"present": False}
    sealed = base64.b64encode(SealedBox(public).encrypt(UPLOADED.encode())).decode()
    stored = client.post(
        f"{API}/v1/env-keys", json={"name": "ENVIRONMENT_API_KEY", "ciphertext_b64": sealed}, headers=head
    )
    assert stored.status_code == 200
    assert stored.json()["name"] == "ENVIRONMENT_API_KEY"
    assert client.get(f"{API}/v1/env-keys/verify", headers=head).json() == {"present": True}
    # Never shown: not in the request log, the admin API or the fake's repr.
    shown = json.dumps([r.to_json() for r in plain.requests]) + repr(plain) + repr(plain.requests)
    shown += client.get("https://api.usesynth.ai/_fake/requests", headers=head).text
    assert UPLOADED not in shown
    assert sealed not in shown
    assert plain.keys.key_source() == "uploaded"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"name": "ENVIRONMENT_API_KEY", "ciphertext_b64": "not base64!!"},
            "environment key upload rejected: 'ciphertext_b64' is not valid base64",
        ),
        (
            {
                "name": "ENVIRONMENT_API_KEY",
                "ciphertext_b64": base64.b64encode(
                    SealedBox(PrivateKey.generate().public_key).encrypt(b"k" * 20)
                ).decode(),
            },
            "does not open as a sealed box (libsodium.sealedbox.v1) for this backend's public key",
        ),
        ({"name": "OPENAI_API_KEY", "ciphertext_b64": "AAAA"}, "'name' must be \"ENVIRONMENT_API_KEY\""),
        ({"name": "ENVIRONMENT_API_KEY"}, "'ciphertext_b64' must be a non-empty base64 string"),
    ],
)
def test_a_bad_upload_gets_a_400_saying_what_is_wrong(
    plain: FakeSynthBackend, client: httpx.Client, body: dict[str, Any], message: str
) -> None:
    response = client.post(f"{API}/v1/env-keys", json=body, headers=auth(plain))
    assert response.status_code == 400
    assert message in response.json()["detail"]["error"]["message"]
    assert not plain.keys.has_env_key


def test_a_key_over_8_kib_is_refused(plain: FakeSynthBackend, client: httpx.Client) -> None:
    public = PublicKey(base64.b64decode(plain.keys.public_key_b64))
    sealed = base64.b64encode(SealedBox(public).encrypt(b"k" * (8 * 1024 + 1))).decode()
    response = client.post(
        f"{API}/v1/env-keys",
        json={"name": "ENVIRONMENT_API_KEY", "ciphertext_b64": sealed},
        headers=auth(plain),
    )
    assert response.status_code == 400
    assert "the key is 8193 bytes; at most 8192 bytes are accepted" in response.text


def test_the_env_key_routes_need_the_bearer_key(plain: FakeSynthBackend, client: httpx.Client) -> None:
    for method, path in (
        ("GET", "/v1/crypto/public-key"),
        ("POST", "/v1/env-keys"),
        ("GET", "/v1/env-keys/verify"),
    ):
        assert client.request(method, f"{API}{path}").status_code == 401


# -- verify_task_app ---------------------------------------------------------------------------
def test_verify_task_app_probes_with_the_uploaded_key(plain: FakeSynthBackend, era_app: Any) -> None:
    url = era_app("0.5.0")
    with pytest.raises(TaskAppVerificationError, match="Task app verification failed \\(auth\\)"):
        verify_task_app("https://api.usesynth.ai", SYNTH_KEY, url, clock=plain.clock)
    _upload(plain)
    verdict = verify_task_app("https://api.usesynth.ai", SYNTH_KEY, url, clock=plain.clock)
    assert verdict.any_ok is True
    assert verdict.candidates_first15 == ["uplo…5b"]
    assert verdict.attempts[0]["status"] == 200
    assert verdict.attempts[0]["health_status"] == 200
    assert verdict.attempts[0]["key_source"] == "uploaded"
    assert UPLOADED not in json.dumps(verdict.raw)


# -- the error status --------------------------------------------------------------------------
def test_an_error_scenario_ends_in_the_terminal_error_status(
    plain: FakeSynthBackend, client: httpx.Client
) -> None:
    plain.scenario(outcome="error", fail_at_step=2, error="trainer crashed")
    job_id = submit(client, plain)
    for _ in range(20):
        body = client.get(f"{API}/rl/jobs/{job_id}", headers=auth(plain)).json()
        if body["status"] == "error":
            break
        plain.clock.advance(10)  # type: ignore[attr-defined]
    assert body["status"] == "error"
    assert body["error"] == "trainer crashed"
    assert plain.job(job_id).event_types[-1] == "rl.train.failed"


# -- the live event stream, in-process ----------------------------------------------------------
def test_in_process_the_stream_advances_the_virtual_clock_until_the_terminal_event(
    plain: FakeSynthBackend, client: httpx.Client
) -> None:
    plain.scenario(steps=3, duration=300.0)
    job_id = submit(client, plain)
    events = []
    with client.stream("GET", f"{API}/rl/jobs/{job_id}/events/stream", headers=auth(plain)) as response:
        assert response.headers["content-type"] == "text/event-stream"
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    assert [e["type"] for e in events] == [
        "rl.job.created",
        "rl.train.started",
        "rl.train.step",
        "rl.train.step",
        "rl.train.step",
        "rl.eval.summary",
        "rl.train.completed",
    ]
    assert plain.clock.elapsed == 300.0  # type: ignore[attr-defined]


# -- the served default -----------------------------------------------------------------------
def test_served_jobs_move_one_stage_per_look(client: httpx.Client) -> None:
    fake = FakeSynthBackend(api_key=SYNTH_KEY)
    fake.scenario(steps=2)
    with (
        fake.serve() as url,
        httpx.Client(base_url=url + "/api", headers={"Authorization": f"Bearer {SYNTH_KEY}"}) as http,
    ):
        job_id = http.post("/rl/jobs", json=rl_payload()).json()["id"]
        # The first look starts the job (due at submit) and runs step 1; each later look one stage.
        looks = [http.get(f"/rl/jobs/{job_id}").json() for _ in range(2)]
        assert [(b["status"], b["progress"]["completed"]) for b in looks] == [("running", 1), ("running", 2)]
        events = http.get(f"/rl/jobs/{job_id}/events").json()["events"]
        assert events[-1]["type"] == "rl.train.completed"
        assert http.get(f"/rl/jobs/{job_id}").json()["status"] == "succeeded"
    assert fake.clock.elapsed == 0.0  # type: ignore[attr-defined]
    fake.close()


def test_a_served_job_nobody_moves_says_why(client: httpx.Client) -> None:
    fake = FakeSynthBackend(api_key=SYNTH_KEY)
    with (
        fake.serve(pacing="clock") as url,
        httpx.Client(base_url=url + "/api", headers={"Authorization": f"Bearer {SYNTH_KEY}"}) as http,
    ):
        job_id = http.post("/rl/jobs", json=rl_payload()).json()["id"]
        bodies = [http.get(f"/rl/jobs/{job_id}").json() for _ in range(4)]
    assert [("hint" in b) for b in bodies] == [False, False, False, True]
    hint = bodies[-1]["hint"]
    assert hint.startswith(
        f"job {job_id} has not moved in 4 status polls: this fake backend runs jobs on a virtual clock"
    )
    assert 'POST /_fake/clock/advance {"seconds": 60}' in hint
    assert "serve with pacing='observed'" in hint
    assert bodies[-1]["status"] == "running"
    assert bodies[-1]["progress"]["completed"] == 0
    fake.close()


def _refusing_app(body: dict[str, Any]) -> FastAPI:
    """A task app whose /rollout answers 400 with *body*, whatever key it gets."""
    app = FastAPI()

    @app.post("/rollout")
    async def rollout(request: Request) -> JSONResponse:
        return JSONResponse(body, status_code=400)

    return app


@pytest.mark.parametrize(
    ("body", "hint", "not_in_hint"),
    [
        (
            {
                "detail": {
                    "error": {
                        "code": "unauthorised",
                        "allowed_first15": [UPLOADED[:15]],
                        "got_first15": UPLOADED[:15],
                    }
                }
            },
            "the key the fake sent is one the task app allows (its got_first15 is among its allowed_first15)",
            "RLJob.upload_environment_api_key()",
        ),
        ({"detail": "unknown env 'math'"}, "the task app's /rollout must answer 2xx", "environment key"),
    ],
    ids=["right-key-refused", "not-about-the-key"],
)
def test_a_400_that_is_not_about_a_wrong_key_does_not_blame_the_key(
    plain: FakeSynthBackend, client: httpx.Client, body: dict[str, Any], hint: str, not_in_hint: str
) -> None:
    server = InProcessTaskApp(_refusing_app(body), api_key=UPLOADED, export_api_key=False, health_path=None)
    server.start()
    try:
        _upload(plain)
        result, _ = poll_to_end(client, plain, submit(client, plain, rl_payload(server.url)))
    finally:
        server.stop()
    assert result["status"] == "failed"
    assert "HTTP 400" in result["error"]
    assert hint in result["error"]
    assert not_in_hint not in result["error"]


def test_a_key_no_header_can_carry_is_refused_at_upload(
    plain: FakeSynthBackend, client: httpx.Client
) -> None:
    # Before, it was stored, and every later rollout failed with "invalid header 'X-API-Key'".
    public = PublicKey(base64.b64decode(plain.keys.public_key_b64))
    sealed = base64.b64encode(SealedBox(public).encrypt(b"abcdefgh\r\nX-Evil: 1 zzzzzzzzzzzz")).decode()
    response = client.post(
        f"{API}/v1/env-keys",
        json={"name": "ENVIRONMENT_API_KEY", "ciphertext_b64": sealed},
        headers=auth(plain),
    )
    assert response.status_code == 400
    message = response.json()["detail"]["error"]["message"]
    assert "the key contains a line break (character 9 of 32); an HTTP header cannot carry it" in message
    assert "X-Evil" not in message
    assert not plain.keys.has_env_key
