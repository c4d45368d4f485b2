"""The RL job handles :class:`RLJob` (blocking) and :class:`AsyncRLJob`, and the plain functions.

Both run the steps of :class:`~.base.JobSteps`, differing only in how they send, sleep and close; every
wait is on the job's clock. ``AsyncRLJob`` works under asyncio and anyio's asyncio backend."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

import httpx

from pytest_synth_rl.client import jobconfig
from pytest_synth_rl.client.base import DEFAULT_REQUEST_TIMEOUT, HEALTH_TIMEOUT, JobBase, JobSteps
from pytest_synth_rl.client.jobconfig import EnvKeyUpload, TaskAppVerification
from pytest_synth_rl.client.retry import RetryPolicy, Steps, async_drive, drive
from pytest_synth_rl.clock import Clock
from pytest_synth_rl.secrets.masking import Secret
from pytest_synth_rl.taskapp.health import async_check_task_app_health, check_task_app_health

P = ParamSpec("P")
T = TypeVar("T")
J = TypeVar("J", "RLJob", "AsyncRLJob")


def _like(method: Callable[..., Any], steps: Callable[..., Any]) -> None:
    method.__name__ = method.__qualname__ = steps.__name__
    method.__doc__, method.__module__ = steps.__doc__, steps.__module__
    returns = str(steps.__annotations__["return"]).removeprefix("Steps[").removesuffix("]")
    method.__signature__ = inspect.signature(steps).replace(return_annotation=returns)  # type: ignore[attr-defined]


def _blocking(steps: Callable[Concatenate[Any, P], Steps[T]]) -> Callable[Concatenate[RLJob, P], T]:
    """An :class:`RLJob` method that runs the steps of *steps* to the end."""

    def method(self: RLJob, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._drive(steps(self, *args, **kwargs))

    _like(method, steps)
    return method


def _awaiting(
    steps: Callable[Concatenate[Any, P], Steps[T]],
) -> Callable[Concatenate[AsyncRLJob, P], Coroutine[Any, Any, T]]:
    """An :class:`AsyncRLJob` method that awaits the steps of *steps*."""

    async def method(self: AsyncRLJob, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._drive(steps(self, *args, **kwargs))

    _like(method, steps)
    return method


class RLJob(JobBase[httpx.Client, httpx.BaseTransport], contextlib.AbstractContextManager["RLJob"]):
    """An RL training job on the Synth backend (or a fake of it), with the upstream SDK's surface;
    clock, HTTP client or transport and retry policy injectable. A context manager."""

    _client_cls = httpx.Client

    def _drive(self, steps: Steps[T]) -> T:
        return drive(steps, self._http, self._clock)

    def _drive_and_close(self, steps: Steps[T]) -> T:
        try:
            return self._drive(steps)
        finally:
            self.close()

    def submit(self) -> str:
        """Health-check the task app (unless ``skip_health_check``), then POST the job; returns its id."""
        call = self._submit_call()
        if not self._skip_health_check:
            self._health_verdict(check_task_app_health(*self._health_target(), timeout=HEALTH_TIMEOUT))
        return self._accept_submission(self._drive(self._sender.send(call)))

    upload_environment_api_key = _blocking(JobSteps.upload_environment_api_key)
    verify_task_app = _blocking(JobSteps.verify_task_app)
    get_status = _blocking(JobSteps.get_status)
    poll_until_complete = _blocking(JobSteps.poll_until_complete)
    get_results = _blocking(JobSteps.get_results)
    cancel = _blocking(JobSteps.cancel)
    events = _blocking(JobSteps.events)
    metrics = _blocking(JobSteps.metrics)
    timeline = _blocking(JobSteps.timeline)

    def close(self) -> None:
        """Close the HTTP client if the job created it (an injected client stays open)."""
        if self._owns_client:
            self._http.close()

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncRLJob(
    JobBase[httpx.AsyncClient, httpx.AsyncBaseTransport], contextlib.AbstractAsyncContextManager["AsyncRLJob"]
):
    """:class:`RLJob` with ``async`` methods. Construct with the same class methods
    (``from_config``, ``from_job_id``); use ``async with`` or ``await job.close()``."""

    _client_cls = httpx.AsyncClient

    async def _drive(self, steps: Steps[T]) -> T:
        return await async_drive(steps, self._http, self._clock)

    async def _drive_and_close(self, steps: Steps[T]) -> T:
        try:
            return await self._drive(steps)
        finally:
            await self.close()

    async def submit(self) -> str:
        """Health-check the task app (unless ``skip_health_check``), then POST the job; returns its id."""
        call = self._submit_call()
        if not self._skip_health_check:
            report = await async_check_task_app_health(*self._health_target(), timeout=HEALTH_TIMEOUT)
            self._health_verdict(report)
        return self._accept_submission(await self._drive(self._sender.send(call)))

    upload_environment_api_key = _awaiting(JobSteps.upload_environment_api_key)
    verify_task_app = _awaiting(JobSteps.verify_task_app)
    get_status = _awaiting(JobSteps.get_status)
    poll_until_complete = _awaiting(JobSteps.poll_until_complete)
    get_results = _awaiting(JobSteps.get_results)
    cancel = _awaiting(JobSteps.cancel)
    events = _awaiting(JobSteps.events)
    metrics = _awaiting(JobSteps.metrics)
    timeline = _awaiting(JobSteps.timeline)

    async def close(self) -> None:
        """Close the HTTP client if the job created it (an injected client stays open)."""
        if self._owns_client:
            await self._http.aclose()

    aclose = close

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def list_rl_jobs(limit: int = 20, status: str | None = None, **kwargs: Any) -> Any:
    """List RL jobs; same arguments as :meth:`RLJob.list_jobs`."""
    return RLJob.list_jobs(limit, status, **kwargs)


async def async_list_rl_jobs(limit: int = 20, status: str | None = None, **kwargs: Any) -> Any:
    """List RL jobs; same arguments as :meth:`AsyncRLJob.list_jobs`."""
    return await AsyncRLJob.list_jobs(limit, status, **kwargs)


def _detached(cls: type[J], args: dict[str, Any]) -> J:
    """A handle with no config and no job, for preflight calls (a transport beside a client goes unused)."""
    url, key = jobconfig.resolve_backend_url(args["backend_url"]), jobconfig.resolve_api_key(args["api_key"])
    options = {name: args[name] for name in ("clock", "http_client", "retry", "request_timeout")}
    transport = args["transport"] if args["http_client"] is None else None
    return cls(jobconfig.RLJobConfig(None, url, key), transport=transport, **options)


def upload_environment_api_key(
    backend_url: str | None = None,
    api_key: str | Secret | None = None,
    env_key: str | Secret | None = None,
    *,
    verify: bool = False,
    http_client: httpx.Client | None = None,
    transport: httpx.BaseTransport | None = None,
    clock: Clock | None = None,
    retry: RetryPolicy | None = None,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
) -> EnvKeyUpload:
    """Upload the task app's key (``env_key`` or ``ENVIRONMENT_API_KEY``) to the backend, sealed;
    with ``verify``, raise unless the backend then reports it present."""
    with _detached(RLJob, locals()) as job:
        return job.upload_environment_api_key(env_key, verify=verify)


async def async_upload_environment_api_key(
    backend_url: str | None = None,
    api_key: str | Secret | None = None,
    env_key: str | Secret | None = None,
    *,
    verify: bool = False,
    http_client: httpx.AsyncClient | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    clock: Clock | None = None,
    retry: RetryPolicy | None = None,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
) -> EnvKeyUpload:
    """:func:`upload_environment_api_key` over ``httpx.AsyncClient``."""
    async with _detached(AsyncRLJob, locals()) as job:
        return await job.upload_environment_api_key(env_key, verify=verify)


def verify_task_app(
    backend_url: str | None = None,
    api_key: str | Secret | None = None,
    task_url: str | None = None,
    *,
    http_client: httpx.Client | None = None,
    transport: httpx.BaseTransport | None = None,
    clock: Clock | None = None,
    retry: RetryPolicy | None = None,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
) -> TaskAppVerification:
    """Have the backend probe the task app at *task_url* (``TASK_APP_URL`` if None); raises
    :class:`TaskAppVerificationError` for HTTP status >= 400 or a falsy ``any_ok``."""
    with _detached(RLJob, locals()) as job:
        return job.verify_task_app(task_url)


async def async_verify_task_app(
    backend_url: str | None = None,
    api_key: str | Secret | None = None,
    task_url: str | None = None,
    *,
    http_client: httpx.AsyncClient | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    clock: Clock | None = None,
    retry: RetryPolicy | None = None,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
) -> TaskAppVerification:
    """:func:`verify_task_app` over ``httpx.AsyncClient``."""
    async with _detached(AsyncRLJob, locals()) as job:
        return await job.verify_task_app(task_url)
