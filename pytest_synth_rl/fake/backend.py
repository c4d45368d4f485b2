"""FakeSynthBackend: a stateful stand-in for Synth's RL service on an injectable clock, over the job
store, the lifecycle, the task app's keys, the stand-in model and the request handler; and the
``serve`` command as a library, with policies loaded from ``[ENV=]file.py:NAME`` specs."""

from __future__ import annotations

import contextlib
import inspect
import math
import os
import re
import secrets
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TextIO
from urllib.parse import urlsplit

import httpx
import respx
from respx.models import AllMockedAssertionError

from pytest_synth_rl.clock import Clock, ScaledClock, VirtualClock
from pytest_synth_rl.config.urls import normalize_backend_url
from pytest_synth_rl.errors import (
    ConfigProblem,
    SynthError,
    SynthUsageError,
    TaskAppError,
    finite_number,
    keywords_checked,
    seconds_problem,
)
from pytest_synth_rl.fake.asgi import DEFAULT_READ_TIMEOUT, FakeASGIApp
from pytest_synth_rl.fake.fake_job import FakeJob
from pytest_synth_rl.fake.faults import Fault, make_fault
from pytest_synth_rl.fake.handler import FakeRouteError, RequestHandler
from pytest_synth_rl.fake.keys import EnvKeys
from pytest_synth_rl.fake.lifecycle import PACING_MODES, Lifecycle, Pacing
from pytest_synth_rl.fake.model import PolicyReply
from pytest_synth_rl.fake.model.inference import StubInference
from pytest_synth_rl.fake.model.policy import Policy, policy_problem
from pytest_synth_rl.fake.rollouts import RolloutDriver
from pytest_synth_rl.fake.scenario import Scenario, int_in
from pytest_synth_rl.fake.stand_in import EVERY_OTHER_ENV, Policies, StandInModel, policies_problem
from pytest_synth_rl.fake.store import JobStore, RolloutsMode
from pytest_synth_rl.fake.wire import LoggedRequest
from pytest_synth_rl.secrets.masking import Secret, key_problem, mask_secret, register_secret, secret_or_none
from pytest_synth_rl.taskapp.loading import is_factory, load_attribute
from pytest_synth_rl.taskapp.loopback import is_loopback_host
from pytest_synth_rl.taskapp.serving import ServerThread

__all__ = ["DEFAULT_API_KEY", "DEFAULT_BASE_URL", "FakeRouteError", "FakeSynthBackend"]

DEFAULT_BASE_URL = "https://api.usesynth.ai"
#: The key the fake accepts unless told otherwise. Not a secret: it only opens this fake.
DEFAULT_API_KEY = "sk_test_fake_backend_key"
_ID = re.compile(r"[A-Za-z0-9_-]{1,40}")
#: Calls respx keeps per router before they are dropped.
_KEEP_CALLS = 1000
#: Routers mounted per origin, newest last: only the newest answers its origin.
_mounted: dict[tuple[str, str, int], list[respx.MockRouter]] = {}
_mounted_lock = threading.Lock()


def _mount(handler: Callable[[httpx.Request], httpx.Response], base_url: str) -> respx.MockRouter:
    """A started respx router answering *base_url*'s origin; loopback passes, other hosts are not mocked."""
    origin = httpx.URL(base_url)
    port = origin.port or (443 if origin.scheme == "https" else 80)
    key = (origin.scheme, origin.host, port)
    router = respx.MockRouter(assert_all_called=False)

    def answer(request: httpx.Request) -> httpx.Response:
        if _mounted.get(key, [None])[-1] is not router:
            raise AllMockedAssertionError(f"RESPX: {request!r} left to the fake mounted last")
        if len(router.calls) >= _KEEP_CALLS:
            router.reset()
        return handler(request)

    def elsewhere(request: httpx.Request) -> httpx.Request:
        if is_loopback_host(request.url.host):
            return request  # passed through
        raise AllMockedAssertionError(
            f"RESPX: {request!r} not mocked! The FakeSynthBackend mounted here serves {base_url} and "
            "lets loopback through; mock other hosts with respx routes."
        )

    for effect in (answer, elsewhere):
        setattr(effect, "__signature__", inspect.signature(effect))  # noqa: B010 (a function attribute)
    router.route(scheme=origin.scheme, host=origin.host, port=port).side_effect = answer
    router.route().side_effect = elsewhere
    with _mounted_lock:
        _mounted.setdefault(key, []).append(router)
    router.start()
    return router


_Rule = tuple[Callable[[Any], str | None], str]


