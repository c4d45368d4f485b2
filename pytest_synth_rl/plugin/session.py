"""Run state behind the fixtures, usable without pytest: :class:`SynthRun` owns task apps, the
offline fake and HTTP clients once per process; the fixtures' types live here too.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import anyio.to_thread
import httpx

from pytest_synth_rl.assertions import JobExpectation, start_expectation
from pytest_synth_rl.baselines import BaselineComparison, BaselineStore, Tolerance, check_baseline
from pytest_synth_rl.client import RLJob, upload_environment_api_key, verify_task_app
from pytest_synth_rl.client.base import DEFAULT_REQUEST_TIMEOUT
from pytest_synth_rl.client.results import JobResult
from pytest_synth_rl.clock import Clock
from pytest_synth_rl.errors import BackendUnreachableError, SynthError
from pytest_synth_rl.fake import DEFAULT_API_KEY, FakeSynthBackend
from pytest_synth_rl.fake.handler import HandlerClient
from pytest_synth_rl.plugin.jobs import RLConfigRef as RLConfigRef
from pytest_synth_rl.plugin.jobs import SynthJobFactory as SynthJobFactory
from pytest_synth_rl.plugin.jobs import job_tags as job_tags
from pytest_synth_rl.plugin.settings import SynthSettings
from pytest_synth_rl.recording import Replayer
from pytest_synth_rl.reporting.files import masked_digest
from pytest_synth_rl.secrets.callers import outside_caller
from pytest_synth_rl.secrets.masking import Secret, get_logger
from pytest_synth_rl.taskapp import InProcessTaskApp, check_task_app_health
from pytest_synth_rl.taskapp.loading import split_app_path
from pytest_synth_rl.taskapp.tls import shared_ssl_context

log = get_logger("pytest_synth_rl.plugin.session")


def offline_job_id_prefix(test_id: str) -> str:
    """Offline job ids of *test_id*, independent of test order, xdist workers or CI shards."""
    return f"job_rl_{masked_digest(test_id)}_"


@dataclass(frozen=True)
class TaskAppSpec:
    source: str
    api_key: Secret | None = None
    startup_timeout: float | None = None

    def start(self, *, shared: bool = False) -> InProcessTaskApp:
        """A started server of this task app; unless *shared*, on an app object loaded for it alone."""
        __tracebackhide__ = True
        kwargs: dict[str, Any] = {"api_key": self.api_key, "fresh": not shared}
        if self.startup_timeout is not None:
            kwargs["startup_timeout"] = self.startup_timeout
        kwargs["task_app_path" if split_app_path(self.source)[0].suffix == ".py" else "target"] = self.source
        return InProcessTaskApp(**kwargs).start()


class SynthRun:
    def __init__(self, settings: SynthSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._task_apps: dict[TaskAppSpec, InProcessTaskApp] = {}
        self._healthy: set[str] = set()
        self._fake: FakeSynthBackend | None = None
        self._http: httpx.Client | None = None
        self._fake_http: httpx.Client | None = None
        self._prepared: set[tuple[str, ...]] = set()
        self._backend_problem: str | None = None  # "" once probed and answering

    def require_backend(self) -> None:
        """Online, raise :class:`BackendUnreachableError` if nothing answers (probed once)."""
        __tracebackhide__ = True
        if self.settings.is_offline:
            return
        url = self.settings.backend_url
        with self._lock:
            if self._backend_problem is None:
                from pytest_synth_rl.client.reachability import probe_backend

                self._backend_problem = probe_backend(url) or ""
            problem = self._backend_problem
        if problem:
            raise BackendUnreachableError(self.settings.origin("backend"), url, problem)

    def task_app(self, spec: TaskAppSpec) -> InProcessTaskApp:
        with self._lock:
            app = self._task_apps.get(spec)
            if app is None or not app.is_running:
                app = spec.start(shared=True)
                self._task_apps[spec] = app
            return app

    def http_client(self) -> httpx.Client:
        with self._lock:
            if self._http is None:
                self._http = httpx.Client(timeout=DEFAULT_REQUEST_TIMEOUT, verify=shared_ssl_context())
            return self._http

    def task_app_known_healthy(self, app: InProcessTaskApp) -> bool:
        key = f"{app.url} {id(app)}"
        with self._lock:
            if key in self._healthy:
                return True
        healthy = check_task_app_health(app.url, app.api_key).ok
        if healthy:
            with self._lock:
                self._healthy.add(key)
        return healthy

    def prepare_submit(
        self, api_key: Secret | None, task_app_url: str | None, task_app_key: Secret | None
    ) -> None:
        """Online: upload the task app's key once per backend, and verify the task app if asked."""
        if self.settings.is_offline:
            return
        backend = self.settings.backend_url
        if task_app_key:
            self._once(("upload", backend), upload_environment_api_key, backend, api_key, task_app_key)
        if self.settings.verify_task_app and task_app_url:
            self._once(("verify", backend, task_app_url), verify_task_app, backend, api_key, task_app_url)

    def _once(self, mark: tuple[str, ...], action: Callable[..., object], *args: Any) -> None:
        with self._lock:
            if mark in self._prepared:
                return
        action(*args, http_client=self.http_client())
        with self._lock:
            self._prepared.add(mark)

    def fake_backend(self) -> FakeSynthBackend:
        with self._lock:
            if self._fake is None:
                self._fake = FakeSynthBackend(
                    self.settings.backend_url,
                    api_key=self.fake_api_key(),
                    task_app_api_key=self.settings.task_app_api_key,
                )
            return self._fake

    def fake_async_transport(self) -> httpx.MockTransport:
        """The fake answering async clients in a thread, keeping the test's event loop free."""
        handler = self.fake_backend().handle

        async def answer(request: httpx.Request) -> httpx.Response:
            await request.aread()
            return await anyio.to_thread.run_sync(handler, request)

        return httpx.MockTransport(answer)

    def fake_http_client(self) -> httpx.Client:
        handler = self.fake_backend().handle
        with self._lock:
            if self._fake_http is None:
                self._fake_http = HandlerClient(handler, timeout=DEFAULT_REQUEST_TIMEOUT)
            return self._fake_http

    def fake_api_key(self) -> Secret:
        return self.settings.api_key or Secret(DEFAULT_API_KEY)

    def close(self) -> None:
        with self._lock:
            apps, self._task_apps = list(self._task_apps.values()), {}
            fake, self._fake = self._fake, None
            clients = [http for http in (self._http, self._fake_http) if http is not None]
            self._http = self._fake_http = None
        for http in clients:
            http.close()
        for app in apps:
            try:
                app.stop()
            except Exception as exc:
                log.warning("stopping task app %s failed: %s", app.url, exc)
        if fake is not None:
            fake.close()


