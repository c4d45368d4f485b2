"""Deterministic fault injection per route: which calls fail, and how each kind looks to a client."""

from __future__ import annotations

import httpx
import pytest
from test_fake_support import API, auth, submit

from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.errors import SynthUsageError
from pytest_synth_rl.fake import FakeSynthBackend


def _codes(client: httpx.Client, fake: FakeSynthBackend, n: int, url: str | None = None) -> list[int]:
    return [client.get(url or f"{API}/rl/jobs", headers=auth(fake)).status_code for _ in range(n)]


def test_pattern_fails_the_marked_calls_then_stops(fake: FakeSynthBackend, client: httpx.Client) -> None:
    fault = fake.fault("list", status=500, pattern="0110")
    assert _codes(client, fake, 7) == [200, 500, 500, 200, 200, 200, 200]
    assert (fault.seen, fault.injected, fault.active) == (5, 2, False)


def test_pattern_can_cycle(fake: FakeSynthBackend, client: httpx.Client) -> None:
    fake.fault("list", status=503, pattern="01", cycle=True)
    assert _codes(client, fake, 6) == [200, 503, 200, 503, 200, 503]


def test_fail_next_counts_only_matching_routes(fake: FakeSynthBackend, client: httpx.Client) -> None:
    job_id = submit(client, fake)
    fake.fault("status", status=503, fail_next=2)
    assert _codes(client, fake, 2) == [200, 200]  # the list route is not affected
    status_url = f"{API}/rl/jobs/{job_id}"
    assert _codes(client, fake, 4, status_url) == [503, 503, 200, 200]


def test_probability_is_reproducible_with_a_seed(client: httpx.Client) -> None:
    runs = []
    for _ in range(2):
        with FakeSynthBackend(clock=VirtualClock()) as backend:
            backend.fault("list", status=500, probability=0.5, seed=7)
            runs.append(_codes(client, backend, 30))
    assert runs[0] == runs[1]
    assert 0 < runs[0].count(500) < 30


def test_429_carries_retry_after_and_a_clear_body(fake: FakeSynthBackend, client: httpx.Client) -> None:
    fake.fault("submit", status=429, retry_after=7, fail_next=1)
    response = client.post(f"{API}/rl/jobs", json={}, headers=auth(fake))
    assert response.status_code == 429
    assert response.headers["retry-after"] == "7"
    error = response.json()["detail"]["error"]
    assert error["code"] == "injected_fault"
    assert "HTTP 429 on route 'submit'" in error["message"]
    assert fake.jobs == []  # a faulted submit creates nothing
    default = fake.fault("list", status=429, fail_next=1)
    assert default.retry_after == 1.0
    assert client.get(f"{API}/rl/jobs", headers=auth(fake)).headers["retry-after"] == "1"


def test_faults_apply_before_auth(fake: FakeSynthBackend, client: httpx.Client) -> None:
    fake.fault("*", status=503, fail_next=1)
    assert client.get(f"{API}/rl/jobs").status_code == 503
    assert client.get(f"{API}/rl/jobs").status_code == 401


def test_connect_error_raises_httpx_connect_error_when_mounted(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    job_id = submit(client, fake)
    fake.fault("events", connect_error=True, fail_next=1)
    with pytest.raises(httpx.ConnectError, match="injected connection error"):
        client.get(f"{API}/rl/jobs/{job_id}/events", headers=auth(fake))
    assert client.get(f"{API}/rl/jobs/{job_id}/events", headers=auth(fake)).status_code == 200
    faulted = fake.calls("events")[0]
    assert faulted.fault == "connection error on route 'events'"
    assert faulted.status is None


def test_latency_advances_the_virtual_clock_then_answers(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    fake.scenario(duration=100.0, steps=2)
    job_id = submit(client, fake)
    fake.fault("status", latency=150.0, fail_next=1)
    body = client.get(f"{API}/rl/jobs/{job_id}", headers=auth(fake)).json()
    # the response is computed after the delay: the job finished while the call "hung"
    assert body["status"] == "succeeded"
    assert isinstance(fake.clock, VirtualClock)
    assert fake.clock.elapsed == 150.0
    assert fake.calls("status")[0].fault == "150s latency on route 'status'"


def test_every_injected_fault_is_in_the_request_log(fake: FakeSynthBackend, client: httpx.Client) -> None:
    fake.fault("list", status=500, pattern="101")
    _codes(client, fake, 3)
    assert [(r.status, r.fault) for r in fake.requests] == [
        (500, "HTTP 500 on route 'list'"),
        (200, None),
        (500, "HTTP 500 on route 'list'"),
    ]


def test_removed_and_cleared_faults_stop(fake: FakeSynthBackend, client: httpx.Client) -> None:
    fault = fake.fault("list", status=500)
    assert _codes(client, fake, 2) == [500, 500]
    fault.remove()
    assert _codes(client, fake, 1) == [200]
    fake.fault("list", status=502)
    fake.clear_faults()
    assert _codes(client, fake, 1) == [200]


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"route": "everything"}, "fault.route"),
        ({"route": "list", "status": 200}, "fault.status"),
        ({"route": "list", "pattern": "01x"}, "fault.pattern"),
        ({"route": "list", "fail_next": 0}, "fault.fail_next"),
        ({"route": "list", "probability": 1.5}, "fault.probability"),
        ({"route": "list", "latency": -1.0}, "fault.latency"),
        ({"route": "list", "pattern": "1", "fail_next": 1}, "fault"),
        ({"route": "list", "status": 500, "connect_error": True}, "fault"),
    ],
)
def test_bad_fault_specs_name_the_field(fake: FakeSynthBackend, kwargs: dict[str, object], key: str) -> None:
    with pytest.raises(SynthUsageError) as caught:
        fake.fault(**kwargs)  # type: ignore[arg-type]
    assert key in caught.value.keys
