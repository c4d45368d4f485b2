"""InProcessTaskApp as a server: ports, hosts, keys in the environment, lifespan, failures, stop.

Every test serves a real app over loopback; failure tests assert the error *and* that it came
fast (the bound is generous; it guards against hanging, not against slow machines).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from hang_guard import HANG_GUARD, finishes

from pytest_synth_rl.errors import SynthUsageError, TaskAppError
from pytest_synth_rl.secrets.masking import redact
from pytest_synth_rl.taskapp import CONTRACT_ENDPOINTS, InProcessTaskApp, task_app_auth_headers
from pytest_synth_rl.taskapp.loading import load_module_from_path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "arithmetic_task_app.py"
KEY_VARS = ("ENVIRONMENT_API_KEY", "ENVIRONMENT_API_KEY_ALIASES", "DEV_ENVIRONMENT_API_KEY")


@pytest.fixture
def clean_key_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in KEY_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def example() -> Any:
    return load_module_from_path(EXAMPLE)


def health_app() -> FastAPI:
    """An app whose /health reports the key it currently expects (read at request time)."""
    app = FastAPI()

    @app.get("/health")
    def health(request: Request) -> dict[str, Any]:
        return {
            "ok": True,
            "key_matches": request.headers.get("x-api-key") == os.environ.get("ENVIRONMENT_API_KEY"),
        }

    return app


def timed_error(build: Callable[[], object], *fragments: str) -> TaskAppError:
    with pytest.raises(TaskAppError) as info:
        finishes(build)
    for fragment in fragments:
        assert fragment in str(info.value), f"{fragment!r} not in:\n{info.value}"
    return info.value


# -- addresses ----------------------------------------------------------------------------------
def test_default_is_an_os_picked_port_on_ipv4_loopback() -> None:
    with InProcessTaskApp(health_app()) as task_app:
        assert task_app.port > 0
        assert task_app.url == f"http://127.0.0.1:{task_app.port}"
        assert httpx.get(task_app.url + "/health").json()["ok"] is True
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{task_app.port}/health", timeout=2.0)


def test_localhost_binds_ipv4_loopback() -> None:
    with InProcessTaskApp(health_app(), host="localhost") as task_app:
        assert task_app.url.startswith("http://127.0.0.1:")
        assert httpx.get(task_app.url + "/health").status_code == 200


def _ipv6_loopback_available() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback_available(), reason="IPv6 loopback is disabled on this machine")
def test_ipv6_loopback() -> None:
    with InProcessTaskApp(health_app(), host="::1") as task_app:
        assert task_app.url == f"http://[::1]:{task_app.port}"
        assert httpx.get(task_app.url + "/health").status_code == 200


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "example.com", "", "::"])
def test_non_loopback_host_is_refused(host: str) -> None:
    timed_error(lambda: InProcessTaskApp(health_app(), host=host), "not a loopback address")


def test_busy_explicit_port_is_an_error_and_the_holder_survives() -> None:
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        error = timed_error(
            lambda: InProcessTaskApp(health_app(), port=port).start(), f"127.0.0.1:{port}", "already in use"
        )
        assert error.hint is not None
        assert "port=0" in error.hint
        # The process holding the port is untouched: it still accepts connections.
        client = socket.create_connection(("127.0.0.1", port), timeout=2.0)
        accepted, _ = holder.accept()
        accepted.close()
        client.close()
    finally:
        holder.close()


def test_explicit_free_port_is_used() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with InProcessTaskApp(health_app(), port=port) as task_app:
        assert task_app.port == port
        assert httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200


@pytest.mark.parametrize("port", [-1, 70000, "8000", 1.5, True])
def test_invalid_port_values(port: Any) -> None:
    timed_error(lambda: InProcessTaskApp(health_app(), port=port), "port must be an integer")


def test_two_apps_at_once_with_different_keys(example: Any, clean_key_env: None) -> None:
    first = InProcessTaskApp(factory=example.create_app, api_key="first-key-0123456789")
    second = InProcessTaskApp(factory=example.create_app, api_key="second-key-9876543210")
    with first, second:
        assert first.port != second.port
        for task_app in (first, second):
            ok = httpx.get(task_app.url + "/task_info", headers=task_app_auth_headers(task_app.api_key))
            assert ok.status_code == 200, ok.text
            assert "taskset" in ok.json()
            denied = httpx.get(task_app.url + "/task_info", headers=task_app_auth_headers("wrong-key-000000"))
            assert denied.status_code == 400
        assert os.environ["ENVIRONMENT_API_KEY"] == "second-key-9876543210"
        assert os.environ["ENVIRONMENT_API_KEY_ALIASES"] == "first-key-0123456789"
    for name in KEY_VARS:
        assert name not in os.environ


# -- the key in the environment -----------------------------------------------------------------
def test_generated_key_is_exported_only_while_running(clean_key_env: None) -> None:
    task_app = InProcessTaskApp(health_app())
    assert task_app.api_key_source == "generated"
    assert re.fullmatch(r"[0-9a-f]{64}", task_app.api_key.value)
    assert "ENVIRONMENT_API_KEY" not in os.environ
    with task_app:
        assert os.environ["ENVIRONMENT_API_KEY"] == task_app.api_key.value
        body = httpx.get(task_app.url + "/health", headers={"X-API-Key": task_app.api_key.value}).json()
        assert body["key_matches"] is True
    assert "ENVIRONMENT_API_KEY" not in os.environ


def test_explicit_key_overrides_and_previous_value_is_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVIRONMENT_API_KEY", "outer-value-123456")
    monkeypatch.setenv("ENVIRONMENT_API_KEY_ALIASES", "outer-alias-123456")
    with InProcessTaskApp(health_app(), api_key="inner-key-abcdef123") as task_app:
        assert task_app.api_key_source == "argument"
        assert os.environ["ENVIRONMENT_API_KEY"] == "inner-key-abcdef123"
        assert os.environ["ENVIRONMENT_API_KEY_ALIASES"] == "outer-alias-123456"
    assert os.environ["ENVIRONMENT_API_KEY"] == "outer-value-123456"
    assert os.environ["ENVIRONMENT_API_KEY_ALIASES"] == "outer-alias-123456"


def test_key_from_environment_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVIRONMENT_API_KEY", "env-provided-key-42")
    with InProcessTaskApp(health_app()) as task_app:
        assert task_app.api_key.value == "env-provided-key-42"
        assert task_app.api_key_source == "environment"
    assert os.environ["ENVIRONMENT_API_KEY"] == "env-provided-key-42"


def test_env_restored_even_when_startup_fails(clean_key_env: None) -> None:
    with pytest.raises(TaskAppError):
        InProcessTaskApp(FastAPI(), api_key="never-exported-key").start()  # no /health -> fails
    assert "ENVIRONMENT_API_KEY" not in os.environ


def test_export_api_key_false_leaves_environment_alone(clean_key_env: None) -> None:
    with InProcessTaskApp(health_app(), export_api_key=False) as task_app:
        assert task_app.api_key
        assert "ENVIRONMENT_API_KEY" not in os.environ


def test_repr_and_errors_never_show_the_key() -> None:
    key = "sk-secret-value-abcdef0123456789"
    task_app = InProcessTaskApp(health_app(), api_key=key)
    assert key not in repr(task_app)
    with task_app:
        assert key not in repr(task_app)
        assert "running" in repr(task_app)
        assert key not in redact(f"calling with {key}")
    assert "stopped" in repr(task_app)


# -- lifecycle ----------------------------------------------------------------------------------
def test_lifespan_startup_and_shutdown_run() -> None:
    events: list[str] = []

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        events.append("startup")
        yield
        events.append("shutdown")

    app = FastAPI(lifespan=lifespan)
    app.get("/health")(lambda: {"events": list(events)})
    with InProcessTaskApp(app) as task_app:
        assert httpx.get(task_app.url + "/health").json() == {"events": ["startup"]}
    assert events == ["startup", "shutdown"]


def test_lifespan_off_skips_startup() -> None:
    events: list[str] = []

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        events.append("startup")
        yield

    app = FastAPI(lifespan=lifespan)
    app.get("/health")(lambda: {})
    with InProcessTaskApp(app, lifespan="off"):
        pass
    assert events == []


def test_start_and_stop_are_idempotent_and_restartable() -> None:
    task_app = InProcessTaskApp(health_app())
    task_app.stop()  # stopping a never-started app is a no-op
    assert task_app.start() is task_app
    first_url = task_app.url
    assert task_app.start() is task_app  # already running: same server
    assert task_app.url == first_url
    task_app.stop()
    task_app.stop()
    assert not task_app.is_running
    with task_app:  # and it can be started again
        assert httpx.get(task_app.url + "/health").status_code == 200


def test_url_before_start_is_a_clear_error() -> None:
    timed_error(lambda: InProcessTaskApp(health_app()).url, "has not been started")


@pytest.mark.asyncio
async def test_async_with() -> None:
    async with InProcessTaskApp(health_app()) as task_app, httpx.AsyncClient() as client:
        response = await client.get(task_app.url + "/health", headers={"X-API-Key": task_app.api_key.value})
        assert response.json() == {"ok": True, "key_matches": True}
        port = task_app.port
    assert not task_app.is_running
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=2.0)


# -- failures -----------------------------------------------------------------------------------
def test_lifespan_startup_failure_reports_the_app_log() -> None:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        raise RuntimeError("cannot open the dataset shard 7")
        yield  # pragma: no cover

    app = FastAPI(lifespan=lifespan)
    error = timed_error(
        lambda: InProcessTaskApp(app).start(),
        "failed to start",
        "lifespan startup failed",
        "cannot open the dataset shard 7",
    )
    assert any("cannot open the dataset shard 7" in line for line in error.details["logs"])


def test_required_lifespan_on_an_app_without_lifespan_support() -> None:
    async def no_lifespan(scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "http", "this app only speaks HTTP"

    timed_error(lambda: InProcessTaskApp(no_lifespan, lifespan="on").start(), "lifespan startup failed")


def test_plain_app_without_lifespan_support_runs_in_auto_mode() -> None:
    async def no_lifespan(scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "http", "this app only speaks HTTP"
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"up"})

    with InProcessTaskApp(no_lifespan) as task_app:
        assert httpx.get(task_app.url + "/health").text == "up"


def test_missing_health_route_lists_the_contract_endpoints() -> None:
    app = FastAPI()
    app.get("/healthz")(lambda: {"ok": True})
    task_app = InProcessTaskApp(app)
    error = timed_error(task_app.start, "no /health route", "404", *CONTRACT_ENDPOINTS)
    assert error.url is not None
    assert error.url.startswith("http://127.0.0.1:")
    assert not task_app.is_running


def test_health_path_none_serves_non_task_apps() -> None:
    app = FastAPI()
    app.get("/ping")(lambda: "pong")
    with InProcessTaskApp(app, health_path=None) as task_app:
        assert httpx.get(task_app.url + "/ping").json() == "pong"


def test_startup_that_never_finishes_times_out() -> None:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await asyncio.Event().wait()  # never set: startup hangs until the server is aborted
        yield

    app = FastAPI(lifespan=lifespan)
    timed_error(
        lambda: InProcessTaskApp(app, startup_timeout=0.3, shutdown_timeout=0.2).start(),
        "did not start within 0.3s",
    )


def test_a_startup_timeout_says_where_the_app_waits_without_the_aborts_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Before, the message and the captured log each held uvicorn's traceback of the cancelled
    # startup (the plugin's frames and asyncio's), and no line said where the app was stuck.
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await asyncio.Event().wait()  # the line the message points at
        yield

    app = FastAPI(lifespan=lifespan)
    caplog.set_level(logging.INFO)
    error = timed_error(lambda: InProcessTaskApp(app, startup_timeout=0.3, shutdown_timeout=0.2).start())
    line = lifespan.__wrapped__.__code__.co_firstlineno + 2  # type: ignore[attr-defined]
    assert str(error).startswith(
        "the task app did not start within 0.3s: its lifespan startup is still running, waiting at "
        f"test_taskapp_serving.py:{line} in lifespan: await asyncio.Event().wait()  # the line the "
        "message points at\n  (the server logged nothing)\n  hint: "
    )
    assert "CancelledError" not in str(error)
    assert "startup_timeout=..." in str(error)
    assert [r for r in caplog.records if r.name.startswith("uvicorn") and r.levelno >= logging.ERROR] == []


def test_server_thread_dying_during_startup() -> None:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        asyncio.get_running_loop().stop()  # kills the server's event loop from inside
        yield

    app = FastAPI(lifespan=lifespan)
    timed_error(lambda: InProcessTaskApp(app).start(), "the server thread died", "Event loop stopped")


def test_server_thread_dying_while_running_is_reported() -> None:
    app = FastAPI()
    app.get("/health")(lambda: {"ok": True})

    @app.get("/crash")
    async def crash() -> None:
        asyncio.get_running_loop().stop()

    task_app = InProcessTaskApp(app)
    task_app.start()
    try:
        with contextlib.suppress(httpx.HTTPError):  # the reply may or may not make it out
            httpx.get(task_app.url + "/crash", timeout=2.0)
        assert task_app.wait_until_stopped(2.0)
        timed_error(task_app.ensure_running, "stopped unexpectedly", "server thread died")
        timed_error(lambda: task_app.url, "server thread died")
    finally:
        finishes(task_app.stop)


def test_stop_does_not_hang_on_a_request_that_never_ends() -> None:
    entered = threading.Event()
    app = FastAPI()
    app.get("/health")(lambda: {"ok": True})

    @app.get("/forever")
    async def forever() -> None:
        entered.set()
        await asyncio.Event().wait()

    task_app = InProcessTaskApp(app, shutdown_timeout=0.2)
    task_app.start()
    outcome: list[BaseException | httpx.Response] = []

    def call() -> None:
        try:
            outcome.append(httpx.get(task_app.url + "/forever", timeout=10.0))
        except BaseException as exc:
            outcome.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    assert entered.wait(5.0)
    finishes(task_app.stop)
    caller.join(HANG_GUARD)
    assert not task_app.is_running
    assert len(outcome) == 1  # the client was released (error or 5xx), not left hanging


def test_stop_does_not_hang_on_an_app_shutdown_that_never_ends() -> None:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await asyncio.Event().wait()

    app = FastAPI(lifespan=lifespan)
    app.get("/health")(lambda: {})
    task_app = InProcessTaskApp(app, shutdown_timeout=0.2).start()
    finishes(task_app.stop)
    assert not task_app.is_running


def test_request_errors_show_up_in_logs() -> None:
    app = FastAPI()
    app.get("/health")(lambda: {})

    @app.get("/boom")
    def boom() -> None:
        raise ValueError("reward table corrupted")

    with InProcessTaskApp(app) as task_app:
        assert httpx.get(task_app.url + "/boom").status_code == 500
    # uvicorn logs the traceback after the 500 went out; stopping waits for that request's task.
    assert any("reward table corrupted" in line for line in task_app.logs)
    assert any("Exception in ASGI application" in line for line in task_app.logs)


def test_health_helper_uses_the_app_key(example: Any) -> None:
    with InProcessTaskApp(factory=example.create_app) as task_app:
        report = task_app.health()
        assert report.ok, report.detail
        assert report.health_status == 200


LEAK_SCRIPT = """
import asyncio, contextlib, gc, sys, threading, warnings
import httpx
from fastapi import FastAPI
from pytest_synth_rl.taskapp import InProcessTaskApp

