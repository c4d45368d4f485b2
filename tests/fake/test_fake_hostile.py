"""The served fake under hostile input: every number finite, every size bounded, every admin
route behind the key, and an answer (not a crash) for whatever a client sends.

Everything here goes through a really served fake (``FakeSynthBackend().serve()``) on loopback.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from hang_guard import finishes
from nacl.public import PublicKey, SealedBox
from test_fake_support import API, TASK_KEY, auth, error_message, rl_payload, served_client, submit

from pytest_synth_rl.clock import RealClock, VirtualClock
from pytest_synth_rl.errors import SynthUsageError
from pytest_synth_rl.fake import FakeSynthBackend, Scenario
from pytest_synth_rl.fake.store import StoreLock
from pytest_synth_rl.secrets.masking import register_secret
from pytest_synth_rl.taskapp import InProcessTaskApp

KEY = "sk_test_hostile_input_key_0123"
AUTH = {"Authorization": f"Bearer {KEY}"}
#: Seconds; only a hang gets near it.
GENEROUS = 60.0


@pytest.fixture
def served() -> Iterator[tuple[FakeSynthBackend, httpx.Client]]:
    with served_client(KEY, GENEROUS) as served:
        yield served


# -- numbers are finite -------------------------------------------------------------------------
@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_a_non_finite_clock_advance_is_refused_and_the_fake_stays_healthy(
    served: tuple[FakeSynthBackend, httpx.Client], number: str
) -> None:
    fake, client = served
    answer = client.post("/_fake/clock/advance", content=f'{{"seconds": {number}}}')
    assert answer.status_code == 400
    assert "field 'seconds' must be a finite number" in error_message(answer)
    assert fake.clock.now() == 0.0
    created = client.post("/api/rl/jobs", json=rl_payload())
    assert created.status_code == 201
    assert client.get(f"/api/rl/jobs/{created.json()['id']}").status_code == 200
    assert client.get("/_fake/clock").json()["now"] == 0.0


def test_a_huge_finite_clock_advance_is_refused(served: tuple[FakeSynthBackend, httpx.Client]) -> None:
    _, client = served
    answer = client.post("/_fake/clock/advance", json={"seconds": 1e300})
    assert answer.status_code == 422
    assert error_message(answer) == "'seconds' must be a finite number from 0 to 3.16224e+07, got 1e+300"


@pytest.mark.parametrize(
    ("route", "body", "field"),
    [
        ("/_fake/scenario", '{"duration": NaN}', "duration"),
        ("/_fake/scenario", '{"reward_curve": [0.1, Infinity]}', "reward_curve[1]"),
        ("/_fake/scenario", '{"queue_time": 1e999}', "queue_time"),
        ("/_fake/faults", '{"route": "status", "latency": Infinity}', "latency"),
        ("/_fake/faults", '{"route": "status", "probability": NaN}', "probability"),
        ("/_fake/faults", '{"route": "status", "status": 429, "retry_after": NaN}', "retry_after"),
    ],
)
def test_admin_routes_name_the_non_finite_field(
    served: tuple[FakeSynthBackend, httpx.Client], route: str, body: str, field: str
) -> None:
    fake, client = served
    answer = client.post(route, content=body)
    assert answer.status_code == 400
    assert f"field {field!r} must be a finite number" in error_message(answer)
    assert fake.faults == []


def test_a_submitted_payload_with_nan_is_refused_naming_the_field(
    served: tuple[FakeSynthBackend, httpx.Client],
) -> None:
    fake, client = served
    payload = rl_payload()
    payload["data"]["config"]["rollout"]["episodes_per_batch"] = float("nan")
    answer = client.post("/api/rl/jobs", content=json.dumps(payload))  # Python writes NaN
    assert answer.status_code == 422
    assert error_message(answer) == "data.config.rollout.episodes_per_batch: must be a finite number, got nan"
    assert fake.jobs == []


@pytest.mark.parametrize(
    ("body", "got"),
    [(b"", "an empty body"), (b"null", "JSON null"), (b"[1, 2]", "a JSON list"), (b'"rl"', "a JSON str")],
)
def test_a_submit_that_is_not_an_object_says_what_it_was(
    served: tuple[FakeSynthBackend, httpx.Client], body: bytes, got: str
) -> None:
    _, client = served
    answer = client.post("/api/rl/jobs", content=body, headers={"content-type": "application/json"})
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["msg"] == f"expected the RL job payload as a JSON object, got {got}"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"latency": float("inf")},
            "fault.latency: must be a finite number of seconds in (0, 3600], got inf",
        ),
        ({"latency": 7200}, "fault.latency: must be a finite number of seconds in (0, 3600], got 7200"),
        ({"status": 429, "retry_after": float("nan")}, "fault.retry_after: must be a finite number"),
        ({"probability": float("nan")}, "fault.probability: must be in [0, 1], got nan"),
        ({"pattern": "01" * 6000}, "fault.pattern: must be a string of 1 to 10000 characters 0/1"),
    ],
)
def test_faults_refuse_non_finite_and_oversized_numbers(fields: dict[str, Any], message: str) -> None:
    fake = FakeSynthBackend()
    with pytest.raises(SynthUsageError) as raised:
        fake.fault("status", **fields)
    assert message in str(raised.value)


def test_a_virtual_clock_refuses_to_move_by_nan() -> None:
    clock = VirtualClock()
    with pytest.raises(ValueError, match="finite number of seconds, not nan"):
        clock.advance(float("nan"))
    assert clock.now() == 0.0


# -- scenario limits ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fields", "loc", "message"),
    [
        ({"steps": 100_000_000, "immediate": True}, "Scenario.steps", "must be an int from 1 to 10000"),
        ({"duration": 10**12}, "Scenario.duration", "seconds above 0, at most 2592000 (30 days), got"),
        ({"polls": 10**9}, "Scenario.polls", "must be an int from 1 to 1000000"),
        ({"queue_time": 10**9}, "Scenario.queue_time", "must be a finite number of seconds from 0"),
        ({"reward_curve": [0.5] * 20_000}, "Scenario.reward_curve", "has 20000 values; at most 10000"),
        ({"error": "x" * 20_000, "outcome": "failed"}, "Scenario.error", "at most 10000 characters"),
        ({"labels": {str(i): "x" for i in range(100)}}, "Scenario.labels", "at most 64 string keys"),
    ],
)
def test_scenario_limits_give_a_422_naming_the_field(
    served: tuple[FakeSynthBackend, httpx.Client], fields: dict[str, Any], loc: str, message: str
) -> None:
    fake, client = served
    answer = client.post("/_fake/scenario", json=fields)
    assert answer.status_code == 422
    problem = answer.json()["detail"][0]
    assert problem["loc"] == loc
    assert message in problem["msg"]
    assert fake.default_scenario == Scenario()
    with pytest.raises(SynthUsageError, match=loc.replace(".", r"\.")):
        Scenario(**fields)


def test_the_largest_scenario_runs_and_the_fake_answers_after_it(
    served: tuple[FakeSynthBackend, httpx.Client],
) -> None:
    _, client = served
    assert client.post("/_fake/scenario", json={"steps": 10_000, "immediate": True}).status_code == 200
    job_id = client.post("/api/rl/jobs", json=rl_payload()).json()["id"]
    assert client.get(f"/api/rl/jobs/{job_id}").json()["status"] == "succeeded"
    assert client.get("/_fake/clock").status_code == 200


#: Finite rewards past the bound, and the entry each error names. Before, every one was taken: a
#: step's loss or the job's mean reward overflowed to inf, and from then on every status poll of
#: the job answered 500 (JSON has no inf).
HUGE_CURVES = [
    ([1e308, -1e308], "entry [0] is 1e+308"),
    ([1e308, 1e308], "entry [0] is 1e+308"),
    ([1.7e308, 1.7e308], "entry [0] is 1.7e+308"),
    ([0.5, -1_000_000_000_001], "entry [1] is -1000000000001"),
]


@pytest.mark.parametrize(("curve", "entry"), HUGE_CURVES)
def test_a_reward_curve_past_the_bound_gets_a_422_and_the_fake_stays_healthy(
    served: tuple[FakeSynthBackend, httpx.Client], curve: list[float], entry: str
) -> None:
    fake, client = served
    answer = client.post("/_fake/scenario", json={"job": "next", "steps": 2, "reward_curve": curve})
    assert answer.status_code == 422
    assert answer.json()["detail"] == [
        {
            "loc": "Scenario.reward_curve",
            "msg": f"{entry}; expected a finite number from -1e+12 to 1e+12",
            "hint": "give one number per step, e.g. [0.1, 0.4, 0.8]",
        }
    ]
    job_id = client.post("/api/rl/jobs", json=rl_payload()).json()["id"]
    assert fake.job(job_id).scenario == Scenario()  # the refused script was not queued
    client.post("/_fake/clock/advance", json={"seconds": 60})
    polled = [client.get(f"/api/rl/jobs/{job_id}") for _ in range(3)]
    assert [(p.status_code, p.json()["status"]) for p in polled] == [(200, "succeeded")] * 3


def test_rewards_at_the_bound_run_to_the_end_and_past_it_are_refused(
    served: tuple[FakeSynthBackend, httpx.Client],
) -> None:
    _, client = served
    past = {"steps": 1, "reward_curve": [1e12 * (1 + 1e-9)]}
    assert client.post("/_fake/scenario", json=past).status_code == 422
    at_bound = {"job": "next", "steps": 3, "polls": 5, "reward_curve": [1e12, -1e12, -1e12]}
    assert client.post("/_fake/scenario", json=at_bound).status_code == 200
    job_id = client.post("/api/rl/jobs", json=rl_payload()).json()["id"]
    polled = [client.get(f"/api/rl/jobs/{job_id}") for _ in range(5)]
    assert [p.status_code for p in polled] == [200] * 5
    body = polled[-1].json()
    assert (body["status"], body["final_reward"]) == ("succeeded", -1e12)
    assert body["metrics"] == {"reward": -1e12, "loss": 1000000000001.0}  # (1 + 1e12) * 2 / sqrt(4)
    assert body["results"]["metrics"] == {
        "final_reward": -1e12,
        "mean_reward": -333333333333.3333,
        "best_reward": 1e12,
        "steps": 3,
        "rollouts": 0,
        "eval": {"3": -1e12},
    }


# -- admin routes need the key ------------------------------------------------------------------
ADMIN_CALLS = [
    ("GET", "/_fake"),
    ("POST", "/_fake/reset"),
    ("GET", "/_fake/scenario"),
    ("POST", "/_fake/scenario"),
    ("GET", "/_fake/jobs"),
    ("GET", "/_fake/requests"),
    ("GET", "/_fake/faults"),
    ("POST", "/_fake/faults"),
    ("DELETE", "/_fake/faults"),
    ("GET", "/_fake/clock"),
    ("POST", "/_fake/clock/advance"),
    ("GET", "/_fake/nowhere"),
]


@pytest.mark.parametrize("credentials", [None, "Bearer wrong-key", f"Basic {KEY}", KEY])
@pytest.mark.parametrize(("method", "path"), ADMIN_CALLS)
def test_admin_routes_require_the_fakes_key(
    served: tuple[FakeSynthBackend, httpx.Client], method: str, path: str, credentials: str | None
) -> None:
    fake, client = served
    fake.scenario(steps=3)
    headers = {"Authorization": credentials} if credentials else {}
    with httpx.Client(base_url=str(client.base_url), headers=headers, timeout=GENEROUS) as stranger:
        answer = stranger.request(method, path, json={"seconds": 5, "route": "*", "steps": 9})
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"] == "Bearer"
    assert "missing or invalid API key" in error_message(answer)
    assert KEY not in answer.text
    assert (fake.default_scenario.steps, fake.faults, fake.clock.now()) == (3, [], 0.0)


def test_the_request_log_redacts_bodies_and_never_shows_the_env_key_upload(
    served: tuple[FakeSynthBackend, httpx.Client],
) -> None:
    _, client = served
    payload = rl_payload()
    payload["data"]["config"]["rollout"]["api_key"] = "sk-live-user-wrote-this-0123"
    payload["tags"]["note"] = f"the key is {TASK_KEY}"
    register_secret(TASK_KEY)
    assert client.post("/api/rl/jobs", json=payload).status_code == 201
    public = PublicKey(base64.b64decode(client.get("/api/v1/crypto/public-key").json()["public_key"]))
    sealed = base64.b64encode(SealedBox(public).encrypt(TASK_KEY.encode())).decode()
    stored = client.post("/api/v1/env-keys", json={"name": "ENVIRONMENT_API_KEY", "ciphertext_b64": sealed})
    assert stored.status_code == 200
    logged = client.get("/_fake/requests").json()["requests"]
    assert [r["route"] for r in logged] == ["submit", "public_key", "env_keys"]
    text = json.dumps(logged)
    assert "sk-live-user-wrote-this-0123" not in text
    assert TASK_KEY not in text
    assert sealed not in text
    assert logged[0]["json"]["data"]["config"]["rollout"]["api_key"] == "<redacted>"
    assert logged[2]["json"] is None


# -- the request log is bounded -----------------------------------------------------------------
def test_the_request_log_keeps_the_last_requests_with_capped_bodies(
    served: tuple[FakeSynthBackend, httpx.Client],
) -> None:
    fake, client = served
    big = {"job_type": "rl", "blob": "z" * 100_000}
    assert client.post("/api/rl/jobs", json=big).status_code == 422  # invalid, but logged
    first = fake.requests[-1]
    assert (first.body_truncated, first.body_size > 100_000, first.json) == (True, True, None)
    assert len(first.body_text) == 64 * 1024
    # The admin API shows the kept 64 KiB as text (before, a cut body showed as nothing at all).
    shown = client.get("/_fake/requests").json()["requests"][-1]
    assert (shown["json"], shown["body_truncated"]) == (None, True)
    assert shown["body"] == first.body_text
    assert shown["body"].startswith('{"job_type":"rl","blob":"zzz')
    for index in range(1100):
        if index % 2:
            client.post("/api/rl/jobs", headers={"Authorization": "Bearer wrong"}, content=b"x" * 1000)
        else:
            client.post("/api/nowhere", content=b"y" * 1000)
    logged = fake.requests
    assert len(logged) == 1000
    assert first not in logged
    assert {r.status for r in logged} == {401, 404}
    assert {r.body_text for r in logged} == {""}  # answered 401/404: kept, but without a body
    assert {r.body_size for r in logged} == {1000}
    shown = client.get("/_fake/requests").json()["requests"]
    assert len(shown) == 1000
    assert shown[-1]["body_size"] == 1000


def test_a_body_over_the_limit_gets_413_and_is_not_kept(
    served: tuple[FakeSynthBackend, httpx.Client],
) -> None:
    fake, client = served
    answer = client.post("/api/rl/jobs", content=b"[" + b" " * (10 * 2**20) + b"]")
    assert answer.status_code == 413
    assert error_message(answer) == (
        f"the request body is {10 * 2**20 + 2} bytes; this fake backend accepts at most {10 * 2**20} bytes"
    )
    assert fake.requests == []
    assert client.post("/api/rl/jobs", json=rl_payload()).status_code == 201


# -- malformed HTTP -----------------------------------------------------------------------------
def raw_exchange(url: str, data: bytes) -> bytes:
    """Send *data* on a fresh connection and read until the server closes it."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=GENEROUS) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


