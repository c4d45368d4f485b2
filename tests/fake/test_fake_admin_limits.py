"""The served fake stays bounded under what an outside tester kept adding: scenarios scripted for
upcoming jobs and faults through the admin routes (each call was a 200 and memory grew without
limit), and request bodies held at once across connections, before any key check (100 open
connections took 1 GB). Each test failed before its fix.

Sizes and counts are asserted, never durations. The limits are lowered with ``monkeypatch``
(``raising=False``, so the same test runs, and fails, against the code before the fix).
"""

from __future__ import annotations

import json
import socket
import tracemalloc
from collections.abc import Callable, Iterator

import httpx
import pytest
from test_fake_support import API, auth, error_message, open_socket, read_answer, rl_payload, served_client

from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.errors import SynthError
from pytest_synth_rl.fake import FakeSynthBackend, Scenario
from pytest_synth_rl.fake import asgi as asgi_module
from pytest_synth_rl.fake import store as store_module

KEY = "sk_test_admin_limits_key_0123456789"
#: Seconds; only a hang gets near it.
GENEROUS = 60.0
STEPS = 10_000
CURVE = [round(0.1 + 0.8 * i / STEPS, 6) for i in range(STEPS)]
MiB = 2**20


@pytest.fixture
def served() -> Iterator[tuple[FakeSynthBackend, httpx.Client]]:
    with served_client(KEY, GENEROUS) as served:
        yield served


def script_next(client: httpx.Client, **fields: object) -> httpx.Response:
    return client.post("/_fake/scenario", json={"job": "next", **fields})


