"""Every route of the served fake, spelt with a trailing slash, a doubled slash or another case:
each gets the canonical path's answer and limits, or a 404; no spelling escapes a limit.

The fake is served on loopback and every request is real HTTP; waits are socket timeouts that
only a hang reaches.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from test_fake_support import open_socket, rl_payload, served_client

from pytest_synth_rl.fake import FakeSynthBackend
from pytest_synth_rl.fake.api import ROUTES
from pytest_synth_rl.fake.asgi import MAX_STREAMS
from pytest_synth_rl.fake.handler import ADMIN_ROUTES

KEY = "sk_test_spelt_paths_key_0123456"
GENEROUS = 60.0

#: What each route is sent (others get no body): enough to reach its handler.
BODIES: dict[str, Any] = {
    "POST /api/rl/jobs": rl_payload(),
    "POST /api/rl/verify_task_app": {"endpoint_base_url": "http://127.0.0.1:9"},
    "POST /api/v1/env-keys": {"name": "ENVIRONMENT_API_KEY", "ciphertext_b64": "bm90IGEga2V5"},
    "POST /_fake/scenario": {"steps": 2},
    "POST /_fake/faults": {"route": "timeline", "status": 503, "fail_next": 1},
    "POST /_fake/jobs/{job_id}/advance": {"to": "running"},
    "POST /_fake/jobs/{job_id}/fail": {"error": "stopped by the test"},
    "POST /_fake/clock/advance": {"seconds": 1},
}
CANONICAL = [(method, "/api" + path) for method, path, _, _ in ROUTES] + [
    (line.split()[0], line.split()[1]) for line in ADMIN_ROUTES
]


def spellings(path: str) -> dict[str, str]:
    """The other ways of writing *path* a careless or hostile client sends."""
    head, last = path.rsplit("/", 1)
    first = path.find("/", 1) % (len(path) + 1)  # the end of the first segment (the path's end if one)
    return {
        "trailing slash": path + "/",
        "doubled last slash": f"{head}//{last}",
        "doubled first slash": f"{path[:first]}/{path[first:]}",
        "other case": f"{head}/{last.upper()}",
    }


@pytest.fixture
def served() -> Iterator[tuple[FakeSynthBackend, httpx.Client]]:
    with served_client(KEY, GENEROUS) as served:
        yield served


def answer(client: httpx.Client, method: str, template: str, path: str) -> tuple[int, object]:
    """The status and error code of *method path* on a fresh fake holding one running job."""
    assert client.post("/_fake/reset").status_code == 200
    job_id = client.post("/api/rl/jobs", json=rl_payload()).json()["id"]
    if template.endswith("/events/stream"):  # a finished job's stream ends
        assert client.post(f"/_fake/jobs/{job_id}/succeed").status_code == 200
    body = BODIES.get(f"{method} {template}")
    # An absolute URL: httpx would drop a doubled slash when joining a relative one.
    url = f"{str(client.base_url).rstrip('/')}{path.replace('{job_id}', job_id)}"
    response = client.request(method, url, json=body)
    error = response.json().get("detail", {}) if "json" in response.headers.get("content-type", "") else {}
    return response.status_code, error.get("error", {}).get("code") if isinstance(error, dict) else None


@pytest.mark.parametrize(("method", "template"), CANONICAL, ids=[f"{m} {p}" for m, p in CANONICAL])
def test_every_spelling_of_a_route_answers_as_the_route_or_404(
    served: tuple[FakeSynthBackend, httpx.Client], method: str, template: str
) -> None:
    _, client = served
    canonical = answer(client, method, template, template)
    assert canonical[0] != 404, canonical
    for kind, spelt in spellings(template).items():
        got = answer(client, method, template, spelt)
        assert got == canonical or got[0] == 404, (kind, spelt, got, canonical)


def stream_head(client: httpx.Client, path: str) -> bytes:
    """The status line and headers of a GET of *path* that never reads a stream's events."""
    sock = open_socket(client)
    sock.sendall(
        f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
        "Accept: text/event-stream\r\n\r\n".encode()
    )
    data = b""
    with sock:
        while b"\r\n\r\n" not in data and (chunk := sock.recv(4096)):
            data += chunk
    return data


def test_no_spelling_of_the_event_stream_opens_one_past_the_bound(
    served: tuple[FakeSynthBackend, httpx.Client],
) -> None:
    _, client = served
    assert client.post("/_fake/scenario", json={"polls": 1000}).status_code == 200  # streams stay open
    job_id = client.post("/api/rl/jobs", json=rl_payload()).json()["id"]
    path = f"/api/rl/jobs/{job_id}/events/stream"
    streams: list[socket.socket] = []
    try:
        for _ in range(MAX_STREAMS):
            sock = open_socket(client)
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\r\n".encode())
            streams.append(sock)
            assert sock.recv(12) == b"HTTP/1.1 200"
        for kind, spelt in spellings(path).items():
            head = stream_head(client, spelt)
            assert head.startswith((b"HTTP/1.1 503", b"HTTP/1.1 404")), (kind, head[:200])
            if head.startswith(b"HTTP/1.1 503"):
                assert b"too_many_streams" in head or b"retry-after: 1" in head.lower(), (kind, head[:300])
    finally:
        for sock in streams:
            sock.close()