@pytest.mark.parametrize(
    "header",
    [
        b"X-Note: caf\xe9",
        b"X-Note: \xff\xfe\x80",
        b"Idempotency-Key: \xe2\x98\x83",
        b"Authorization: Bearer \xe9",
    ],
)
def test_non_ascii_header_bytes_get_an_answer_not_a_500(
    served: tuple[FakeSynthBackend, httpx.Client], header: bytes
) -> None:
    _, client = served
    url = str(client.base_url)
    request = b"GET /api/rl/jobs HTTP/1.1\r\nHost: x\r\n" + header + b"\r\nConnection: close\r\n"
    if not header.startswith(b"Authorization"):
        request += f"Authorization: Bearer {KEY}\r\n".encode()
    answer = raw_exchange(url, request + b"\r\n")
    assert status_of(answer) == (401 if header.startswith(b"Authorization") else 200), answer[:300]
    assert client.get("/_fake/clock").status_code == 200


@pytest.mark.parametrize(
    "target", [b"http://x/api/rl/jobs", b"http://127.0.0.1/_fake/reset", b"*", b"api/rl/jobs"]
)
def test_a_request_target_that_is_not_a_path_gets_400(
    served: tuple[FakeSynthBackend, httpx.Client], target: bytes
) -> None:
    fake, client = served
    fake.scenario(steps=4)
    request = b"POST " + target + f" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n".encode()
    answer = raw_exchange(str(client.base_url), request + b"Content-Length: 0\r\nConnection: close\r\n\r\n")
    assert status_of(answer) == 400, answer[:300]
    assert b"is not a path; send an origin-form target such as /api/rl/jobs" in answer
    assert fake.default_scenario.steps == 4
    assert client.get("/api/rl/jobs").status_code == 200