def _must(ok: Callable[[Any], object], expected: str, hint: str = "") -> _Rule:
    """A rule: the problem with a value *ok* refuses, and its hint."""
    return (lambda value: None if ok(value) else f"must be {expected}, got {value!r:.80}"), hint


def _positive(value: object, most: float) -> bool:
    number = finite_number(value)
    return number is not None and 0 < number <= most


def _is_http_url(url: object) -> bool:
    parts = urlsplit(url.strip()) if isinstance(url, str) else None
    return parts is not None and parts.scheme in ("http", "https") and bool(parts.netloc)


_PREFIX = "1-40 letters, digits, '_' or '-' (it goes into URL paths)"
_SPEED = "a finite number > 0 (how many times faster than real time)"
_PACING = f"one of {', '.join(PACING_MODES)} ('observed' by default on a virtual clock)"
_POLICY = (
    "a policy is policy(request) -> reply, e.g. LearningPolicy(solve=...), or one per env, "
    "{'unscramble': policy} ('*': every env not named; else the built-in); None: the fake's"
)
#: Every argument's rule (the problem with a value, None if fine) and its error's hint.
_RULES: dict[str, _Rule] = {
    "base_url": _must(_is_http_url, "an http(s) URL", "e.g. base_url='https://api.usesynth.ai'"),
    "api_key": (
        lambda key: key_problem(key) if isinstance(key, str) and key else "must be a non-empty string",
        f"omit it to use the test key {DEFAULT_API_KEY!r}; a key is printable ASCII text",
    ),
    "rollouts": _must(lambda mode: mode in ("auto", True, False), "'auto', True or False"),
    "max_rollouts_per_step": _must(lambda count: int_in(count, 1, math.inf), "an int >= 1"),
    "rollout_timeout": (seconds_problem, "real seconds for each rollout, e.g. 60"),
    "policy": (lambda policy: None if policy is None else policies_problem(policy), _POLICY),
    "job_id_prefix": _must(
        lambda text: isinstance(text, str) and _ID.fullmatch(text), _PREFIX, "e.g. 'job_gw1_'"
    ),
    "pacing": _must(lambda pacing: pacing in (None, *PACING_MODES), _PACING, "omit it for the default"),
    "speed": _must(lambda speed: speed is None or _positive(speed, math.inf), _SPEED, "e.g. serve(speed=60)"),
    "read_timeout": _must(lambda seconds: _positive(seconds, 3600), "a number of seconds in (0, 3600]"),
}


def argument_problem(name: str, value: object) -> str | None:
    """What is wrong with *value* for the argument *name* (e.g. ``"speed"``), or None."""
    return _RULES[name][0](value)


def _problems(where: str, given: Mapping[str, object]) -> list[ConfigProblem]:
    problems = ((name, _RULES[name][0](given[name])) for name in _RULES if name in given)
    return [ConfigProblem(f"FakeSynthBackend.{where}{n}", p, _RULES[n][1] or None) for n, p in problems if p]


def _check(where: str, given: Mapping[str, object]) -> None:
    __tracebackhide__ = True
    problems = _problems(where, given)
    if problems:
        raise SynthUsageError(problems)


