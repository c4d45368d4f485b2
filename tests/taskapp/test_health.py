"""The task-app health probe against real task-app-shaped servers on loopback.

One uvicorn server per module serves several behaviours under path prefixes, so each test
probes a different "task app" by base URL while every request really crosses a socket.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest
from client_support import free_port, serve_app
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from pytest_synth_rl.errors import TaskAppError
from pytest_synth_rl.secrets.masking import Secret
from pytest_synth_rl.taskapp.health import (
    HealthReport,
    async_check_task_app_health,
    check_task_app_health,
    task_app_auth_headers,
)

KEY = "env_key_health_0123456789"


@dataclass
class Seen:
    """Headers of every request the server received, keyed by path."""

    headers: dict[str, list[dict[str, str]]] = field(default_factory=dict)

    def add(self, request: Request) -> None:
        self.headers.setdefault(request.url.path, []).append(dict(request.headers))


def _build_app(seen: Seen) -> Starlette:
    def authorised(request: Request) -> bool:
        return request.headers.get("x-api-key") == KEY

    async def ok_health(request: Request) -> Response:
        seen.add(request)
        if not authorised(request):
            return JSONResponse({"detail": {"error": {"code": "unauthorised"}}}, status_code=400)
        return JSONResponse({"healthy": True})

    async def ok_task_info(request: Request) -> Response:
        seen.add(request)
        if not authorised(request):
            return JSONResponse({"detail": {"error": {"code": "unauthorised"}}}, status_code=400)
        return JSONResponse({"taskset": {"name": "math"}})

    async def prefix_health(request: Request) -> Response:
        seen.add(request)
        return JSONResponse({"expected_api_key_prefix": KEY[:6]}, status_code=401)

    async def detail_health(request: Request) -> Response:
        seen.add(request)
        return JSONResponse({"detail": "Invalid key; Expected prefix env_ke"}, status_code=403)

    async def plain401_health(request: Request) -> Response:
        seen.add(request)
        return JSONResponse({"detail": "nope"}, status_code=401)

    async def text401_health(request: Request) -> Response:
        seen.add(request)
        return PlainTextResponse("expected prefix but not json", status_code=401)

    async def missing(request: Request) -> Response:
        seen.add(request)
        return JSONResponse({"detail": "Not Found"}, status_code=404)

    async def leaky_health(request: Request) -> Response:
        seen.add(request)
        return JSONResponse({"healthy": True})

    routes = [
        Route("/ok/health", ok_health),
        Route("/ok/task_info", ok_task_info),
        Route("/prefix/health", prefix_health),
        Route("/prefix/task_info", ok_task_info),
        Route("/detail/health", detail_health),
        Route("/detail/task_info", ok_task_info),
        Route("/plain401/health", plain401_health),
        Route("/plain401/task_info", ok_task_info),
        Route("/text401/health", text401_health),
        Route("/text401/task_info", ok_task_info),
        Route("/noinfo/health", ok_health),
        Route("/noinfo/task_info", missing),
    ]
    return Starlette(routes=routes)


@dataclass
class LiveServer:
    base: str
    seen: Seen


@pytest.fixture(scope="module")
def live() -> Iterator[LiveServer]:
    seen = Seen()
    with serve_app(_build_app(seen)) as base:
        yield LiveServer(base=base, seen=seen)


def test_auth_headers_all_three() -> None:
    assert task_app_auth_headers("k") == {
        "X-API-Key": "k",
        "X-API-Keys": "k",
        "Authorization": "Bearer k",
    }
    assert task_app_auth_headers(Secret(KEY))["Authorization"] == f"Bearer {KEY}"
    assert task_app_auth_headers(None) == {}
    assert task_app_auth_headers("") == {}


def test_healthy_app_and_all_three_headers_arrive(live: LiveServer) -> None:
    report = check_task_app_health(f"{live.base}/ok/", KEY)
    assert report == HealthReport(
        ok=True,
        health_status=200,
        task_info_status=200,
        detail="/health=200, /task_info=200",
        url=f"{live.base}/ok",
    )
    for path in ("/ok/health", "/ok/task_info"):
        headers = live.seen.headers[path][-1]
        assert headers["x-api-key"] == KEY
        assert headers["x-api-keys"] == KEY
        assert headers["authorization"] == f"Bearer {KEY}"


def test_wrong_key_gives_400_which_is_not_ok(live: LiveServer) -> None:
    report = check_task_app_health(f"{live.base}/ok", "wrong-key-xyz")
    assert not report.ok
    assert report.health_status == 400
    assert report.task_info_status == 400
    assert report.detail == "/health=400, /task_info=400"


@pytest.mark.parametrize("variant", ["prefix", "detail"])
def test_auth_optional_health_counts_as_up(live: LiveServer, variant: str) -> None:
    report = check_task_app_health(f"{live.base}/{variant}", KEY)
    assert report.ok, report.detail
    assert report.health_status in (401, 403)
    assert report.task_info_status == 200


@pytest.mark.parametrize("variant", ["plain401", "text401"])
def test_401_without_prefix_hint_is_not_ok(live: LiveServer, variant: str) -> None:
    report = check_task_app_health(f"{live.base}/{variant}", KEY)
    assert not report.ok
    assert report.health_status == 401
    assert report.task_info_status == 200


def test_task_info_must_be_200(live: LiveServer) -> None:
    report = check_task_app_health(f"{live.base}/noinfo", KEY)
    assert not report.ok
    assert (report.health_status, report.task_info_status) == (200, 404)
    assert report.detail == "/health=200, /task_info=404"


def test_connection_refused_is_reported_not_raised() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    report = check_task_app_health(url, KEY, timeout=2.0)
    assert not report.ok
    assert report.health_status is None
    assert report.task_info_status is None
    assert report.detail.startswith("/health=error (ConnectError")
    assert report.detail.endswith("/task_info=skipped")


def test_injected_client_is_used_and_left_open(live: LiveServer) -> None:
    with httpx.Client() as client:
        report = check_task_app_health(f"{live.base}/ok", KEY, client=client)
        assert report.ok
        assert not client.is_closed


@pytest.mark.parametrize("bad", ["", "127.0.0.1:8114", "ftp://127.0.0.1/x", "http://"])
def test_malformed_url_is_a_task_app_error(bad: str) -> None:
    with pytest.raises(TaskAppError, match="task app URL") as info:
        check_task_app_health(bad, KEY)
    assert "http://127.0.0.1:8114" in (info.value.hint or "")


def test_key_never_in_detail(live: LiveServer) -> None:
    # The error text of a failed request can echo the URL; a key in it must come out masked.
    report = check_task_app_health(f"http://127.0.0.1:{free_port()}/{KEY}", KEY, timeout=2.0)
    assert KEY not in report.detail
    assert KEY not in repr(report)


def test_async_probe_matches_sync(live: LiveServer) -> None:
    async def main() -> tuple[HealthReport, HealthReport, HealthReport]:
        ok = await async_check_task_app_health(f"{live.base}/ok", KEY)
        bad = await async_check_task_app_health(f"{live.base}/noinfo", KEY)
        async with httpx.AsyncClient() as client:
            refused = await async_check_task_app_health(
                f"http://127.0.0.1:{free_port()}", KEY, client=client, timeout=2.0
            )
            assert not client.is_closed
        return ok, bad, refused

    ok, bad, refused = asyncio.run(main())
    assert ok.ok
    assert ok.detail == "/health=200, /task_info=200"
    assert not bad.ok
    assert bad.task_info_status == 404
    assert not refused.ok
    assert "ConnectError" in refused.detail
    headers = live.seen.headers["/ok/task_info"][-1]
    assert headers["x-api-keys"] == KEY