@pytest.mark.parametrize(
    ("partial", "expected"),
    [
        (b"", b""),  # connected, sent nothing: closed
        (b"GET /api/rl/jo", b"HTTP/1.1 408"),  # half a request line
        (b"GET /api/rl/jobs HTTP/1.1\r\nHost: x\r\n", b"HTTP/1.1 408"),  # headers never end
        (  # the headers arrived, half the body never does
            b'POST /api/rl/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"job',
            b"HTTP/1.1 408",
        ),
    ],
)
def test_half_sent_requests_time_out(partial: bytes, expected: bytes) -> None:
    fake = FakeSynthBackend(api_key=KEY)
    with fake.serve(read_timeout=0.2) as url:
        answers = [raw_exchange(url, partial) for _ in range(3)]
        assert httpx.get(f"{url}/_fake/clock", headers=AUTH, timeout=GENEROUS).status_code == 200
    fake.close()
    for answer in answers:
        assert answer.startswith(expected), answer[:200]
    if expected:
        assert b"did not arrive within 0.2s" in answers[0]


def test_many_half_sent_requests_are_all_closed() -> None:
    fake = FakeSynthBackend(api_key=KEY)
    with fake.serve(read_timeout=0.5) as url:
        host, port = url.removeprefix("http://").split(":")
        sockets = [socket.create_connection((host, int(port)), timeout=GENEROUS) for _ in range(200)]
        try:
            for sock in sockets:
                sock.sendall(b"GET /api/rl/jobs HTTP/1.1\r\nHost: x\r\n")
            closed = 0
            for sock in sockets:
                while sock.recv(65536):
                    pass
                closed += 1
            assert closed == 200
            assert httpx.get(f"{url}/_fake/clock", headers=AUTH, timeout=GENEROUS).status_code == 200
        finally:
            for sock in sockets:
                sock.close()
    fake.close()


