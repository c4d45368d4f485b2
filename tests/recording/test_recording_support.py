"""A tiny stateful backend served for real on loopback, for the record/replay tests.

Other ``test_recording_*`` modules import :class:`LoopbackServer` and :func:`make_backend_app`
from here; the tests at the bottom check the app itself, so a replay test can trust that the
sequence it recorded (queued -> running -> succeeded) came from a real server.
"""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any
from urllib.parse import parse_qsl

import httpx

from pytest_synth_rl.taskapp.asgi import Receive, Scope, Send
from pytest_synth_rl.taskapp.serving import ServerThread

ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Statuses a job reports on successive polls; the last one repeats.
LIFECYCLE = ("queued", "running", "running", "succeeded")


@dataclass
class BackendState:
    """What the app has seen: lets tests prove a replay sent nothing to the server."""

    jobs: dict[str, int] = field(default_factory=dict)  # job id -> polls so far
    requests: list[tuple[str, str]] = field(default_factory=list)  # (method, path)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def hits(self) -> int:
        with self.lock:
            return len(self.requests)


def _status_payload(job_id: str, poll: int) -> dict[str, Any]:
    status = LIFECYCLE[min(poll, len(LIFECYCLE) - 1)]
    payload: dict[str, Any] = {
        "job_id": job_id,
        "status": status,
        "progress": {"completed": min(poll, 3), "total": 3},
        "metrics": {"reward": round(0.25 * min(poll, 3), 2)},
    }
    if status == "succeeded":
        payload["final_reward"] = 0.75
    return payload


def make_backend_app(state: BackendState | None = None) -> tuple[ASGIApp, BackendState]:
    """An ASGI app with just enough of the RL jobs API, plus echo endpoints for redaction tests."""
    state = state or BackendState()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        method, path = scope["method"], scope["path"]
        with state.lock:
            state.requests.append((method, path))
        query = scope.get("query_string", b"").decode()
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        extra_headers: list[tuple[bytes, bytes]] = []
        content_type = b"application/json"
        status = 200
        result: Any
        if method == "POST" and path == "/api/rl/jobs":
            with state.lock:
                job_id = f"job-{len(state.jobs) + 1}"
                state.jobs[job_id] = 0
            status, result = 201, {"job_id": job_id, "status": "queued"}
        elif method == "GET" and path.startswith("/api/rl/jobs/"):
            job_id = path.rsplit("/", 1)[-1]
            with state.lock:
                poll = state.jobs.get(job_id)
                if poll is not None:
                    state.jobs[job_id] = poll + 1
            if poll is None:
                status, result = 404, {"detail": f"job {job_id} not found"}
            else:
                result = _status_payload(job_id, poll)
        elif path == "/echo":
            # Reflects the request (headers, query, body) into the response, and sets a cookie
            # and a token header from the request: secrets travel both ways.
            parsed = json.loads(body) if body else None
            result = {"headers": headers, "query": dict(parse_qsl(query)), "body": parsed}
            cookie = headers.get("x-api-key", "none")
            extra_headers += [(b"set-cookie", f"session={cookie}; Path=/".encode())]
            extra_headers += [(b"x-session-token", cookie.encode())]
        elif path == "/text":
            content_type = b"text/plain; charset=utf-8"
            result = f"plain text, query was: {query}"
        elif path == "/gzip":
            data = gzip.compress(json.dumps({"compressed": True, "n": 3}).encode())
            await _respond(send, 200, b"application/json", data, [(b"content-encoding", b"gzip")])
            return
        elif path == "/binary":
            await _respond(send, 200, b"application/octet-stream", bytes(range(256)) + body, [])
            return
        else:
            status, result = 404, {"detail": f"no route {method} {path}"}
        data = result.encode() if isinstance(result, str) else json.dumps(result).encode()
        await _respond(send, status, content_type, data, extra_headers)

    return app, state


async def _respond(
    send: Send, status: int, content_type: bytes, data: bytes, extra: list[tuple[bytes, bytes]]
) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(data)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


class LoopbackServer:
    """Serve an ASGI app on 127.0.0.1 with an OS-assigned port (the package's own server)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.url = ""
        self._server = ServerThread(
            app, lifespan="off", log_level="error", description="recording test server"
        )

    def __enter__(self) -> LoopbackServer:
        self._server.start(timeout=15)
        self.url = self._server.url
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.stop()


def poll_job(client: httpx.Client, base: str, *, max_polls: int = 10) -> list[str]:
    """Submit a job and poll it to a terminal status, as a job client would (without sleeping)."""
    created = client.post(f"{base}/api/rl/jobs", json={"job_type": "rl", "data": {"model": "m"}})
    created.raise_for_status()
    job_id = created.json()["job_id"]
    seen = []
    for _ in range(max_polls):
        status = client.get(f"{base}/api/rl/jobs/{job_id}").json()["status"]
        seen.append(status)
        if status in ("succeeded", "failed", "cancelled"):
            break
    return seen


# -- the app itself ----------------------------------------------------------------------------
def test_backend_app_goes_queued_running_succeeded_over_real_loopback() -> None:
    app, state = make_backend_app()
    with LoopbackServer(app) as server, httpx.Client() as client:
        assert server.url.startswith("http://127.0.0.1:")
        assert poll_job(client, server.url) == ["queued", "running", "running", "succeeded"]
        # a second job starts its own lifecycle
        assert poll_job(client, server.url) == ["queued", "running", "running", "succeeded"]
    assert state.hits == 10
    assert state.jobs == {"job-1": 4, "job-2": 4}


def test_backend_app_echo_and_encodings() -> None:
    app, _ = make_backend_app()
    with LoopbackServer(app) as server, httpx.Client() as client:
        echoed = client.post(f"{server.url}/echo?a=1", json={"x": 1}, headers={"X-API-Key": "k1"})
        assert echoed.json()["body"] == {"x": 1}
        assert echoed.json()["query"] == {"a": "1"}
        assert echoed.headers["x-session-token"] == "k1"
        assert client.get(f"{server.url}/gzip").json() == {"compressed": True, "n": 3}
        assert client.get(f"{server.url}/binary").content[:3] == b"\x00\x01\x02"
        assert client.get(f"{server.url}/api/rl/jobs/nope").status_code == 404