class FakeSynthBackend:
    """A fake of Synth's RL job API, for offline tests.

    ``with FakeSynthBackend() as fake:`` mounts it on respx (loopback passes through, other hosts
    keep the usual respx rules); ``with fake.serve() as url:`` serves it on loopback instead;
    ``fake.transport()`` is an ``httpx.MockTransport`` for a client of your own.

    *base_url* is what clients are configured with (``/api`` implied); *api_key* the bearer key
    accepted; *clock* is shared with the client under test. *task_app_api_key* goes to task apps
    (default ``$ENVIRONMENT_API_KEY``); *policy*/*replies* drive the stub model (default: an
    arithmetic solver that improves over the job); ``policy={"unscramble": p}`` answers that env's
    rollouts with *p* and the others with the default (``"*"``: every env not named). *rollouts*:
    ``"auto"`` (real rollouts for loopback task apps), ``True`` (any http(s) URL) or ``False``.
    *strict*: an unknown path on the backend host raises :class:`FakeRouteError` when mounted.
    *validate*: 422 for bad payloads. *max_rollouts_per_step* caps rollouts per step,
    *rollout_timeout* is real seconds per rollout, and job ids are *job_id_prefix* plus a 6-digit count.
    """

    @keywords_checked
    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        api_key: str | Secret = DEFAULT_API_KEY,
        clock: Clock | None = None,
        task_app_api_key: str | Secret | None = None,
        policy: Policies | None = None,
        replies: Sequence[PolicyReply] | None = None,
        rollouts: RolloutsMode = "auto",
        max_rollouts_per_step: int = 4,
        rollout_timeout: float = 30.0,
        strict: bool = True,
        validate: bool = True,
        job_id_prefix: str = "job_rl_",
    ) -> None:
        key = api_key.value if isinstance(api_key, Secret) else api_key
        given = {name: value for name, value in locals().items() if name in _RULES}
        problems = _problems("", {**given, "api_key": key, "policy": policy if replies is None else None})
        if policy is not None and replies is not None:
            message = "give either policy= (a callable) or replies= (canned answers), not both"
            problems.append(ConfigProblem("FakeSynthBackend.policy", message))
        if problems:
            raise SynthUsageError(problems, hint="see the FakeSynthBackend docstring")
        self.base_url = base_url.strip().rstrip("/")
        self.api_base = normalize_backend_url(self.base_url)
        register_secret(key)
        self.strict = strict
        self._rollout_timeout = float(rollout_timeout)
        clock = VirtualClock() if clock is None else clock
        self.store = JobStore(clock=clock, validate=validate, rollouts=rollouts, job_id_prefix=job_id_prefix)
        self.keys = EnvKeys(secret_or_none(task_app_api_key))
        self.stand_in = StandInModel(policy, replies)
        inference = self.stand_in.inference
        self.driver = RolloutDriver(
            api_key=self.keys.rollout_key,
            inference_url=self.stand_in.url_for,
            policy_failure=inference.policy_failure,
            calls=inference.calls,
            key_replaced=lambda: self.keys.key_replaced,
            timeout=rollout_timeout,
        )
        self.lifecycle = Lifecycle(self.store, self.driver, max_rollouts_per_step)
        self._pacing: Pacing = self.lifecycle.pacing
        self.handle = RequestHandler(
            self.lifecycle, keys=self.keys, reset=self.reset, api_base=self.api_base, api_key=Secret(key)
        )
        self._router: respx.MockRouter | None = None

    @property
    def clock(self) -> Clock:
        """The clock jobs run on (share it with the client under test)."""
        return self.store.clock

    @property
    def api_key(self) -> Secret:
        """The accepted key (``.api_key.value`` for the text)."""
        return self.handle.api_key

    @property
    def inference(self) -> StubInference:
        """The stub model rollouts talk to."""
        return self.stand_in.inference

    @property
    def validate(self) -> bool:
        return self.store.validate_payloads

    @property
    def rollouts(self) -> RolloutsMode:
        return self.store.rollouts

    def __repr__(self) -> str:
        return (
            f"FakeSynthBackend(base_url={self.base_url!r}, api_key={mask_secret(self.api_key.value)!r}, "
            f"clock={self.clock!r}, jobs={len(self.store.records())})"
        )

    def transport(self) -> httpx.MockTransport:
        """An ``httpx.MockTransport`` answering with this fake."""
        return httpx.MockTransport(self.handle)

    @staticmethod
    def _make_scenario(scenario: Scenario | None, fields: Mapping[str, Any]) -> Scenario:
        if scenario is not None and fields:
            problem = ConfigProblem("scenario", "pass either a Scenario or keyword fields, not both")
            raise SynthUsageError([problem])
        return scenario if scenario is not None else Scenario(**fields)

    def scenario(self, scenario: Scenario | None = None, /, **fields: Any) -> Scenario:
        """Set the default scenario for jobs submitted from now on, e.g. ``scenario(outcome="failed")``."""
        made = self._make_scenario(scenario, fields)
        self.store.set_default(made, scripted=scenario is not None or bool(fields))
        return made

    def scenario_for(self, job: str, scenario: Scenario | None = None, /, **fields: Any) -> Scenario:
        """Script one job: ``"next"`` (the next submission; calls queue up) or an existing job id."""
        made = self._make_scenario(scenario, fields)
        self.lifecycle.script(job, made)
        return made

    def next_job(self, scenario: Scenario | None = None, /, **fields: Any) -> Scenario:
        """Shorthand for ``scenario_for("next", ...)``."""
        return self.scenario_for("next", scenario, **fields)

    @property
    def default_scenario(self) -> Scenario:
        return self.store.default_scenario

    def job(self, job_id: str | None = None) -> FakeJob:
        """A handle on one job (default: the most recent)."""
        state = self.store.latest() if job_id is None else self.store.get(job_id)
        return FakeJob(self.lifecycle, state)

    @property
    def jobs(self) -> list[FakeJob]:
        """Every job, oldest first."""
        return [FakeJob(self.lifecycle, state) for state in self.store.records()]

    @keywords_checked
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
        """Inject a fault on *route*: one kind (``status=503``, ``connect_error=True``, ``latency=30``) and
        at most one selector (``pattern="0110"``, ``fail_next=2``, ``probability=0.3, seed=1``)."""
        options = {name: value for name, value in locals().items() if name != "self"}
        return self.store.add_fault(make_fault(**options))

    @property
    def faults(self) -> list[Fault]:
        return self.store.faults

    def clear_faults(self) -> None:
        self.store.clear_faults()

    @property
    def requests(self) -> list[LoggedRequest]:
        """Every request the fake received, in order (credentials masked)."""
        return self.store.requests

    def calls(self, route: str) -> list[LoggedRequest]:
        """Requests that matched *route* (``submit``, ``status``...)."""
        return [r for r in self.store.requests if r.route == route]

    def reset(self, *, clock: Clock | None = None, job_id_prefix: str | None = None) -> None:
        """Forget jobs, requests, scenarios and faults, and restore this fake's own model, rollout timeout
        and pacing; optionally switch to *clock* and restart ids at *job_id_prefix* 000001."""
        __tracebackhide__ = True
        _check("reset.", {} if job_id_prefix is None else {"job_id_prefix": job_id_prefix})
        if clock is not None:
            self.lifecycle.use_clock(clock)
        self.store.reset(job_id_prefix)
        self.stand_in.reset()
        self.driver.timeout = self._rollout_timeout
        self.lifecycle.pacing = self._pacing

    def use_policy(self, policy: Policies | None) -> None:
        """Answer model calls with *policy* (or ``{env_name: policy}``; ``None``: this fake's own)."""
        __tracebackhide__ = True
        _check("use_", {"policy": policy})
        self.stand_in.use_policy(policy)

    def use_rollout_timeout(self, seconds: float | None) -> None:
        """Give each rollout *seconds* (real); ``None``: the constructor's ``rollout_timeout``."""
        __tracebackhide__ = True
        _check("use_", {} if seconds is None else {"rollout_timeout": seconds})
        self.driver.timeout = self._rollout_timeout if seconds is None else float(seconds)

    def use_task_app_key(self, key: str | Secret | None) -> None:
        """Send *key* to task apps, as if a client had uploaded it (``None`` forgets it)."""
        self.keys.keep(secret_or_none(key))

    def start(self) -> FakeSynthBackend:
        """Mount on respx: httpx requests to ``base_url`` reach this fake."""
        if self._router is None:
            self._router = _mount(self.handle.strict if self.strict else self.handle, self.base_url)
        return self

    def stop(self) -> None:
        """Unmount from respx and stop the stub model server and the rollout client."""
        router, self._router = self._router, None
        if router is not None:
            router.stop()
            with _mounted_lock:
                for key, routers in list(_mounted.items()):
                    if router in routers:
                        routers.remove(router)
                    if not routers:
                        del _mounted[key]
        self.stand_in.stop()
        self.driver.close()

    @property
    def mounted(self) -> bool:
        return self._router is not None

    def __enter__(self) -> FakeSynthBackend:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def close(self) -> None:
        """Unmount, stop helpers and detach from the clock."""
        self.stop()
        self.lifecycle.close()

    @contextlib.contextmanager
    @keywords_checked
    def serve(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        speed: float | None = None,
        pacing: Pacing | None = None,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
    ) -> Iterator[str]:
        """Serve this fake over HTTP on loopback; yields the base URL (``http://127.0.0.1:<port>``).

        On a virtual clock jobs move by observation: every look at a job runs its next stage.
        ``speed=N`` serves on ``ScaledClock(N)`` (only before any job exists); ``pacing="clock"``
        keeps the virtual clock, moved only when advanced. A request must arrive within
        *read_timeout* seconds (else 408); ``/_fake/...`` needs the API's key.
        """
        _check("serve.", {"pacing": pacing, "speed": speed, "read_timeout": read_timeout})
        lifecycle = self.lifecycle
        previous: Clock | None = None
        if speed is not None:
            if self.store.records():
                raise SynthError(
                    "serve(speed=...) replaces the clock, which would corrupt existing jobs",
                    hint="call reset() first, or create the fake with clock=ScaledClock(speed)",
                )
            previous = lifecycle.use_clock(ScaledClock(speed))
        previous_pacing, own_pacing = lifecycle.pacing, self._pacing
        if pacing is not None:
            lifecycle.pacing = pacing
        elif speed is None and isinstance(self.store.clock, VirtualClock):
            lifecycle.pacing = "observed"
        self._pacing = lifecycle.pacing
        app = FakeASGIApp(self.handle, read_timeout=read_timeout)
        server = ServerThread(
            app,
            host=host,
            port=port,
            lifespan="off",
            description="fake Synth backend",
            read_timeout=read_timeout,
        )
        try:
            server.start(15.0)
            yield server.url
        finally:
            server.stop()
            lifecycle.pacing, self._pacing = previous_pacing, own_pacing
            if previous is not None:
                self.store.clear_jobs()
                lifecycle.use_clock(previous)
            self.stand_in.stop()
            self.driver.close()


