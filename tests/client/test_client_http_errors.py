"""What a refused or failing call says: the operation, the status, the attempts, why retrying
stopped, the problems of a 422, and a hint that depends on the status and the call."""

from __future__ import annotations

import httpx
import pytest
import respx
from client_support import API, BACKEND, attach

from pytest_synth_rl.client import RetryPolicy, RLJob
from pytest_synth_rl.errors import BackendError

JOB = f"{API}/rl/jobs/job-1"


def _status_error(router: respx.MockRouter, job: RLJob, *answers: httpx.Response) -> BackendError:
    router.get(JOB).mock(side_effect=list(answers))
    with pytest.raises(BackendError) as caught:
        job.get_status()
    return caught.value


def test_an_unknown_job_names_the_job_and_the_backend(router: respx.MockRouter, job: RLJob) -> None:
    error = _status_error(router, job, httpx.Response(404, json={"detail": "not found"}))
    assert str(error).startswith("reading the status of job 'job-1' failed: HTTP 404")
    assert " attempts" not in str(error)  # one try: no count
    assert error.hint == (
        f"job 'job-1' is unknown to {API}: check the job id and that backend_url is the backend "
        "that created it"
    )


def test_a_server_error_kept_up_says_how_often_it_was_tried_and_how_to_try_harder(
    router: respx.MockRouter,
) -> None:
    with attach(retry=RetryPolicy(max_attempts=3, seed=7)) as job:
        error = _status_error(router, job, *[httpx.Response(500)] * 3)
    assert "HTTP 500 after 3 attempts; retry limit RetryPolicy.max_attempts=3 reached" in str(error)
    assert error.hint is not None
    assert error.hint.startswith("the backend kept failing; the request was retried per RetryPolicy")
    assert error.hint.endswith("or raise RetryPolicy(max_attempts=, total_budget=)")


def test_a_server_error_not_worth_retrying_is_said_so(router: respx.MockRouter, job: RLJob) -> None:
    error = _status_error(router, job, httpx.Response(501))
    assert str(error).startswith("reading the status of job 'job-1' failed: HTTP 501\n")  # tried once
    assert error.hint == "the backend failed on this request and it is not one worth retrying"


def test_another_refusal_points_at_the_answer(router: respx.MockRouter, job: RLJob) -> None:
    error = _status_error(router, job, httpx.Response(418, text="teapot"))
    assert str(error).startswith("reading the status of job 'job-1' failed: HTTP 418")
    assert error.hint == "the backend rejected the request; see its answer above"


def test_a_missing_jobs_route_on_listing_points_at_the_backend_url(router: respx.MockRouter) -> None:
    router.get(f"{API}/rl/jobs").mock(return_value=httpx.Response(404))
    with pytest.raises(BackendError) as caught:
        RLJob.list_jobs(backend_url=BACKEND, api_key="sk_test_list_key_0123456789")
    hint = caught.value.hint or ""
    assert hint.startswith(f"no RL jobs route at {API}/rl/jobs")
    assert f"check backend_url / BACKEND_BASE_URL (now {API})" in hint
    assert "appended when missing" not in hint  # that note is about submitting


def test_a_fallback_route_that_also_fails_names_the_route_that_answered_404(
    router: respx.MockRouter, job: RLJob
) -> None:
    router.get(f"{JOB}/events").mock(return_value=httpx.Response(404))
    router.get(f"{API}/learning/jobs/job-1/events").mock(return_value=httpx.Response(418))
    with pytest.raises(BackendError) as caught:
        job.events()
    assert f"HTTP 418 (after {JOB}/events answered 404)" in str(caught.value)
