"""Polling to completion on a virtual clock: terminal statuses, exact timing, callbacks, results."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
import respx
from client_support import API, attach

from pytest_synth_rl.client import JobResult, RLJob, SynthCallbackWarning
from pytest_synth_rl.client.results import polls_in
from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.errors import JobFailedError, JobTimeoutError, SynthError, SynthUsageError

STATUS_URL = f"{API}/rl/jobs/job-1"


def _clock(job: RLJob) -> VirtualClock:
    clock = job.clock
    assert isinstance(clock, VirtualClock)
    return clock


def _sequence(router: respx.MockRouter, payloads: list[dict[str, Any]]) -> respx.Route:
    """Answer status polls with *payloads* in order, repeating the last one."""
    calls = {"n": 0}

    def answer(request: httpx.Request) -> httpx.Response:
        index = min(calls["n"], len(payloads) - 1)
        calls["n"] += 1
        return httpx.Response(200, json=payloads[index])

    return router.get(STATUS_URL).mock(side_effect=answer)


@pytest.mark.parametrize(
    ("payload", "outcome"),
    [
        ({"status": "succeeded"}, "succeeded"),
        ({"status": "SUCCEEDED"}, "succeeded"),
        ({"status": "Completed"}, "succeeded"),
        ({"status": "completed"}, "succeeded"),
        ({"status": "failed"}, "failed"),
        ({"status": "Failed"}, "failed"),
        ({"status": "cancelled"}, "cancelled"),
        ({"status": "CANCELED"}, "cancelled"),
        ({"status": "Canceled"}, "cancelled"),
        ({"state": "Succeeded"}, "succeeded"),
        ({"state": "CANCELLED"}, "cancelled"),
        ({"status": "", "state": "failed"}, "failed"),
        ({"status": " succeeded "}, "succeeded"),
    ],
)
def test_every_terminal_spelling_ends_polling(
    router: respx.MockRouter, job: RLJob, payload: dict[str, str], outcome: str
) -> None:
    route = _sequence(router, [{"status": "queued"}, {"state": "Running"}, payload])
    result = job.poll_until_complete(timeout=600, interval=10)
    assert route.call_count == 3
    assert result.outcome == outcome
    assert result.status == (payload.get("status") or payload.get("state") or "").strip().lower()
    assert [r.status for r in result.history][:2] == ["queued", "running"]
    assert _clock(job).sleeps == [10.0, 10.0]
    assert result.elapsed == 20.0


def test_two_hour_timeout_on_virtual_clock(
    router: respx.MockRouter, job: RLJob, monkeypatch: pytest.MonkeyPatch
) -> None:
    route = _sequence(router, [{"status": "running"}])
    real_sleeps: list[float] = []
    monkeypatch.setattr(time, "sleep", real_sleeps.append)
    with pytest.raises(JobTimeoutError) as info:
        job.poll_until_complete(timeout=7200.0, interval=10.0)
    clock = _clock(job)
    assert route.call_count == 721  # t = 0, 10, ..., 7200
    assert len(clock.sleeps) == 720
    assert sum(clock.sleeps) == 7200.0
    assert clock.elapsed == 7200.0
    assert real_sleeps == []  # nowhere near two real hours: nothing really slept
    err = info.value
    assert err.job_id == "job-1"
    assert err.timeout == 7200.0
    assert err.last_status == "running"
    assert polls_in(err.history) == 721
    assert len(err.history) == 2  # the same answer all along: its first and latest poll
    assert err.history[-1].elapsed == 7200.0
    assert "running x721 (0-7200s)" in str(err)
    assert "timeout=" in (err.hint or "")
    assert "from_job_id('job-1')" in (err.hint or "")


def test_interval_and_timeout_honoured_exactly(router: respx.MockRouter, job: RLJob) -> None:
    _sequence(router, [{"status": "running"}])
    with pytest.raises(JobTimeoutError) as info:
        job.poll_until_complete(timeout=25.0, interval=10.0)
    assert _clock(job).sleeps == [10.0, 10.0, 5.0]
    assert [(r.elapsed, r.polls) for r in info.value.history] == [(0.0, 1), (25.0, 3)]


def test_fractional_interval_does_not_overshoot(router: respx.MockRouter, job: RLJob) -> None:
    route = _sequence(router, [{"status": "running"}])
    with pytest.raises(JobTimeoutError):
        job.poll_until_complete(timeout=1.0, interval=0.1)
    assert route.call_count == 11
    assert sum(_clock(job).sleeps) == pytest.approx(1.0)


def test_zero_timeout_polls_once(router: respx.MockRouter, job: RLJob) -> None:
    route = _sequence(router, [{"status": "running"}])
    with pytest.raises(JobTimeoutError):
        job.poll_until_complete(timeout=0, interval=10)
    assert route.call_count == 1
    assert _clock(job).sleeps == []


@pytest.mark.parametrize(("timeout", "interval", "key"), [(-1, 10, "timeout"), (10, 0, "interval")])
def test_bad_poll_arguments(job: RLJob, timeout: float, interval: float, key: str) -> None:
    with pytest.raises(SynthUsageError) as info:
        job.poll_until_complete(timeout=timeout, interval=interval)
    assert info.value.keys == [f"poll_until_complete.{key}"]


def test_transient_errors_during_polling_are_retried(router: respx.MockRouter, job: RLJob) -> None:
    router.get(STATUS_URL).mock(
        side_effect=[
            httpx.Response(200, json={"status": "running"}),
            httpx.Response(503),
            httpx.Response(200, json={"status": "succeeded", "final_reward": 0.5}),
        ]
    )
    result = job.poll_until_complete(timeout=100, interval=10)
    assert result.succeeded
    assert result.final_reward == 0.5
    sleeps = _clock(job).sleeps
    assert sleeps[0] == 10.0
    assert len(sleeps) == 2  # the poll interval, then one retry backoff


def test_on_status_sees_every_poll(router: respx.MockRouter, job: RLJob) -> None:
    _sequence(router, [{"status": "queued"}, {"status": "running", "progress": 1}, {"status": "succeeded"}])
    seen: list[dict[str, Any]] = []
    job.poll_until_complete(timeout=100, interval=5, on_status=seen.append)
    assert [p["status"] for p in seen] == ["queued", "running", "succeeded"]


def test_on_status_error_is_warned_with_traceback_and_polling_continues(
    router: respx.MockRouter, job: RLJob
) -> None:
    _sequence(router, [{"status": "running"}, {"status": "running"}, {"status": "succeeded"}])
    calls: list[str] = []

    def broken(payload: dict[str, Any]) -> None:
        calls.append(payload["status"])
        raise ValueError("progress bar exploded")

    with pytest.warns(SynthCallbackWarning) as record:
        result = job.poll_until_complete(timeout=100, interval=5, on_status=broken)
    assert result.succeeded
    assert calls == ["running", "running", "succeeded"]
    assert len(record) == 3
    message = str(record[0].message)
    assert "ValueError: progress bar exploded" in message
    assert "Traceback (most recent call last)" in message
    assert "in broken" in message
    assert "polling continues" in message


def test_raise_on_failure(router: respx.MockRouter, job: RLJob) -> None:
    _sequence(router, [{"status": "running"}, {"status": "FAILED", "error": "OOM on trainer"}])
    with pytest.raises(JobFailedError) as info:
        job.poll_until_complete(timeout=100, interval=5, raise_on_failure=True)
    err = info.value
    assert err.job_id == "job-1"
    assert err.status == "failed"
    assert err.error == "OOM on trainer"
    assert "OOM on trainer" in str(err)
    assert isinstance(err.result, JobResult)
    assert len(err.result.history) == 2


def test_raise_on_failure_for_cancelled(router: respx.MockRouter, job: RLJob) -> None:
    _sequence(router, [{"status": "canceled", "message": "cancelled by user"}])
    with pytest.raises(JobFailedError, match="cancelled by user") as info:
        job.poll_until_complete(raise_on_failure=True)
    assert info.value.status == "canceled"


def test_failure_returned_without_raise(router: respx.MockRouter, job: RLJob) -> None:
    _sequence(router, [{"status": "failed", "error_message": "bad reward"}])
    result = job.poll_until_complete()
    assert result.failed
    assert result.error == "bad reward"
    assert not result.succeeded


def test_success_result_fields_and_mapping(router: respx.MockRouter, job: RLJob) -> None:
    final = {
        "status": "Succeeded",
        "results": {"final_reward": 0.875, "metrics": {"reward": 0.8}},
        "model_id": "ft:Qwen/Qwen3-0.6B:job-1",
        "message": "done",
    }
    _sequence(router, [{"status": "running"}, final])
    result = job.poll_until_complete(timeout=100, interval=10)
    assert result.job_id == "job-1"
    assert result.status == "succeeded"
    assert result.final_reward == 0.875
    assert result.results == final["results"]
    assert result.error is None  # "message" on a succeeded job is not an error
    assert result.raw == final
    assert result["model_id"] == "ft:Qwen/Qwen3-0.6B:job-1"
    assert result.get("final_reward") is None
    assert "status" in result
    assert set(result) == set(final)
    assert result == final
    assert result.polls == 2
    first = result.history[0]
    assert (first.elapsed, first.status, first.payload) == (0.0, "running", {"status": "running"})
    assert result.history[1].at - first.at == 10.0


def test_non_json_status_counts_as_empty_and_is_noted(router: respx.MockRouter, job: RLJob) -> None:
    router.get(STATUS_URL).respond(200, text="<html>gateway</html>", headers={"content-type": "text/html"})
    assert job.get_status() == {}
    with pytest.raises(JobTimeoutError) as info:
        job.poll_until_complete(timeout=20, interval=10)
    assert "<no status> x3" in str(info.value)
    assert "text/html" in str(info.value)


@pytest.mark.parametrize(
    ("body", "named"),
    [(b"[" * 5000 + b"]" * 5000, "is nested too deeply"), (b'{"status": "running", "step": NaN}', "at step")],
)
def test_a_status_the_reader_refuses_counts_as_empty_and_is_noted(
    router: respx.MockRouter, job: RLJob, body: bytes, named: str
) -> None:
    # Before, a deeply nested answer raised RecursionError out of the poll loop.
    router.get(STATUS_URL).respond(200, content=body, headers={"content-type": "application/json"})
    assert job.get_status() == {}
    with pytest.raises(JobTimeoutError) as info:
        job.poll_until_complete(timeout=20, interval=10)
    assert named in str(info.value)


def test_get_results(router: respx.MockRouter, job: RLJob) -> None:
    router.get(STATUS_URL).mock(
        side_effect=[
            httpx.Response(200, json={"status": "completed", "results": {"metrics": {"acc": 1}}}),
            httpx.Response(200, json={"status": "succeeded"}),
            httpx.Response(200, json={"status": "failed", "error": {"message": "trainer crashed"}}),
            httpx.Response(200, json={"status": "running"}),
        ]
    )
    assert job.get_results() == {"metrics": {"acc": 1}}
    assert job.get_results() == {}
    with pytest.raises(JobFailedError, match="trainer crashed") as info:
        job.get_results()
    assert info.value.status == "failed"
    with pytest.raises(SynthError, match="'running'") as running:
        job.get_results()
    assert not isinstance(running.value, JobFailedError)
    assert "poll_until_complete" in (running.value.hint or "")


def test_status_404_names_the_job(router: respx.MockRouter, job: RLJob) -> None:
    from pytest_synth_rl.errors import BackendError

    router.get(STATUS_URL).respond(404, json={"detail": "no such job"})
    with pytest.raises(BackendError) as info:
        job.get_status()
    assert "job 'job-1'" in str(info.value)
    assert "job id" in (info.value.hint or "")


def test_status_retry_budget_exhausted_lists_every_attempt(router: respx.MockRouter) -> None:
    from pytest_synth_rl.client import RetryPolicy
    from pytest_synth_rl.errors import BackendError

    route = router.get(STATUS_URL).respond(502, text="bad gateway")
    with attach("job-1", retry=RetryPolicy(jitter=False, max_attempts=5)) as job:
        with pytest.raises(BackendError) as info:
            job.poll_until_complete(timeout=100, interval=10, max_failed_polls=1)
        assert _clock(job).sleeps == [0.5, 1.0, 2.0, 4.0]
    assert route.call_count == 5
    err = info.value
    assert [a.status_code for a in err.attempts] == [502] * 5
    text = str(err)
    assert "HTTP 502 after 5 attempts; retry limit RetryPolicy.max_attempts=5 reached" in text
    assert "attempts (5):" in text
    for number in range(1, 6):
        assert f"{number}. GET {STATUS_URL} -> HTTP 502" in text
    assert "(then waited 4.00s)" in text
    assert "bad gateway" in text


def test_polls_carry_a_cookie_the_backend_set_on_an_earlier_poll(
    router: respx.MockRouter, job: RLJob
) -> None:
    """A load balancer's sticky cookie set on the first answer goes with every later poll."""
    sent: list[str | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request.headers.get("cookie"))
        status = "succeeded" if len(sent) == 3 else "running"
        return httpx.Response(200, json={"status": status}, headers={"set-cookie": "lb=node-7; Path=/"})

    router.get(STATUS_URL).mock(side_effect=answer)
    assert job.poll_until_complete(timeout=100.0, interval=10.0).status == "succeeded"
    assert sent == [None, "lb=node-7", "lb=node-7"]


def test_every_poll_sends_the_same_request_headers(router: respx.MockRouter, job: RLJob) -> None:
    seen: list[dict[str, str]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append({k: v for k, v in request.headers.items() if k != "authorization"})
        seen[-1]["authorization-set"] = str("authorization" in request.headers)
        return httpx.Response(200, json={"status": "succeeded" if len(seen) == 4 else "running"})

    router.get(STATUS_URL).mock(side_effect=answer)
    assert job.poll_until_complete(timeout=100.0, interval=10.0).status == "succeeded"
    assert len(seen) == 4
    assert all(headers == seen[0] for headers in seen)
    assert seen[0]["authorization-set"] == "True"
