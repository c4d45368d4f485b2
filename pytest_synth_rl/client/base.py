"""What :class:`~.jobs.RLJob` and :class:`~.jobs.AsyncRLJob` share: everything but I/O.

Construction, payload, every operation as steps, the health-check verdict and result interpretation;
the two job classes only run the steps.
"""

from __future__ import annotations

import inspect
import os
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Generic, TypeVar

import httpx

from pytest_synth_rl.client.jobconfig import (
    EnvKeyUpload,
    RLJobConfig,
    TaskAppVerification,
    argument_problems,
    argument_rules,
    upload_steps,
    usage_error,
    verify_steps,
)
from pytest_synth_rl.client.polling import DEFAULT_MAX_FAILED_POLLS, Poller, job_failed
from pytest_synth_rl.client.results import EventPage, JobResult, PollRecord, add_status_run, job_status
from pytest_synth_rl.client.retry import (
    DEFAULT_REQUEST_TIMEOUT,
    Call,
    RetryPolicy,
    Sender,
    Steps,
    event_page,
    extract_job_id,
    json_list,
    read_json,
    read_object,
)
from pytest_synth_rl.clock import Clock, RealClock
from pytest_synth_rl.config import RLBuildResult, build_rl_payload
from pytest_synth_rl.config.urls import normalize_backend_url
from pytest_synth_rl.errors import (
    BackendError,
    JobFailedError,
    JobSubmitError,
    SynthError,
    SynthUsageError,
    TaskAppError,
    keywords_checked,
)
from pytest_synth_rl.secrets.masking import Secret, SecretHeaders
from pytest_synth_rl.taskapp.health import HealthReport, key_refusal
from pytest_synth_rl.taskapp.tls import shared_ssl_context

__all__ = ["DEFAULT_REQUEST_TIMEOUT", "HEALTH_TIMEOUT", "JobBase", "JobSteps"]

ClientT = TypeVar("ClientT", httpx.Client, httpx.AsyncClient)
TransportT = TypeVar("TransportT", httpx.BaseTransport, httpx.AsyncBaseTransport)
J = TypeVar("J", bound="JobBase[Any, Any]")
T = TypeVar("T")

#: Seconds allowed for each request of the pre-submission task app probe.
HEALTH_TIMEOUT = 10.0
#: The arguments the job constructors pass on to the job and to :meth:`RLJobConfig.resolve`.
_CLIENT_OPTIONS = ("clock", "http_client", "transport", "retry", "request_timeout")
_RESOLVED = "backend_url api_key task_app_url task_app_api_key allow_experimental overrides idempotency_key"
_RESOLVED += " tags allow_new_keys"
#: Each operation on a job: what it does (unsubmitted; failed), method, route suffix, has a fallback.
_ROUTES = {
    "status": ("get the job status", "reading the status of job {!r}", "GET", "", False),
    "cancel": ("cancel the job", "cancelling job {!r}", "POST", "/cancel", False),
    "events": ("read job events", "reading events of job {!r}", "GET", "/events", True),
    "metrics": ("read job metrics", "reading metrics of job {!r}", "GET", "/metrics", True),
    "timeline": ("read the job timeline", "reading timeline of job {!r}", "GET", "/timeline", True),
}


def _check_arguments(cls: type[JobBase[Any, Any]], call: str, args: Mapping[str, Any]) -> None:
    rules = argument_rules(cls._client_cls is httpx.Client)
    given = {name: value for name, value in args.items() if name in rules}
    if problems := argument_problems(f"{cls.__name__}.{call}", given, rules, {}):
        raise SynthUsageError(problems)


