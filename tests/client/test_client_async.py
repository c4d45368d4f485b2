"""AsyncRLJob: the same behaviour as RLJob over httpx.AsyncClient and clock.async_sleep."""

from __future__ import annotations

import json
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
    make_async_job,
    serve_app,
    write_config,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from pytest_synth_rl.client import AsyncRLJob, RetryPolicy, SynthCallbackWarning, async_list_rl_jobs
from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.errors import (
    BackendError,
    JobFailedError,
    JobSubmitError,
    JobTimeoutError,
    SynthError,
    TaskAppError,
)

JOB = f"{API}/rl/jobs/job-1"


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    return write_config(tmp_path)


def _attached(**kw: Any) -> AsyncRLJob:
    kwargs: dict[str, Any] = {"clock": VirtualClock(), "retry": RetryPolicy(seed=3), **kw}
    return AsyncRLJob.from_job_id("job-1", backend_url=BACKEND, api_key=API_KEY, **kwargs)


def _virtual(job: AsyncRLJob) -> VirtualClock:
    assert isinstance(job.clock, VirtualClock)
    return job.clock


@pytest.mark.asyncio
async def test_submit_and_poll_to_success(router: respx.MockRouter, config_path: Path) -> None:
    submit = router.post(f"{API}/rl/jobs").mock(
        side_effect=[httpx.Response(500), httpx.Response(201, json={"id": "job-1"})]
    )
    router.get(JOB).mock(
        side_effect=[
            httpx.Response(200, json={"status": "queued"}),
            httpx.Response(200, json={"status": "Running"}),
            httpx.Response(200, json={"status": "COMPLETED", "final_reward": 0.9}),
        ]
    )
    async with make_async_job(config_path, retry=RetryPolicy(jitter=False)) as job:
        assert await job.submit() == "job-1"
        result = await job.poll_until_complete(timeout=60, interval=15)
    keys = {call.request.headers["idempotency-key"] for call in submit.calls}
    assert keys == {job.idempotency_key}
    assert json.loads(submit.calls.last.request.content) == job.payload
    assert result.succeeded
    assert result.final_reward == 0.9
    assert [r.status for r in result.history] == ["queued", "running", "completed"]
    assert _virtual(job).sleeps == [0.5, 15.0, 15.0]  # one retry backoff, then two poll intervals
    assert job.http_client.is_closed


@pytest.mark.asyncio
async def test_async_timeout_is_exact(router: respx.MockRouter) -> None:
    route = router.get(JOB).respond(200, json={"status": "running"})
    async with _attached() as job:
        with pytest.raises(JobTimeoutError) as info:
            await job.poll_until_complete(timeout=7200, interval=10)
    assert route.call_count == 721
    assert sum(_virtual(job).sleeps) == 7200.0
    assert info.value.last_status == "running"


@pytest.mark.asyncio
async def test_async_on_status_sync_async_and_broken(router: respx.MockRouter) -> None:
    router.get(JOB).mock(
        side_effect=[
            httpx.Response(200, json={"status": "running"}),
            httpx.Response(200, json={"status": "cancelled", "error": "stopped"}),
        ]
    )
    seen: list[str] = []

    async def async_callback(payload: dict[str, Any]) -> None:
        seen.append(payload["status"])
        raise RuntimeError("async callback failed")

    async with _attached() as job:
        with pytest.warns(SynthCallbackWarning, match="RuntimeError: async callback failed"):
            result = await job.poll_until_complete(timeout=60, interval=5, on_status=async_callback)
    assert seen == ["running", "cancelled"]
    assert result.cancelled
    assert result.error == "stopped"


@pytest.mark.asyncio
async def test_async_raise_on_failure_and_results(router: respx.MockRouter) -> None:
    router.get(JOB).respond(200, json={"status": "failed", "error": "diverged"})
    async with _attached() as job:
        with pytest.raises(JobFailedError, match="diverged"):
            await job.poll_until_complete(raise_on_failure=True)
        with pytest.raises(JobFailedError):
            await job.get_results()


@pytest.mark.asyncio
async def test_async_events_metrics_timeline_cancel(router: respx.MockRouter) -> None:
    router.get(f"{JOB}/events").respond(404)
    router.get(f"{API}/learning/jobs/job-1/events").respond(
        200, json={"data": {"events": [{"seq": 2, "type": "rl.train.step"}]}}
    )
    router.get(f"{JOB}/metrics").respond(200, json={"points": [{"name": "r", "step": 1, "value": 1.0}]})
    router.get(f"{JOB}/timeline").respond(200, json={"events": [{"phase": "running"}]})
    cancel = router.post(f"{JOB}/cancel").respond(200, json={"ok": True})
    async with _attached() as job:
        page = await job.events()
        assert (page.types, page.next_seq) == (["rl.train.step"], 2)
        assert await job.metrics() == [{"name": "r", "step": 1, "value": 1.0}]
        assert await job.timeline() == [{"phase": "running"}]
        assert await job.cancel() == {"ok": True}
    assert json.loads(cancel.calls.last.request.content) == {}


@pytest.mark.asyncio
async def test_async_errors(router: respx.MockRouter, config_path: Path) -> None:
    router.post(f"{API}/rl/jobs").respond(403, json={"detail": "forbidden"})
    async with make_async_job(config_path) as job:
        with pytest.raises(SynthError, match="not been submitted"):
            await job.get_status()
        with pytest.raises(JobSubmitError) as info:
            await job.submit()
    assert "SYNTH_API_KEY" in (info.value.hint or "")


@pytest.mark.asyncio
async def test_async_retry_exhaustion(router: respx.MockRouter) -> None:
    router.get(JOB).mock(side_effect=httpx.ConnectError("refused"))
    async with _attached(retry=RetryPolicy(jitter=False, max_attempts=3)) as job:
        with pytest.raises(BackendError) as info:
            await job.get_status()
    assert len(info.value.attempts) == 3
    assert _virtual(job).sleeps == [0.5, 1.0]


@pytest.mark.asyncio
async def test_async_list(router: respx.MockRouter) -> None:
    route = router.get(f"{API}/rl/jobs").respond(200, json=[{"id": "a"}])
    assert await async_list_rl_jobs(3, backend_url=BACKEND, api_key=API_KEY) == [{"id": "a"}]
    assert dict(route.calls.last.request.url.params) == {"limit": "3"}


@pytest.mark.asyncio
async def test_async_health_check_blocks_submission(config_path: Path) -> None:
    async def health(request: Request) -> Response:
        return JSONResponse({"detail": {"error": {"code": "unauthorised"}}}, status_code=400)

    app = Starlette(routes=[Route("/health", health), Route("/task_info", health)])
    with serve_app(app) as url, respx.mock(assert_all_called=False) as router:
        router.route(host="127.0.0.1").pass_through()
        submit = router.post(f"{API}/rl/jobs").respond(201, json={"id": "never"})
        job = make_async_job(
            config_path, task_app_url=url, task_app_api_key=TASK_KEY, skip_health_check=False
        )
        async with job:
            with pytest.raises(TaskAppError, match="/health=400, /task_info=400"):
                await job.submit()
    assert submit.call_count == 0


@pytest.mark.anyio
async def test_works_under_anyio(router: respx.MockRouter) -> None:
    router.get(JOB).respond(200, json={"state": "succeeded"})
    async with _attached() as job:
        result = await job.poll_until_complete()
    assert result.succeeded


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_repr_masks_key() -> None:
    job = _attached()
    assert API_KEY not in repr(job)
    assert repr(job).startswith("AsyncRLJob(job_id='job-1'")
