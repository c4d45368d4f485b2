"""Admin routes of a served fake that change its state: pushing a finished job, and reset.

A push that cannot happen (the job already finished) is an error naming the job and its status,
as the API's cancel answers, never a 200 that changed nothing; reset, like every admin route
with a body, refuses fields it does not know.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from test_fake_support import error_message, rl_payload, served_client

from pytest_synth_rl.fake import FakeSynthBackend

KEY = "sk_test_admin_pushes_key_01234"
#: Seconds; only a hang gets near it.
GENEROUS = 60.0
FINISHED_BY = {"succeed": "succeeded", "fail": "failed", "cancel": "cancelled"}


@pytest.fixture
def served() -> Iterator[tuple[FakeSynthBackend, httpx.Client]]:
    with served_client(KEY, GENEROUS) as served:
        yield served


def new_job(client: httpx.Client) -> str:
    created = client.post("/api/rl/jobs", json=rl_payload())
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    assert isinstance(job_id, str)
    return job_id


@pytest.mark.parametrize("first", sorted(FINISHED_BY))
@pytest.mark.parametrize("then", sorted(FINISHED_BY))
def test_pushing_a_finished_job_gets_409_naming_the_job_and_its_status(
    served: tuple[FakeSynthBackend, httpx.Client], first: str, then: str
) -> None:
    fake, client = served
    job_id = new_job(client)
    finished = client.post(f"/_fake/jobs/{job_id}/{first}")
    assert finished.status_code == 200, finished.text
    status = FINISHED_BY[first]
    assert finished.json()["status"] == status
    before = fake.job(job_id).summary()
    events = fake.job(job_id).events

    answer = client.post(f"/_fake/jobs/{job_id}/{then}")

    assert answer.status_code == 409, answer.text
    error = answer.json()["detail"]["error"]
    assert error["code"] == "job_already_finished"  # the code the API's cancel answers with
    assert error["job_status"] == status
    assert f"job {job_id} already {status}" in error["message"]
    assert f"queued or running jobs can {then}" in error["message"]
    assert fake.job(job_id).summary() == before
    assert fake.job(job_id).events == events


def test_the_admin_409_matches_the_apis_cancel_of_a_finished_job(
    served: tuple[FakeSynthBackend, httpx.Client],
) -> None:
    _, client = served
    job_id = new_job(client)
    assert client.post(f"/_fake/jobs/{job_id}/succeed").status_code == 200
    api = client.post(f"/api/rl/jobs/{job_id}/cancel")
    admin = client.post(f"/_fake/jobs/{job_id}/cancel")
    assert (api.status_code, admin.status_code) == (409, 409)
    api_error, admin_error = api.json()["detail"]["error"], admin.json()["detail"]["error"]
    assert (admin_error["code"], admin_error["job_status"]) == (api_error["code"], api_error["job_status"])


def test_failing_a_finished_job_keeps_its_history_and_says_why(
    served: tuple[FakeSynthBackend, httpx.Client],
) -> None:
    fake, client = served
    job_id = new_job(client)
    assert client.post(f"/_fake/jobs/{job_id}/succeed").status_code == 200
    answer = client.post(f"/_fake/jobs/{job_id}/fail", json={"error": "too late"})
    assert answer.status_code == 409
    assert f"job {job_id} already succeeded" in error_message(answer)
    assert fake.job(job_id).status == "succeeded"
    assert fake.job(job_id).error is None
    # A bad error text is still the caller's bad input first.
    bad = client.post(f"/_fake/jobs/{job_id}/fail", json={"error": 3})
    assert bad.status_code == 422


# -- reset ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"x": 1}, "unknown reset fields ['x']; allowed: []"),
        ({"job_id_prefix": "t_", "clock": 0}, "unknown reset fields ['clock', 'job_id_prefix']; allowed: []"),
    ],
)
def test_reset_refuses_unknown_fields_naming_them_and_resets_nothing(
    served: tuple[FakeSynthBackend, httpx.Client], body: dict[str, object], message: str
) -> None:
    fake, client = served
    job_id = new_job(client)
    answer = client.post("/_fake/reset", json=body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"]["error"]["code"] == "unknown_fields"
    assert error_message(answer) == message
    assert [job.id for job in fake.jobs] == [job_id]
    # Without fields (an empty object or no body at all), it resets.
    for fields in ({}, None):
        again = client.post("/_fake/reset", json=fields)  # json=None: no body at all
        assert (again.status_code, again.json()) == (200, {"ok": True})
        assert fake.jobs == []
        new_job(client)


def test_reset_refuses_a_body_that_is_not_an_object(served: tuple[FakeSynthBackend, httpx.Client]) -> None:
    fake, client = served
    new_job(client)
    answer = client.post("/_fake/reset", content=b"[1]")
    assert answer.status_code == 400
    assert error_message(answer).startswith("the admin request body must be a JSON object")
    assert len(fake.jobs) == 1
