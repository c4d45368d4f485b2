"""Run-level state behind the pytest fixtures, usable without pytest.

A test run needs a few expensive things once (the in-process task apps, the offline fake backend
with its stub model server) and cheap things per test (a fresh virtual clock, a clean job store,
the list of jobs the test started). :class:`SynthRun` owns the expensive things for the life of
one process (so once per xdist worker) and hands out a :class:`SynthJobFactory` per test, which builds
jobs bound to the right backend, task app and clock, and finishes them at teardown: still-running
online jobs are cancelled, every job becomes a :class:`~pytest_synth_rl.reporting.report.JobRecord`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

import anyio.to_thread
import httpx

from pytest_synth_rl.assertions import JobExpectation, job_rewards, start_expectation
from pytest_synth_rl.baselines import BaselineComparison, BaselineStore, Tolerance, check_baseline
from pytest_synth_rl.client import AsyncRLJob, RLJob, upload_environment_api_key, verify_task_app
from pytest_synth_rl.client.base import DEFAULT_REQUEST_TIMEOUT
from pytest_synth_rl.client.results import is_terminal, job_status
from pytest_synth_rl.clock import Clock, RealClock, VirtualClock
from pytest_synth_rl.errors import (
    BackendUnreachableError,
    ConfigError,
    ConfigProblem,
    SynthError,
    SynthUsageError,
)
from pytest_synth_rl.fake import FakeSynthBackend
from pytest_synth_rl.plugin.settings import SynthSettings
from pytest_synth_rl.recording import Replayer
from pytest_synth_rl.reporting.report import JobRecord, job_record
from pytest_synth_rl.secrets.callers import outside_caller
from pytest_synth_rl.secrets.masking import Secret, get_logger, secret_or_none
from pytest_synth_rl.taskapp import InProcessTaskApp, check_task_app_health
from pytest_synth_rl.taskapp.loading import split_app_path
from pytest_synth_rl.taskapp.tls import shared_ssl_context

__all__ = [
    "BaselineCheck",
    "ExpectJob",
    "ExternalTaskApp",
    "RLConfigRef",
    "ServedFake",
    "SynthBackend",
    "SynthJobFactory",
    "SynthRun",
    "TaskAppHandle",
    "TaskAppSpec",
    "job_tags",
    "new_test_clock",
    "replay_transport",
]

log = get_logger("pytest_synth_rl.plugin.session")

_J = TypeVar("_J", RLJob, AsyncRLJob)


def job_tags(test_id: str) -> dict[str, str]:
    """Tags that let someone find a test's job on the real backend: run, worker, test."""
    tags = {"source": "pytest-synth-rl", "test": test_id[-200:]}
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run_id:
        tags["run"] = run_id
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    tags["worker"] = worker or "main"
    return tags


def offline_job_id_prefix(test_id: str) -> str:
    """The fake's job id prefix for the test *test_id*: ``job_rl_`` and 10 hex digits of a hash
    of it. A test's offline ids then do not depend on test order, xdist workers or CI shards,
    so a table merged from shards shows the ids an unsharded run shows."""
    digest = hashlib.sha256(test_id.encode("utf-8", "surrogatepass")).hexdigest()
    return f"job_rl_{digest[:10]}_"


@dataclass(frozen=True)
class TaskAppSpec:
    """What task app to serve: a ``pkg.mod:attr`` target or a ``.py`` path, plus options."""

    source: str
    api_key: Secret | None = None
    options: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "api_key", secret_or_none(self.api_key))

    def start(self, *, shared: bool = False) -> InProcessTaskApp:
        """Start a server of this task app: by default with an app loaded anew for it alone.

        A per-test app must not serve the app object of the session's app (nor of another
        per-test app) of the same source: a task app's lifespan keeps state on it (a client on
        ``app.state``), which one server's shutdown would close under the other. ``shared=True``
        is for the run's one app per spec (:meth:`SynthRun.task_app`): a file executed once per
        version of the file, a target imported once.
        """
        __tracebackhide__ = True
        kwargs: dict[str, Any] = dict(self.options)
        if self.api_key:
            kwargs["api_key"] = self.api_key
        kwargs["fresh"] = not shared
        if split_app_path(self.source)[0].suffix == ".py":  # app.py, or app.py:attribute
            app = InProcessTaskApp(task_app_path=self.source, **kwargs)
        else:
            app = InProcessTaskApp(target=self.source, **kwargs)
        return app.start()


