"""The retry loop: what is retried, how long it waits (on the clock), and what it reports."""

from __future__ import annotations

import email.utils
import logging

import httpx
import pytest
import respx

from pytest_synth_rl.client import RetryPolicy, parse_retry_after
from pytest_synth_rl.client.retry import Sent, drive, retrying
from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.errors import BackendError, JobSubmitError, SynthUsageError

URL = "https://api.usesynth.ai/api/rl/jobs/job-1"
KEY = "sk_retry_secret_0123456789abcdef"


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


def _send(
    router_setup: list[httpx.Response | Exception],
    policy: RetryPolicy | None = None,
    clock: VirtualClock | None = None,
    *,
    method: str = "GET",
) -> tuple[httpx.Response, list[float], respx.Route, Sent]:
    clock = clock or VirtualClock()
    policy = policy or RetryPolicy(jitter=False)
    with respx.mock(assert_all_called=False) as router:
        route = router.route(method=method, url=URL).mock(side_effect=router_setup)
        with httpx.Client() as client:
            sent = send(client, client.build_request(method, URL), policy=policy, clock=clock)
    return sent.response, clock.sleeps, route, sent


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_server_errors_are_retried_with_backoff(status: int) -> None:
    response, sleeps, route, sent = _send(
        [httpx.Response(status), httpx.Response(status), httpx.Response(200)]
    )
    assert response.status_code == 200
    assert route.call_count == 3
    assert sleeps == [0.5, 1.0]  # jitter off: the backoff caps themselves
    assert [a.status_code for a in sent.attempts] == [status, status, 200]
    assert [a.waited for a in sent.attempts] == [0.5, 1.0, 0.0]


def test_retry_after_seconds_is_honoured() -> None:
    response, sleeps, _, _ = _send([httpx.Response(429, headers={"Retry-After": "7"}), httpx.Response(200)])
    assert response.status_code == 200
    assert sleeps == [7.0]


def test_retry_after_http_date_is_read_against_the_clock() -> None:
    clock = VirtualClock()
    date = email.utils.formatdate(clock.time() + 12, usegmt=True)
    response, sleeps, _, _ = _send(
        [httpx.Response(429, headers={"Retry-After": date}), httpx.Response(200)], clock=clock
    )
    assert response.status_code == 200
    assert sleeps == [12.0]


def test_retry_after_is_capped() -> None:
    policy = RetryPolicy(jitter=False, max_retry_after=20.0)
    _, sleeps, _, _ = _send(
        [httpx.Response(503, headers={"Retry-After": "3600"}), httpx.Response(200)], policy
    )
    assert sleeps == [20.0]


def test_429_without_retry_after_uses_backoff() -> None:
    _, sleeps, _, _ = _send([httpx.Response(429), httpx.Response(429), httpx.Response(201)])
    assert sleeps == [0.5, 1.0]


@pytest.mark.parametrize(
    "error",
    [
        httpx.ConnectError("connection refused"),
        httpx.ReadTimeout("read timed out"),
        httpx.ConnectTimeout("connect timed out"),
        httpx.RemoteProtocolError("server disconnected"),
    ],
)
def test_transport_errors_are_retried(error: Exception) -> None:
    response, sleeps, route, sent = _send([error, httpx.Response(200, json={"ok": True})])
    assert response.json() == {"ok": True}
    assert route.call_count == 2
    assert sleeps == [0.5]
    first = sent.attempts[0]
    assert first.status_code is None
    assert type(error).__name__ in (first.error or "")


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 422, 501])
def test_client_errors_are_not_retried(status: int) -> None:
    response, sleeps, route, _ = _send([httpx.Response(status), httpx.Response(200)])
    assert response.status_code == status
    assert route.call_count == 1
    assert sleeps == []


def test_exhausted_status_is_returned_with_every_attempt() -> None:
    policy = RetryPolicy(jitter=False, max_attempts=4)
    response, sleeps, route, sent = _send([httpx.Response(503)] * 10, policy)
    assert response.status_code == 503
    assert route.call_count == 4
    assert sleeps == [0.5, 1.0, 2.0]
    assert sent.exhausted
    assert sent.stop_reason == "retry limit RetryPolicy.max_attempts=4 reached"
    assert len(sent.attempts) == 4


def test_exhausted_transport_errors_raise_backend_error_listing_attempts() -> None:
    policy = RetryPolicy(jitter=False, max_attempts=3)
    with pytest.raises(BackendError) as info:
        _send([httpx.ConnectError("refused")] * 5, policy)
    err = info.value
    assert len(err.attempts) == 3
    assert [a.error for a in err.attempts] == ["ConnectError: refused"] * 3
    assert [a.waited for a in err.attempts] == [0.5, 1.0, 0.0]
    text = str(err)
    assert "after 3 attempts: ConnectError: refused; retry limit RetryPolicy.max_attempts=3 reached" in text
    assert text.count(f"GET {URL} -> ConnectError: refused") == 3
    assert "BACKEND_BASE_URL" in (err.hint or "")
    assert isinstance(err.__cause__, httpx.ConnectError)