def test_serve_rejects_a_bad_read_timeout() -> None:
    fake = FakeSynthBackend()
    serving = fake.serve(read_timeout=float("nan"))
    with pytest.raises(SynthUsageError, match=r"FakeSynthBackend\.serve\.read_timeout: must be a number"):
        serving.__enter__()


# -- slow task apps never hold up other clients; stopping is bounded ------------------------------
@pytest.fixture
def hanging_task_app() -> Iterator[tuple[str, threading.Event, threading.Event]]:
    """A task app whose ``/rollout`` waits for *release*; *entered* is set when one arrives."""
    entered, release = threading.Event(), threading.Event()
    app = FastAPI()

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"healthy": True}

    @app.post("/rollout")
    async def rollout(request: Request) -> dict[str, Any]:
        body = await request.json()
        entered.set()
        await asyncio.get_running_loop().run_in_executor(None, release.wait)
        return {"trace_correlation_id": body["trace_correlation_id"], "metrics": {"outcome_reward": 1.0}}

    server = InProcessTaskApp(app, api_key=TASK_KEY, export_api_key=False)
    server.start()
    try:
        yield server.url, entered, release
    finally:
        release.set()
        server.stop()


def test_a_hanging_rollout_does_not_hold_up_other_clients(
    hanging_task_app: tuple[str, threading.Event, threading.Event],
) -> None:
    task_url, entered, release = hanging_task_app
    fake = FakeSynthBackend(api_key=KEY, task_app_api_key=TASK_KEY, rollout_timeout=3 * GENEROUS)
    answers: list[httpx.Response] = []
    with fake.serve() as url, httpx.Client(base_url=url, headers=AUTH, timeout=GENEROUS) as client:
        other = client.post("/api/rl/jobs", json=rl_payload()).json()["id"]  # scripted rewards
        fake.next_job(immediate=True)
        hanging = client.post("/api/rl/jobs", json=rl_payload(task_url)).json()["id"]

        def look_at_the_hanging_job() -> None:
            with httpx.Client(base_url=url, headers=AUTH, timeout=3 * GENEROUS) as own:
                answers.append(own.get(f"/api/rl/jobs/{hanging}"))

        stuck = threading.Thread(target=look_at_the_hanging_job)
        stuck.start()
        try:
            assert entered.wait(GENEROUS), "the rollout never reached the task app"
            # The rollout hangs; everything else answers.
            listed = client.get("/_fake/jobs").json()["jobs"]
            assert [(j["id"], j["status"]) for j in listed] == [(other, "running"), (hanging, "running")]
            assert client.get(f"/api/rl/jobs/{other}").json()["status"] == "running"
            assert client.get(f"/api/rl/jobs/{hanging}").json()["status"] == "running"  # mid-step
            assert client.post("/_fake/clock/advance", json={"seconds": 5}).json()["now"] == 5.0
            third = client.post("/api/rl/jobs", json=rl_payload())
            assert third.status_code == 201
            assert client.get("/_fake/requests").status_code == 200
        finally:
            release.set()
            stuck.join(3 * GENEROUS)
        assert not stuck.is_alive()
        assert answers[0].json()["status"] == "succeeded"
    fake.close()