class JobBase(Generic[ClientT, TransportT]):
    """Shared state and logic of one RL job handle (see :class:`~.jobs.RLJob` for the API)."""

    _client_cls: type[ClientT]

    @keywords_checked
    def __init__(
        self,
        config: RLJobConfig,
        job_id: str | None = None,
        skip_health_check: bool = False,
        *,
        clock: Clock | None = None,
        http_client: ClientT | None = None,
        transport: TransportT | None = None,
        retry: RetryPolicy | None = None,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    ) -> None:
        if http_client is not None and transport is not None:
            raise SynthError(
                "pass either http_client= or transport=, not both",
                hint="a transport is only used for the client the job creates itself",
            )
        self._config, self._skip_health_check = config, skip_health_check
        self._job_id = str(job_id) if job_id is not None else None
        self._clock: Clock = clock if clock is not None else RealClock()
        self._retry = retry if retry is not None else RetryPolicy()
        self._owns_client = http_client is None
        if http_client is None:  # the transport matches the client class, which the types cannot say
            options: dict[str, Any] = {"transport": transport, "timeout": request_timeout}
            http_client = self._client_cls(verify=shared_ssl_context(), **options)
        self._http: ClientT = http_client
        self._sender: Sender[ClientT] = Sender(self._http, self._retry, self._clock)
        # Reused by every retry of the submission, so a retried POST cannot create a second job.
        self._idempotency_key = config.idempotency_key or uuid.uuid4().hex
        self._build: RLBuildResult | None = None
        #: ``poll_until_complete``'s defaults (``synth_rl_job`` gives the test's).
        self.poll_timeout, self.poll_interval = 7200.0, 10.0
        #: The last ``poll_until_complete``'s outcome (also when it raised) and polls (filled as they happen).
        self.last_result: JobResult | None = None
        self.last_polls: list[PollRecord] = []
        #: Every status read, as runs ``[status, first, last]`` in clock seconds since submission.
        self.observed_statuses: list[list[Any]] = []
        self._observed_since: float | None = None
        #: Submission and end of the last wait, clock and wall seconds.
        self.submitted_at: float | None = None
        self.submitted_wall: float | None = None
        self.finished_at: float | None = None
        self.finished_wall: float | None = None
        #: Called with the job id as soon as the backend accepted the submission.
        self.on_submitted: Callable[[str], None] | None = None

    def _drive_and_close(self, steps: Steps[T]) -> Any:
        raise NotImplementedError  # pragma: no cover

    @classmethod
    @keywords_checked
    def from_config(
        cls: type[J],
        config_path: str | os.PathLike[str],
        *,
        backend_url: str | None = None,
        api_key: str | Secret | None = None,
        task_app_url: str | None = None,
        task_app_api_key: str | Secret | None = None,
        allow_experimental: bool | None = None,
        overrides: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        skip_health_check: bool = False,
        clock: Clock | None = None,
        http_client: ClientT | None = None,
        transport: TransportT | None = None,
        retry: RetryPolicy | None = None,
        tags: Mapping[str, str] | None = None,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        allow_new_keys: bool = False,
    ) -> J:
        """A new job from an RL TOML config, payload built now; settings: arguments, then environment."""
        args = locals()
        _check_arguments(cls, "from_config", args)
        config = RLJobConfig.resolve(config_path, **{name: args[name] for name in _RESOLVED.split()})
        build = _build_payload(config)
        job = cls(config, None, skip_health_check, **{name: args[name] for name in _CLIENT_OPTIONS})
        job._build = build
        return job

    @classmethod
    @keywords_checked
    def from_job_id(
        cls: type[J],
        job_id: str,
        *,
        backend_url: str | None = None,
        api_key: str | Secret | None = None,
        clock: Clock | None = None,
        http_client: ClientT | None = None,
        transport: TransportT | None = None,
        retry: RetryPolicy | None = None,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    ) -> J:
        """A handle on an existing job: status, polling, events, results, cancel (not submit)."""
        if not isinstance(job_id, str) or not job_id.strip():
            raise SynthError(f"job_id must be a non-empty string, got {job_id!r}")
        _check_arguments(cls, "from_job_id", args := locals())
        config = RLJobConfig.resolve(None, backend_url=backend_url, api_key=api_key)
        return cls(config, job_id.strip(), **{name: args[name] for name in _CLIENT_OPTIONS})

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
        http_client: ClientT | None = None,
        transport: TransportT | None = None,
        retry: RetryPolicy | None = None,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    ) -> Any:
        """``GET /rl/jobs``: the backend's answer as parsed JSON (awaitable on :class:`AsyncRLJob`)."""
        status, args = status or None, locals()
        config = RLJobConfig.resolve(None, backend_url=backend_url, api_key=api_key)
        filters = ("limit", "status", "model", "created_after", "created_before", "after")
        params: dict[str, str | int] = {name: args[name] for name in filters if args[name] is not None}
        lister = cls(config, **{name: args[name] for name in _CLIENT_OPTIONS})
        url, parse = f"{lister.api_base}/rl/jobs", (lambda r: read_json(r)[0])
        call = Call("list", "GET", url, parse, lister._auth(), params, action="listing RL jobs failed")
        return lister._drive_and_close(lister._sender.send(call))

    @property
    def job_id(self) -> str | None:
        """The backend's id for this job; None until :meth:`submit` succeeded."""
        return self._job_id

    @property
    def config(self) -> RLJobConfig:
        return self._config

    @property
    def api_base(self) -> str:
        return self._config.api_base

    @property
    def idempotency_key(self) -> str:
        """Sent as ``Idempotency-Key`` with the submission (given, or generated once per job)."""
        return self._idempotency_key

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def retry_policy(self) -> RetryPolicy:
        return self._retry

    @property
    def http_client(self) -> ClientT:
        return self._http

    def build(self) -> RLBuildResult:
        """Build (once) the submission payload from the TOML config; raises ConfigError if invalid."""
        if self._build is None:
            self._build = _build_payload(self._config)
        return self._build

    @property
    def payload(self) -> dict[str, Any]:
        return self.build().payload

    def _require_job_id(self, action: str) -> str:
        if self._job_id is None:
            raise SynthError(
                f"cannot {action}: the job has not been submitted yet",
                hint="call submit() first, or attach to an existing job with RLJob.from_job_id(job_id)",
            )
        return self._job_id

    def _auth(self) -> SecretHeaders:
        key = self._config.api_key.value
        return SecretHeaders({"Authorization": f"Bearer {key}", "Accept": "application/json"})

    def _submit_call(self) -> Call[str]:
        if self._job_id is not None:
            raise JobSubmitError(
                f"RL job already submitted as {self._job_id}; a job object submits once",
                hint=f"create a new job with from_config() to submit again, or follow this one "
                f"with RLJob.from_job_id({self._job_id!r})",
            )
        headers = SecretHeaders({**self._auth(), "Idempotency-Key": self._idempotency_key})
        url, ok = f"{self.api_base}/rl/jobs", frozenset({200, 201})
        call = Call("submit", "POST", url, extract_job_id, headers, json=self.build().payload, ok_statuses=ok)
        return replace(call, error_cls=JobSubmitError, action="submitting the RL job failed")

    def _accept_submission(self, job_id: str) -> str:
        self._job_id, self.submitted_at, self.submitted_wall = job_id, self._clock.now(), time.perf_counter()
        if self.on_submitted is not None:
            self.on_submitted(job_id)
        return job_id

    def _job_call(self, operation: str, parse: Callable[[httpx.Response], T], **params: int) -> Call[T]:
        """A call on this job's resource; a fallback route (``/learning/jobs/...``) answers a 404."""
        action, failed, method, suffix, fallback = _ROUTES[operation]
        job_id = self._require_job_id(action)
        primary = f"{self.api_base}/rl/jobs/{job_id}{suffix}"
        alternate = f"{self.api_base}/learning/jobs/{job_id}{suffix}" if fallback else None
        if alternate is not None and operation in self._sender.fallback_routes:
            primary, alternate = alternate, None
        json: dict[str, Any] | None = {} if method == "POST" else None
        url, auth, action = alternate or primary, self._auth(), failed.format(job_id) + " failed"
        call = Call(operation, method, url, parse, auth, params or None, json, job_id=job_id, action=action)
        return call if alternate is None else replace(call, url=primary, fallback=call)

    def _read_status(self, response: httpx.Response) -> tuple[dict[str, Any], str | None]:
        read = read_object(response)
        if status := job_status(read[0]):
            now = self._clock.now()
            if self._observed_since is None:
                self._observed_since = self.submitted_at if self.submitted_at is not None else now
            add_status_run(self.observed_statuses, status, max(0.0, now - self._observed_since))
        return read

    def _health_target(self) -> tuple[str, Secret | None]:
        return self.build().task_url, self._config.task_app_api_key

    def _health_verdict(self, report: HealthReport) -> None:
        if report.ok:
            return
        url, key = report.url or self.build().task_url, self._config.task_app_api_key
        hint = "the task app must answer GET /health and GET /task_info with 200 (see the task app contract)"
        if report.health_status is None:
            hint = "is the task app running? start it (e.g. with InProcessTaskApp) or fix task_app_url= / "
            hint += "TASK_APP_URL / [services].task_url"
        elif 400 in (report.health_status, report.task_info_status) or report.health_status in (401, 403):
            hint = key_refusal(key, "task_app_api_key=")
            if key:
                hint += "; a task app that reads its key from another header must accept one of these, as "
                hint += "the trainer sends only these"
        raise TaskAppError(
            f"task app at {url} failed the health check before submission: {report.detail}",
            url=url,
            hint=hint + "; or pass skip_health_check=True",
            details={name: getattr(report, name) for name in ("health_status", "task_info_status", "detail")},
        )

    def __repr__(self) -> str:
        config = self._config
        task_key = config.task_app_api_key.masked if config.task_app_api_key else None
        path = str(config.config_path) if config.config_path is not None else None
        return (
            f"{type(self).__name__}(job_id={self._job_id!r}, api_base={config.api_base!r}, "
            f"api_key={config.api_key.masked!r}, task_app_url={config.task_app_url!r}, "
            f"task_app_api_key={task_key!r}, config_path={path!r})"
        )


