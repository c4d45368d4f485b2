"""The retry contract: what is retried, waits on the clock, budgets and limits, and the report.

The backend is a handler function behind ``httpx.MockTransport``; the clock starts at a
non-zero time so that "time spent" means "since the first send".
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
from collections.abc import AsyncIterator, Callable, Iterator, Sequence

import httpx
import pytest

from pytest_synth_rl.client.retry import (
    RETRYABLE_ERRORS,
    RetryPolicy,
    Sent,
    async_drive,
    drive,
    parse_retry_after,
    read_json,
    retrying,
)
from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.errors import BackendError, JobSubmitError, SynthUsageError

URL = "https://api.usesynth.ai/api/rl/jobs/job-1"


def send(
    client: httpx.Client,
    request: httpx.Request,
    *,
    policy: RetryPolicy,
    clock: VirtualClock,
    error_cls: type[BackendError] = BackendError,
) -> Sent:
    """One request with retries, run blocking."""
    return drive(retrying(request, policy, clock, error_cls), client, clock)


async def async_send(
    client: httpx.AsyncClient,
    request: httpx.Request,
    *,
    policy: RetryPolicy,
    clock: VirtualClock,
    error_cls: type[BackendError] = BackendError,
) -> Sent:
    """One request with retries, run awaiting."""
    return await async_drive(retrying(request, policy, clock, error_cls), client, clock)


START = 5_000.0
Outcome = httpx.Response | Exception


class Script:
    """A handler that answers each request with the next scripted outcome, noting the clock."""

    def __init__(self, clock: VirtualClock, outcomes: Sequence[Outcome | Callable[[], Outcome]]) -> None:
        self.clock = clock
        self.outcomes = list(outcomes)
        self.sent_at: list[float] = []
        self.responses: list[httpx.Response] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.sent_at.append(self.clock.now() - START)
        outcome = self.outcomes.pop(0)
        if callable(outcome):
            outcome = outcome()
        if isinstance(outcome, Exception):
            raise outcome
        self.responses.append(outcome)
        return outcome


def run(
    outcomes: Sequence[Outcome],
    policy: RetryPolicy | None = None,
    error_cls: type[BackendError] = BackendError,
) -> tuple[Sent, Script]:
    clock = VirtualClock(START)
    script = Script(clock, outcomes)
    with httpx.Client(transport=httpx.MockTransport(script)) as client:
        sent = send(
            client,
            client.build_request("GET", URL),
            policy=policy or RetryPolicy(jitter=False),
            clock=clock,
            error_cls=error_cls,
        )
    return sent, script


# -- the policy ------------------------------------------------------------------------------
def test_defaults_ride_out_a_short_outage() -> None:
    policy = RetryPolicy()
    assert (
        policy.max_attempts,
        policy.backoff_base,
        policy.backoff_multiplier,
        policy.backoff_max,
        policy.max_retry_after,
        policy.total_budget,
        policy.jitter,
        policy.seed,
    ) == (6, 0.5, 2.0, 30.0, 60.0, 180.0, True, None)
    assert RetryPolicy.never() == RetryPolicy(max_attempts=1)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_attempts": 1},
        {"backoff_base": 0},
        {"backoff_max": 0},
        {"max_retry_after": 0},
        {"total_budget": 0},
        {"backoff_multiplier": 1},
        {"backoff_base": 3},
    ],
)
def test_boundary_values_are_accepted(kwargs: dict[str, float]) -> None:
    RetryPolicy(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_attempts": 0}, "RetryPolicy.max_attempts: must be >= 1, got 0"),
        ({"backoff_base": -0.1}, "RetryPolicy.backoff_base: must be a finite number >= 0, got -0.1"),
        ({"backoff_max": float("nan")}, "RetryPolicy.backoff_max: must be a finite number >= 0, got nan"),
        (
            {"max_retry_after": float("inf")},
            "RetryPolicy.max_retry_after: must be a finite number >= 0, got inf",
        ),
        ({"total_budget": "10"}, "RetryPolicy.total_budget: must be a finite number >= 0, got '10'"),
        ({"backoff_multiplier": 0.99}, "RetryPolicy.backoff_multiplier: must be >= 1, got 0.99"),
    ],
)
def test_bad_values_name_the_field_and_the_value(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(SynthUsageError) as info:
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
    assert len(info.value.problems) == 1
    problem = info.value.problems[0]
    assert f"{problem.key}: {problem.message}" == message
    assert problem.hint == "see RetryPolicy docs"


@pytest.mark.parametrize(
    ("status", "retried"),
    [
        (200, False),
        (404, False),
        (428, False),
        (429, True),
        (430, False),
        (499, False),
        (500, True),
        (501, False),
        (502, True),
        (503, True),
        (599, True),
        (600, False),
    ],
)
def test_which_statuses_are_transient(status: int, retried: bool) -> None:
    assert RetryPolicy().retries_status(status) is retried


@pytest.mark.parametrize("error", RETRYABLE_ERRORS)
def test_transport_failures_are_retried(error: type[Exception]) -> None:
    assert RetryPolicy().retries_error(error("x")) is True


@pytest.mark.parametrize("error", [httpx.UnsupportedProtocol("x"), httpx.ProxyError("x"), ValueError("x")])
def test_other_errors_are_not(error: Exception) -> None:
    assert RetryPolicy().retries_error(error) is False


def test_backoff_grows_by_the_multiplier_up_to_the_cap() -> None:
    policy = RetryPolicy(jitter=False)
    assert [policy.backoff(n) for n in range(8)] == [0.5, 1, 2, 4, 8, 16, 30, 30]
    assert [RetryPolicy(jitter=False, backoff_base=3, backoff_multiplier=1).backoff(n) for n in range(3)] == [
        3,
        3,
        3,
    ]


def test_jittered_backoff_is_a_seeded_uniform_draw_below_the_cap() -> None:
    policy = RetryPolicy(seed=11)
    draws = [policy.backoff(n) for n in range(8)]
    reference = random.Random(11)
    assert draws == [reference.uniform(0.0, cap) for cap in [0.5, 1, 2, 4, 8, 16, 30, 30]]
    assert len(set(draws)) == 8
    assert all(0 <= d <= cap for d, cap in zip(draws, [0.5, 1, 2, 4, 8, 16, 30, 30], strict=True))


# -- Retry-After ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (None, None),
        ("", None),
        ("   ", None),
        ("5", 5.0),
        (" 2.5 ", 2.5),
        ("0", 0.0),
        ("-3", 0.0),
        ("nan", None),
        ("inf", None),
        ("soon", None),
        ("Mon, 99 Foo 2024 00:00:00 GMT", None),
    ],
)
def test_parse_retry_after_seconds(value: str | None, seconds: float | None) -> None:
    assert parse_retry_after(value, 1_700_000_000.0) == seconds


def test_parse_retry_after_dates_are_read_against_the_given_now() -> None:
    now = 1_700_000_000.0
    future = email.utils.formatdate(now + 90, usegmt=True)
    past = email.utils.formatdate(now - 90, usegmt=True)
    assert parse_retry_after(future, now) == 90.0
    assert parse_retry_after(past, now) == 0.0


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_is_honored_and_capped_at_max_retry_after(status: int) -> None:
    sent, script = run(
        [
            httpx.Response(status, headers={"Retry-After": "7"}),
            httpx.Response(status, headers={"Retry-After": "60"}),
            httpx.Response(status, headers={"Retry-After": "61"}),
            httpx.Response(200),
        ]
    )
    assert script.sent_at == [0, 7, 67, 127]
    assert [a.waited for a in sent.attempts] == [7, 60, 60, 0]


def test_retry_after_date_uses_the_clocks_epoch() -> None:
    clock = VirtualClock(START, epoch=1_700_000_000.0)
    when = email.utils.formatdate(1_700_000_000.0 + 42, usegmt=True)
    script = Script(clock, [httpx.Response(503, headers={"Retry-After": when}), httpx.Response(200)])
    with httpx.Client(transport=httpx.MockTransport(script)) as client:
        send(client, client.build_request("GET", URL), policy=RetryPolicy(jitter=False), clock=clock)
    assert clock.sleeps == [42.0]


def test_retry_after_on_other_statuses_or_unreadable_falls_back_to_backoff() -> None:
    _, script = run(
        [
            httpx.Response(500, headers={"Retry-After": "20"}),
            httpx.Response(429, headers={"Retry-After": "later"}),
            httpx.Response(429),
            httpx.Response(200),
        ]
    )
    assert script.sent_at == [0, 0.5, 1.5, 3.5]


# -- limits and budget ---------------------------------------------------------------------
def test_max_attempts_is_the_total_number_of_sends() -> None:
    sent, script = run([httpx.Response(502)] * 3, RetryPolicy(jitter=False, max_attempts=3))
    assert sent.response.status_code == 502
    assert script.sent_at == [0, 0.5, 1.5]
    assert (sent.exhausted, sent.stop_reason) == (True, "retry limit RetryPolicy.max_attempts=3 reached")
    assert [(a.method, a.url, a.status_code, a.waited) for a in sent.attempts] == [
        ("GET", URL, 502, 0.5),
        ("GET", URL, 502, 1.0),
        ("GET", URL, 502, 0.0),
    ]


def test_one_attempt_means_no_retry() -> None:
    sent, script = run([httpx.Response(503)], RetryPolicy.never())
    assert len(script.sent_at) == 1
    assert (sent.exhausted, sent.stop_reason) == (True, "retry limit RetryPolicy.max_attempts=1 reached")


def test_a_final_answer_is_not_exhaustion() -> None:
    sent, _ = run([httpx.Response(404)])
    assert (sent.response.status_code, sent.exhausted, sent.stop_reason) == (404, False, "")
    assert len(sent.attempts) == 1


def test_the_budget_counts_from_the_first_send_and_allows_waiting_up_to_it_exactly() -> None:
    policy = RetryPolicy(jitter=False, backoff_base=4, backoff_multiplier=1, total_budget=8)
    sent, script = run([httpx.Response(500)] * 4, policy)
    assert script.sent_at == [0, 4, 8]
    assert sent.exhausted is True
    assert sent.stop_reason == "waiting 4.00s more would exceed RetryPolicy.total_budget=8s"


def test_a_zero_budget_never_waits() -> None:
    sent, script = run([httpx.Response(500)] * 2, RetryPolicy(jitter=False, total_budget=0))
    assert script.sent_at == [0]
    assert sent.stop_reason == "waiting 0.50s more would exceed RetryPolicy.total_budget=0s"


def test_retrying_measures_spent_time_from_its_start_on_a_late_clock() -> None:
    clock = VirtualClock(1e6)
    script = Script(clock, [httpx.Response(500)] * 3)
    policy = RetryPolicy(jitter=False, backoff_base=10, backoff_multiplier=1, total_budget=25)
    with httpx.Client(transport=httpx.MockTransport(script)) as client:
        sent = send(client, client.build_request("GET", URL), policy=policy, clock=clock)
    assert [attempt.waited for attempt in sent.attempts] == [10, 10, 0]
    assert sent.stop_reason == "waiting 10.00s more would exceed RetryPolicy.total_budget=25s"


# -- transport errors and the report -------------------------------------------------------
def test_transport_errors_are_retried_then_reported_with_every_attempt() -> None:
    with pytest.raises(BackendError) as info:
        run(
            [httpx.ConnectError("refused"), httpx.ReadTimeout(""), httpx.ConnectError("refused")],
            RetryPolicy(jitter=False, max_attempts=3),
        )
    error = info.value
    assert str(error).splitlines()[0] == (
        f"could not reach the backend: GET {URL} failed after 3 attempts: ConnectError: refused; "
        "retry limit RetryPolicy.max_attempts=3 reached"
    )
    assert [a.error for a in error.attempts] == [
        "ConnectError: refused",
        "ReadTimeout",
        "ConnectError: refused",
    ]
    assert [a.waited for a in error.attempts] == [0.5, 1.0, 0.0]
    assert isinstance(error.__cause__, httpx.ConnectError)


def test_an_error_that_is_not_transient_is_reported_at_once_without_a_reason() -> None:
    with pytest.raises(JobSubmitError) as info:
        run([httpx.UnsupportedProtocol("bad scheme")], error_cls=JobSubmitError)
    assert str(info.value).splitlines()[0] == (
        f"could not reach the backend: GET {URL} failed: UnsupportedProtocol: bad scheme"
    )
    assert len(info.value.attempts) == 1


def test_a_transport_error_then_a_response_returns_the_response() -> None:
    sent, _ = run([httpx.ConnectError("x"), httpx.Response(200, json={"ok": True})])
    assert sent.response.json() == {"ok": True}
    assert [(a.status_code, a.error) for a in sent.attempts] == [(None, "ConnectError: x"), (200, None)]


def test_each_retry_is_logged_with_the_attempt_number(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="pytest_synth_rl.client"):
        run(
            [httpx.Response(503), httpx.ConnectError("down"), httpx.Response(200)],
            RetryPolicy(jitter=False, max_attempts=4),
        )
    assert [r.getMessage() for r in caplog.records] == [
        f"GET {URL} -> HTTP 503; retrying in 0.50s (attempt 2 of 4)",
        f"GET {URL} -> ConnectError: down; retrying in 1.00s (attempt 3 of 4)",
    ]


# -- closing what is not returned ----------------------------------------------------------
class TrackedBody(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A body that records when it was closed."""

    def __init__(self, closed: list[int], index: int) -> None:
        self.closed, self.index = closed, index

    def __iter__(self) -> Iterator[bytes]:
        yield b"{}"

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield b"{}"

    def close(self) -> None:
        self.closed.append(self.index)

    async def aclose(self) -> None:
        self.closed.append(self.index)