def test_leaving_serve_is_bounded_while_a_handler_is_stuck(
    hanging_task_app: tuple[str, threading.Event, threading.Event],
) -> None:
    task_url, entered, release = hanging_task_app
    fake = FakeSynthBackend(api_key=KEY, task_app_api_key=TASK_KEY, rollout_timeout=3 * GENEROUS)
    fake.next_job(immediate=True)
    serving = fake.serve()
    url = serving.__enter__()
    job_id = httpx.post(f"{url}/api/rl/jobs", json=rl_payload(task_url), headers=AUTH).json()["id"]
    outcome: list[BaseException | int] = []

    def poll() -> None:
        try:
            outcome.append(
                httpx.get(f"{url}/api/rl/jobs/{job_id}", headers=AUTH, timeout=3 * GENEROUS).status_code
            )
        except httpx.HTTPError as exc:
            outcome.append(exc)

    stuck = threading.Thread(target=poll, daemon=True)
    stuck.start()
    try:
        assert entered.wait(GENEROUS), "the rollout never reached the task app"
        finishes(lambda: serving.__exit__(None, None, None))  # returns although the handler is stuck
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{url}/_fake/clock", headers=AUTH, timeout=GENEROUS)
    finally:
        release.set()
        stuck.join(3 * GENEROUS)
        fake.close()
    assert len(outcome) == 1


def test_the_store_lock_is_set_aside_and_taken_back_at_its_depth() -> None:
    lock = StoreLock()
    seen: list[bool] = []

    def other_thread() -> None:
        with lock:
            seen.append(lock.held)

    with lock, lock:
        with lock.set_aside():
            assert not lock.held
            worker = threading.Thread(target=other_thread)
            worker.start()
            worker.join(GENEROUS)
        assert lock.held
    assert seen == [True]
    assert not lock.held  # both levels were taken back, and both released


