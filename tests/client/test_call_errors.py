"""What a call the backend refused says, made from the call itself: the hint per status (the API
key for 401/403, rate limiting for 429, a call's own fix for the other refusals below 500), the
message's parts, which statuses count as success, and the request a repeated call sends.

Calls go through :class:`Sender` to a handler behind ``httpx.MockTransport``; the clock starts at
a non-zero time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from client_support import attach

from pytest_synth_rl.client.retry import Call, RetryPolicy, Sender, drive, event_page, extract_job_id
from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.errors import BackendError, JobSubmitError
from pytest_synth_rl.secrets.masking import SecretHeaders

API = "https://api.usesynth.ai/api"
JOB_URL = f"{API}/rl/jobs/job-1"
FIX = "check the task app URL (task_url=) and backend_url"
START = 5_000.0


def make_call(url: str = JOB_URL, **overrides: Any) -> Call[Any]:
    fields: dict[str, Any] = {
        "operation": "status",
        "method": "GET",
        "url": url,
        "parse": lambda response: response.status_code,
        "headers": SecretHeaders({"Authorization": "Bearer sk_test_call_key_0123456789"}),
        "job_id": "job-1",
    }
    fields.update(overrides)
    return Call(**fields)


def send(call: Call[Any], *answers: httpx.Response, policy: RetryPolicy | None = None) -> Any:
    """Send *call* through a Sender; the handler gives the answers in turn (the last one repeats)."""
    queue = list(answers)

    def handler(request: httpx.Request) -> httpx.Response:
        return queue.pop(0) if len(queue) > 1 else queue[0]

    clock = VirtualClock(START)
    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        sender = Sender(client, policy or RetryPolicy.never(), clock)
        return drive(sender.send(call), client, clock)


def failure(call: Call[Any], *answers: httpx.Response, policy: RetryPolicy | None = None) -> BackendError:
    with pytest.raises(BackendError) as caught:
        send(call, *answers, policy=policy)
    return caught.value


# -- 401 / 403: the API key ----------------------------------------------------------------------
@pytest.mark.parametrize("status", [401, 403])
@pytest.mark.parametrize("url", [JOB_URL, f"{API}/learning/jobs/job-1/events", f"{API}/rl/jobs"])
def test_a_refused_key_names_the_backend_and_the_key_setting(status: int, url: str) -> None:
    error = failure(make_call(url), httpx.Response(status))
    hint = error.hint or ""
    assert hint.startswith(f"the backend at {API} rejected the API key: check SYNTH_API_KEY")
    assert "(or api_key=)" in hint
    assert hint.endswith("key belongs to this backend")
    assert error.status_code == status


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_key_is_said_even_when_the_call_has_its_own_fix(status: int) -> None:
    error = failure(make_call(fix=FIX), httpx.Response(status))
    assert (error.hint or "").startswith(f"the backend at {API} rejected the API key")


# -- 429: rate limiting --------------------------------------------------------------------------
def test_rate_limiting_kept_up_says_so_and_how_to_allow_more() -> None:
    policy = RetryPolicy(max_attempts=2, jitter=False)
    error = failure(make_call(fix=FIX), httpx.Response(429), policy=policy)
    hint = error.hint or ""
    assert hint.startswith("rate limited by the backend; retry later")
    assert hint.endswith("allow more with RetryPolicy(max_attempts=...)")
    assert "status failed: HTTP 429 after 2 attempts; retry limit RetryPolicy.max_attempts=2" in str(error)


# -- a call's own fix: the refusals below 500 but 429 --------------------------------------------
@pytest.mark.parametrize("status", [400, 404, 409, 418, 422, 428, 430, 499])
def test_a_calls_fix_is_the_hint_for_a_refusal_below_500(status: int) -> None:
    assert failure(make_call(fix=FIX), httpx.Response(status)).hint == FIX


@pytest.mark.parametrize("status", [500, 502, 503])
def test_a_calls_fix_is_not_the_hint_for_a_server_error_kept_up(status: int) -> None:
    hint = failure(make_call(fix=FIX), httpx.Response(status)).hint or ""
    assert hint.startswith("the backend kept failing; the request was retried per RetryPolicy")


def test_a_calls_fix_is_not_the_hint_for_a_server_error_not_worth_retrying() -> None:
    hint = failure(make_call(fix=FIX), httpx.Response(501)).hint or ""
    assert hint.startswith("the backend failed on this request")


# -- 404 -----------------------------------------------------------------------------------------
def test_a_missing_submit_route_names_the_url_the_backend_and_where_the_api_lives() -> None:
    url = f"{API}/rl/jobs"
    error = failure(make_call(url, operation="submit", method="POST", json={}), httpx.Response(404))
    hint = error.hint or ""
    assert hint.startswith(f"no RL jobs route at {url}: check backend_url / BACKEND_BASE_URL (now {API})")
    assert f"(now {API}); the job API lives under /api" in hint
    assert hint.endswith("which is appended when missing")


def test_a_missing_list_route_names_the_url_and_the_backend() -> None:
    url = f"{API}/rl/jobs"
    hint = failure(make_call(url, operation="list"), httpx.Response(404)).hint or ""
    assert hint.startswith(f"no RL jobs route at {url}: check backend_url")
    assert hint.endswith(f"(now {API})")


def test_an_unknown_job_names_the_job_and_the_backend() -> None:
    hint = failure(make_call(), httpx.Response(404)).hint or ""
    assert hint.startswith(f"job 'job-1' is unknown to {API}: check the job id")
    assert hint.endswith("the backend that created it")


# -- 422 -----------------------------------------------------------------------------------------
def test_a_rejected_body_points_at_the_problems_listed() -> None:
    error = failure(make_call(), httpx.Response(422, json={"detail": [{"loc": ["a"], "msg": "bad"}]}))
    hint = error.hint or ""
    assert hint.startswith("the backend rejected the request body: fix the problems above")
    assert hint.endswith("in the RL config or overrides")
    assert "HTTP 422\n  problems:\n    - a: bad" in str(error)


def test_a_listed_problems_array_wins_over_a_detail_string() -> None:
    body = {"detail": "validation failed", "problems": [{"path": "model.base", "message": "unknown"}]}
    error = failure(make_call(), httpx.Response(422, json=body))
    assert "problems:\n    - model.base: unknown" in str(error)
    assert "- validation failed" not in str(error)


def test_a_long_problem_is_cut_at_300_characters() -> None:
    problem = "word " * 80  # 400 characters
    error = failure(make_call(), httpx.Response(422, json={"problems": [problem]}))
    assert f"    - {problem[:300]}… (100 more chars)" in str(error)


# -- the message ---------------------------------------------------------------------------------
def test_a_call_without_an_action_names_its_operation() -> None:
    error = failure(make_call(operation="timeline"), httpx.Response(418))
    assert str(error).startswith("timeline failed: HTTP 418\n")


def test_a_call_with_an_action_says_it() -> None:
    error = failure(make_call(action="reading the timeline failed"), httpx.Response(418))
    assert str(error).startswith("reading the timeline failed: HTTP 418\n")


def test_two_attempts_are_counted() -> None:
    policy = RetryPolicy(max_attempts=2, jitter=False)
    error = failure(make_call(), httpx.Response(503), policy=policy)
    assert "status failed: HTTP 503 after 2 attempts; retry limit" in str(error)
    assert len(error.attempts) == 2


# -- success -------------------------------------------------------------------------------------
@pytest.mark.parametrize("status", [200, 201, 204, 299])
def test_a_2xx_answer_is_a_success(status: int) -> None:
    assert send(make_call(), httpx.Response(status)) == status


@pytest.mark.parametrize("status", [199, 300, 302, 304])
def test_an_answer_outside_2xx_is_a_failure(status: int) -> None:
    error = failure(make_call(), httpx.Response(status))
    assert str(error).startswith(f"status failed: HTTP {status}\n")


def test_a_calls_own_ok_statuses_replace_2xx() -> None:
    call = make_call(ok_statuses=frozenset({200, 409}))
    assert send(call, httpx.Response(409)) == 409
    assert str(failure(call, httpx.Response(201))).startswith("status failed: HTTP 201\n")


# -- the call and its request --------------------------------------------------------------------
def test_a_call_cannot_be_changed_once_made() -> None:
    call = make_call()
    with pytest.raises(dataclasses.FrozenInstanceError):
        call.url = f"{API}/rl/jobs/other"  # type: ignore[misc]
    assert dataclasses.replace(call, job_id="job-2").job_id == "job-2"


@pytest.fixture
def cookie_backend() -> Iterator[tuple[httpx.Client, list[httpx.Request]]]:
    """A backend that sets a session cookie on its first answer (as a sticky load balancer does)."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        headers = {"set-cookie": "lb=node-2; Path=/"} if len(seen) == 1 else {}
        return httpx.Response(200, json={}, headers=headers)

    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        yield client, seen


