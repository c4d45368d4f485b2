"""``error`` (synth-ai 0.5.0's learning constants) is a terminal failure, in any case."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import respx
from client_support import API

from pytest_synth_rl.assertions import expect_job
from pytest_synth_rl.client import FAILURE_STATUSES, TERMINAL_STATUSES, RLJob, is_terminal
from pytest_synth_rl.client.results import outcome_of
from pytest_synth_rl.errors import JobFailedError

JOB = f"{API}/rl/jobs/job-1"


@pytest.fixture
def router() -> Iterator[respx.MockRouter]:
    with respx.mock(assert_all_called=False) as mock:
        mock.get(f"{JOB}/events").mock(return_value=httpx.Response(200, json={"events": []}))
        mock.get(f"{JOB}/metrics").mock(return_value=httpx.Response(200, json={"points": []}))
        yield mock


def _answer(router: respx.MockRouter, payloads: list[dict[str, Any]]) -> respx.Route:
    calls = {"n": 0}

    def answer(request: httpx.Request) -> httpx.Response:
        index = min(calls["n"], len(payloads) - 1)
        calls["n"] += 1
        return httpx.Response(200, json=payloads[index])

    return router.get(JOB).mock(side_effect=answer)


def test_error_is_in_the_failure_vocabulary() -> None:
    assert frozenset({"failed", "error"}) == FAILURE_STATUSES
    assert "error" in TERMINAL_STATUSES
    for spelling in ("error", "ERROR", " Error "):
        assert is_terminal(spelling)
        assert outcome_of(spelling) == "failed"


@pytest.mark.parametrize("spelling", ["error", "ERROR", "Error"])
def test_polling_ends_on_error_as_a_failure(router: respx.MockRouter, job: RLJob, spelling: str) -> None:
    route = _answer(router, [{"status": "running"}, {"status": spelling, "error": "trainer crashed"}])
    result = job.poll_until_complete(timeout=600, interval=10)
    assert route.call_count == 2
    assert result.status == "error"
    assert result.outcome == "failed"
    assert result.failed
    assert not result.succeeded
    assert not result.cancelled
    assert result.error == "trainer crashed"


def test_raise_on_failure_raises_for_error(router: respx.MockRouter, job: RLJob) -> None:
    _answer(router, [{"status": "error", "error": "trainer crashed"}])
    with pytest.raises(JobFailedError) as info:
        job.poll_until_complete(timeout=600, interval=10, raise_on_failure=True)
    assert str(info.value).startswith("RL job job-1 failed (status 'error'): trainer crashed")
    assert info.value.status == "error"


def test_results_of_an_errored_job_raise(router: respx.MockRouter, job: RLJob) -> None:
    _answer(router, [{"state": "Error", "message": "out of memory"}])
    with pytest.raises(JobFailedError) as info:
        job.get_results()
    expected = "RL job job-1 has no results: it failed (status 'error'): out of memory"
    assert str(info.value).startswith(expected)


def test_expectations_treat_error_as_failed(router: respx.MockRouter, job: RLJob) -> None:
    _answer(router, [{"status": "ERROR", "error": "trainer crashed"}])
    expect_job(job, interval=10, timeout=600).to_fail(error_contains="crashed")
    with pytest.raises(AssertionError) as info:
        expect_job(job, interval=10, timeout=600).to_succeed()
    assert str(info.value).startswith("expected job job-1 to succeed, but it ended 'error'")
