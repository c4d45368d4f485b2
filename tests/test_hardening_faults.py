"""A whole job lifecycle under injected backend faults, and the client's bounds when it gives up.

The fake's faults fire on a seeded coin, so every run sees the same failures; the client waits on
a :class:`VirtualClock`, so backoff and ``Retry-After`` cost virtual seconds, not real ones. The
job store is the witness for idempotency: however many times the submission was retried, there
must be exactly one job, and every attempt must have carried the same ``Idempotency-Key``.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from pytest_synth_rl.client import RetryPolicy, RLJob
from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.errors import BackendError
from pytest_synth_rl.fake import FakeSynthBackend, Fault
from pytest_synth_rl.taskapp import InProcessTaskApp

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CONFIG = EXAMPLES / "arithmetic.toml"
TASK_KEY = "hardening-faults-task-key-5f0c2a"
#: Share of requests that fail, split evenly (as independent coins) over three kinds of fault.
FAULT_RATE = 0.3
LIFECYCLE_ROUTES = ("submit", "status", "events", "metrics")


def _load_example() -> ModuleType:
    name = "hardening_faults_arithmetic_task_app"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, EXAMPLES / "arithmetic_task_app.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def task_app() -> Iterator[InProcessTaskApp]:
    app = _load_example().create_app(api_key=TASK_KEY)
    with InProcessTaskApp(app, api_key=TASK_KEY, export_api_key=False) as served:
        yield served


@pytest.fixture
def no_real_sleep(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every ``time.sleep`` made during the test; an offline retry storm must make none."""
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    return slept


def _mixed_faults(
    fake: FakeSynthBackend, seed: int, routes: tuple[str, ...] = LIFECYCLE_ROUTES
) -> list[Fault]:
    """5xx, 429 + Retry-After and dropped connections on each route, ~FAULT_RATE of its calls.

    Each kind gets its own seeded coin per route, with probability p such that
    1 - (1 - p)**3 == FAULT_RATE. One coin stream per route keeps a route's failures independent
    of how often the others are called, so a seed fixes them exactly.
    """
    p = 1.0 - (1.0 - FAULT_RATE) ** (1.0 / 3.0)
    faults: list[Fault] = []
    for i, route in enumerate(routes):
        base = seed + 10 * i
        faults += [
            fake.fault(route, status=503, probability=p, seed=base),
            fake.fault(route, status=429, retry_after=2, probability=p, seed=base + 1),
            fake.fault(route, connect_error=True, probability=p, seed=base + 2),
        ]
    return faults


def _job(fake: FakeSynthBackend, task_app: InProcessTaskApp, clock: VirtualClock, **kwargs: object) -> RLJob:
    return RLJob.from_config(
        CONFIG,
        backend_url=fake.base_url,
        api_key=fake.api_key,
        task_app_url=task_app.url,
        task_app_api_key=TASK_KEY,
        clock=clock,
        **kwargs,  # type: ignore[arg-type]
    )


def _assert_one_job_one_key(fake: FakeSynthBackend, job: RLJob) -> None:
    jobs = fake.jobs
    assert [j.id for j in jobs] == [job.job_id], "a retried submission created a duplicate job"
    submits = fake.calls("submit")
    keys = {r.headers.get("idempotency-key") for r in submits}
    assert keys == {job.idempotency_key}, f"submissions carried keys {keys}"


def test_full_lifecycle_survives_30_percent_faults_on_every_route(
    task_app: InProcessTaskApp, no_real_sleep: list[float]
) -> None:
    clock = VirtualClock()
    with FakeSynthBackend(clock=clock, task_app_api_key=TASK_KEY) as fake:
        fake.scenario(steps=4, duration=600.0)
        # Seed 12 makes the first submit, events and metrics call each fail.
        faults = _mixed_faults(fake, seed=12)
        with _job(fake, task_app, clock, retry=RetryPolicy(seed=5)) as job:
            job_id = job.submit()
            result = job.poll_until_complete(timeout=7200.0, interval=10.0)
            events = job.events()
            points = job.metrics()
        requests = fake.requests
    fake.close()

    assert result.status == "succeeded"
    assert result.job_id == job_id
    _assert_one_job_one_key(fake, job)
    assert len(fake.calls("submit")) > 1, "the seed must make the submission itself fail at least once"
    # Faults really hit every route the lifecycle uses, with every kind of failure.
    for route in LIFECYCLE_ROUTES:
        assert any(r.fault for r in fake.calls(route)), f"no fault was injected on {route}"
    for kind in ("status", "connect"):
        assert any(f.injected for f in faults if f.kind == kind), kind
    assert any(f.injected for f in faults if f.status == 429 and f.kind == "status")
    faulted = sum(1 for r in requests if r.fault)
    assert 0.15 <= faulted / len(requests) <= 0.45, (faulted, len(requests))
    # ...and the client still read everything.
    assert events.types[0] == "rl.job.created"
    assert "rl.train.completed" in events.types
    assert {p["name"] for p in points} >= {"train.reward", "train.loss"}
    # Waiting happened on the virtual clock only: Retry-After was honoured, nothing slept for real.
    assert 2.0 in clock.sleeps
    assert clock.elapsed >= 600.0
    assert no_real_sleep == []