class JobSteps(JobBase[Any, Any]):
    def upload_environment_api_key(
        self, env_key: str | Secret | None = None, *, verify: bool = False
    ) -> Steps[EnvKeyUpload]:
        """Upload the task app's key (default: ``task_app_api_key``) sealed; see the function of this name."""
        key = env_key if env_key is not None else self._config.task_app_api_key
        return upload_steps(self._sender, self.api_base, self._auth(), key, verify)

    def verify_task_app(self, task_url: str | None = None) -> Steps[TaskAppVerification]:
        """Have the backend probe the task app (default: this job's); see :func:`~.jobs.verify_task_app`."""
        task_url = task_url if task_url is not None else self._config.task_app_url or None
        if task_url is None and self._config.config_path is not None:
            task_url = self.build().task_url
        return verify_steps(self._sender, self.api_base, self._auth(), task_url)

    def get_status(self) -> Steps[dict[str, Any]]:
        """The job's current status payload (``{}`` if the backend answered with non-JSON)."""
        return (yield from self._sender.send(self._job_call("status", self._read_status)))[0]

    @keywords_checked
    def poll_until_complete(
        self,
        timeout: float | None = None,
        interval: float | None = None,
        on_status: Callable[[dict[str, Any]], object] | None = None,
        raise_on_failure: bool = False,
        *,
        max_failed_polls: int = DEFAULT_MAX_FAILED_POLLS,
    ) -> Steps[JobResult]:
        """Poll every ``interval`` until terminal, up to ``timeout`` (defaults :attr:`poll_interval`,
        :attr:`poll_timeout`), then :class:`JobTimeoutError`; ``raise_on_failure``: :class:`JobFailedError`
        for a failed job; ``max_failed_polls`` transient failures in a row end the wait; ``on_status`` may
        be async on :class:`~.jobs.AsyncRLJob`."""
        poller = Poller(
            self._require_job_id("poll the job"),
            timeout=self.poll_timeout if timeout is None else timeout,
            interval=self.poll_interval if interval is None else interval,
            clock=self._clock,
            raise_on_failure=raise_on_failure,
            max_failed_polls=max_failed_polls,
        )
        self.last_polls = poller.history
        status_call = self._job_call("status", self._read_status)
        while True:
            try:
                payload, note = yield from self._sender.send(status_call)
            except BackendError as exc:
                yield poller.poll_failed(exc)
                continue
            poller.record(payload, note)
            if on_status is not None:
                try:
                    returned = on_status(payload)
                    failure = (yield returned) if inspect.isawaitable(returned) else None
                except Exception as exc:
                    failure = exc
                if failure is not None:
                    poller.callback_failed(failure)
            wait = poller.next_wait()
            if wait is None:
                break
            yield wait
        self.finished_at, self.finished_wall = self._clock.now(), time.perf_counter()
        try:
            self.last_result = poller.finish()
        except JobFailedError as exc:
            self.last_result = exc.result
            raise
        return self.last_result

    def get_results(self) -> Steps[dict[str, Any]]:
        """The ``results`` of a succeeded job; :class:`JobFailedError` if it failed or was cancelled."""
        job_id = self._job_id or "?"
        result = JobResult.from_payload(job_id, (yield from JobSteps.get_status(self)))
        if result.succeeded:
            return result.results
        if result.outcome is not None:
            message = f"RL job {job_id} has no results: it {result.outcome} (status {result.status!r})"
            raise job_failed(result, message + (f": {result.error}" if result.error else ""), result.raw)
        raise SynthError(
            f"RL job {job_id} has no results yet: its status is {result.status or '<none>'!r}",
            hint="wait for it with poll_until_complete() before asking for results",
        )

    def cancel(self) -> Steps[dict[str, Any]]:
        """Ask the backend to cancel the job; returns its answer."""
        return self._sender.send(self._job_call("cancel", lambda r: read_object(r)[0]))

    def events(self, since_seq: int = 0, limit: int = 200) -> Steps[EventPage]:
        """Events after ``since_seq``; pass ``page.next_seq`` back to continue."""
        call = self._job_call("events", lambda r: event_page(r, since_seq), since_seq=since_seq, limit=limit)
        return self._sender.send(call)

    def metrics(self, after_step: int = -1, limit: int = 200) -> Steps[list[dict[str, Any]]]:
        """Metric points (``name``, ``step``, ``value``, ...) after ``after_step``."""
        call = self._job_call("metrics", lambda r: json_list(r, "points"), after_step=after_step, limit=limit)
        return self._sender.send(call)

    def timeline(self) -> Steps[list[dict[str, Any]]]:
        """The job's phase timeline (entries with ``phase`` and ``created_at``)."""
        return self._sender.send(self._job_call("timeline", lambda r: json_list(r, "events")))


