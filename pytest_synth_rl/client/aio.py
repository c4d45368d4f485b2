"""Async RL job handle: :class:`AsyncRLJob` and :func:`async_list_rl_jobs`.

The same operations as :mod:`.sync`, over ``httpx.AsyncClient``, waiting with
``clock.async_sleep``. Works under asyncio (pytest-asyncio) and anyio's asyncio backend.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

import httpx

from pytest_synth_rl.client.base import DEFAULT_REQUEST_TIMEOUT, JobBase
from pytest_synth_rl.client.calls import Call
from pytest_synth_rl.client.env_keys import EnvKeyUpload
from pytest_synth_rl.client.env_keys import async_upload_environment_api_key as _upload
from pytest_synth_rl.client.jobconfig import RLJobConfig
from pytest_synth_rl.client.polling import DEFAULT_MAX_FAILED_POLLS, Poller
from pytest_synth_rl.client.results import EventPage, JobResult
from pytest_synth_rl.client.retry import RetryPolicy, async_send
from pytest_synth_rl.client.sync import HEALTH_TIMEOUT
from pytest_synth_rl.client.task_verify import TaskAppVerification
from pytest_synth_rl.client.task_verify import async_verify_task_app as _verify
from pytest_synth_rl.clock import Clock
from pytest_synth_rl.errors import BackendError, keywords_checked
from pytest_synth_rl.secrets.masking import Secret
from pytest_synth_rl.taskapp.health import async_check_task_app_health
from pytest_synth_rl.taskapp.tls import shared_ssl_context

__all__ = ["AsyncRLJob", "async_list_rl_jobs"]

T = TypeVar("T")


class AsyncRLJob(JobBase[httpx.AsyncClient, httpx.AsyncBaseTransport]):
    """:class:`~.sync.RLJob` with ``async`` methods. Construct with the same class methods
    (``from_config``, ``from_job_id``); use ``async with`` or ``await job.close()``."""

    def _new_client(self, transport: httpx.AsyncBaseTransport | None) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            transport=transport, timeout=self._request_timeout, verify=shared_ssl_context()
        )

    async def _run(self, call: Call[T]) -> T:
        current = call
        while True:
            sent = await async_send(
                self._http,
                self._request(current),
                policy=self._retry,
                clock=self._clock,
                error_cls=current.error_cls,
            )
            following = current.next_after(sent)
            if following is None:
                value = current.outcome(sent)
                self._note_route(current)
                return value
            current = following

    async def submit(self) -> str:
        """Health-check the task app (unless ``skip_health_check``), then POST the job; returns its id."""
        call = self._submit_call()
        if not self._skip_health_check:
            url, key = self._health_target()
            async with httpx.AsyncClient(timeout=HEALTH_TIMEOUT, verify=shared_ssl_context()) as probe_client:
                report = await async_check_task_app_health(
                    url, key, timeout=HEALTH_TIMEOUT, client=probe_client
                )
            self._health_verdict(report)
        return self._accept_submission(await self._run(call))

    async def upload_environment_api_key(
        self, env_key: str | Secret | None = None, *, verify: bool = False
    ) -> EnvKeyUpload:
        """Upload the task app's key (default: this job's ``task_app_api_key``) to the backend,
        sealed; see :func:`~.env_keys.async_upload_environment_api_key`."""
        return await _upload(env_key=self._upload_key(env_key), verify=verify, **self._oneshot_options())

    async def verify_task_app(self, task_url: str | None = None) -> TaskAppVerification:
        """Have the backend probe the task app (default: this job's); see
        :func:`~.task_verify.async_verify_task_app`."""
        return await _verify(task_url=self._verify_target(task_url), **self._oneshot_options())

    async def get_status(self) -> dict[str, Any]:
        return (await self._run(self._status_call()))[0]

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
        job_id = self._require_job_id("poll the job")
        poller = Poller(
            job_id,
            timeout=timeout,
            interval=interval,
            clock=self._clock,
            raise_on_failure=raise_on_failure,
            max_failed_polls=max_failed_polls,
        )
        self.last_polls = poller.history
        status_call = self._status_call()
        while True:
            try:
                payload, note = await self._run(status_call)
            except BackendError as exc:
                await self._clock.async_sleep(poller.poll_failed(exc))
                continue
            poller.record(payload, note)
            if on_status is not None:
                try:
                    returned = on_status(payload)
                    if inspect.isawaitable(returned):
                        await returned
                except Exception as exc:
                    poller.callback_failed(exc)
            wait = poller.next_wait()
            if wait is None:
                return self._finish_poll(poller)
            await self._clock.async_sleep(wait)

    async def get_results(self) -> dict[str, Any]:
        return self._results_from(await self.get_status())

    async def cancel(self) -> dict[str, Any]:
        return await self._run(self._cancel_call())

    async def events(self, since_seq: int = 0, limit: int = 200) -> EventPage:
        return await self._run(self._events_call(since_seq, limit))

    async def metrics(self, after_step: int = -1, limit: int = 200) -> list[dict[str, Any]]:
        return await self._run(self._metrics_call(after_step, limit))

    async def timeline(self) -> list[dict[str, Any]]:
        return await self._run(self._timeline_call())

    @classmethod
    async def list_jobs(
        cls,
        limit: int = 20,
        status: str | None = None,
        *,
        model: str | None = None,
        created_after: str | None = None,
        created_before: str | None = None,
        after: str | None = None,
        backend_url: str | None = None,
        api_key: str | Secret | None = None,
        clock: Clock | None = None,
        http_client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        retry: RetryPolicy | None = None,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    ) -> Any:
        config = RLJobConfig.resolve(None, backend_url=backend_url, api_key=api_key)
        filters = {
            "model": model,
            "created_after": created_after,
            "created_before": created_before,
            "after": after,
        }
        async with cls(
            config,
            clock=clock,
            http_client=http_client,
            transport=transport,
            retry=retry,
            request_timeout=request_timeout,
        ) as lister:
            return await lister._run(lister._list_call(limit, status, filters))

    async def close(self) -> None:
        """Close the HTTP client if the job created it (an injected client stays open)."""
        if self._owns_client:
            await self._http.aclose()

    aclose = close

    async def __aenter__(self) -> AsyncRLJob:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


async def async_list_rl_jobs(limit: int = 20, status: str | None = None, **kwargs: Any) -> Any:
    """List RL jobs; same arguments as :meth:`AsyncRLJob.list_jobs`."""
    return await AsyncRLJob.list_jobs(limit, status, **kwargs)