def test_lifecycle_survives_faults_on_the_served_fake_over_real_tcp(task_app: InProcessTaskApp) -> None:
    """The same storm through real sockets: dropped connections are aborted TCP connections."""
    client_clock = VirtualClock()
    fake = FakeSynthBackend(clock=VirtualClock(), task_app_api_key=TASK_KEY)
    fake.scenario(steps=3, polls=6)  # advances per poll: the client's clock is not the fake's
    faults = _mixed_faults(fake, seed=12)
    try:
        with fake.serve() as url:
            job = RLJob.from_config(
                CONFIG,
                backend_url=url,
                api_key=fake.api_key,
                task_app_url=task_app.url,
                task_app_api_key=TASK_KEY,
                clock=client_clock,
                retry=RetryPolicy(seed=2),
            )
            with job:
                job.submit()
                result = job.poll_until_complete(timeout=3600.0, interval=5.0)
                page = job.events()
    finally:
        fake.close()
    assert result.status == "succeeded"
    assert "rl.train.completed" in page.types
    _assert_one_job_one_key(fake, job)
    assert any(f.injected for f in faults if f.kind == "connect"), "no connection was dropped"
    assert any("connection error" in (r.fault or "") for r in fake.requests)
    assert client_clock.sleeps, "retries and polls must wait on the client's virtual clock"


class _LoseSubmitAnswers(httpx.BaseTransport):
    """Hands requests to the fake, but loses the answer to the first *lose* submissions.

    This is the case idempotency exists for: the backend created the job, the client never heard.
    """

    def __init__(self, fake: FakeSynthBackend, lose: int) -> None:
        self.fake = fake
        self.lose = lose
        self.lost = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.fake.handle(request)
        if request.method == "POST" and request.url.path.endswith("/rl/jobs") and self.lost < self.lose:
            self.lost += 1
            raise httpx.ReadError("connection reset after the backend answered", request=request)
        return response


def test_a_submission_whose_answer_is_lost_is_not_duplicated(task_app: InProcessTaskApp) -> None:
    clock = VirtualClock()
    fake = FakeSynthBackend(clock=clock, task_app_api_key=TASK_KEY)
    transport = _LoseSubmitAnswers(fake, lose=2)
    with _job(fake, task_app, clock, transport=transport, retry=RetryPolicy(seed=0)) as job:
        job_id = job.submit()
    fake.close()
    assert transport.lost == 2
    submits = fake.calls("submit")
    assert [r.status for r in submits] == [201, 200, 200]  # created once, then replayed
    _assert_one_job_one_key(fake, job)
    assert fake.job().id == job_id
    assert len(clock.sleeps) == 2


def test_without_a_shared_key_the_store_would_show_the_duplicate(task_app: InProcessTaskApp) -> None:
    """The witness can fail: two job objects (two keys) for the same payload make two jobs."""
    clock = VirtualClock()
    fake = FakeSynthBackend(clock=clock, task_app_api_key=TASK_KEY)
    transport = _LoseSubmitAnswers(fake, lose=0)
    for _ in range(2):
        with _job(fake, task_app, clock, transport=transport, skip_health_check=True) as job:
            job.submit()
    fake.close()
    assert len(fake.jobs) == 2
    assert len({r.headers.get("idempotency-key") for r in fake.calls("submit")}) == 2


@pytest.mark.parametrize(
    ("fault", "what"),
    [
        ({"status": 503}, "HTTP 503"),
        ({"status": 429, "retry_after": 3}, "HTTP 429"),
        ({"connect_error": True}, "ConnectError"),
    ],
)
def test_exhausted_retries_raise_backend_error_with_every_attempt(
    task_app: InProcessTaskApp, no_real_sleep: list[float], fault: dict[str, object], what: str
) -> None:
    clock = VirtualClock()
    policy = RetryPolicy(max_attempts=5, seed=9)
    fake = FakeSynthBackend(clock=clock, task_app_api_key=TASK_KEY)
    with fake, _job(fake, task_app, clock, retry=policy) as job:
        job.submit()
        fake.fault("status", **fault)  # type: ignore[arg-type]
        before = clock.now()
        with pytest.raises(BackendError) as caught:
            # One failed poll spends the failure budget: its own retries are what is checked here.
            job.poll_until_complete(timeout=7200.0, interval=10.0, max_failed_polls=1)
        spent = clock.now() - before
    fake.close()
    error = caught.value
    assert len(error.attempts) == policy.max_attempts
    assert len(fake.calls("status")) == policy.max_attempts
    assert all(what in a.render() for a in error.attempts), [a.render() for a in error.attempts]
    text = str(error)
    assert f"attempts ({policy.max_attempts}):" in text
    for number in range(1, policy.max_attempts + 1):
        assert f"    {number}. GET {fake.api_base}/rl/jobs/{job.job_id} -> " in text
    assert "max_attempts=5" in text
    assert error.hint
    # Bounded: every wait was on the virtual clock and within the policy's budget.
    assert spent <= policy.total_budget
    assert spent == pytest.approx(sum(a.waited for a in error.attempts))
    assert error.attempts[-1].waited == 0.0
    assert no_real_sleep == []


def test_the_total_budget_stops_retrying_before_max_attempts(task_app: InProcessTaskApp) -> None:
    clock = VirtualClock()
    policy = RetryPolicy(max_attempts=50, total_budget=20.0, seed=1)
    fake = FakeSynthBackend(clock=clock, task_app_api_key=TASK_KEY)
    with fake, _job(fake, task_app, clock, retry=policy) as job:
        job.submit()
        fake.fault("status", status=429, retry_after=6)
        before = clock.now()
        with pytest.raises(BackendError) as caught:
            job.get_status()
        spent = clock.now() - before
    fake.close()
    attempts = caught.value.attempts
    assert len(attempts) == 4  # waits of 6 + 6 + 6 fit in 20 s; a fourth wait would not
    assert spent == 18.0 <= policy.total_budget
    assert "total_budget=20s" in str(caught.value)
    assert caught.value.status_code == 429