def test_sync_send_closes_every_retried_response_before_sending_again() -> None:
    closed: list[int] = []
    bodies = [
        lambda i=i: httpx.Response(503 if i < 2 else 200, stream=TrackedBody(closed, i)) for i in range(3)
    ]
    clock = VirtualClock(START)
    seen_closed: list[list[int]] = []
    script = Script(clock, bodies)

    def handler(request: httpx.Request) -> httpx.Response:
        seen_closed.append(list(closed))
        return script(request)

    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        sent = send(client, client.build_request("GET", URL), policy=RetryPolicy(jitter=False), clock=clock)
    assert seen_closed == [[], [0], [0, 1]]
    assert sent.response.status_code == 200
    assert all(r.is_closed for r in script.responses)


def test_async_send_retries_on_the_clocks_async_sleep_and_closes_retried_responses() -> None:
    closed: list[int] = []
    clock = VirtualClock(START)
    outcomes: list[Outcome | Callable[[], Outcome]] = [
        lambda: httpx.Response(503, stream=TrackedBody(closed, 0)),
        httpx.ConnectError("down"),
        lambda: httpx.Response(200, stream=TrackedBody(closed, 2)),
    ]
    script = Script(clock, outcomes)
    seen_closed: list[list[int]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen_closed.append(list(closed))
        return script(request)

    async def main() -> Sent:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await async_send(
                client, client.build_request("POST", URL), policy=RetryPolicy(jitter=False), clock=clock
            )

    sent = asyncio.run(main())
    assert sent.response.status_code == 200
    assert script.sent_at == [0, 0.5, 1.5]
    assert clock.sleeps == [0.5, 1.0]
    assert seen_closed[1] == [0]
    assert [a.method for a in sent.attempts] == ["POST"] * 3


def test_async_send_reports_transport_failures_like_send() -> None:
    clock = VirtualClock(START)
    script = Script(clock, [httpx.ConnectError("down")] * 2)

    async def main() -> Sent:
        async with httpx.AsyncClient(transport=httpx.MockTransport(script)) as client:
            return await async_send(
                client,
                client.build_request("GET", URL),
                policy=RetryPolicy(jitter=False, max_attempts=2),
                clock=clock,
                error_cls=JobSubmitError,
            )

    with pytest.raises(JobSubmitError, match=r"failed after 2 attempts: ConnectError: down; retry limit"):
        asyncio.run(main())
    assert clock.sleeps == [0.5]


def test_the_policy_shows_its_settings_but_not_its_random_state() -> None:
    assert repr(RetryPolicy(seed=3)) == (
        "RetryPolicy(max_attempts=6, backoff_base=0.5, backoff_multiplier=2.0, backoff_max=30.0, "
        "max_retry_after=60.0, total_budget=180.0, jitter=True, seed=3)"
    )


def test_a_sent_response_is_final_unless_said_otherwise() -> None:
    sent = Sent(httpx.Response(200), [])
    assert (sent.exhausted, sent.stop_reason) == (False, "")


def test_giving_up_says_what_to_check() -> None:
    with pytest.raises(BackendError) as info:
        run([httpx.ConnectError("refused")], RetryPolicy.never())
    assert info.value.hint == (
        "check that the backend URL (backend_url= / BACKEND_BASE_URL) is right and reachable; "
        "transient errors were retried per the job's RetryPolicy"
    )


def test_policies_with_the_same_settings_are_equal_whatever_their_random_state() -> None:
    used = RetryPolicy(seed=3)
    used.backoff(0)
    assert used == RetryPolicy(seed=3)
    assert RetryPolicy() == RetryPolicy()
    assert RetryPolicy(seed=3) != RetryPolicy(seed=4)


def test_a_seed_does_not_turn_jitter_back_on() -> None:
    policy = RetryPolicy(jitter=False, seed=11)
    assert [policy.backoff(n) for n in range(4)] == [0.5, 1, 2, 4]


# -- reading answers -----------------------------------------------------------------------
def test_an_unreadable_body_is_noted_with_its_content_type_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    request = httpx.Request("GET", URL)
    html = httpx.Response(502, content=b"<html>bad gateway</html>", request=request)
    html.headers["content-type"] = "text/html"
    with caplog.at_level(logging.WARNING, logger="pytest_synth_rl.client"):
        body, note = read_json(html)
    assert body == {}
    assert note is not None
    assert note.startswith("unreadable JSON body (")
    assert note.endswith("; content-type 'text/html') treated as {}")
    assert [r.getMessage() for r in caplog.records] == [f"GET {URL}: {note}"]


def test_an_unreadable_body_without_a_content_type_says_so() -> None:
    bare = httpx.Response(200, content=b"not json", request=httpx.Request("GET", URL))
    assert "content-type" not in bare.headers
    _, note = read_json(bare)
    assert (note or "").endswith("; content-type 'not set') treated as {}")