def _build_payload(config: RLJobConfig) -> RLBuildResult:
    if config.config_path is None:
        raise SynthError(
            "this job has no RL config to build a payload from (it was attached with from_job_id)",
            hint="use RLJob.from_config(path, ...) to submit a new job",
        )
    # A copy (the SDK wrote into the caller's dict); a task_url override wins (contract §3).
    overrides: dict[str, Any] = dict(config.overrides or {})
    given = overrides.get("backend")
    if isinstance(given, str) and given.strip() and normalize_backend_url(given) != config.api_base:
        hint = "choose the backend with backend_url= (or --synth-backend under pytest) and drop "
        message = f"is {given!r}, but this job is sent to {config.backend_url!r}"
        raise usage_error('overrides["backend"]', message, hint + 'overrides["backend"]')
    overrides["backend"] = config.backend_url
    if config.task_app_url and not (overrides.get("task_url") or "").strip():
        overrides["task_url"] = config.task_app_url
    build = build_rl_payload(
        config.config_path,
        task_url=config.task_app_url,
        overrides=overrides,
        idempotency=config.idempotency_key,
        allow_experimental=config.allow_experimental,
        backend_url=config.backend_url,
        allow_new_keys=config.allow_new_keys,
    )
    if config.tags:
        existing = build.payload.get("tags")
        build.payload["tags"] = {**(existing if isinstance(existing, Mapping) else {}), **config.tags}
    return build
