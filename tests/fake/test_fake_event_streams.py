"""The served fake's live event stream: open streams are bounded and never starve other requests,
and a reconnecting client resumes after its ``Last-Event-ID``.

Streams here are raw loopback sockets that send a request and never read the events: the
clients the bound is for. Every wait is bounded by a socket or client timeout that only a hang
(or a missing fix) reaches.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from test_fake_support import (
    API,
    auth,
    error_message,
    open_socket,
    poll_to_end,
    read_answer,
    rl_payload,
    served_client,
    submit,
)

import pytest_synth_rl.fake.api as stream_module
import pytest_synth_rl.fake.asgi as asgi_module
from pytest_synth_rl.assertions import eventually
from pytest_synth_rl.clock import RealClock
from pytest_synth_rl.fake import FakeSynthBackend
from pytest_synth_rl.fake.asgi import MAX_STREAMS, MAX_WORKERS

KEY = "sk_test_event_stream_bound_0123"
#: Seconds; only a hang gets near it.
GENEROUS = 60.0


@pytest.fixture
def served() -> Iterator[tuple[FakeSynthBackend, httpx.Client]]:
    with served_client(KEY, GENEROUS) as served:
        yield served


def waiting_job(client: httpx.Client) -> str:
    """A job that only status polls move (a stream tick does not): its streams stay open."""
    assert client.post("/_fake/scenario", json={"polls": 1000}).status_code == 200
    created = client.post("/api/rl/jobs", json=rl_payload())
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    assert isinstance(job_id, str)
    return job_id


def open_stream(client: httpx.Client, job_id: str) -> socket.socket:
    """A connection that asked for *job_id*'s event stream and will never read a byte of it."""
    sock = open_socket(client)
    sock.sendall(
        f"GET /api/rl/jobs/{job_id}/events/stream HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {KEY}\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    return sock


def read_head(sock: socket.socket) -> bytes:
    """The response's status line and headers (a stream's first events may come with them);
    returns without waiting for the end of a stream answered 200, which may never come."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def answers_a_new_stream(client: httpx.Client, job_id: str) -> bytes:
    """The head of the first stream answered 200, trying again while the server still counts
    streams that were just closed (it notices a hang-up on its own time)."""

    def answered() -> bytes:
        with open_stream(client, job_id) as sock:
            head = read_head(sock)
        assert head.startswith(b"HTTP/1.1 200"), head[:200]
        return head

    return eventually(answered, timeout=GENEROUS, interval=0.02, clock=RealClock())


def test_the_bound_is_well_below_the_worker_pool_as_the_docs_say() -> None:
    assert MAX_STREAMS == MAX_WORKERS // 4 == 16
    limits = Path(__file__).resolve().parents[2] / "docs" / "reference" / "served-fake.md"
    text = " ".join(limits.read_text(encoding="utf-8").split())
    assert f"at most {MAX_STREAMS} event streams are open at once (a quarter of the {MAX_WORKERS}" in text


def test_streams_past_the_bound_get_503_and_other_requests_are_still_answered(
    served: tuple[FakeSynthBackend, httpx.Client],
) -> None:
    _, client = served
    job_id = waiting_job(client)
    streams = [open_stream(client, job_id) for _ in range(MAX_STREAMS)]
    try:
        for sock in streams:
            head = read_head(sock)
            assert head.startswith(b"HTTP/1.1 200"), head[:200]
            assert b"text/event-stream" in head
        # More than the whole worker pool: before the bound, these held every worker.
        for _ in range(MAX_WORKERS):
            with open_stream(client, job_id) as extra:
                head = read_head(extra)  # only the head: a stream answered 200 would never end
            assert head.startswith(b"HTTP/1.1 503"), head[:200]
            assert b"\r\nretry-after: 1\r\n" in head.lower()
            assert b"connection: close" in head.lower()
        with client.stream("GET", f"/api/rl/jobs/{job_id}/events/stream") as one_more:
            one_more.read()
        assert one_more.status_code == 503
        assert one_more.headers["retry-after"] == "1"
        error = one_more.json()["detail"]["error"]
        assert error["code"] == "too_many_streams"
        assert f"{MAX_STREAMS} event streams are open" in error["message"]
        assert f"at most {MAX_STREAMS} event streams open at once; retry after 1s" in error["message"]
        # Every other request is answered while the streams stay open.
        for _ in range(2 * MAX_WORKERS):
            assert client.get(f"/api/rl/jobs/{job_id}").status_code == 200
        assert client.get(f"/api/rl/jobs/{job_id}/events", params={"since_seq": 0}).status_code == 200
        assert client.get("/_fake/jobs").status_code == 200
    finally:
        for sock in streams:
            sock.close()
    # Closed streams give their places back.
    head = answers_a_new_stream(client, job_id)
    assert head.startswith(b"HTTP/1.1 200"), head[:200]


def test_a_stream_past_the_bound_is_refused_before_its_request_is_handled(
    served: tuple[FakeSynthBackend, httpx.Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, client = served
    monkeypatch.setattr(asgi_module, "MAX_STREAMS", 1)
    job_id = waiting_job(client)
    with open_stream(client, job_id) as first:
        assert read_head(first).startswith(b"HTTP/1.1 200")
        logged = len(fake.requests)
        with open_stream(client, job_id) as second:
            head = read_head(second)
            assert head.startswith(b"HTTP/1.1 503"), head[:200]
            answer = head + read_answer(second)
        assert b"at most 1 event streams open at once" in answer
        # Refused like a body past the budget: never handled, so never logged as answered.
        assert len(fake.requests) == logged
        assert client.get(f"/api/rl/jobs/{job_id}").status_code == 200


def test_a_waiting_stream_holds_no_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    # Two workers and streams that never send a keep-alive: a stream that held a worker while
    # waiting for its job would hold it for good, and the status request would never be served.
    monkeypatch.setattr(asgi_module, "MAX_WORKERS", 2)
    monkeypatch.setattr(stream_module, "_HEARTBEAT", 10**9)
    with served_client(KEY, 30.0) as (_, client):
        job_id = waiting_job(client)
        streams = [open_stream(client, job_id) for _ in range(4)]
        try:
            for sock in streams:
                sock.settimeout(30.0)
                head = read_head(sock)
                assert head.startswith(b"HTTP/1.1 200"), head[:200]
            for _ in range(10):
                assert client.get(f"/api/rl/jobs/{job_id}").status_code == 200
        finally:
            for sock in streams:
                sock.close()


# -- Last-Event-ID ---------------------------------------------------------------------------------
def _ids(text: str) -> list[int]:
    return [int(line[4:]) for line in text.splitlines() if line.startswith("id: ")]


def _finished_job(fake: FakeSynthBackend, client: httpx.Client) -> tuple[str, list[int]]:
    job_id = submit(client, fake)
    poll_to_end(client, fake, job_id)
    whole = client.get(f"{API}/rl/jobs/{job_id}/events/stream", headers=auth(fake))
    ids = _ids(whole.text)
    assert ids == list(range(1, len(ids) + 1))
    assert len(ids) > 5
    return job_id, ids


def test_a_reconnecting_client_resumes_after_its_last_event_id(
    fake: FakeSynthBackend, client: httpx.Client
) -> None:
    job_id, ids = _finished_job(fake, client)
    url = f"{API}/rl/jobs/{job_id}/events/stream"
    resumed = client.get(url, headers={**auth(fake), "Last-Event-ID": "3"})
    assert resumed.status_code == 200
    assert _ids(resumed.text) == ids[3:]
    assert resumed.text == client.get(url, params={"since_seq": 3}, headers=auth(fake)).text
    # An empty Last-Event-ID is no id at all (the SSE reset): from the start.
    assert _ids(client.get(url, headers={**auth(fake), "Last-Event-ID": ""}).text) == ids
    # since_seq in the query says where, whatever the header.
    both = client.get(url, params={"since_seq": 5}, headers={**auth(fake), "Last-Event-ID": "2"})
    assert _ids(both.text) == ids[5:]


def test_a_served_stream_resumes_after_its_last_event_id(
    served: tuple[FakeSynthBackend, httpx.Client],
) -> None:
    fake, client = served
    job_id = client.post("/api/rl/jobs", json=rl_payload()).json()["id"]
    path = f"/api/rl/jobs/{job_id}/events/stream"
    seen: list[int] = []
    with client.stream("GET", path) as stream:  # hang up after the third event, as a dropped link
        for line in stream.iter_lines():
            if line.startswith("id: "):
                seen.append(int(line[4:]))
            if len(seen) == 3:
                break
    resumed = client.get(path, headers={"Last-Event-ID": str(seen[-1])})
    assert resumed.status_code == 200
    rest = _ids(resumed.text)
    assert rest[0] == seen[-1] + 1
    assert seen + rest == list(range(1, len(seen) + len(rest) + 1))
    assert f"event: {fake.job(job_id).event_types[-1]}" in resumed.text  # to the terminal event


@pytest.mark.parametrize(
    "value", ["abc", "-1", "1.5", "3x", "0x10", "10000000000001", "99999999999999999999"]
)
def test_a_malformed_last_event_id_gets_a_422_naming_the_header(
    fake: FakeSynthBackend, client: httpx.Client, value: str
) -> None:
    job_id = submit(client, fake)
    answer = client.get(
        f"{API}/rl/jobs/{job_id}/events/stream", headers={**auth(fake), "Last-Event-ID": value}
    )
    assert answer.status_code == 422
    detail = answer.json()["detail"][0]
    assert detail["loc"] == ["header", "last-event-id"]
    assert detail["msg"] == f"must be the id of an event (an integer in 0..{10**12}), got {value!r}"
    assert error_message(answer).startswith("['header', 'last-event-id']: must be the id of an event")


@pytest.mark.parametrize("root", ["/api", "/_fakes/api", "/_fake_backend/api"])
def test_an_api_root_that_merely_begins_like_the_admin_prefix_still_streams(root: str) -> None:
    base = f"http://fake.test{root}"
    with FakeSynthBackend(base_url=base, rollouts=False) as fake, httpx.Client() as client:
        headers = {"Authorization": f"Bearer {fake.api_key.value}"}
        job_id = client.post(f"{base}/rl/jobs", json=rl_payload(), headers=headers).json()["id"]
        with client.stream("GET", f"{base}/rl/jobs/{job_id}/events/stream", headers=headers) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
        assert client.get(f"{base}/rl/jobs/{job_id}", headers=headers).json()["id"] == job_id