def test_releasing_a_store_lock_held_by_nobody_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="this thread does not hold"):
        StoreLock().release()


class GatedClock(RealClock):
    """Real time, but ``sleep`` waits for *release* (and says when it started): an injected
    latency that lasts exactly as long as the test wants."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def sleep(self, seconds: float) -> None:
        self.entered.set()
        assert self.release.wait(3 * GENEROUS), "the test never released the latency"


def test_a_latency_fault_on_a_real_clock_holds_up_only_its_own_request() -> None:
    clock = GatedClock()
    fake = FakeSynthBackend(api_key=KEY, clock=clock)
    fake.fault("list", latency=30, fail_next=1)
    answers: list[int] = []
    with fake.serve() as url, httpx.Client(base_url=url, headers=AUTH, timeout=GENEROUS) as client:
        job_id = client.post("/api/rl/jobs", json=rl_payload()).json()["id"]

        def slow_list() -> None:
            with httpx.Client(base_url=url, headers=AUTH, timeout=3 * GENEROUS) as own:
                answers.append(own.get("/api/rl/jobs").status_code)

        slow = threading.Thread(target=slow_list)
        slow.start()
        try:
            assert clock.entered.wait(GENEROUS), "the latency fault never fired"
            assert client.get(f"/api/rl/jobs/{job_id}").status_code == 200
            assert client.get("/_fake/faults").json()["faults"][0]["injected"] == 1
        finally:
            clock.release.set()
            slow.join(3 * GENEROUS)
    fake.close()
    assert answers == [200]


# -- every field of the wrong type gets a 422 naming it; the fake keeps answering -----------------
def still_answers(client: httpx.Client) -> None:
    """A normal API request and a normal admin request both still work."""
    assert client.get("/api/rl/jobs").status_code == 200
    assert client.get("/_fake/clock").status_code == 200


def test_a_float_fault_status_is_refused_and_the_fake_keeps_answering(
    served: tuple[FakeSynthBackend, httpx.Client],
) -> None:
    fake, client = served
    answer = client.post("/_fake/faults", json={"route": "list", "status": 500.5})
    assert answer.status_code == 422
    assert answer.json() == {
        "detail": [
            {
                "loc": "fault.status",
                "msg": "must be an HTTP error status 400-599 (an int), got float 500.5",
                "hint": "e.g. status=503",
            }
        ]
    }
    assert fake.faults == []
    assert client.get("/_fake/faults").json() == {"faults": []}
    still_answers(client)


@pytest.mark.parametrize(
    ("body", "loc", "msg"),
    [
        ({"connect_error": "no"}, "fault.connect_error", "must be true or false, got str 'no'"),
        ({"connect_error": None}, "fault.connect_error", "must be true or false, got NoneType None"),
        ({"status": 500, "cycle": "false"}, "fault.cycle", "must be true or false, got str 'false'"),
        ({"seed": "x"}, "fault.seed", "must be an int from 0 to 2**64 - 1, got str 'x'"),
        ({"seed": 1.5}, "fault.seed", "must be an int from 0 to 2**64 - 1, got float 1.5"),
        ({"latency": "1"}, "fault.latency", "must be a finite number of seconds in (0, 3600], got '1'"),
        ({"status": "500"}, "fault.status", "must be an HTTP error status 400-599 (an int), got str '500'"),
        ({"status": [500]}, "fault.status", "must be an HTTP error status 400-599 (an int), got list [500]"),
        ({"status": True}, "fault.status", "must be an HTTP error status 400-599 (an int), got bool True"),
        ({"fail_next": "3"}, "fault.fail_next", "must be an int from 1 to 1000000000, got str '3'"),
        ({"fail_next": 2.0}, "fault.fail_next", "must be an int from 1 to 1000000000, got float 2.0"),
        (
            {"retry_after": "1"},
            "fault.retry_after",
            "must be a finite number of seconds from 0 to 86400, got '1'",
        ),
        ({"probability": "0.5"}, "fault.probability", "must be in [0, 1], got '0.5'"),
    ],
)
def test_admin_fault_fields_of_the_wrong_type_get_a_422_naming_the_field(
    served: tuple[FakeSynthBackend, httpx.Client], body: dict[str, Any], loc: str, msg: str
) -> None:
    fake, client = served
    answer = client.post("/_fake/faults", json={"route": "list", **body})
    assert answer.status_code == 422
    assert [(p["loc"], p["msg"]) for p in answer.json()["detail"]] == [(loc, msg)]
    assert fake.faults == []
    still_answers(client)


def test_admin_unknown_fields_get_a_did_you_mean(served: tuple[FakeSynthBackend, httpx.Client]) -> None:
    fake, client = served
    answer = client.post("/_fake/faults", json={"route": "list", "stauts": 500})
    assert answer.status_code == 422
    assert error_message(answer) == (
        "unknown fault fields ['stauts']; did you mean 'status' for 'stauts'? allowed: ['connect_error', "
        "'cycle', 'fail_next', 'latency', 'pattern', 'probability', 'retry_after', 'route', 'seed', 'status']"
    )
    many = client.post("/_fake/scenario", json={f"x{i:03}": 1 for i in range(25)})
    assert error_message(many).startswith(
        "unknown scenario fields ['x000', 'x001', 'x002', 'x003', 'x004', 'x005', 'x006', 'x007', 'x008', "
        "'x009', 'x010', 'x011', 'x012', 'x013', 'x014', 'x015', 'x016', 'x017', 'x018', 'x019'] "
        "(and 5 more); allowed: ['duration',"
    )
    assert fake.faults == []
    still_answers(client)


@pytest.mark.parametrize(("value", "got"), [("yes", "str 'yes'"), (1, "int 1"), (None, "NoneType None")])
def test_scenario_flags_must_be_real_booleans(
    served: tuple[FakeSynthBackend, httpx.Client], value: object, got: str
) -> None:
    fake, client = served
    answer = client.post("/_fake/scenario", json={"immediate": value})
    assert answer.status_code == 422
    assert answer.json()["detail"] == [
        {
            "loc": "Scenario.immediate",
            "msg": f"must be true or false, got {got}",
            "hint": "e.g. immediate=True",
        }
    ]
    assert fake.default_scenario == Scenario()
    with pytest.raises(SynthUsageError) as raised:
        fake.scenario(immediate=value)
    assert raised.value.keys == ["Scenario.immediate"]
    assert raised.value.problems[0].message == f"must be true or false, got {got}"
    assert fake.default_scenario == Scenario()
    still_answers(client)


@pytest.mark.parametrize(
    ("body", "loc", "msg"),
    [
        ({"steps": "3"}, "Scenario.steps", "must be an int from 1 to 10000, got '3'"),
        (
            {"outcome": "failed", "error": 5},
            "Scenario.error",
            "must be a string of at most 10000 characters, got int 5",
        ),
        (
            {"outcome": "failed", "error": "x" * 10_001},
            "Scenario.error",
            "must be a string of at most 10000 characters, got 10001 characters",
        ),
    ],
)
def test_admin_scenario_fields_of_the_wrong_type_get_a_422_naming_the_field(
    served: tuple[FakeSynthBackend, httpx.Client], body: dict[str, Any], loc: str, msg: str
) -> None:
    fake, client = served
    answer = client.post("/_fake/scenario", json=body)
    assert answer.status_code == 422
    assert [(p["loc"], p["msg"]) for p in answer.json()["detail"]] == [(loc, msg)]
    assert fake.default_scenario == Scenario()
    still_answers(client)


ERROR_TEXTS = [
    ("x" * 10_001, "got 10001 characters"),
    ("x" * 9_000_000, "got 9000000 characters"),
    (123, "got int 123"),
    ({"nested": [1, 2]}, "got dict {'nested': [1, 2]}"),
]


@pytest.mark.parametrize(("error", "got"), ERROR_TEXTS)
def test_failing_a_job_through_the_admin_api_checks_the_error_like_a_scenario(
    served: tuple[FakeSynthBackend, httpx.Client], error: object, got: str
) -> None:
    fake, client = served
    job_id = client.post("/api/rl/jobs", json=rl_payload()).json()["id"]
    answer = client.post(f"/_fake/jobs/{job_id}/fail", json={"error": error})
    assert answer.status_code == 422
    assert answer.json()["detail"] == [
        {
            "loc": "fail.error",
            "msg": f"must be a string of at most 10000 characters, {got}",
            "hint": "pass a short error message, e.g. 'CUDA out of memory'",
        }
    ]
    assert (fake.job(job_id).status, fake.job(job_id).error) == ("running", None)
    still_answers(client)
    # Scenario(error=...) says the same thing about the same value: one rule.
    with pytest.raises(SynthUsageError) as raised:
        Scenario(outcome="failed", error=error)  # type: ignore[arg-type]
    assert [(p.key, p.message) for p in raised.value.problems] == [
        ("Scenario.error", f"must be a string of at most 10000 characters, {got}")
    ]


@pytest.mark.parametrize(("error", "got"), ERROR_TEXTS)
def test_failing_a_job_in_process_checks_the_error_like_a_scenario(
    fake: FakeSynthBackend, client: httpx.Client, error: object, got: str
) -> None:
    job = fake.job(submit(client, fake))
    with pytest.raises(SynthUsageError) as raised:
        job.fail(error)  # type: ignore[arg-type]
    assert str(raised.value) == (
        f"invalid arguments: FakeJob.fail: must be a string of at most 10000 characters, {got} "
        "(hint: pass a short error message, e.g. 'CUDA out of memory')"
    )
    assert (job.status, job.error) == ("running", None)


def test_an_error_of_exactly_the_limit_fails_the_job(served: tuple[FakeSynthBackend, httpx.Client]) -> None:
    fake, client = served
    first = client.post("/api/rl/jobs", json=rl_payload()).json()["id"]
    second = client.post("/api/rl/jobs", json=rl_payload()).json()["id"]
    answer = client.post(f"/_fake/jobs/{first}/fail", json={"error": "e" * 10_000})
    assert (answer.status_code, answer.json()["status"]) == (200, "failed")
    assert fake.job(first).error == "e" * 10_000
    assert fake.job(second).fail("f" * 10_000).error == "f" * 10_000
    third = client.post("/api/rl/jobs", json=rl_payload()).json()["id"]
    assert client.post(f"/_fake/jobs/{third}/fail", json={}).json()["status"] == "failed"
    assert fake.job(third).error == "failed via the admin API"


@pytest.mark.parametrize(
    ("to", "msg", "hint"),
    [
        ([1], "must be 'running', a step number or 'end', got list [1]", 'e.g. {"to": "end"} or {"to": 3}'),
        (1.0, "must be 'running', a step number or 'end', got float 1.0", 'e.g. {"to": "end"} or {"to": 3}'),
        (True, "must be 'running', a step number or 'end', got bool True", 'e.g. {"to": "end"} or {"to": 3}'),
        (
            None,
            "must be 'running', a step number or 'end', got NoneType None",
            'e.g. {"to": "end"} or {"to": 3}',
        ),
        (
            "e" * 65,
            f"must be 'running', a step number or 'end', got str {'e' * 65!r:.40}",
            'e.g. {"to": "end"} or {"to": 3}',
        ),
        ("edn", "unknown target 'edn'", "use 'running', a step in 0..10, or 'end'"),
        (11, "unknown target 11", "use 'running', a step in 0..10, or 'end'"),
    ],
)
def test_admin_advance_names_the_to_field(
    served: tuple[FakeSynthBackend, httpx.Client], to: object, msg: str, hint: str
) -> None:
    fake, client = served
    job_id = client.post("/api/rl/jobs", json=rl_payload()).json()["id"]
    answer = client.post(f"/_fake/jobs/{job_id}/advance", json={"to": to})
    assert answer.status_code == 422
    assert answer.json()["detail"] == [{"loc": "advance.to", "msg": msg, "hint": hint}]
    assert fake.job(job_id).rewards == []
    still_answers(client)
    moved = client.post(f"/_fake/jobs/{job_id}/advance", json={"to": 3})
    assert (moved.status_code, len(fake.job(job_id).rewards)) == (200, 3)


@pytest.mark.parametrize("action", ["succeed", "cancel"])
def test_succeed_and_cancel_take_no_fields(
    served: tuple[FakeSynthBackend, httpx.Client], action: str
) -> None:
    fake, client = served
    job_id = client.post("/api/rl/jobs", json=rl_payload()).json()["id"]
    answer = client.post(f"/_fake/jobs/{job_id}/{action}", json={"error": "oops"})
    assert answer.status_code == 422
    assert error_message(answer) == f"unknown {action} fields ['error']; allowed: []"
    huge_key = client.post(f"/_fake/jobs/{job_id}/{action}", json={"x" * 100_000: 1})
    assert error_message(huge_key) == f"unknown {action} fields ['{'x' * 40}']; allowed: []"
    assert fake.job(job_id).status == "running"
    still_answers(client)


def test_a_bytes_reward_curve_is_not_a_list_of_rewards() -> None:
    with pytest.raises(SynthUsageError) as raised:
        Scenario(steps=2, reward_curve=b"ab")
    assert [(p.key, p.message) for p in raised.value.problems] == [
        ("Scenario.reward_curve", "unsupported type bytes")
    ]


def test_an_oversized_body_is_a_413_in_process_too(fake: FakeSynthBackend, client: httpx.Client) -> None:
    from pytest_synth_rl.fake.handler import MAX_BODY_BYTES

    huge = b'{"pad": "' + b"x" * MAX_BODY_BYTES + b'"}'
    response = client.post(
        f"{API}/rl/jobs", content=huge, headers={**auth(fake), "content-type": "application/json"}
    )
    assert response.status_code == 413
    assert response.json()["detail"]["error"]["message"] == (
        f"the request body is {len(huge)} bytes; this fake backend accepts at most {MAX_BODY_BYTES} bytes"
    )
    assert fake.requests == []  # never logged, so never kept
    assert client.get(f"{API}/rl/jobs", headers=auth(fake)).status_code == 200
