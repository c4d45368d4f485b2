"""Run-level state: task-app health probed once per app, not once per job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.plugin.session import SynthJobFactory, SynthRun
from pytest_synth_rl.plugin.settings import resolve_settings
from pytest_synth_rl.taskapp import InProcessTaskApp

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


class _Counting:
    """An ASGI app counting /health probes; /task_info answers only when *task_info* is set."""

    def __init__(self, task_info: bool) -> None:
        self.task_info = task_info
        self.health_calls = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        path = scope["path"]
        if path == "/health":
            self.health_calls += 1
        status = 200 if path == "/health" or (path == "/task_info" and self.task_info) else 404
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": b"{}"})


@pytest.fixture
def run() -> Any:
    synth_run = SynthRun(resolve_settings(cli={}, env={}, ini={}))
    yield synth_run
    synth_run.close()


def test_a_healthy_app_is_probed_once(run: SynthRun) -> None:
    counting = _Counting(task_info=True)
    with InProcessTaskApp(counting) as app:
        start = counting.health_calls  # the server's own readiness probe
        assert run.task_app_known_healthy(app)
        assert run.task_app_known_healthy(app)
        assert counting.health_calls == start + 1


def test_an_unhealthy_app_is_not_cached_and_probes_again(run: SynthRun) -> None:
    counting = _Counting(task_info=False)
    with InProcessTaskApp(counting) as app:
        start = counting.health_calls
        assert not run.task_app_known_healthy(app)
        assert not run.task_app_known_healthy(app)
        assert counting.health_calls == start + 2


def test_jobs_pointed_elsewhere_probe_as_usual() -> None:
    settings = resolve_settings(cli={}, env={}, ini={})
    jobs = SynthJobFactory(
        test_id="t",
        settings=settings,
        clock=VirtualClock(),
        config=None,
        task_app_url="http://127.0.0.1:9",
        task_app_api_key="k" * 12,
        api_key="sk_test_session_key",
        skip_health_check=True,
    )
    config = EXAMPLES / "arithmetic.toml"
    own = jobs(config)
    other_key = jobs(config, task_app_api_key="x" * 12)
    explicit = jobs(config, skip_health_check=False)
    assert own._skip_health_check is True
    assert other_key._skip_health_check is False
    assert explicit._skip_health_check is False
    jobs.finish(cancel_running=False)