@dataclass(frozen=True)
class RLConfigRef:
    """The RL config a test uses: a TOML path and the overrides applied on top of it."""

    path: Path
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def load(self) -> dict[str, Any]:
        """The parsed TOML with overrides applied (not yet validated)."""
        from pytest_synth_rl.config import load_rl_config

        return load_rl_config(self.path, overrides=dict(self.overrides))

    def build(self, task_url: str | None = None) -> dict[str, Any]:
        """The job payload this config produces for *task_url*."""
        from pytest_synth_rl.config import build_rl_payload

        return build_rl_payload(self.path, task_url=task_url, overrides=dict(self.overrides)).payload


class SynthRun:
    """Process-wide state: settings, task app pool, the offline fake backend."""

    def __init__(self, settings: SynthSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._task_apps: dict[TaskAppSpec, InProcessTaskApp] = {}
        self._healthy: set[str] = set()
        self._fake: FakeSynthBackend | None = None
        self._http: httpx.Client | None = None
        self._fake_http: httpx.Client | None = None
        self._prepared: set[tuple[str, ...]] = set()
        self._backend_verdict: BackendUnreachableError | None = None
        self._backend_probed = False

    # -- the online backend ----------------------------------------------------------------
    def require_backend(self) -> None:
        """Online: raise :class:`BackendUnreachableError` if nothing answers at the backend URL.

        Probed once per run (per xdist worker) and the verdict kept: the first test needing the
        backend pays for a few seconds at most, and every later one fails at once with the same
        message instead of spending its own retry budget. Offline this does nothing.
        """
        __tracebackhide__ = True
        if self.settings.is_offline:
            return
        with self._lock:
            if not self._backend_probed:
                from pytest_synth_rl.client.reachability import probe_backend

                url = self.settings.backend_url
                problem = probe_backend(url)
                if problem is not None:
                    self._backend_verdict = BackendUnreachableError(
                        self.settings.origin("backend"), url, problem
                    )
                self._backend_probed = True
            verdict = self._backend_verdict
        if verdict is not None:
            raise BackendUnreachableError(verdict.setting, verdict.url, verdict.problem)

    # -- task apps -------------------------------------------------------------------------
    def task_app(self, spec: TaskAppSpec) -> InProcessTaskApp:
        """The shared, running task app for *spec* (started on first use, kept for the run)."""
        with self._lock:
            app = self._task_apps.get(spec)
            if app is None or not app.is_running:
                app = spec.start(shared=True)
                self._task_apps[spec] = app
            return app

    def http_client(self) -> httpx.Client:
        """One HTTP client for every synchronous job of the run: building a client per job costs
        more than the job's requests offline, and online it keeps connections to the backend warm."""
        with self._lock:
            if self._http is None:
                self._http = httpx.Client(timeout=DEFAULT_REQUEST_TIMEOUT, verify=shared_ssl_context())
            return self._http

    def task_app_known_healthy(self, app: InProcessTaskApp) -> bool:
        """Whether *app* passed the pre-submit health probe (run here once per app, not per job).

        An in-process app is ours and cannot move; probing it before every submit would cost two
        requests per job for nothing. Jobs of an app that is not known healthy probe as usual, so
        a failing probe still raises the client's own ``TaskAppError``.
        """
        key = f"{app.url} {id(app)}"
        with self._lock:
            if key in self._healthy:
                return True
        if not check_task_app_health(app.url, app.api_key).ok:
            return False
        with self._lock:
            self._healthy.add(key)
        return True

    # -- online: what the CLI does before submitting ------------------------------------------
    def prepare_submit(
        self, api_key: Secret | None, task_app_url: str | None, task_app_key: Secret | None
    ) -> None:
        """Online, before a job of this run is submitted: upload the task app's key to the
        backend (once per process per backend, the same key from every xdist worker; the backend
        sends it to the task app on rollouts, contract §10.5), and with
        ``--synth-verify-task-app`` have the backend verify the task app (once per task app).
        Failures raise the client's errors, which name the URL and the fix."""
        if self.settings.is_offline:
            return
        backend = self.settings.backend_url
        if task_app_key:
            self._once(
                ("upload", backend),
                lambda: upload_environment_api_key(
                    backend, api_key, task_app_key, http_client=self.http_client()
                ),
            )
        if self.settings.verify_task_app and task_app_url:
            self._once(
                ("verify", backend, task_app_url),
                lambda: verify_task_app(backend, api_key, task_app_url, http_client=self.http_client()),
            )

    def _once(self, mark: tuple[str, ...], action: Callable[[], object]) -> None:
        with self._lock:
            if mark in self._prepared:
                return
        action()  # outside the lock: a network call; a failure leaves the mark unset (retried)
        with self._lock:
            self._prepared.add(mark)

    # -- the offline backend ---------------------------------------------------------------
    def fake_backend(self) -> FakeSynthBackend:
        """The fake (created once; each test resets it onto a fresh clock)."""
        with self._lock:
            if self._fake is None:
                self._fake = FakeSynthBackend(
                    self.settings.backend_url,
                    api_key=self.fake_api_key(),
                    task_app_api_key=self.settings.task_app_api_key,
                )
            return self._fake

    def fake_transport(self) -> httpx.MockTransport:
        """The fake as a transport (``httpx.MockTransport(fake.handle)``): the plugin's own jobs,
        sync or async, reach the fake without patching httpx for anyone else."""
        return httpx.MockTransport(self.fake_backend().handle)

    def fake_async_transport(self) -> httpx.MockTransport:
        """The fake as an async transport whose answers are worked out in a thread: an answer may
        run rollouts, and an async test's event loop must stay free meanwhile (the task app may
        call back into something the test serves on that loop)."""
        handler = self.fake_backend().handle

        async def answer(request: httpx.Request) -> httpx.Response:
            await request.aread()
            return await anyio.to_thread.run_sync(handler, request)

        return httpx.MockTransport(answer)

    def fake_http_client(self) -> httpx.Client:
        """One client on the fake's handler shared by every synchronous offline job."""
        from pytest_synth_rl.fake.handler_client import HandlerClient

        handler = self.fake_backend().handle
        with self._lock:
            if self._fake_http is None:
                self._fake_http = HandlerClient(handler, timeout=DEFAULT_REQUEST_TIMEOUT)
            return self._fake_http

    def fake_api_key(self) -> Secret:
        """Offline, the user's key if set (so the same code paths run), else the fake's default."""
        from pytest_synth_rl.fake.backend import DEFAULT_API_KEY

        return self.settings.api_key or Secret(DEFAULT_API_KEY)

    def close(self) -> None:
        """Stop everything this run started. Safe to call twice."""
        with self._lock:
            apps, self._task_apps = list(self._task_apps.values()), {}
            fake, self._fake = self._fake, None
            clients = [self._http, self._fake_http]
            self._http = self._fake_http = None
        for http in clients:
            if http is not None:
                http.close()
        for app in apps:
            try:
                app.stop()
            except Exception as exc:  # keep stopping the others; say what went wrong
                log.warning("stopping task app %s failed: %s", app.url, exc)
        if fake is not None:
            fake.close()


class SynthJobFactory:
    """The jobs one test made, and how to build more (what ``synth_rl_job`` returns).

    Call it like a function: ``job = synth_rl_job()`` or ``synth_rl_job(config="other.toml",
    overrides={"training.batch_size": 2})``.
    """

    def __init__(
        self,
        *,
        test_id: str,
        settings: SynthSettings,
        clock: Clock,
        config: RLConfigRef | None,
        task_app_url: str | None,
        task_app_api_key: str | Secret | None,
        api_key: str | Secret | None,
        skip_health_check: bool = False,
        http_client: httpx.Client | None = None,
        transport: httpx.MockTransport | None = None,
        async_transport: httpx.MockTransport | None = None,
        prepare_submit: Callable[[Secret | None, str | None, Secret | None], None] | None = None,
        config_dirs: tuple[Path, ...] = (),
    ) -> None:
        self.test_id = test_id
        #: Where a relative ``config=`` is looked for, in order (the first file found wins).
        self.config_dirs = config_dirs
        self.transport = transport
        #: What async jobs use instead of *transport* (the fake answering off the event loop).
        self.async_transport = async_transport if async_transport is not None else transport
        self.prepare_submit = prepare_submit
        self.skip_health_check = skip_health_check
        self.http_client = http_client
        self.settings = settings
        self.clock = clock
        self.config = config
        self.task_app_url = task_app_url
        self.task_app_api_key = secret_or_none(task_app_api_key)
        self.api_key = secret_or_none(api_key)
        self.jobs: list[RLJob] = []
        self.async_jobs: list[AsyncRLJob] = []
        #: ids of async jobs given their own transport or client (teardown cannot reuse them).
        self._own_transport: set[int] = set()

    def __call__(
        self,
        config: str | os.PathLike[str] | None = None,
        *,
        overrides: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> RLJob:
        """Build an ``RLJob`` bound to this test's backend, task app and clock (not submitted).

        Besides *config* and *overrides* it takes ``RLJob.from_config``'s keyword arguments
        (``task_app_url=``, ``idempotency_key=``, ``allow_new_keys=``...), which win over the
        test's own. A wrong argument is a :class:`SynthUsageError` naming it, with a "did you mean".
        """
        __tracebackhide__ = True
        path, options = self._options(config, overrides, kwargs, call="synth_rl_job")
        if not {"http_client", "transport"} & kwargs.keys():
            if self.http_client is not None:
                options["http_client"] = self.http_client
            elif self.transport is not None:
                options["transport"] = self.transport
        job = self._new_job(lambda: RLJob.from_config(path, **options))
        self.jobs.append(job)
        return job

    def async_job(
        self,
        config: str | os.PathLike[str] | None = None,
        *,
        overrides: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> AsyncRLJob:
        """The same as calling this object, for an ``AsyncRLJob`` (use it with ``async with``)."""
        __tracebackhide__ = True
        path, options = self._options(config, overrides, kwargs, call="synth_rl_job.async_job")
        own_transport = bool({"http_client", "transport"} & kwargs.keys())
        if self.async_transport is not None and not own_transport:
            options["transport"] = self.async_transport
        job = self._new_job(lambda: AsyncRLJob.from_config(path, **options))
        self.async_jobs.append(job)
        if own_transport:
            self._own_transport.add(id(job))
        return job

    def _new_job(self, make: Callable[[], _J]) -> _J:
        """``make()``; a config without a task URL in a test that serves no task app gets the
        fix that applies (a marker), which the config's own hint (task_url=, ...) does not say."""
        __tracebackhide__ = True
        try:
            return make()
        except ConfigError as error:
            if self.task_app_url is not None or "services.task_url" not in error.keys:
                raise
            hint = (
                "this test serves no task app: add @pytest.mark.synth_task_app('my_task_app.py') (or set "
                "the ini option synth_task_app, or pass --synth-task-app-url), or give "
                "synth_rl_job(task_app_url=...)"
            )
            problems = [replace(p, hint=hint) if p.key == "services.task_url" else p for p in error.problems]
            raise ConfigError(problems, path=error.path) from None

    def _find_config(self, given: Path, call: str) -> Path:
        """*given* itself if absolute, else the first file of that name in :attr:`config_dirs`
        (by default the test's config's folder; with neither, the working directory's, as
        ``RLJob.from_config`` takes it)."""
        __tracebackhide__ = True
        from pytest_synth_rl.reporting.files import find_file

        folders = self.config_dirs or ((self.config.path.parent,) if self.config is not None else ())
        if not folders:
            return given
        found = find_file(given, folders)
        if isinstance(found, Path):
            return found
        hint = (
            "give a path relative to the test file (or to the test's synth_rl config, or the rootdir), "
            "or an absolute path"
        )
        if found.near is not None:
            hint = f"did you mean {found.near!r}? {hint}"
        raise SynthUsageError(
            [ConfigProblem(key=f"{call}.config", message=f"RL config file {found.problem}", hint=hint)]
        )

    def _options(
        self,
        config: str | os.PathLike[str] | None,
        overrides: Mapping[str, Any] | None,
        kwargs: Mapping[str, Any],
        *,
        call: str = "synth_rl_job",
    ) -> tuple[Path, dict[str, Any]]:
        __tracebackhide__ = True
        if kwargs or config is not None or overrides is not None:
            from pytest_synth_rl.plugin.job_arguments import job_argument_problems

            problems = job_argument_problems(call, config, overrides, kwargs)
            if problems:
                raise SynthUsageError(problems, subject=f"{call}() arguments")
        if config is not None:
            path = self._find_config(Path(config), call)
            base_overrides: Mapping[str, Any] = {}
        elif self.config is not None:
            path, base_overrides = self.config.path, self.config.overrides
        else:
            raise SynthUsageError(
                [
                    ConfigProblem(
                        key="synth_rl.config",
                        message="no RL config for this test",
                        hint="add @pytest.mark.synth_rl(config='path/to/rl.toml'), set the ini option "
                        "synth_rl_config, or pass synth_rl_job(config=...)",
                    )
                ]
            )
        merged = {**base_overrides, **(overrides or {})}
        options: dict[str, Any] = {
            "backend_url": self.settings.backend_url,
            "api_key": self.api_key,
            "task_app_url": self.task_app_url,
            "task_app_api_key": self.task_app_api_key,
            "overrides": merged or None,
            "clock": self.clock,
            "tags": job_tags(self.test_id),
            # The run probed its own task app once; a job pointed elsewhere probes as usual.
            "skip_health_check": self.skip_health_check
            and not {"task_app_url", "task_app_api_key"} & kwargs.keys(),
        }
        options.update(kwargs)
        if self.prepare_submit is not None:
            # The run's task app key, not a per-job override: the backend holds one key, and a
            # test trying a wrong key must not take the right one away from the others.
            self.prepare_submit(self.api_key, options.get("task_app_url"), self.task_app_api_key)
        return path, options

    def finish(self, *, cancel_running: bool) -> list[JobRecord]:
        """Teardown: cancel jobs still running (online), then describe every submitted job.

        Async jobs are finished through a synchronous handle on the same job id, since teardown
        runs outside the test's event loop.
        """
        records = []
        for job in self.jobs:
            if job.job_id is not None:
                records.append(self._finish_one(job, job, cancel_running))
            job.close()
        for ajob in self.async_jobs:
            if ajob.job_id is None:
                continue
            # The job's own backend and key: async_job(backend_url=...) sent it elsewhere.
            own = id(ajob) in self._own_transport
            if own and self.settings.is_offline:
                # Its transport is async and its own; a plain client could leave loopback: no reads.
                records.append(self._finish_one(None, ajob, cancel_running))
                continue
            with RLJob.from_job_id(
                ajob.job_id,
                backend_url=ajob.config.backend_url,
                api_key=ajob.config.api_key,
                clock=ajob.clock,
                transport=None if own else self.transport,
            ) as handle:
                records.append(self._finish_one(handle, ajob, cancel_running))
        return records

    def _finish_one(self, handle: RLJob | None, job: Any, cancel_running: bool) -> JobRecord:
        # The job's time ends with the test, not after the teardown's own reads and their retries.
        now_clock, now_wall = self._end_clock(job), self._end_wall(job)
        cancelled = False
        status_payload: dict[str, Any] | None = None
        rewards: list[float] = []
        try:
            if handle is not None:  # else nothing may be read: what the job saw is reported
                if job.last_result is None:
                    status_payload = handle.get_status()
                    if cancel_running and not is_terminal(job_status(status_payload)):
                        handle.cancel()
                        cancelled = True
                        log.warning("cancelled RL job %s left running by %s", job.job_id, self.test_id)
                        status_payload = handle.get_status()
                rewards = job_rewards(handle)
        except SynthError as exc:
            log.warning("could not finish RL job %s of %s: %s", job.job_id, self.test_id, exc)
        return job_record(
            self.test_id,
            job,
            backend=job.config.backend_url,
            rewards=rewards,
            status_payload=status_payload,
            now_clock=now_clock,
            now_wall=now_wall,
            cancelled_by_plugin=cancelled,
        )

    def _end_clock(self, job: RLJob | AsyncRLJob) -> float:
        return job.finished_at if job.finished_at is not None else self.clock.now()

    @staticmethod
    def _end_wall(job: RLJob | AsyncRLJob) -> float:
        return job.finished_wall if job.finished_wall is not None else time.perf_counter()


def new_test_clock(settings: SynthSettings) -> Clock:
    """A fresh virtual clock offline; real time online."""
    return VirtualClock() if settings.is_offline else RealClock()


@dataclass(frozen=True)
class SynthBackend:
    """What ``synth_backend`` yields in either mode: where jobs go and with which key.

    Offline ``url`` is the hosted backend's address, answered by the fake; use ``synth_fake``
    to script or inspect the fake itself.
    """

    url: str
    mode: Literal["offline", "online"]
    api_key: Secret | None = None

    @property
    def is_offline(self) -> bool:
        return self.mode == "offline"


class TaskAppHandle(Protocol):
    """What ``synth_task_app`` yields: a running task app's URL and the key it enforces."""

    @property
    def url(self) -> str: ...

    @property
    def api_key(self) -> Secret | None: ...


@dataclass(frozen=True)
class ExternalTaskApp:
    """A task app someone else runs (``--synth-task-app-url``): just its URL and key.

    The key is a :class:`~pytest_synth_rl.secrets.masking.Secret` (``.value`` is the text): this object
    is a test argument, printed whenever a test using it fails.
    """

    url: str
    api_key: Secret | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "api_key", secret_or_none(self.api_key))


@dataclass(frozen=True)
class ExpectJob:
    """``synth_expect(job)``: :func:`~pytest_synth_rl.assertions.expect_job` with the test's
    poll interval and timeout on the test's clock."""

    clock: Clock
    interval: float
    timeout: float
    #: Every expectation made, with where the test made it (``test_x.py:12``).
    made: list[tuple[JobExpectation, str]] = field(default_factory=list, repr=False, compare=False)

    def __call__(self, job: RLJob) -> JobExpectation:
        __tracebackhide__ = True
        expectation = start_expectation(
            "synth_expect", job, clock=self.clock, interval=self.interval, timeout=self.timeout
        )
        self.made.append((expectation, outside_caller()))
        return expectation

    def unchecked(self) -> list[str]:
        """Where the test made an expectation it never called a check on (a passing test with
        ``synth_expect(job).to_succeed``, parentheses forgotten, checked nothing)."""
        return [where for expectation, where in self.made if not expectation.checks_made]


@dataclass(frozen=True)
class BaselineCheck:
    """``synth_baseline(result, {"reward.*": Tolerance(abs=0.1)}, final_reward=Tolerance(rel=0.05))``:
    compare a job's metrics with this test's stored baseline, or refresh it when *update*."""

    store: BaselineStore
    test_id: str
    update: bool = False

    def __call__(
        self, result_or_metrics: Any, tolerances: Mapping[str, Tolerance] | None = None, **named: Tolerance
    ) -> BaselineComparison:
        merged = {**(tolerances or {}), **named}
        return check_baseline(
            self.store, self.test_id, result_or_metrics, tolerances=merged or None, update=self.update
        )


def replay_transport(replayer: Replayer) -> httpx.MockTransport:
    """A transport answering from *replayer*'s cassette: the plugin's jobs replay without respx."""

    def handle(request: httpx.Request) -> httpx.Response:
        answer = replayer.handle(request)
        if isinstance(answer, httpx.Request):  # pass-through is for loopback, never the backend
            raise SynthError(f"{request.method} {request.url} is not a backend request a cassette can answer")
        return answer

    return httpx.MockTransport(handle)


@dataclass
class ServedFake:
    """A fake backend served on loopback, for clients in other processes or not on httpx.

    Jobs move the way ``FakeSynthBackend.serve()`` moves them by default: one stage each time a
    client looks at a job (status, events, metrics, a tick of the live event stream), so a
    client polling at any cadence, or only reading the stream, sees its job finish without
    anyone sharing a clock. *polls_to_finish* scripts ``Scenario(polls=N)`` instead (terminal on
    the N-th status poll). Its admin routes (``/_fake/...``) take the same key as the API:
    ``Authorization: Bearer <api_key>``.
    """

    fake: FakeSynthBackend
    url: str

    @property
    def api_key(self) -> Secret:
        """The key the served fake accepts, masked (``.value`` is the text to send)."""
        return self.fake.api_key

    @classmethod
    @contextlib.contextmanager
    def start(cls, *, polls_to_finish: int | None = None, **options: Any) -> Iterator[ServedFake]:
        fake = FakeSynthBackend(**options)
        if polls_to_finish is not None:
            fake.scenario(polls=polls_to_finish)
        try:
            with fake.serve() as url:
                yield cls(fake=fake, url=url)
        finally:
            fake.close()
