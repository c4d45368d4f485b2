"""The fake served on loopback, driven by clients that are not httpx (urllib, the upstream SDK)."""

from __future__ import annotations

import http.client
import importlib.util
import json
import signal
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_fake_support import rl_payload

from pytest_synth_rl.clock import ScaledClock, VirtualClock
from pytest_synth_rl.errors import SynthError
from pytest_synth_rl.fake import DEFAULT_API_KEY, FakeSynthBackend

KEY = DEFAULT_API_KEY


def call(
    method: str, url: str, body: Any = None, *, key: str | None = KEY, headers: dict[str, str] | None = None
) -> tuple[int, Any, dict[str, str]]:
    """One request with urllib; returns (status, parsed JSON or text, headers)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            raw, status, got = response.read(), response.status, dict(response.headers)
    except urllib.error.HTTPError as error:
        raw, status, got = error.read(), error.code, dict(error.headers)
    try:
        return status, json.loads(raw), got
    except ValueError:
        return status, raw.decode(), got


@pytest.fixture
def served() -> Iterator[tuple[FakeSynthBackend, str]]:
    fake = FakeSynthBackend(clock=VirtualClock())
    with fake.serve() as url:
        yield fake, url
    fake.close()


def test_urllib_submits_and_polls_a_job_to_success(served: tuple[FakeSynthBackend, str]) -> None:
    fake, url = served
    fake.scenario(steps=3, polls=5)
    status, created, _ = call("POST", f"{url}/api/rl/jobs", rl_payload())
    assert status == 201
    job_id = created["id"]
    seen = [call("GET", f"{url}/api/rl/jobs/{job_id}")[1]["status"] for _ in range(5)]
    assert seen == ["running", "running", "running", "running", "succeeded"]
    _, events, _ = call("GET", f"{url}/api/rl/jobs/{job_id}/events?since_seq=0&limit=50")
    assert events["events"][-1]["type"] == "rl.train.completed"
    _, metrics, _ = call("GET", f"{url}/api/learning/jobs/{job_id}/metrics?after_step=-1")
    assert {p["step"] for p in metrics["points"]} == {1, 2, 3}
    assert fake.requests[0].url.startswith(url)


def test_served_errors_are_http_answers(served: tuple[FakeSynthBackend, str]) -> None:
    _, url = served
    status, body, headers = call("GET", f"{url}/api/rl/jobs", key=None)
    assert status == 401
    assert body["detail"]["error"]["code"] == "unauthorised"
    assert headers["www-authenticate"] == "Bearer"
    status, body, _ = call("GET", f"{url}/api/rl/nothing")  # strict mode only applies to respx
    assert status == 404
    assert "GET /api/rl/jobs/{job_id}" in body["detail"]["error"]["routes"]
    status, body, _ = call("POST", f"{url}/api/rl/jobs", [1])
    assert status == 422


def test_admin_routes_script_the_fake_from_outside(served: tuple[FakeSynthBackend, str]) -> None:
    fake, url = served
    status, index, _ = call("GET", f"{url}/_fake")
    assert status == 200
    assert "POST /_fake/reset" in index["routes"]
    # The API base a client should use is the served address, not the hosted backend's.
    assert index["api_base"] == f"{url}/api"
    status, scenario, _ = call("POST", f"{url}/_fake/scenario", {"steps": 2, "duration": 20.0})
    assert (status, scenario["steps"], scenario["mode"]) == (200, 2, "duration")
    call("POST", f"{url}/_fake/scenario", {"job": "next", "outcome": "failed", "immediate": True})
    first = call("POST", f"{url}/api/rl/jobs", rl_payload())[1]["id"]
    second = call("POST", f"{url}/api/rl/jobs", rl_payload())[1]["id"]
    assert call("GET", f"{url}/api/rl/jobs/{first}")[1]["status"] == "failed"
    assert call("GET", f"{url}/api/rl/jobs/{second}")[1]["status"] == "running"
    status, moved, _ = call("POST", f"{url}/_fake/clock/advance", {"seconds": 20})
    assert status == 200
    assert moved["now"] == 20.0
    assert call("GET", f"{url}/api/rl/jobs/{second}")[1]["status"] == "succeeded"
    _, jobs, _ = call("GET", f"{url}/_fake/jobs")
    assert [j["id"] for j in jobs["jobs"]] == [first, second]
    _, detail, _ = call("GET", f"{url}/_fake/jobs/{second}")
    assert detail["events"][-1]["type"] == "rl.train.completed"
    _, log, _ = call("GET", f"{url}/_fake/requests")
    assert log["requests"][0]["route"] == "submit"
    assert log["requests"][0]["headers"]["authorization"] == "Bearer sk_t…ey"
    status, fault, _ = call("POST", f"{url}/_fake/faults", {"route": "list", "status": 503, "fail_next": 1})
    assert (status, fault["kind"]) == (201, "status")
    assert call("GET", f"{url}/api/rl/jobs")[0] == 503
    assert call("GET", f"{url}/api/rl/jobs")[0] == 200
    status, pushed, _ = call("POST", f"{url}/_fake/jobs/{second}/fail", {"error": "x"})
    assert status == 409  # already succeeded: refused, as the API's cancel of a finished job
    assert pushed["detail"]["error"]["code"] == "job_already_finished"
    assert pushed["detail"]["error"]["job_status"] == "succeeded"
    assert call("GET", f"{url}/api/rl/jobs/{second}")[1]["status"] == "succeeded"
    assert call("POST", f"{url}/_fake/reset")[0] == 200
    assert fake.jobs == []


def test_admin_errors_name_the_problem(served: tuple[FakeSynthBackend, str]) -> None:
    _, url = served
    status, body, _ = call("POST", f"{url}/_fake/scenario", {"steps": 0})
    assert status == 422
    assert body["detail"][0]["loc"] == "Scenario.steps"
    status, body, _ = call("POST", f"{url}/_fake/scenario", {"speed": 3})
    assert status == 422
    assert "unknown scenario fields ['speed']" in body["detail"]["error"]["message"]
    status, body, _ = call("GET", f"{url}/_fake/jobs/job_nope")
    assert status == 404
    status, body, _ = call("POST", f"{url}/_fake/faults", {"route": "nowhere"})
    assert status == 422
    assert body["detail"][0]["loc"] == "fault.route"
    status, body, _ = call("GET", f"{url}/_fake/teapot")
    assert status == 404
    assert "GET /_fake/jobs" in body["detail"]["error"]["routes"]


def test_connect_fault_drops_the_connection(served: tuple[FakeSynthBackend, str]) -> None:
    fake, url = served
    fake.fault("list", connect_error=True, fail_next=1)
    with pytest.raises((urllib.error.URLError, http.client.HTTPException, ConnectionError)):
        call("GET", f"{url}/api/rl/jobs")
    assert call("GET", f"{url}/api/rl/jobs")[0] == 200
    assert fake.calls("list")[0].fault == "connection error on route 'list'"


def test_served_on_a_scaled_real_clock() -> None:
    fake = FakeSynthBackend()
    with fake.serve(speed=1_000_000.0) as url:
        assert isinstance(fake.clock, ScaledClock)
        fake.scenario(duration=60.0, steps=2)  # 60 virtual seconds = 60 microseconds of real time
        job_id = call("POST", f"{url}/api/rl/jobs", rl_payload())[1]["id"]
        assert call("GET", f"{url}/api/rl/jobs/{job_id}")[1]["status"] == "succeeded"
        with pytest.raises(SynthError, match="replaces the clock"), fake.serve(speed=2.0):
            pass
    assert isinstance(fake.clock, VirtualClock)  # restored
    fake.close()


# -- the upstream SDK ------------------------------------------------
_SDK_CONFIG = """
[algorithm]
type = "online"
method = "policy_gradient"
variety = "gspo"