_SPEC_HINT = "a policy is 'path/to/file.py:NAME' or 'package.module:NAME', optionally after 'ENV='"


def load_policy(spec: str) -> Policy:
    """The policy (or factory of no arguments' policy) ``"file.py:NAME"`` or ``"module:NAME"`` names."""
    try:
        found = load_attribute(
            spec, kind="policy", fits=lambda obj: policy_problem(obj) is None, found="policies"
        )
    except TaskAppError as exc:
        raise SynthUsageError([ConfigProblem(spec, exc.message, exc.hint)], subject="policy") from None
    policy, made = found, ""
    if policy_problem(found) is not None and is_factory(found):
        made = " (returned by the factory)"
        try:
            policy = found()
        except Exception as exc:
            raised = f"the factory raised {type(exc).__name__}: {exc}"
            raise SynthUsageError([ConfigProblem(spec, raised, _SPEC_HINT)], subject="policy") from exc
    problem = policy_problem(policy)
    if problem is not None:
        hint = "NAME must be a policy, policy(request) -> reply, or a function of no arguments returning one"
        raise SynthUsageError([ConfigProblem(spec, f"{problem}{made}", hint)], subject="policy")
    return policy  # type: ignore[no-any-return]


def policies_from_specs(specs: Sequence[str]) -> dict[str, Policy]:
    """``["unscramble=policy.py:policy", "mod:default"]`` -> ``{"unscramble": ..., "*": ...}``."""
    policies: dict[str, Policy] = {}
    for text in specs:
        env, equals, spec = text.partition("=") if "=" in text.split(":", 1)[0] else ("", "", text)
        env = env.strip() if equals else EVERY_OTHER_ENV
        if not env or env in policies:
            problem = "has no env name before '='" if not env else f"gives env {env!r} a second policy"
            if env == EVERY_OTHER_ENV:
                problem = "is a second default policy (a policy without 'ENV=')"
            raise SynthUsageError([ConfigProblem(text, problem, _SPEC_HINT)], subject="policy")
        policies[env] = load_policy(spec.strip())
    return policies