leaks = []
sys.unraisablehook = lambda u: leaks.append(str(u.exc_value))
warnings.simplefilter("error", ResourceWarning)

entered = threading.Event()
app = FastAPI()
app.get("/health")(lambda: {})

@app.get("/crash")
async def crash():
    asyncio.get_running_loop().stop()

@app.get("/forever")
async def forever():
    entered.set()
    await asyncio.Event().wait()

# 1. the server's loop dies under it
task_app = InProcessTaskApp(app).start()
with contextlib.suppress(httpx.HTTPError):
    httpx.get(task_app.url + "/crash", timeout=2.0)
task_app.stop()

# 2. a request that never ends is cut off by stop()
task_app = InProcessTaskApp(app, shutdown_timeout=0.2).start()
caller = threading.Thread(target=lambda: httpx.get(task_app.url + "/forever", timeout=10.0))
caller.start()
entered.wait(5.0)
task_app.stop()
caller.join(5.0)

del task_app
gc.collect()
print("LEAKS:", [leak for leak in leaks if "unclosed" in leak])
"""


def test_no_sockets_leak_when_the_server_dies_or_is_cut_off() -> None:
    # In a fresh interpreter: inside pytest, captured log records keep the dead server alive.
    result = subprocess.run(
        [sys.executable, "-c", LEAK_SCRIPT], capture_output=True, text=True, timeout=60, check=False
    )
    assert "LEAKS: []" in result.stdout, result.stdout + result.stderr[-3000:]


@pytest.mark.parametrize("name", ["startup_timeout", "shutdown_timeout"])
@pytest.mark.parametrize("seconds", [0, -1, float("nan"), float("inf"), "10", True])
def test_a_timeout_that_is_no_number_of_seconds_is_a_usage_error(name: str, seconds: object) -> None:
    # Before, a NaN startup_timeout was taken and "10" raised a bare TypeError.
    with pytest.raises(SynthUsageError) as info:
        InProcessTaskApp(health_app(), **{name: seconds})  # type: ignore[arg-type]
    assert info.value.keys == [f"InProcessTaskApp.{name}"]
    assert f"must be a finite number of seconds > 0, got {seconds!r}" in str(info.value)
