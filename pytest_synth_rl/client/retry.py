"""Retrying one HTTP request, and the two runners every client operation goes through.

An operation is a generator ("steps") yielding an ``httpx.Request`` (answered with the response or
the transport error), seconds to sleep, or an awaitable; :func:`drive` and :func:`async_drive` run it.
"""

from __future__ import annotations

import email.utils
import math
import random
from collections.abc import Awaitable, Generator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from pytest_synth_rl.clock import Clock
from pytest_synth_rl.errors import (
    Attempt,
    BackendError,
    ConfigProblem,
    SynthError,
    SynthUsageError,
    keywords_checked,
)
from pytest_synth_rl.secrets.masking import get_logger

T = TypeVar("T")
#: An operation: yields requests, sleeps (seconds) and awaitables; returns its value.
Steps = Generator[httpx.Request | float | Awaitable[Any], Any, T]

logger = get_logger("pytest_synth_rl.client")

#: Transport failures that say nothing about the request itself, so sending it again may work.
#: Safe for POST too: submissions carry an ``Idempotency-Key`` that is the same on every retry.
RETRYABLE_ERRORS: tuple[type[Exception], ...] = (httpx.ConnectError, httpx.TimeoutException, httpx.ReadError)
RETRYABLE_ERRORS += (httpx.WriteError, httpx.RemoteProtocolError)


def _problem(key: str, message: str) -> SynthUsageError:
    return SynthUsageError([ConfigProblem(f"RetryPolicy.{key}", message, "see RetryPolicy docs")])


@dataclass
class RetryPolicy:
    """How hard to try: ``max_attempts`` sends, jittered exponential backoff, ``Retry-After``
    honoured up to ``max_retry_after``, at most ``total_budget`` clock seconds in all."""

    max_attempts: int = 6
    backoff_base: float = 0.5
    backoff_multiplier: float = 2.0
    backoff_max: float = 30.0
    max_retry_after: float = 60.0
    total_budget: float = 180.0
    jitter: bool = True
    seed: int | None = None
    _rng: random.Random | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise _problem("max_attempts", f"must be >= 1, got {self.max_attempts!r}")
        for name in ("backoff_base", "backoff_max", "max_retry_after", "total_budget"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value >= 0 and math.isfinite(value)):
                raise _problem(name, f"must be a finite number >= 0, got {value!r}")
        if self.backoff_multiplier < 1:
            raise _problem("backoff_multiplier", f"must be >= 1, got {self.backoff_multiplier!r}")
        # An unseeded generator (it reads os.urandom) is made when a first retry needs one.
        self._rng = random.Random(self.seed) if self.seed is not None else None

    @classmethod
    def never(cls) -> RetryPolicy:
        """Send once; report the first failure as is."""
        return cls(max_attempts=1)

    def retries_status(self, status_code: int) -> bool:
        """429 and server errors but 501 (not implemented, it never gets better)."""
        return status_code == 429 or (500 <= status_code <= 599 and status_code != 501)

    def retries_error(self, exc: Exception) -> bool:
        return isinstance(exc, RETRYABLE_ERRORS)

    def backoff(self, retry_number: int) -> float:
        """Wait before retry *retry_number* (0 for the first retry)."""
        cap = min(self.backoff_max, self.backoff_base * self.backoff_multiplier**retry_number)
        if not self.jitter:
            return cap
        if self._rng is None:
            self._rng = random.Random()
        return self._rng.uniform(0.0, cap)


# ``RetryPolicy(max_attemps=3)``: a usage error with a "did you mean", not a bare ``TypeError``.
RetryPolicy.__init__ = keywords_checked(RetryPolicy.__init__)  # type: ignore[method-assign]


