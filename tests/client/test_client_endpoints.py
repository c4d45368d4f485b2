"""Events, metrics, timeline, cancel and list: requests sent and answers read."""

from __future__ import annotations

import json

import httpx
import pytest
import respx
from client_support import API, API_KEY, BACKEND

from pytest_synth_rl.client import EventPage, RLJob, list_rl_jobs
from pytest_synth_rl.errors import BackendError

JOB = f"{API}/rl/jobs/job-1"
LEARNING = f"{API}/learning/jobs/job-1"


def _events(*seqs: int) -> list[dict[str, object]]:
    return [{"seq": s, "type": "rl.train.step", "message": f"step {s}"} for s in seqs]


def test_events_cursor_from_next_seq(router: respx.MockRouter, job: RLJob) -> None:
    route = router.get(f"{JOB}/events").respond(200, json={"events": _events(4, 5), "next_seq": 9})
    page = job.events(since_seq=3, limit=2)
    assert isinstance(page, EventPage)
    assert [e["seq"] for e in page] == [4, 5]
    assert len(page) == 2
    assert page.next_seq == 9
    assert page.types == ["rl.train.step", "rl.train.step"]
    params = route.calls.last.request.url.params
    assert (params["since_seq"], params["limit"]) == ("3", "2")
    assert route.calls.last.request.headers["authorization"] == f"Bearer {API_KEY}"


def test_events_cursor_defaults(router: respx.MockRouter, job: RLJob) -> None:
    route = router.get(f"{JOB}/events").mock(
        side_effect=[
            httpx.Response(200, json={"events": _events(1, 2, 3)}),
            httpx.Response(200, json={"events": []}),
        ]
    )
    first = job.events()
    assert first.next_seq == 3  # highest seq seen
    assert route.calls[0].request.url.params["since_seq"] == "0"
    assert route.calls[0].request.url.params["limit"] == "200"
    second = job.events(since_seq=first.next_seq)
    assert second.events == []
    assert second.next_seq == 3  # no new events: the cursor stays


@pytest.mark.parametrize(
    "body",
    [
        {"data": {"events": _events(7)}},
        {"result": {"events": _events(7)}},
        {"items": _events(7)},
        {"data": _events(7)},
        _events(7),
    ],
)
def test_events_nested_shapes(router: respx.MockRouter, job: RLJob, body: object) -> None:
    router.get(f"{JOB}/events").respond(200, json=body)
    page = job.events()
    assert [e["seq"] for e in page] == [7]
    assert page.next_seq == 7


def test_events_fall_back_to_learning_route_and_remember_it(router: respx.MockRouter, job: RLJob) -> None:
    rl_route = router.get(f"{JOB}/events").respond(404, json={"detail": "Not Found"})
    learning = router.get(f"{LEARNING}/events").respond(200, json={"events": _events(1)})
    assert [e["seq"] for e in job.events(since_seq=0, limit=10)] == [1]
    assert learning.calls.last.request.url.params["limit"] == "10"
    job.events(since_seq=1)
    assert rl_route.call_count == 1  # the second call went straight to the route that works
    assert learning.call_count == 2


def test_events_both_routes_missing(router: respx.MockRouter, job: RLJob) -> None:
    router.get(f"{JOB}/events").respond(404)
    router.get(f"{LEARNING}/events").respond(404)
    with pytest.raises(BackendError) as info:
        job.events()
    text = str(info.value)
    assert "/learning/jobs/job-1/events" in text
    assert f"after {JOB}/events answered 404" in text


def test_metrics(router: respx.MockRouter, job: RLJob) -> None:
    points = [
        {"name": "train.loss", "step": 1, "value": 0.9},
        {"name": "train.loss", "step": 2, "value": 0.7},
    ]
    route = router.get(f"{JOB}/metrics").respond(200, json={"points": points, "extra": 1})
    assert job.metrics(after_step=0, limit=50) == points
    params = route.calls.last.request.url.params
    assert (params["after_step"], params["limit"]) == ("0", "50")
    assert job.metrics() == points
    assert route.calls.last.request.url.params["after_step"] == "-1"


def test_metrics_fallback_and_missing_key(router: respx.MockRouter, job: RLJob) -> None:
    router.get(f"{JOB}/metrics").respond(404)
    router.get(f"{LEARNING}/metrics").respond(200, json={"unexpected": True})
    assert job.metrics() == []


def test_timeline(router: respx.MockRouter, job: RLJob) -> None:
    entries = [{"phase": "queued", "created_at": "t0"}, {"phase": "running", "created_at": "t1"}]
    router.get(f"{JOB}/timeline").respond(200, json={"events": entries})
    assert job.timeline() == entries


def test_cancel(router: respx.MockRouter, job: RLJob) -> None:
    route = router.post(f"{JOB}/cancel").respond(200, json={"status": "cancelling"})
    assert job.cancel() == {"status": "cancelling"}
    request = route.calls.last.request
    assert json.loads(request.content) == {}
    assert request.headers["authorization"] == f"Bearer {API_KEY}"


def test_cancel_conflict_is_backend_error(router: respx.MockRouter, job: RLJob) -> None:
    router.post(f"{JOB}/cancel").respond(409, json={"detail": "already finished"})
    with pytest.raises(BackendError, match="cancelling job 'job-1' failed: HTTP 409") as info:
        job.cancel()
    assert "already finished" in str(info.value)


def test_list_jobs(router: respx.MockRouter) -> None:
    body = {"jobs": [{"id": "a"}, {"id": "b"}], "next": None}
    route = router.get(f"{API}/rl/jobs").respond(200, json=body)
    assert list_rl_jobs(backend_url=BACKEND, api_key=API_KEY) == body
    assert dict(route.calls.last.request.url.params) == {"limit": "20"}
    RLJob.list_jobs(5, "running", model="Qwen/Qwen3-0.6B", backend_url=BACKEND, api_key=API_KEY)
    assert dict(route.calls.last.request.url.params) == {
        "limit": "5",
        "status": "running",
        "model": "Qwen/Qwen3-0.6B",
    }


def test_list_jobs_auth_error(router: respx.MockRouter) -> None:
    router.get(f"{API}/rl/jobs").respond(401, json={"detail": "bad key"})
    with pytest.raises(BackendError, match="listing RL jobs failed: HTTP 401") as info:
        list_rl_jobs(backend_url=BACKEND, api_key=API_KEY)
    assert "SYNTH_API_KEY" in (info.value.hint or "")