[services]
task_url = "https://task-app.example.com"

[model]
base = "Qwen/Qwen3-0.6B"
trainer_mode = "lora"
label = "sdk-against-fake"

[compute]
gpu_type = "H100"
gpu_count = 1

[topology]
type = "single_node_split"
gpus_for_vllm = 1
gpus_for_training = 1

[rollout]
env_name = "arithmetic"
policy_name = "arithmetic-solver"
max_turns = 1
episodes_per_batch = 4
max_concurrent_rollouts = 2
"""


@pytest.mark.skipif(
    importlib.util.find_spec("synth_ai") is None,
    reason="the upstream SDK (pip install synth-ai==0.4.12) is not installed in this environment",
)
def test_upstream_sdk_rljob_submits_and_polls_to_success(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Importing the SDK's RLJob imports its in-process module, which replaces the SIGINT/SIGTERM
    # handlers with ones that do not stop the process (contract §5); put ours back. It also
    # opens a queue database, which goes to the test's tmp_path instead of the home directory.
    monkeypatch.setenv("EXPERIMENT_QUEUE_DB_PATH", str(tmp_path / "experiment_queue.db"))
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        from synth_ai.sdk.api.train.rl import RLJob  # type: ignore[import-not-found,unused-ignore]
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)

    config = tmp_path / "rl.toml"
    config.write_text(_SDK_CONFIG)
    monkeypatch.setenv("SYNTH_LOCALAPI_AUTH_PERSIST", "0")
    monkeypatch.setenv("ENVIRONMENT_API_KEY", "env-key-for-the-sdk-0123456789")
    fake = FakeSynthBackend(clock=VirtualClock())
    fake.scenario(immediate=True, steps=3)  # done on the first poll: the SDK sleeps for real
    with fake.serve() as url:
        job = RLJob.from_config(
            config,
            backend_url=url,
            api_key=KEY,
            task_app_url="https://task-app.example.com",
            task_app_api_key="env-key-for-the-sdk-0123456789",
        )
        job = RLJob(job.config, skip_health_check=True)
        job_id = job.submit()
        result = job.poll_until_complete(timeout=30.0, interval=0.01)
    assert result["status"] == "succeeded"
    assert result["id"] == job_id
    submitted = fake.job(job_id).payload
    assert submitted["data"]["endpoint_base_url"] == "https://task-app.example.com"
    assert submitted["data"]["base_model"] == "Qwen/Qwen3-0.6B"
    fake.close()
