"""FakeSynthBackend: a stateful stand-in for Synth's RL service, on an injectable clock.

The core is :meth:`FakeSynthBackend.handle`, a plain ``httpx.Request -> httpx.Response`` function
with no respx or ASGI in it; :mod:`.mount` puts it on respx for httpx clients in the test process
and :mod:`.asgi` / :meth:`FakeSynthBackend.serve` put it on a loopback port for everything else
(the upstream SDK uses ``requests``; CLIs run in subprocesses).

Jobs follow :class:`~.scenario.Scenario` scripts whose state is derived from the clock when
observed, and (when their task app is live) run real rollouts. Faults, the request log and the
job store are all inspectable, because a fake you cannot see into is a fake you cannot trust.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

import httpx

from ..clock import Clock, ScaledClock, VirtualClock
from ..config.urls import normalize_backend_url
from ..errors import ConfigProblem, SynthError, SynthUsageError
from ..inference import ArithmeticPolicy, InferencePolicy, InferenceReply, StubInference
from ..loopback import is_loopback_url
from ..masking import Secret, get_logger, mask_secret, register_secret
from . import api
from .faults import Fault, FaultKind
from .handle import FakeJob
from .jobs import JobRecord
from .lifecycle import Lifecycle
from .rollouts import RolloutDriver
from .routes import match_route, route_listing
from .scenario import Scenario
from .wire import RecordedRequest, error_response, json_response

if TYPE_CHECKING:
    from .mount import RespxMount

__all__ = ["DEFAULT_API_KEY", "DEFAULT_BASE_URL", "FakeRouteError", "FakeSynthBackend"]

log = get_logger(__name__)

DEFAULT_BASE_URL = "https://api.usesynth.ai"
#: The key the fake accepts unless told otherwise. Not a secret: it only opens this fake.
DEFAULT_API_KEY = "sk_test_fake_backend_key"
ADMIN_PREFIX = "/_fake"

RolloutsMode = Literal["auto"] | bool


class FakeRouteError(SynthError, AssertionError):
    """A request reached the fake backend's host on a path it does not serve (strict mode).

    An ``AssertionError`` too, like respx's "not mocked" error, so it fails the test where the
    request was made instead of looking like a server-side 404 the client might swallow.
    """


def _api_root(base_url: str) -> tuple[str, str]:
    """``(api_base_url, api_path)`` for *base_url*: ``/api`` is appended unless present."""
    text = (base_url or "").strip().rstrip("/")
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise SynthUsageError(
            [
                ConfigProblem(
                    "FakeSynthBackend.base_url",
                    f"must be an http(s) URL, got {base_url!r}",
                    "e.g. FakeSynthBackend(base_url='https://api.usesynth.ai')",
                )
            ]
        )
    api_base = normalize_backend_url(text)
    return api_base, urlsplit(api_base).path


def _progress_accuracy(step: int) -> float:
    # The default "model" improves as training progresses: step is the percentage of the job done.
    return min(0.95, 0.15 + 0.8 * step / 100.0)


def _check_settings(
    api_key: object,
    rollouts: object,
    max_rollouts_per_step: object,
    rollout_timeout: object,
    policy: object,
    replies: object,
) -> None:
    """Every problem with the constructor arguments, raised together."""
    problems: list[ConfigProblem] = []

    def bad(key: str, message: str, hint: str = "") -> None:
        problems.append(ConfigProblem(f"FakeSynthBackend.{key}", message, hint or None))

    if not isinstance(api_key, str) or not api_key:
        bad("api_key", "must be a non-empty string", f"omit it to use the test key {DEFAULT_API_KEY!r}")
    if rollouts not in ("auto", True, False):
        bad("rollouts", f"must be 'auto', True or False, got {rollouts!r}")
    if (
        isinstance(max_rollouts_per_step, bool)
        or not isinstance(max_rollouts_per_step, int)
        or max_rollouts_per_step < 1
    ):
        bad("max_rollouts_per_step", f"must be an int >= 1, got {max_rollouts_per_step!r}")
    if (
        isinstance(rollout_timeout, bool)
        or not isinstance(rollout_timeout, (int, float))
        or rollout_timeout <= 0
    ):
        bad("rollout_timeout", f"must be > 0 seconds, got {rollout_timeout!r}")
    if policy is not None and replies is not None:
        bad("policy", "give either policy= (a callable) or replies= (canned answers), not both")
    if problems:
        raise SynthUsageError(problems, hint="see the FakeSynthBackend docstring")


class FakeSynthBackend:
    """A fake of Synth's RL job API, for offline tests.

    ``with FakeSynthBackend() as fake:`` mounts it on respx (httpx clients talking to
    ``base_url`` reach the fake; loopback traffic passes through; other hosts stay under the
    usual respx rules). ``with fake.serve() as url:`` serves it on loopback instead.

    Arguments:
        base_url: the backend URL clients are configured with (``/api`` is implied).
        api_key: the bearer key the fake accepts.
        clock: shared with the client under test; default a new :class:`VirtualClock`.
        task_app_api_key: the key sent to task apps on rollouts (default ``$ENVIRONMENT_API_KEY``).
        policy / replies: how the stub model answers during rollouts (see
            :class:`~pytest_synth_rl.inference.StubInference`); default an arithmetic solver whose
            accuracy improves over the job, so rewards from real rollouts rise.
        rollouts: ``"auto"`` runs real rollouts when the job's task app URL is on loopback,
            ``True`` for any http(s) URL, ``False`` never (scripted rewards).
        max_rollouts_per_step: cap on rollouts per step (and per evaluation), to keep tests fast.
        rollout_timeout: seconds (real) before a rollout counts as timed out.
        strict: when mounted, a request to the backend host on an unknown path raises
            :class:`FakeRouteError` (served, it gets a 404 that lists the routes).
        validate: check submitted payloads with ``validate_rl_payload`` (422 on problems).
    """

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        api_key: str | Secret = DEFAULT_API_KEY,
        clock: Clock | None = None,
        task_app_api_key: str | Secret | None = None,
        policy: InferencePolicy | None = None,
        replies: Sequence[InferenceReply] | None = None,
        rollouts: RolloutsMode = "auto",
        max_rollouts_per_step: int = 4,
        rollout_timeout: float = 30.0,
        strict: bool = True,
        validate: bool = True,
    ) -> None:
        self.base_url = (base_url or "").strip().rstrip("/")
        self.api_base, self._api_path = _api_root(self.base_url)
        key = api_key.value if isinstance(api_key, Secret) else api_key
        _check_settings(key, rollouts, max_rollouts_per_step, rollout_timeout, policy, replies)
        self._api_key = Secret(key)
        register_secret(key)
        task_key = task_app_api_key.value if isinstance(task_app_api_key, Secret) else task_app_api_key
        self._task_app_key = Secret(task_key) if task_key else None
        self.rollouts: RolloutsMode = rollouts
        self.strict = strict
        self.validate = validate
        self._clock: Clock = clock if clock is not None else VirtualClock()
        self._lock = threading.RLock()
        self._jobs: OrderedDict[str, JobRecord] = OrderedDict()
        self._active: dict[str, JobRecord] = {}
        self._idempotency: dict[str, tuple[str, str]] = {}
        self._faults: list[Fault] = []
        self._requests: list[RecordedRequest] = []
        self._default = Scenario()
        self._next: list[Scenario] = []
        self._counter = 0
        self._policy_obj = policy
        self._stub = StubInference(
            policy=policy
            if policy is not None or replies is not None
            else ArithmeticPolicy(_progress_accuracy),
            replies=replies,
        )
        self._stub_stack: contextlib.ExitStack | None = None
        self._stub_url: str | None = None
        self._driver = RolloutDriver(
            api_key=self._rollout_key, inference_url=self._inference_url, timeout=rollout_timeout
        )
        self._lifecycle = Lifecycle(
            clock=lambda: self._clock,
            driver=self._driver,
            max_rollouts_per_step=max_rollouts_per_step,
            before_batch=self._before_batch,
        )
        self._mount: RespxMount | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._subscribe()

    # -- basics ---------------------------------------------------------------------------------
    @property
    def clock(self) -> Clock:
        """The clock jobs run on (share it with the client under test)."""
        return self._clock

    @property
    def api_key(self) -> Secret:
        """The accepted key, wrapped so it never shows in a repr (``.api_key.value`` for the text)."""
        return self._api_key

    @property
    def inference(self) -> StubInference:
        """The stub model rollouts talk to (its ``requests`` show what the task app asked)."""
        return self._stub

    def __repr__(self) -> str:
        return (
            f"FakeSynthBackend(base_url={self.base_url!r}, api_key={mask_secret(self._api_key.value)!r}, "
            f"clock={self._clock!r}, jobs={len(self._jobs)})"
        )

    def _subscribe(self) -> None:
        if not isinstance(self._clock, VirtualClock):
            return
        ref = weakref.ref(self)

        def on_advance(before: float, after: float) -> None:
            fake = ref()
            if fake is not None:
                fake._on_clock(after)

        self._unsubscribe = self._clock.subscribe(on_advance)

    def _on_clock(self, now: float) -> None:
        # Cheap when nothing is due: one comparison per active job.
        if not self._active:
            return
        with self._lock:
            for job in list(self._active.values()):
                due = self._lifecycle.next_due(job)
                if job.scenario.mode == "immediate" or (due is not None and due <= now + 1e-9):
                    self._lifecycle.sync(job)
                if job.terminal:
                    self._active.pop(job.id, None)

    # -- scenarios ------------------------------------------------------------------------------
    @staticmethod
    def _make_scenario(scenario: Scenario | None, fields: Mapping[str, Any]) -> Scenario:
        if scenario is not None and fields:
            raise SynthUsageError(
                [ConfigProblem("scenario", "pass either a Scenario or keyword fields, not both", "")]
            )
        return scenario if scenario is not None else Scenario(**fields)

    def scenario(self, scenario: Scenario | None = None, /, **fields: Any) -> Scenario:
        """Set the default scenario for jobs submitted from now on; returns it.

        ``fake.scenario(outcome="failed", fail_at_step=3, error="OOM")``; no arguments resets to
        the default (succeeds after 10 steps over 300 virtual seconds).
        """
        made = self._make_scenario(scenario, fields)
        with self._lock:
            self._default = made
        return made

    def scenario_for(self, job: str, scenario: Scenario | None = None, /, **fields: Any) -> Scenario:
        """Script one job: ``"next"`` (the next submission; calls queue up) or an existing job id.

        For an existing job the new script applies from its current stage on (stages already run
        stay as they were).
        """
        made = self._make_scenario(scenario, fields)
        with self._lock:
            if job == "next":
                self._next.append(made)
                return made
            record = self._jobs.get(job)
            if record is None:
                raise SynthError(
                    f"no job {job!r} on this FakeSynthBackend (jobs: {list(self._jobs)[-5:]})",
                    hint="use scenario_for('next', ...) before submitting, or an id from fake.jobs",
                )
            self._lifecycle.sync(record)
            record.scenario = made
            record.touch(record.updated_time)
            if not record.terminal:
                self._active[record.id] = record
        return made

    def next_job(self, scenario: Scenario | None = None, /, **fields: Any) -> Scenario:
        """Shorthand for ``scenario_for("next", ...)``."""
        return self.scenario_for("next", scenario, **fields)

    @property
    def default_scenario(self) -> Scenario:
        return self._default

    # -- jobs -----------------------------------------------------------------------------------
    def job(self, job_id: str | None = None) -> FakeJob:
        """A handle on one job (default: the most recent). Unknown ids raise :class:`SynthError`."""
        with self._lock:
            if job_id is None:
                if not self._jobs:
                    raise SynthError(
                        "no job was submitted to this FakeSynthBackend yet",
                        hint="submit a job first (POST /rl/jobs)",
                    )
                job_id = next(reversed(self._jobs))
            record = self._jobs.get(job_id)
            if record is None:
                raise SynthError(
                    f"no job {job_id!r} on this FakeSynthBackend (jobs: {list(self._jobs)[-5:]})",
                    hint="use the id returned by submit(), or fake.jobs",
                )
            return FakeJob(self, record)

    @property
    def jobs(self) -> list[FakeJob]:
        """Every job, oldest first."""
        with self._lock:
            return [FakeJob(self, record) for record in self._jobs.values()]

    def _create_job(self, payload: dict[str, Any], idempotency_key: str | None) -> JobRecord:
        self._counter += 1
        job_id = f"job_rl_{self._counter:06d}"
        scenario = self._next.pop(0) if self._next else self._default
        endpoint = str((payload.get("data") or {}).get("endpoint_base_url") or "")
        forced = scenario.uses_rollouts
        if forced is not None:
            use_rollouts = forced
        elif self.rollouts == "auto":
            use_rollouts = is_loopback_url(endpoint)
        else:
            use_rollouts = bool(self.rollouts) and endpoint.startswith(("http://", "https://"))
        now, ts = self._clock.now(), self._clock.time()
        job = JobRecord(
            id=job_id,
            payload=payload,
            scenario=scenario,
            created_now=now,
            created_time=ts,
            use_rollouts=use_rollouts,
            idempotency_key=idempotency_key,
            updated_time=ts,
        )
        job.set_phase(ts, "queued")
        job.add_event(ts, "rl.job.created", f"RL job {job_id} created for {job.model}", {"model": job.model})
        self._jobs[job_id] = job
        self._active[job_id] = job
        return job

    def _validate(self, payload: Mapping[str, Any]) -> list[ConfigProblem]:
        if not self.validate:
            return []
        from ..config import validate_rl_payload  # the config layer, not needed until a submit

        return list(validate_rl_payload(payload))

    # -- rollouts -------------------------------------------------------------------------------
    def _rollout_key(self) -> str | Secret | None:
        return self._task_app_key or os.environ.get("ENVIRONMENT_API_KEY")

    def _inference_url(self) -> str:
        with self._lock:
            if self._stub_url is None:
                stack = contextlib.ExitStack()
                self._stub_url = stack.enter_context(self._stub.serve())
                self._stub_stack = stack
            return self._stub_url

    def _before_batch(self, job: JobRecord, step: int) -> None:
        policy = self._stub.policy
        if hasattr(policy, "step"):
            percent = round(100 * step / max(1, job.scenario.steps))
            policy.step = percent if self._policy_obj is None else step

    # -- faults ---------------------------------------------------------------------------------
    def fault(
        self,
        route: str = "*",
        *,
        status: int | None = None,
        connect_error: bool = False,
        latency: float | None = None,
        retry_after: float | None = None,
        pattern: str | None = None,
        fail_next: int | None = None,
        probability: float | None = None,
        seed: int = 0,
        cycle: bool = False,
    ) -> Fault:
        """Inject a fault on *route* (``submit``, ``status``, ``events``, ``*``...); see :mod:`.faults`.

        Give one kind (``status=503`` is the default, ``connect_error=True``, ``latency=30``) and at
        most one selector (``pattern="0110"``, ``fail_next=2``, ``probability=0.3, seed=1``).
        """
        kinds = [
            k
            for k, on in (
                ("status", status is not None),
                ("connect", connect_error),
                ("latency", latency is not None),
            )
            if on
        ]
        if len(kinds) > 1:
            raise SynthUsageError(
                [
                    ConfigProblem(
                        "fault",
                        f"choose one fault kind, got {' and '.join(kinds)}",
                        "status=, connect_error=True or latency=",
                    )
                ]
            )
        kind: FaultKind = "status"
        if connect_error:
            kind = "connect"
        elif latency is not None:
            kind = "latency"
        made = Fault(
            route=route,
            kind=kind,
            status=status if status is not None else 503,
            latency=float(latency or 0.0),
            retry_after=retry_after,
            pattern=pattern,
            fail_next=fail_next,
            probability=probability,
            seed=seed,
            cycle=cycle,
        )
        with self._lock:
            self._faults.append(made)
        return made

    @property
    def faults(self) -> list[Fault]:
        with self._lock:
            return list(self._faults)

    def clear_faults(self) -> None:
        with self._lock:
            for fault in self._faults:
                fault.remove()
            self._faults.clear()

    # -- request log ----------------------------------------------------------------------------
    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request the fake received, in order (credentials masked)."""
        with self._lock:
            return list(self._requests)

    def calls(self, route: str) -> list[RecordedRequest]:
        """Requests that matched *route* (``submit``, ``status``...)."""
        with self._lock:
            return [r for r in self._requests if r.route == route]

    def reset(self, *, clock: Clock | None = None) -> None:
        """Forget jobs, the request log, scenarios and faults; settings stay.

        With *clock*, jobs from now on run on that clock (a test gets a fresh ``VirtualClock``
        while the fake, and its stub model server, live for the whole session).
        """
        if clock is not None and clock is not self._clock:
            if self._unsubscribe is not None:
                self._unsubscribe()
                self._unsubscribe = None
            with self._lock:
                self._clock = clock
            self._subscribe()
        with self._lock:
            self._jobs.clear()
            self._active.clear()
            self._idempotency.clear()
            self._requests.clear()
            self._next.clear()
            self._default = Scenario()
            for fault in self._faults:
                fault.remove()
            self._faults.clear()
        self._stub.clear()
        if self._policy_obj is None and self._stub.replies is None:
            # A fresh default model: its answers depend on what it was asked before, and a test
            # must not see different rewards depending on which tests ran first.
            self._stub.policy = ArithmeticPolicy(_progress_accuracy)

    # -- the request handler ----------------------------------------------------------------------
    def handle(self, request: httpx.Request) -> httpx.Response:
        """Answer one request to the fake backend.

        Unknown paths get a 404 listing the routes; an injected connection fault raises
        :class:`httpx.ConnectError` (the transport decides how to surface it).
        """
        response, _ = self._handle(request)
        return response

    def _handle(self, request: httpx.Request) -> tuple[httpx.Response, bool]:
        """``(response, matched)``; *matched* is False for paths the API does not have."""
        request.read()  # a no-op for transports that already did; needed for streamed bodies
        path = request.url.path
        if path.startswith(ADMIN_PREFIX + "/") or path == ADMIN_PREFIX:
            from .admin import handle_admin  # only scripts driving a served fake need it

            return handle_admin(self, request), True
        with self._lock:
            record = RecordedRequest(
                method=request.method,
                url=str(request.url),
                path=path,
                route=None,
                time=self._clock.time(),
                _raw_headers=request.headers,
                _body=request.content,
            )
            self._requests.append(record)
            root = self._api_path
            if not (path == root or path.startswith(root + "/")):
                return self._unmatched(record, f"path is outside the API root {root}"), False
            found = match_route(request.method, path[len(root) :])
            if found is None:
                return self._unmatched(record, "no such route"), False
            record.job_id = found.job_id
            if found.route is None:
                allowed = ", ".join(found.allowed)
                record.status = 405
                return (
                    error_response(
                        405,
                        "method_not_allowed",
                        f"{request.method} is not allowed on {path}; use {allowed}",
                        [("allow", allowed)],
                    ),
                    True,
                )
            record.route = name = found.route.name
            if self._faults:
                injected = self._apply_faults(name, request, record)
                if injected is not None:
                    record.status = injected.status_code
                    return injected, True
            if not self._authorised(request):
                record.status = 401
                return self._unauthorised(), True
            call = api.Call(self, request, found.job_id)
            response = api.dispatch(name, call)
            record.status = response.status_code
            record.job_id = call.job_id
            return response, True

    def _unmatched(self, record: RecordedRequest, why: str) -> httpx.Response:
        record.status = 404
        record.error = why
        return json_response(
            404,
            {
                "detail": {
                    "error": {
                        "code": "route_not_found",
                        "message": f"{record.method} {record.path}: {why}. This fake backend serves "
                        f"the RL job API under {self._api_path}; see 'routes'.",
                        "routes": route_listing(self._api_path),
                    }
                }
            },
        )

    def unmatched_error(self, request: httpx.Request) -> FakeRouteError:
        """The strict-mode error for a request to an unknown path (used by the respx mount)."""
        lines = "\n".join(f"    {line}" for line in route_listing(self.api_base))
        return FakeRouteError(
            f"FakeSynthBackend has no route {request.method} {request.url}\n  routes served:\n{lines}",
            hint="fix the URL in the client, or create the fake with strict=False to get a 404 instead",
        )

    def _authorised(self, request: httpx.Request) -> bool:
        header: str | None = request.headers.get("authorization")
        if not header:
            return False
        scheme, _, token = header.partition(" ")
        return scheme.lower() == "bearer" and token.strip() == str(self._api_key.value)

    def _unauthorised(self) -> httpx.Response:
        return error_response(
            401,
            "unauthorised",
            "missing or invalid API key: send 'Authorization: Bearer <key>' with the key this fake "
            f"backend accepts (FakeSynthBackend(api_key=...), currently {mask_secret(self._api_key.value)}); "
            "with the plugin, use the synth_backend fixture's api_key or set SYNTH_API_KEY to it",
            [("www-authenticate", "Bearer")],
        )

    def _apply_faults(
        self, route: str, request: httpx.Request, record: RecordedRequest
    ) -> httpx.Response | None:
        fired: list[Fault] = [f for f in self._faults if f.matches(route) and f.should_fail()]
        if not fired:
            return None
        record.fault = "; ".join(f.describe() for f in fired)
        for fault in fired:
            if fault.kind == "latency":
                self._delay(fault.latency)
        for fault in fired:
            if fault.kind == "connect":
                record.error = "connection error injected"
                raise httpx.ConnectError(
                    f"[FakeSynthBackend] injected connection error on {request.method} {request.url.path} "
                    f"(fault: {fault.describe()})",
                    request=request,
                )
            if fault.kind == "status":
                headers: list[tuple[str, str]] = []
                if fault.retry_after is not None:
                    headers.append(("retry-after", f"{fault.retry_after:g}"))
                return error_response(
                    fault.status,
                    "injected_fault",
                    f"fault injected by FakeSynthBackend: {fault.describe()} (call {fault.seen})",
                    headers,
                )
        return None

    def _delay(self, seconds: float) -> None:
        clock = self._clock
        if isinstance(clock, VirtualClock):
            clock.advance(seconds)
        else:
            clock.sleep(seconds)

    # -- mounting (respx) -----------------------------------------------------------------------
    def start(self) -> FakeSynthBackend:
        """Mount on respx: httpx requests to ``base_url`` reach this fake. Idempotent."""
        from .mount import RespxMount

        with self._lock:
            if self._mount is None:
                self._mount = RespxMount(self)
                self._mount.start()
        return self

    def stop(self, *, keep_helpers: bool = False) -> None:
        """Unmount from respx and stop helpers (the stub model server, the rollout client).

        ``keep_helpers=True`` only unmounts: a fake reused across tests (mounted per test, reset
        in between) then keeps its stub model server instead of restarting it for every test;
        :meth:`close` stops it at the end.
        """
        with self._lock:
            mount, self._mount = self._mount, None
        if mount is not None:
            mount.stop()
        if not keep_helpers:
            self._shutdown_helpers()

    @property
    def mounted(self) -> bool:
        return self._mount is not None

    def __enter__(self) -> FakeSynthBackend:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _shutdown_helpers(self) -> None:
        with self._lock:
            stack, self._stub_stack = self._stub_stack, None
            self._stub_url = None
        if stack is not None:
            stack.close()
        self._driver.close()

    def close(self) -> None:
        """Unmount, stop helpers and detach from the clock."""
        self.stop()
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    # -- serving (loopback) -----------------------------------------------------------------------
    @contextlib.contextmanager
    def serve(self, *, host: str = "127.0.0.1", port: int = 0, speed: float | None = None) -> Iterator[str]:
        """Serve this fake over HTTP on loopback; yields the base URL (``http://127.0.0.1:<port>``).

        ``speed`` replaces the clock with ``ScaledClock(speed)`` (real time, sped up) while
        serving, for clients in other processes; only allowed before any job exists. Without it
        the fake keeps its clock: with a virtual clock, use ``polls=``/``immediate=`` scenarios
        or advance time via ``POST /_fake/clock/advance``.
        """
        from .server import FakeServer

        previous: Clock | None = None
        if speed is not None:
            with self._lock:
                if self._jobs:
                    raise SynthError(
                        "serve(speed=...) replaces the clock, which would corrupt existing jobs",
                        hint="call reset() first, or create the fake with clock=ScaledClock(speed)",
                    )
                previous = self._clock
                if self._unsubscribe is not None:
                    self._unsubscribe()
                    self._unsubscribe = None
                self._clock = ScaledClock(speed)
        server = FakeServer(self, host=host, port=port)
        try:
            url = server.start()
            yield url
        finally:
            server.stop()
            if previous is not None:
                with self._lock:
                    self._jobs.clear()
                    self._active.clear()
                    self._clock = previous
                self._subscribe()
            self._shutdown_helpers()
