"""Blocking RL job handle: :class:`RLJob` and :func:`list_rl_jobs`.

Every request goes through :func:`.retry.send` and every wait through the job's clock; the rules
themselves (calls, verdicts, polling) live in :mod:`.base`, :mod:`.calls` and :mod:`.polling`.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

import httpx

from pytest_synth_rl.client.base import DEFAULT_REQUEST_TIMEOUT, JobBase
from pytest_synth_rl.client.calls import Call
from pytest_synth_rl.client.env_keys import EnvKeyUpload
from pytest_synth_rl.client.env_keys import upload_environment_api_key as _upload
from pytest_synth_rl.client.jobconfig import RLJobConfig
from pytest_synth_rl.client.polling import DEFAULT_MAX_FAILED_POLLS, Poller
from pytest_synth_rl.client.results import EventPage, JobResult
from pytest_synth_rl.client.retry import RetryPolicy, send
from pytest_synth_rl.client.task_verify import TaskAppVerification
from pytest_synth_rl.client.task_verify import verify_task_app as _verify
from pytest_synth_rl.clock import Clock
from pytest_synth_rl.errors import BackendError, keywords_checked
from pytest_synth_rl.secrets.masking import Secret
from pytest_synth_rl.taskapp.health import check_task_app_health
from pytest_synth_rl.taskapp.tls import shared_ssl_context

__all__ = ["RLJob", "list_rl_jobs"]

T = TypeVar("T")

#: Seconds allowed for each request of the pre-submission task app probe.
HEALTH_TIMEOUT = 10.0


class RLJob(JobBase[httpx.Client, httpx.BaseTransport]):
    """An RL training job on the Synth backend (or a fake of it), over a blocking httpx client.

    Same surface as the upstream SDK's ``RLJob`` (``from_config``, ``from_job_id``, ``submit``,
    ``get_status``, ``poll_until_complete``, ``get_results``), plus ``cancel``, ``events``,
    ``metrics``, ``timeline``; with the clock, HTTP client or transport, and retry policy
    injectable. Use as a context manager (or call :meth:`close`) to release the client it made.
    """

    def _new_client(self, transport: httpx.BaseTransport | None) -> httpx.Client:
        return httpx.Client(transport=transport, timeout=self._request_timeout, verify=shared_ssl_context())

    def _run(self, call: Call[T]) -> T:
        current = call
        while True:
            sent = send(
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

    # -- lifecycle ---------------------------------------------------------------------------
    def submit(self) -> str:
        """Health-check the task app (unless ``skip_health_check``), then POST the job; returns its id."""
        call = self._submit_call()
        if not self._skip_health_check:
            url, key = self._health_target()
            with httpx.Client(timeout=HEALTH_TIMEOUT, verify=shared_ssl_context()) as probe_client:
                report = check_task_app_health(url, key, timeout=HEALTH_TIMEOUT, client=probe_client)
            self._health_verdict(report)
        return self._accept_submission(self._run(call))

    def upload_environment_api_key(
        self, env_key: str | Secret | None = None, *, verify: bool = False
    ) -> EnvKeyUpload:
        """Upload the task app's key (default: this job's ``task_app_api_key``) to the backend,
        sealed; see :func:`~.env_keys.upload_environment_api_key`."""
        return _upload(env_key=self._upload_key(env_key), verify=verify, **self._oneshot_options())

    def verify_task_app(self, task_url: str | None = None) -> TaskAppVerification:
        """Have the backend probe the task app (default: this job's); see
        :func:`~.task_verify.verify_task_app`."""
        return _verify(task_url=self._verify_target(task_url), **self._oneshot_options())

    def get_status(self) -> dict[str, Any]:
        """The job's current status payload (``{}`` if the backend answered with non-JSON)."""
        return self._run(self._status_call())[0]

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
        """Poll until the job is terminal; ``timeout`` and ``interval`` are clock seconds, honoured exactly.

        Raises :class:`JobTimeoutError` after the poll at the deadline, and
        :class:`JobFailedError` for a failed/cancelled job if ``raise_on_failure``. A poll that
        fails after all its retries on a transient error does not end the wait; ``max_failed_polls``
        such polls in a row do (:class:`BackendError` listing every attempt).
        """
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
                payload, note = self._run(status_call)
            except BackendError as exc:
                self._clock.sleep(poller.poll_failed(exc))
                continue
            poller.record(payload, note)
            if on_status is not None:
                try:
                    on_status(payload)
                except Exception as exc:
                    poller.callback_failed(exc)
            wait = poller.next_wait()
            if wait is None:
                return self._finish_poll(poller)
            self._clock.sleep(wait)

    def get_results(self) -> dict[str, Any]:
        """The ``results`` of a succeeded job; :class:`JobFailedError` if it failed or was cancelled."""
        return self._results_from(self.get_status())

    def cancel(self) -> dict[str, Any]:
        """Ask the backend to cancel the job; returns its answer."""
        return self._run(self._cancel_call())

    def events(self, since_seq: int = 0, limit: int = 200) -> EventPage:
        """Events after ``since_seq``; pass ``page.next_seq`` back to continue."""
        return self._run(self._events_call(since_seq, limit))

    def metrics(self, after_step: int = -1, limit: int = 200) -> list[dict[str, Any]]:
        """Metric points (``name``, ``step``, ``value``, ...) after ``after_step``."""
        return self._run(self._metrics_call(after_step, limit))

    def timeline(self) -> list[dict[str, Any]]:
        """The job's phase timeline (entries with ``phase`` and ``created_at``)."""
        return self._run(self._timeline_call())

    @classmethod
    def list_jobs(
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
        http_client: httpx.Client | None = None,
        transport: httpx.BaseTransport | None = None,
        retry: RetryPolicy | None = None,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    ) -> Any:
        """``GET /rl/jobs``: the backend's answer as parsed JSON (its shape is the backend's)."""
        config = RLJobConfig.resolve(None, backend_url=backend_url, api_key=api_key)
        filters = {
            "model": model,
            "created_after": created_after,
            "created_before": created_before,
            "after": after,
        }
        with cls(
            config,
            clock=clock,
            http_client=http_client,
            transport=transport,
            retry=retry,
            request_timeout=request_timeout,
        ) as lister:
            return lister._run(lister._list_call(limit, status, filters))

    # -- resources ---------------------------------------------------------------------------
    def close(self) -> None:
        """Close the HTTP client if the job created it (an injected client stays open)."""
        if self._owns_client:
            self._http.close()

    def __enter__(self) -> RLJob:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def list_rl_jobs(limit: int = 20, status: str | None = None, **kwargs: Any) -> Any:
    """List RL jobs; same arguments as :meth:`RLJob.list_jobs`."""
    return RLJob.list_jobs(limit, status, **kwargs)