def test_error_class_is_chosen_by_caller() -> None:
    clock = VirtualClock()
    with respx.mock() as router:
        router.post(URL).mock(side_effect=httpx.ConnectError("down"))
        with httpx.Client() as client, pytest.raises(JobSubmitError):
            send(
                client,
                client.build_request("POST", URL),
                policy=RetryPolicy.never(),
                clock=clock,
                error_cls=JobSubmitError,
            )


def test_total_budget_bounds_waiting() -> None:
    policy = RetryPolicy(jitter=False, max_attempts=50, backoff_base=4.0, total_budget=20.0)
    response, sleeps, route, sent = _send([httpx.Response(500)] * 50, policy)
    # waits 4, 8 (total 12); the next (16) would pass 20 s, so it stops after 3 sends.
    assert sleeps == [4.0, 8.0]
    assert route.call_count == 3
    assert response.status_code == 500
    assert sent.exhausted
    assert sent.stop_reason == "waiting 16.00s more would exceed RetryPolicy.total_budget=20s"


def test_non_transient_transport_error_is_not_retried() -> None:
    with pytest.raises(BackendError) as info:
        _send([httpx.UnsupportedProtocol("bad scheme"), httpx.Response(200)])
    assert len(info.value.attempts) == 1


def test_backoff_caps_at_max() -> None:
    policy = RetryPolicy(jitter=False, backoff_base=1.0, backoff_max=5.0)
    assert [policy.backoff(n) for n in range(5)] == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_full_jitter_is_seeded_and_bounded() -> None:
    a = RetryPolicy(seed=42)
    b = RetryPolicy(seed=42)
    draws_a = [a.backoff(n) for n in range(8)]
    assert draws_a == [b.backoff(n) for n in range(8)]
    assert all(0.0 <= d <= min(30.0, 0.5 * 2**n) for n, d in enumerate(draws_a))
    assert len(set(draws_a)) == len(draws_a)


def test_unseeded_jitter_is_drawn_apart_per_policy_and_a_bad_seed_fails_at_once() -> None:
    policies = [RetryPolicy() for _ in range(3)]  # each draws from a generator of its own
    draws = [tuple(policy.backoff(n) for n in range(6)) for policy in policies]
    assert len(set(draws)) == 3
    assert all(0.0 <= d <= min(30.0, 0.5 * 2**n) for run in draws for n, d in enumerate(run))
    with pytest.raises(TypeError):
        RetryPolicy(seed=[1])  # type: ignore[arg-type]


def test_retries_are_logged_masked(caplog: pytest.LogCaptureFixture) -> None:
    from pytest_synth_rl.secrets.masking import Secret

    Secret(KEY)  # registers the key as a secret, as the client does with its keys
    caplog.set_level(logging.WARNING, logger="pytest_synth_rl.client")
    _send([httpx.ConnectError(f"refused for {KEY}"), httpx.Response(200)])
    records = [r for r in caplog.records if r.name == "pytest_synth_rl.client"]
    assert len(records) == 1
    assert records[0].levelno == logging.WARNING
    message = records[0].getMessage()
    assert "retrying in 0.50s" in message
    assert KEY not in message
    assert "sk_r…ef" in message


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("5", 5.0),
        (" 2.5 ", 2.5),
        ("-3", 0.0),
        ("soon", None),
        ("", None),
        (None, None),
        ("nan", None),
    ],
)
def test_parse_retry_after(header: str | None, expected: float | None) -> None:
    assert parse_retry_after(header, 1_000_000.0) == expected


def test_parse_retry_after_dates() -> None:
    now = 1_767_225_600.0
    assert parse_retry_after(email.utils.formatdate(now + 30, usegmt=True), now) == 30.0
    assert parse_retry_after(email.utils.formatdate(now - 30, usegmt=True), now) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"max_attempts": 0}, "RetryPolicy.max_attempts"),
        ({"backoff_base": -1}, "RetryPolicy.backoff_base"),
        ({"total_budget": float("inf")}, "RetryPolicy.total_budget"),
        ({"backoff_multiplier": 0.5}, "RetryPolicy.backoff_multiplier"),
    ],
)
def test_policy_validation(kwargs: dict[str, float], key: str) -> None:
    with pytest.raises(SynthUsageError) as info:
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
    assert info.value.keys == [key]
