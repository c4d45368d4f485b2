"""Shared helpers for the FakeSynthBackend tests (imported by the other ``test_fake_*`` modules;
their fixtures live in ``conftest.py``).

The payload is written out by hand after contract §3 rather than built by the config layer, so
the fake's tests do not depend on the builder: the fake must accept what the real SDK sends.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from pytest_synth_rl.client import RLJob
from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.fake import FakeSynthBackend

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
BASE = "https://api.usesynth.ai"
API = f"{BASE}/api"
TASK_KEY = "task-app-key-for-fake-tests-0123456789"

_CONFIG: dict[str, Any] = {
    "algorithm": {"type": "online", "method": "policy_gradient", "variety": "gspo"},
    "services": {"task_url": "https://task-app.example.com"},
    "model": {"base": "Qwen/Qwen3-0.6B", "trainer_mode": "lora", "label": "fake-tests"},
    "compute": {
        "gpu_type": "H100",
        "gpu_count": 1,
        "topology": {"reference_placement": "none"},
    },
    "topology": {"type": "single_node_split", "gpus_for_vllm": 1, "gpus_for_training": 1},
    "reference": {"placement": "none"},
    "rollout": {
        "env_name": "arithmetic",
        "policy_name": "arithmetic-solver",
        "max_turns": 1,
        "episodes_per_batch": 4,
        "max_concurrent_rollouts": 2,
    },
    "training": {
        "num_epochs": 1,
        "iterations_per_epoch": 1,
        "max_turns": 1,
        "batch_size": 2,
        "group_size": 2,
        "learning_rate": 5e-6,
    },
}


def rl_payload(task_url: str = "https://task-app.example.com", **config_updates: Any) -> dict[str, Any]:
    """A valid RL job payload (contract §3) pointing at *task_url*; sections can be replaced."""
    config = copy.deepcopy(_CONFIG)
    config["services"]["task_url"] = task_url
    for section, value in config_updates.items():
        if value is None:
            config.pop(section, None)
        else:
            config[section] = value
    return {
        "job_type": "rl",
        "compute": copy.deepcopy(config["compute"]),
        "data": {"endpoint_base_url": task_url, "config": config, "base_model": "Qwen/Qwen3-0.6B"},
        "tags": {"source": "train-cli"},
        "metadata": {"backend_base_url": API},
    }


def job_on(fake: FakeSynthBackend, clock: VirtualClock) -> RLJob:
    """An ``RLJob`` of the arithmetic example sent to *fake* through its transport, on *clock*,
    for a task app the fake does not roll out against (no health check)."""
    return RLJob.from_config(
        EXAMPLES / "arithmetic.toml",
        backend_url=fake.base_url,
        api_key=fake.api_key,
        task_app_url="https://task-app.example.com",
        skip_health_check=True,
        clock=clock,
        transport=fake.transport(),
    )


def auth(fake: FakeSynthBackend) -> dict[str, str]:
    return {"Authorization": f"Bearer {fake.api_key.value}"}


def submit(client: httpx.Client, fake: FakeSynthBackend, payload: dict[str, Any] | None = None) -> str:
    response = client.post(f"{API}/rl/jobs", json=payload or rl_payload(), headers=auth(fake))
    assert response.status_code == 201, response.text
    job_id = response.json()["id"]
    assert isinstance(job_id, str)
    return job_id


@contextlib.contextmanager
def served_client(key: str, timeout: float = 60.0) -> Iterator[tuple[FakeSynthBackend, httpx.Client]]:
    """A fake with *key* on a virtual clock, served on loopback, and a client with that key."""
    fake = FakeSynthBackend(api_key=key, clock=VirtualClock())
    headers = {"Authorization": f"Bearer {key}"}
    with fake.serve() as url, httpx.Client(base_url=url, headers=headers, timeout=timeout) as client:
        yield fake, client
    fake.close()


#: Seconds a raw-socket read may wait on a served fake; only a hang gets near it.
SOCKET_TIMEOUT = 60.0


def open_socket(client: httpx.Client) -> socket.socket:
    """A raw connection to the served fake *client* talks to, for bytes httpx would not send."""
    return socket.create_connection((client.base_url.host, client.base_url.port), timeout=SOCKET_TIMEOUT)


def read_answer(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (a reset after the answer ends it too)."""
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except ConnectionResetError:
        pass
    return b"".join(chunks)