# -- 1. scenarios scripted for upcoming jobs -----------------------------------------------------
def test_past_the_scripted_scenario_limit_the_admin_call_gets_429_saying_how_to_make_room(
    served: tuple[FakeSynthBackend, httpx.Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: every call was a 200, and the queue (and memory) grew for as long as calls came.
    monkeypatch.setattr(store_module, "MAX_SCRIPTED", 3, raising=False)
    fake, client = served
    for steps in (4, 5, 6):
        assert script_next(client, steps=steps).status_code == 200
    full = script_next(client, steps=7)
    assert full.status_code == 429, full.text[:300]
    assert full.json()["detail"]["error"]["code"] == "too_many_scenarios"
    message = error_message(full)
    assert "no room for another scenario scripted for an upcoming job" in message
    assert "this fake keeps at most 3 of them waiting" in message
    assert "3 are waiting" in message
    assert "submit jobs to use the waiting scenarios up" in message
    assert "reset the fake (POST /_fake/reset)" in message
    # A submission takes the first one off the queue, which makes room for one more.
    first = client.post("/api/rl/jobs", json=rl_payload()).json()["id"]
    assert fake.job(first).scenario.steps == 4
    assert script_next(client, steps=7).status_code == 200
    assert script_next(client, steps=8).status_code == 429
    assert client.post("/_fake/reset").status_code == 200
    assert script_next(client, steps=9).status_code == 200


def test_the_scripted_scenarios_data_is_bounded_too_and_its_estimate_is_an_upper_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tester's recipe, through the admin route in process (every curve parsed anew)."""
    monkeypatch.setattr(store_module, "MAX_SCRIPTED_DATA", 4 * MiB, raising=False)
    fake = FakeSynthBackend(api_key=KEY, clock=VirtualClock())
    body = json.dumps({"job": "next", "steps": STEPS, "reward_curve": CURVE}).encode()
    request = httpx.Request("POST", f"{fake.base_url}/_fake/scenario", content=body, headers=auth(fake))
    fake.handle(request)  # warm caches up
    fake.reset()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        statuses = [fake.handle(request).status_code for _ in range(20)]
        kept = tracemalloc.get_traced_memory()[0] - before
        refused = fake.handle(request)
    finally:
        tracemalloc.stop()
        fake.close()
    # Before: twenty 200s, 6.3 MiB kept (and ~330 KB more per call, for as long as calls came).
    assert 200 in statuses
    accepted = statuses.index(429) if 429 in statuses else len(statuses)
    assert statuses == [200] * accepted + [429] * (20 - accepted)
    assert kept <= 4 * MiB, f"{accepted} scripted scenarios keep {kept / MiB:.1f} MiB"
    assert accepted == 4 * MiB // store_module.scripted_size(Scenario(steps=STEPS, reward_curve=CURVE))
    assert refused.status_code == 429
    assert "and about 4 MiB of them" in error_message(refused)
    assert "this one would take about 392 KiB, for its reward curve and labels" in error_message(refused)


def test_next_job_past_the_limit_raises_store_full_in_python(
    fake: FakeSynthBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "MAX_SCRIPTED", 2, raising=False)
    fake.next_job(steps=2)
    fake.scenario_for("next", steps=3)
    with pytest.raises(SynthError) as raised:  # before: accepted, a third scenario in the queue
        fake.next_job(steps=4)
    assert isinstance(raised.value, store_module.StoreFull)
    assert getattr(raised.value, "code", None) == "too_many_scenarios"
    assert "this fake keeps at most 2 of them waiting" in str(raised.value)
    assert "hint: submit jobs to use the waiting scenarios up" in str(raised.value)


def test_a_submit_refused_for_a_full_store_leaves_the_scripted_scenario_for_the_next(
    fake: FakeSynthBackend, client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: the refused submit took the scenario off the queue, and the next job ran the default.
    monkeypatch.setattr(store_module, "MAX_JOBS", 1)
    running = client.post(f"{API}/rl/jobs", json=rl_payload(), headers=auth(fake)).json()["id"]
    fake.next_job(steps=7)
    assert client.post(f"{API}/rl/jobs", json=rl_payload(), headers=auth(fake)).status_code == 429
    fake.job(running).cancel()
    created = client.post(f"{API}/rl/jobs", json=rl_payload(), headers=auth(fake))
    assert created.status_code == 201
    assert fake.job(created.json()["id"]).scenario.steps == 7


# -- 2. faults ---------------------------------------------------------------------------------
def test_past_the_fault_limit_the_admin_call_gets_429_saying_how_to_make_room(
    served: tuple[FakeSynthBackend, httpx.Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: every call was a 201; 20,000 of them made GET /_fake/faults a 203 MB body.
    monkeypatch.setattr(store_module, "MAX_FAULTS", 3, raising=False)
    fake, client = served
    fault = {"route": "list", "pattern": "0" * 10_000}
    for _ in range(3):
        assert client.post("/_fake/faults", json=fault).status_code == 201
    full = client.post("/_fake/faults", json=fault)
    assert full.status_code == 429, full.text[:300]
    assert full.json()["detail"]["error"]["code"] == "too_many_faults"
    message = error_message(full)
    assert "no room for another fault: this fake keeps at most 3 faults" in message
    assert "3 are registered (3 still active)" in message
    assert "clear them (DELETE /_fake/faults" in message
    assert len(client.get("/_fake/faults").json()["faults"]) == 3
    assert client.get("/api/rl/jobs").status_code == 200  # the faults still apply: pattern 0s
    assert client.delete("/_fake/faults").status_code == 200
    assert client.post("/_fake/faults", json=fault).status_code == 201
    assert len(fake.faults) == 1


def test_fault_past_the_limit_raises_store_full_in_python(
    fake: FakeSynthBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "MAX_FAULTS", 2, raising=False)
    fake.fault("status", fail_next=1)
    fake.fault("*", status=500)
    with pytest.raises(SynthError) as raised:  # before: accepted, a third fault
        fake.fault("list", latency=1)
    assert isinstance(raised.value, store_module.StoreFull)
    assert getattr(raised.value, "code", None) == "too_many_faults"
    assert "this fake keeps at most 2 faults, and 2 are registered" in str(raised.value)
    assert "fake.clear_faults() in Python" in str(raised.value)
    assert len(fake.faults) == 2
    fake.clear_faults()
    fake.fault("list", latency=1)


def test_the_admin_limits_are_what_the_docstrings_say() -> None:
    limits = [
        getattr(store_module, name, None) for name in ("MAX_SCRIPTED", "MAX_SCRIPTED_DATA", "MAX_FAULTS")
    ]
    assert limits == [1000, 64 * MiB, 1000]
    assert getattr(asgi_module, "MAX_BUFFERED_BYTES", None) == 64 * MiB


# -- 3. request bodies held at once, across connections -----------------------------------------
BUDGET = 3 * MiB
BODY = MiB


def held() -> int | None:
    """Body bytes the served fakes of this process hold (None before the budget existed)."""
    budget = getattr(asgi_module, "BODY_BUDGET", None)
    return None if budget is None else int(budget.held)


def wait_for(condition: Callable[[int], bool], what: str) -> None:
    """Wait until ``condition(held bytes)`` holds, woken by the budget as requests in the server's
    thread take or give back bytes; :data:`GENEROUS` only stops a hang (or a missing fix)."""
    budget = getattr(asgi_module, "BODY_BUDGET", None)
    assert budget is not None, "no body budget: each connection may hold a whole body"
    assert budget.wait_for(condition, GENEROUS), f"{what} (held: {held()})"


def start_body(client: httpx.Client, length: int, sent: int) -> socket.socket:
    """A connection that declared a *length*-byte body, without a key, and sent *sent* bytes of it."""
    sock = open_socket(client)
    sock.sendall(f"POST /api/rl/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n".encode())
    sock.sendall(b" " * sent)
    return sock


@pytest.fixture
def budget(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    monkeypatch.setattr(asgi_module, "MAX_BUFFERED_BYTES", BUDGET, raising=False)
    yield BUDGET
    assert held() in (0, None)


def test_bodies_held_at_once_are_bounded_and_a_request_past_the_budget_gets_503(
    served: tuple[FakeSynthBackend, httpx.Client], budget: int
) -> None:
    fake, client = served
    holding = [start_body(client, BODY, BODY - 1) for _ in range(budget // BODY)]
    try:
        wait_for(lambda now: now == budget, "the three bodies being read take the whole budget")
        with start_body(client, BODY, 0) as refused:
            answer = read_answer(refused)  # before: read on, and held another MiB
        assert answer.startswith(b"HTTP/1.1 503"), answer[:200]
        assert b"\r\nretry-after: 1\r\n" in answer.lower()
        assert b"connection: close" in answer.lower()
        for fragment in (
            f"is {BODY} bytes",
            f"{budget} bytes of other bodies held",
            f"at most {budget} bytes",
        ):
            assert fragment.encode() in answer
        assert b"retry after 1s" in answer
        with open_socket(client) as chunked:
            chunked.sendall(b"POST /api/rl/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
            chunked.sendall(b"%x\r\n%s\r\n" % (65536, b" " * 65536))
            answer = read_answer(chunked)
        assert answer.startswith(b"HTTP/1.1 503"), answer[:200]
        assert b"the request body is at least " in answer
        # Requests without a body take nothing from the budget, and are served as ever.
        assert client.get("/api/rl/jobs").status_code == 200
        assert held() == budget
    finally:
        for sock in holding:
            sock.close()
    # The hung-up requests give back what they took; a body as large as all three fits again.
    wait_for(lambda now: now == 0, "closed connections give back the budget")
    big = json.dumps(rl_payload()).encode().ljust(budget, b" ")
    created = client.post("/api/rl/jobs", content=big, headers={"Content-Type": "application/json"})
    assert created.status_code == 201, created.text
    assert held() == 0
    assert [job.id for job in fake.jobs] == [created.json()["id"]]


def test_a_body_larger_than_the_whole_budget_gets_413_not_a_retry(
    served: tuple[FakeSynthBackend, httpx.Client], budget: int
) -> None:
    _, client = served
    with start_body(client, budget + 1, 0) as sock:
        answer = read_answer(sock)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert (
        f"the request body is {budget + 1} bytes; this fake backend accepts at most {budget} bytes".encode()
        in (answer)
    )


@pytest.mark.parametrize("ending", ["answered", "too large", "hung up"])
def test_every_way_a_request_ends_gives_its_bytes_back(
    served: tuple[FakeSynthBackend, httpx.Client], budget: int, ending: str
) -> None:
    _, client = served
    if ending == "answered":
        assert client.post("/api/rl/jobs", content=b"x" * BODY).status_code == 400
    elif ending == "too large":
        with open_socket(client) as sock:
            sock.sendall(b"POST /api/rl/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
            try:
                for _ in range(2 * budget // BODY):
                    sock.sendall(b"%x\r\n%s\r\n" % (BODY, b" " * BODY))
            except (BrokenPipeError, ConnectionResetError):
                pass  # answered and closed once past the limit
            answer = read_answer(sock)
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    else:
        with start_body(client, BODY, BODY // 2):
            wait_for(lambda now: now == BODY, "the body being read holds its declared length")
    wait_for(lambda now: now == 0, f"a request {ending} gives its bytes back")
    # The whole budget is there for the next request.
    with start_body(client, budget, budget - 1):
        wait_for(lambda now: now == budget, "a body as large as the budget fits")
    wait_for(lambda now: now == 0, "and is given back in turn")
