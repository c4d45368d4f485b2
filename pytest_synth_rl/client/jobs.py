"""The RL job handles: :class:`RLJob` (blocking) and :class:`AsyncRLJob`, and the job listings.

Both run the steps of :mod:`.base`; they differ only in how they send, sleep and close.
Every wait is on the job's clock. ``AsyncRLJob`` works under asyncio and anyio's asyncio backend.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import httpx

from pytest_synth_rl.client.base import HEALTH_TIMEOUT, JobBase
from pytest_synth_rl.client.polling import DEFAULT_MAX_FAILED_POLLS
from pytest_synth_rl.client.preflight import EnvKeyUpload, TaskAppVerification
from pytest_synth_rl.client.results import EventPage, JobResult
from pytest_synth_rl.client.retry import Steps, async_drive, drive
from pytest_synth_rl.errors import keywords_checked
from pytest_synth_rl.secrets.masking import Secret
from pytest_synth_rl.taskapp.health import async_check_task_app_health, check_task_app_health

__all__ = ["AsyncRLJob", "RLJob", "async_list_rl_jobs", "list_rl_jobs"]

T = TypeVar("T")


class RLJob(JobBase[httpx.Client, httpx.BaseTransport]):
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
            url, key = self._health_target()
            self._health_verdict(check_task_app_health(url, key, timeout=HEALTH_TIMEOUT))
        return self._accept_submission(self._drive(self._sender.send(call)))

    def upload_environment_api_key(
        self, env_key: str | Secret | None = None, *, verify: bool = False
    ) -> EnvKeyUpload:
        """Upload the task app's key (default: this job's ``task_app_api_key``) to the backend,
        sealed; see :func:`~.preflight.upload_environment_api_key`."""
        return self._drive(self._upload(env_key, verify))

    def verify_task_app(self, task_url: str | None = None) -> TaskAppVerification:
        """Have the backend probe the task app (default: this job's); see
        :func:`~.preflight.verify_task_app`."""
        return self._drive(self._verify(task_url))

    def get_status(self) -> dict[str, Any]:
        """The job's current status payload (``{}`` if the backend answered with non-JSON)."""
        return self._drive(self._status())

    @keywords_checked
    def poll_until_complete(
        self,
        timeout: float = 7200.0,
        interval: float = 10.0,
        on_status: Callable[[dict[str, Any]], object] | None = None,
        raise_on_failure: bool = False,
        *,
        max_failed_polls: int = DEFAULT_MAX_FAILED_POLLS,
    ) -> JobResult:
        """Poll every ``interval`` clock seconds until terminal, up to ``timeout`` (then
        :class:`JobTimeoutError`); ``raise_on_failure``: :class:`JobFailedError` for a failed job;
        ``max_failed_polls`` transient failures in a row end the wait."""
        return self._drive(self._poll(timeout, interval, on_status, raise_on_failure, max_failed_polls))

    def get_results(self) -> dict[str, Any]:
        """The ``results`` of a succeeded job; :class:`JobFailedError` if it failed or was cancelled."""
        return self._drive(self._results())

    def cancel(self) -> dict[str, Any]:
        """Ask the backend to cancel the job; returns its answer."""
        return self._drive(self._cancel())

    def events(self, since_seq: int = 0, limit: int = 200) -> EventPage:
        """Events after ``since_seq``; pass ``page.next_seq`` back to continue."""
        return self._drive(self._events(since_seq, limit))

    def metrics(self, after_step: int = -1, limit: int = 200) -> list[dict[str, Any]]:
        """Metric points (``name``, ``step``, ``value``, ...) after ``after_step``."""
        return self._drive(self._metrics(after_step, limit))

    def timeline(self) -> list[dict[str, Any]]:
        """The job's phase timeline (entries with ``phase`` and ``created_at``)."""
        return self._drive(self._timeline())

    def close(self) -> None:
        """Close the HTTP client if the job created it (an injected client stays open)."""
        if self._owns_client:
            self._http.close()

    def __enter__(self) -> RLJob:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncRLJob(JobBase[httpx.AsyncClient, httpx.AsyncBaseTransport]):
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
            url, key = self._health_target()
            self._health_verdict(await async_check_task_app_health(url, key, timeout=HEALTH_TIMEOUT))
        return self._accept_submission(await self._drive(self._sender.send(call)))

    async def upload_environment_api_key(
        self, env_key: str | Secret | None = None, *, verify: bool = False
    ) -> EnvKeyUpload:
        """As :meth:`RLJob.upload_environment_api_key`."""
        return await self._drive(self._upload(env_key, verify))

    async def verify_task_app(self, task_url: str | None = None) -> TaskAppVerification:
        """As :meth:`RLJob.verify_task_app`."""
        return await self._drive(self._verify(task_url))

    async def get_status(self) -> dict[str, Any]:
        return await self._drive(self._status())

    @keywords_checked
    async def poll_until_complete(
        self,
        timeout: float = 7200.0,
        interval: float = 10.0,
        on_status: Callable[[dict[str, Any]], object] | None = None,
        raise_on_failure: bool = False,
        *,
        max_failed_polls: int = DEFAULT_MAX_FAILED_POLLS,
    ) -> JobResult:
        """As :meth:`RLJob.poll_until_complete`; ``on_status`` may also be an async function."""
        return await self._drive(self._poll(timeout, interval, on_status, raise_on_failure, max_failed_polls))

    async def get_results(self) -> dict[str, Any]:
        return await self._drive(self._results())

    async def cancel(self) -> dict[str, Any]:
        return await self._drive(self._cancel())

    async def events(self, since_seq: int = 0, limit: int = 200) -> EventPage:
        return await self._drive(self._events(since_seq, limit))

    async def metrics(self, after_step: int = -1, limit: int = 200) -> list[dict[str, Any]]:
        return await self._drive(self._metrics(after_step, limit))

    async def timeline(self) -> list[dict[str, Any]]:
        return await self._drive(self._timeline())

    async def close(self) -> None:
        """Close the HTTP client if the job created it (an injected client stays open)."""
        if self._owns_client:
            await self._http.aclose()

    aclose = close

    async def __aenter__(self) -> AsyncRLJob:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def list_rl_jobs(limit: int = 20, status: str | None = None, **kwargs: Any) -> Any:
    """List RL jobs; same arguments as :meth:`RLJob.list_jobs`."""
    return RLJob.list_jobs(limit, status, **kwargs)


async def async_list_rl_jobs(limit: int = 20, status: str | None = None, **kwargs: Any) -> Any:
    """List RL jobs; same arguments as :meth:`AsyncRLJob.list_jobs`."""
    return await AsyncRLJob.list_jobs(limit, status, **kwargs)