def error_message(response: httpx.Response) -> str:
    """The fake's error text: ``detail.error.message``, or the ``loc: msg`` items of a 422."""
    detail = response.json()["detail"]
    if isinstance(detail, dict):
        return str(detail["error"]["message"])
    return "; ".join(f"{item['loc']}: {item['msg']}" for item in detail)


def poll_to_end(
    client: httpx.Client, fake: FakeSynthBackend, job_id: str, interval: float = 10.0, limit: int = 10_000
) -> tuple[dict[str, Any], int]:
    """Poll the status route, sleeping *interval* virtual seconds, until terminal."""
    clock = fake.clock
    assert isinstance(clock, VirtualClock)
    for polls in range(1, limit + 1):
        body = client.get(f"{API}/rl/jobs/{job_id}", headers=auth(fake)).json()
        if body["status"] in ("succeeded", "failed", "cancelled"):
            return body, polls
        clock.sleep(interval)
    raise AssertionError(f"job {job_id} did not finish within {limit} polls")


@contextlib.contextmanager
def no_real_sleep(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """Record any ``time.sleep`` made while the block runs (an offline job must make none).

    Wall-clock speed is a benchmark's business (bench/); what a test can assert is the reason a
    two-hour job is fast: nothing in it waits for real.
    """
    slept: list[float] = []
    with monkeypatch.context() as patch:
        patch.setattr(time, "sleep", slept.append)
        yield slept


def load_example() -> ModuleType:
    """The example task app module (examples/ is not a package)."""
    name = "fake_tests_arithmetic_task_app"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, EXAMPLES / "arithmetic_task_app.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return module


def url_building_app(build: Callable[[str], str], key: str) -> FastAPI:
    """A task app that posts one chat call to ``build(inference_url)`` and scores 1.0 if it got 200."""
    app = FastAPI()

    @app.get("/")
    @app.get("/health")
    @app.get("/info")
    @app.get("/task_info")
    async def ok(request: Request) -> Any:
        if request.url.path == "/task_info" and request.headers.get("x-api-key") != key:
            return JSONResponse({"detail": "bad key"}, status_code=401)
        return {"taskset": {"env_name": "math"}, "task": {"id": "t", "name": "T"}}

    @app.post("/rollout")
    async def rollout(request: Request) -> Any:
        if request.headers.get("x-api-key") != key:
            return JSONResponse({"detail": "bad key"}, status_code=401)
        payload = await request.json()
        url = build(payload["policy"]["config"]["inference_url"])
        async with httpx.AsyncClient() as client:
            answer = await client.post(url, json={"messages": [{"role": "user", "content": "1+1"}]})
        if answer.status_code != 200:
            return JSONResponse({"detail": f"model said {answer.status_code}"}, status_code=502)
        metrics = {"outcome_reward": 1.0}
        return {"trace_correlation_id": payload["trace_correlation_id"], "metrics": metrics}

    return app


def test_payload_helper_is_what_the_fake_accepts(fake: FakeSynthBackend, client: httpx.Client) -> None:
    # The helper itself must produce a payload the fake's validator accepts, or every other
    # test in these modules would be testing the 422 path by accident.
    response = client.post(f"{API}/rl/jobs", json=rl_payload(), headers=auth(fake))
    assert response.status_code == 201, response.text


class SteppedClock:
    """Real-time stand-in (``is_virtual`` False) whose time moves only when told to."""

    is_virtual = False

    def __init__(self) -> None:
        self.t = 100.0

    def now(self) -> float:
        return self.t

    def time(self) -> float:
        return 1_767_225_600.0 + self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds

    async def async_sleep(self, seconds: float) -> None:
        self.t += seconds