@dataclass(frozen=True)
class SynthBackend:
    """What ``synth_backend`` yields: where jobs go and with which key (offline, the hosted
    backend's address, answered by the fake)."""

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
    """A task app someone else runs (``--synth-task-app-url``): its URL and key."""

    url: str
    api_key: Secret | None = None


@dataclass(frozen=True)
class ExpectJob:
    """``synth_expect(job)``: ``expect_job`` with the test's poll interval and timeout on its clock."""

    clock: Clock
    interval: float
    timeout: float
    made: list[tuple[JobExpectation, str]] = field(default_factory=list, repr=False, compare=False)

    def __call__(self, job: RLJob) -> JobExpectation:
        __tracebackhide__ = True
        expectation = start_expectation(
            "synth_expect", job, clock=self.clock, interval=self.interval, timeout=self.timeout
        )
        self.made.append((expectation, outside_caller()))
        return expectation

    def unchecked(self) -> list[str]:
        return [where for expectation, where in self.made if not expectation.checks_made]


@dataclass(frozen=True)
class BaselineCheck:
    """``synth_baseline(job, {"reward.*": Tolerance(abs=0.1)}, final_reward=Tolerance(rel=0.05))``:
    compare a job's metrics (after its wait) with this test's stored baseline, or refresh it when
    *update*; a job's result or a metrics mapping works too (a result stands for the test's job it
    came from, whose metrics give the reward curve)."""

    store: BaselineStore
    test_id: str
    update: bool = False
    jobs: Callable[[], Sequence[RLJob]] = tuple

    def __call__(
        self, job_or_metrics: Any, tolerances: Mapping[str, Tolerance] | None = None, **named: Tolerance
    ) -> BaselineComparison:
        merged = {**(tolerances or {}), **named} or None
        if isinstance(job_or_metrics, JobResult):
            came_from = (job for job in self.jobs() if job.last_result is job_or_metrics)
            job_or_metrics = next(came_from, job_or_metrics)
        return check_baseline(self.store, self.test_id, job_or_metrics, tolerances=merged, update=self.update)


def replay_transport(replayer: Replayer) -> httpx.MockTransport:
    """A transport answering from *replayer*'s cassette, without respx."""

    def handle(request: httpx.Request) -> httpx.Response:
        answer = replayer.handle(request)
        if isinstance(answer, httpx.Request):
            raise SynthError(f"{request.method} {request.url} is not a backend request a cassette can answer")
        return answer

    return httpx.MockTransport(handle)


@dataclass
class ServedFake:
    """A fake backend served on loopback, for clients in other processes or not on httpx: jobs
    move one stage each time a client looks at them (*polls_to_finish* scripts
    ``Scenario(polls=N)`` instead); admin routes (``/_fake/...``) take the API's key."""

    fake: FakeSynthBackend
    url: str

    @property
    def api_key(self) -> Secret:
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