def parse_retry_after(value: str | None, now_epoch: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP-date read against
    *now_epoch*); None if unparseable, 0 for a past date."""
    text = (value or "").strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        try:
            seconds = email.utils.parsedate_to_datetime(text).timestamp() - now_epoch
        except (TypeError, ValueError, IndexError):
            return None
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _describe(exc: Exception) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass
class Sent:
    """The response a request ended with and every attempt it took; ``exhausted`` means the
    response is itself a retryable failure we stopped retrying."""

    response: httpx.Response
    attempts: list[Attempt]
    exhausted: bool = False
    stop_reason: str = ""


class RetryLoop:
    """The decisions for one logical request: record each outcome, say whether and how long to wait."""

    def __init__(self, policy: RetryPolicy, clock: Clock, method: str, url: str) -> None:
        self.policy, self.clock, self.method, self.url = policy, clock, method, url
        self.attempts: list[Attempt] = []
        self.exhausted = False
        self.stop_reason = ""  # why retrying stopped early, when it did
        self._started = clock.now()

    def next_wait(self, outcome: httpx.Response | Exception) -> float | None:
        """Record *outcome*; return seconds to wait before sending again, or None to stop."""
        policy = self.policy
        if isinstance(outcome, httpx.Response):
            what, retry = f"HTTP {outcome.status_code}", policy.retries_status(outcome.status_code)
            attempt = Attempt(self.method, self.url, status_code=outcome.status_code)
        else:
            what, retry = _describe(outcome), policy.retries_error(outcome)
            attempt = Attempt(self.method, self.url, error=what)
        self.attempts.append(attempt)
        if not retry:
            return None
        wait = self._wait_for(outcome)
        if len(self.attempts) >= policy.max_attempts:
            self.stop_reason = f"retry limit RetryPolicy.max_attempts={policy.max_attempts} reached"
        elif self.clock.now() - self._started + wait > policy.total_budget:
            budget = policy.total_budget
            self.stop_reason = f"waiting {wait:.2f}s more would exceed RetryPolicy.total_budget={budget:g}s"
        if self.stop_reason:
            self.exhausted = True
            return None
        attempt.waited = wait
        count = (len(self.attempts) + 1, policy.max_attempts)
        logger.warning(
            "%s %s -> %s; retrying in %.2fs (attempt %d of %d)", self.method, self.url, what, wait, *count
        )
        return wait

    def _wait_for(self, outcome: httpx.Response | Exception) -> float:
        if isinstance(outcome, httpx.Response) and outcome.status_code in (429, 503):
            advised = parse_retry_after(outcome.headers.get("retry-after"), self.clock.time())
            if advised is not None:
                return min(advised, self.policy.max_retry_after)
        return self.policy.backoff(len(self.attempts) - 1)

    def give_up(self, exc: Exception, error_cls: type[BackendError]) -> BackendError:
        """The error for a request that never got a usable response."""
        count = len(self.attempts)
        tries = f" after {count} attempts" if count > 1 else ""
        reason = f"; {self.stop_reason}" if self.exhausted else ""
        message = (
            f"could not reach the backend: {self.method} {self.url} failed{tries}: {_describe(exc)}{reason}"
        )
        hint = "check that the backend URL (backend_url= / BACKEND_BASE_URL) is right and reachable; "
        hint += "transient errors were retried per the job's RetryPolicy"
        return error_cls(message, method=self.method, url=self.url, attempts=self.attempts, hint=hint)


def retrying(
    request: httpx.Request, policy: RetryPolicy, clock: Clock, error_cls: type[BackendError] = BackendError
) -> Steps[Sent]:
    """Send *request* until it gets a final response; raise *error_cls* if it never gets one."""
    loop = RetryLoop(policy, clock, request.method, str(request.url))
    while True:
        outcome = yield request
        wait = loop.next_wait(outcome)
        if wait is None:
            if isinstance(outcome, Exception):
                raise loop.give_up(outcome, error_cls) from outcome
            return Sent(outcome, loop.attempts, loop.exhausted, loop.stop_reason)
        yield wait


def drive(steps: Steps[T], client: httpx.Client, clock: Clock) -> T:
    """Run *steps* blocking; an awaitable (an async ``on_status``) is not awaited."""
    reply: Any = None
    while True:
        try:
            effect = steps.send(reply)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        reply = None
        if isinstance(effect, httpx.Request):
            try:
                reply = client.send(effect)
            except httpx.TransportError as exc:
                reply = exc
            except SynthError as exc:  # raised by a transport of ours (a cassette): httpx's frames go
                raise exc.with_traceback(None) from exc.__cause__
        elif isinstance(effect, (int, float)):
            clock.sleep(effect)


async def async_drive(steps: Steps[T], client: httpx.AsyncClient, clock: Clock) -> T:
    """Run *steps* over ``httpx.AsyncClient`` and ``clock.async_sleep``; an awaitable is awaited
    and answered with None, or with the exception it raised."""
    reply: Any = None
    while True:
        try:
            effect = steps.send(reply)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        reply = None
        if isinstance(effect, httpx.Request):
            try:
                reply = await client.send(effect)
            except httpx.TransportError as exc:
                reply = exc
            except SynthError as exc:  # raised by a transport of ours (a cassette): httpx's frames go
                raise exc.with_traceback(None) from exc.__cause__
        elif isinstance(effect, (int, float)):
            await clock.async_sleep(effect)
        else:
            try:
                await effect
            except Exception as exc:
                reply = exc
