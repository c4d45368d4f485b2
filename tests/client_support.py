"""Shared helpers for the client tests (no tests here): a config file, job factories, and a
loopback server runner for real task-app-shaped apps."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from pytest_synth_rl.client import AsyncRLJob, RetryPolicy, RLJob
from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.taskapp.serving import serve_asgi

API_KEY = "sk_test_client_key_0123456789abcdef"
TASK_KEY = "env_task_key_0123456789abcdef"
BACKEND = "https://api.usesynth.ai"
API = f"{BACKEND}/api"
TASK_URL = "http://127.0.0.1:8114"

#: Every variable the client reads, cleared so a developer's shell cannot change test outcomes.
CLIENT_ENV_VARS = (
    "BACKEND_BASE_URL",
    "SYNTH_BACKEND_URL",
    "SYNTH_API_KEY",
    "TASK_APP_URL",
    "ENVIRONMENT_API_KEY",
)

# The contract's minimal valid RL config (section 2.2).
MINIMAL_TOML = """\
[algorithm]
type = "online"
method = "policy_gradient"
variety = "gspo"

[services]
task_url = ""

[model]
base = "Qwen/Qwen3-0.6B"
trainer_mode = "lora"
label = "plugin-smoke"

[compute]
gpu_type = "H100"
gpu_count = 1

[topology]
type = "single_node_split"
gpus_for_vllm = 1
gpus_for_training = 1

[rollout]
env_name = "math"
policy_name = "math-single-step"
max_turns = 1
episodes_per_batch = 4
max_concurrent_rollouts = 2

[training]
num_epochs = 1
iterations_per_epoch = 1
max_turns = 1
batch_size = 2
group_size = 2
learning_rate = 5e-6
"""


def clear_client_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in CLIENT_ENV_VARS:
        monkeypatch.delenv(name, raising=False)


def write_config(directory: Path, text: str = MINIMAL_TOML) -> Path:
    path = directory / "rl.toml"
    path.write_text(text, encoding="utf-8")
    return path


def job_kwargs(**overrides: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "backend_url": BACKEND,
        "api_key": API_KEY,
        "task_app_url": TASK_URL,
        "skip_health_check": True,
        "clock": VirtualClock(),
        "retry": RetryPolicy(seed=1234),
    }
    kwargs.update(overrides)
    return kwargs


def make_job(config_path: Path, **overrides: Any) -> RLJob:
    return RLJob.from_config(config_path, **job_kwargs(**overrides))


def make_async_job(config_path: Path, **overrides: Any) -> AsyncRLJob:
    return AsyncRLJob.from_config(config_path, **job_kwargs(**overrides))


def attach(job_id: str = "job-1", **overrides: Any) -> RLJob:
    kwargs: dict[str, Any] = {
        "backend_url": BACKEND,
        "api_key": API_KEY,
        "clock": VirtualClock(),
        "retry": RetryPolicy(seed=7),
    }
    kwargs.update(overrides)
    return RLJob.from_job_id(job_id, **kwargs)


@contextmanager
def serve_app(app: Any) -> Iterator[str]:
    """Serve an ASGI app on a free loopback port (the package's own server); yields its base URL."""
    with serve_asgi(app, lifespan="off", description="test server") as server:
        yield server.url


def free_port() -> int:
    """A loopback port with nothing listening on it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port