def test_a_repeated_call_sends_the_cookies_the_backend_set_since(
    cookie_backend: tuple[httpx.Client, list[httpx.Request]],
) -> None:
    client, seen = cookie_backend
    clock = VirtualClock(START)
    sender = Sender(client, RetryPolicy.never(), clock)
    call = make_call()
    for _ in range(3):
        assert drive(sender.send(call), client, clock) == 200
    assert [request.headers.get("cookie") for request in seen] == [None, "lb=node-2", "lb=node-2"]
    assert all(str(request.url) == JOB_URL for request in seen)


def test_a_repeated_call_is_sent_to_the_same_url_with_the_same_params() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200)

    clock = VirtualClock(START)
    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        sender = Sender(client, RetryPolicy.never(), clock)
        call = make_call(f"{JOB_URL}/events", params={"since_seq": 3, "limit": 200})
        for _ in range(2):
            drive(sender.send(call), client, clock)
    assert seen == [f"{JOB_URL}/events?since_seq=3&limit=200"] * 2


def test_a_jobs_own_client_gives_each_request_30_seconds() -> None:
    timeouts: list[object] = []

    def handler(request: httpx.Request) -> httpx.Response:
        timeouts.append(request.extensions["timeout"])
        return httpx.Response(200, json={"status": "running"})

    with attach(transport=httpx.MockTransport(handler)) as job:
        job.get_status()
    assert timeouts == [{"connect": 30.0, "read": 30.0, "write": 30.0, "pool": 30.0}]


# -- reading answers -----------------------------------------------------------------------------
def _answer(body: object, status: int = 200) -> httpx.Response:
    return httpx.Response(status, json=body, request=httpx.Request("GET", f"{JOB_URL}/events"))


def test_an_event_cursor_that_is_not_an_integer_is_ignored() -> None:
    page = event_page(_answer({"events": [{"seq": 4}, {"seq": "9"}, {"seq": True}], "next_seq": "12"}), 2)
    assert page.next_seq == 4
    assert event_page(_answer({"events": [], "next_seq": False}), 2).next_seq == 2
    assert event_page(_answer({"events": [], "next_seq": 7}), 2).next_seq == 7


def test_an_accepted_submission_without_a_job_id_says_where_it_looked() -> None:
    response = httpx.Response(201, json={"status": "queued"}, request=httpx.Request("POST", f"{API}/rl/jobs"))
    with pytest.raises(JobSubmitError) as caught:
        extract_job_id(response)
    first = str(caught.value).splitlines()[0]
    assert first.startswith("the backend accepted the job (HTTP 201) but its answer has no job id")
    assert first.endswith("no job id under 'job_id' or 'id'")