@contextlib.contextmanager
def _stopped_by_signals(stop: threading.Event) -> Iterator[None]:
    """SIGINT and SIGTERM set *stop* (from the main thread; an ignored signal stays ignored)."""
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(signum) is not signal.SIG_IGN:
                previous[signum] = signal.signal(signum, lambda *_: stop.set())
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def serve_until_stopped(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    api_key: str | None = None,
    policy: Policies | None = None,
    pacing: Pacing | None = None,
    speed: float | None = None,
    task_app_api_key: str | None = None,
    out: TextIO | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Serve a :class:`FakeSynthBackend` until *stop* is set (or SIGINT/SIGTERM), printing
    ``SYNTH_BACKEND_URL=...``, ``SYNTH_API_KEY=...`` and a readiness line to *out*."""
    out = sys.stdout if out is None else out
    stop = threading.Event() if stop is None else stop
    key = api_key or os.environ.get("SYNTH_API_KEY") or f"sk_fake_{secrets.token_hex(16)}"
    fake = FakeSynthBackend(api_key=key, policy=policy, task_app_api_key=task_app_api_key)
    try:
        with _stopped_by_signals(stop), fake.serve(host=host, port=port, pacing=pacing, speed=speed) as url:
            print(f"SYNTH_BACKEND_URL={url}", f"SYNTH_API_KEY={key}", sep="\n", file=out)
            ready = f"synth-rl: fake backend ready at {url}, answering with {fake.inference.policy!r}"
            print(f"{ready}; Ctrl-C or SIGTERM stops it", file=out, flush=True)
            stop.wait()
    finally:
        fake.close()
