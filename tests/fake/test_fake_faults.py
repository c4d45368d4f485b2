"""Deterministic fault injection per route: which calls fail, and how each kind looks to a client."""

from __future__ import annotations

import httpx
import pytest
from test_fake_support import API, auth, submit

from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.errors import SynthUsageError
from pytest_synth_rl.fake import FakeSynthBackend, Fault


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


# -- every fault field is type-checked (bools are bools, ints are ints, numbers are finite) -------
@pytest.mark.parametrize(
    ("kwargs", "key", "message"),
    [
        (
            {"status": 500.5},
            "fault.status",
            "must be an HTTP error status 400-599 (an int), got float 500.5 (hint: e.g. status=503)",
        ),
        (
            {"status": "500"},
            "fault.status",
            "must be an HTTP error status 400-599 (an int), got str '500' (hint: e.g. status=503)",
        ),
        (
            {"status": True},
            "fault.status",
            "must be an HTTP error status 400-599 (an int), got bool True (hint: e.g. status=503)",
        ),
        (
            {"connect_error": "no"},
            "fault.connect_error",
            "must be true or false, got str 'no' (hint: e.g. connect_error=True)",
        ),
        (
            {"connect_error": 1},
            "fault.connect_error",
            "must be true or false, got int 1 (hint: e.g. connect_error=True)",
        ),
        (
            {"status": 500, "cycle": "false"},
            "fault.cycle",
            "must be true or false, got str 'false' (hint: e.g. cycle=True)",
        ),
        ({"seed": "x"}, "fault.seed", "must be an int from 0 to 2**64 - 1, got str 'x' (hint: e.g. seed=7)"),
        (
            {"seed": 1.5},
            "fault.seed",
            "must be an int from 0 to 2**64 - 1, got float 1.5 (hint: e.g. seed=7)",
        ),
        ({"seed": -1}, "fault.seed", "must be an int from 0 to 2**64 - 1, got int -1 (hint: e.g. seed=7)"),
        (
            {"latency": "1"},
            "fault.latency",
            "must be a finite number of seconds in (0, 3600], got '1' (hint: e.g. latency=30)",
        ),
        (
            {"latency": True},
            "fault.latency",
            "must be a finite number of seconds in (0, 3600], got True (hint: e.g. latency=30)",
        ),
        (
            {"fail_next": "3"},
            "fault.fail_next",
            "must be an int from 1 to 1000000000, got str '3' (hint: e.g. fail_next=2)",
        ),
        (
            {"fail_next": 1.5},
            "fault.fail_next",
            "must be an int from 1 to 1000000000, got float 1.5 (hint: e.g. fail_next=2)",
        ),
    ],
)
def test_fault_fields_of_the_wrong_type_name_the_field(
    fake: FakeSynthBackend, kwargs: dict[str, object], key: str, message: str
) -> None:
    with pytest.raises(SynthUsageError) as caught:
        fake.fault("list", **kwargs)  # type: ignore[arg-type]
    assert caught.value.keys == [key]
    assert str(caught.value) == f"invalid arguments: {key}: {message}"
    assert fake.faults == []


def test_a_fault_route_near_miss_gets_a_did_you_mean(fake: FakeSynthBackend) -> None:
    with pytest.raises(SynthUsageError) as caught:
        fake.fault("lsit", status=500)
    assert str(caught.value) == (
        "invalid arguments: fault.route: unknown route 'lsit' (hint: did you mean 'list'? use one of "
        "submit, list, status, cancel, start, events, events_stream, metrics, timeline, *)"
    )


def test_a_fault_lists_every_wrong_field_at_once(fake: FakeSynthBackend) -> None:
    with pytest.raises(SynthUsageError) as caught:
        fake.fault("list", status="500", connect_error="x", seed=1.5, cycle="no")  # type: ignore[arg-type]
    assert caught.value.keys == ["fault.connect_error", "fault.status", "fault.seed", "fault.cycle"]


def test_a_fault_built_directly_checks_its_kind() -> None:
    with pytest.raises(SynthUsageError) as caught:
        Fault(route="list", kind="explode")  # type: ignore[arg-type]
    assert str(caught.value) == (
        "invalid arguments: fault.kind: unknown kind 'explode' (hint: use one of status, connect, latency)"
    )


def test_an_int_status_fault_still_answers_with_that_status(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    fault = fake.fault("list", status=599, fail_next=1, seed=2**64 - 1, cycle=False)
    assert (fault.status, fault.seed) == (599, 2**64 - 1)
    assert _codes(client, fake, 2) == [599, 200]
