"""The plugin's own apps as the stub model is served (uvicorn, httptools, a header deadline),
spoken to over raw sockets."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator

import httpx
import pytest

from pytest_synth_rl.taskapp.asgi import Receive, Scope, Send, read_body, serve_lifespan
from pytest_synth_rl.taskapp.serving import ServerThread

#: Seconds; only a hang gets near it.
GENEROUS = 60.0


class Echo:
    """Answers with what it got; ``/boom`` raises, ``/stream`` answers in unsized parts,
    ``/half`` starts an answer and returns, ``/wait`` waits for the client to go away, ``/later``
    waits a moment before answering."""

    def __init__(self) -> None:
        self.disconnected = threading.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send)
            return
        path = scope["path"]
        if path == "/boom":
            raise RuntimeError("the app broke")
        body = await read_body(receive)
        if path == "/wait":
            message = await receive()
            if message["type"] == "http.disconnect":
                self.disconnected.set()
            return
        start = {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
        if path == "/later":  # really waits before answering: not answered eagerly
            await asyncio.sleep(0)
            await asyncio.sleep(0.001)
        if path == "/half":
            await send(start)
            await send({"type": "http.response.body", "body": b"{", "more_body": True})
            return
        payload = json.dumps(
            {
                "method": scope["method"],
                "path": path,
                "query": scope["query_string"].decode(),
                "body": body.decode(),
                "http_version": scope["http_version"],
                "headers": {k.decode(): v.decode() for k, v in scope["headers"]},
            }
        ).encode()
        await send(start)
        if path == "/stream":
            for part in (payload[:5], payload[5:]):
                await send({"type": "http.response.body", "body": part, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        await send({"type": "http.response.body", "body": payload})


@pytest.fixture
def echo() -> Echo:
    return Echo()


@pytest.fixture
def server(echo: Echo) -> Iterator[ServerThread]:
    thread = ServerThread(
        echo, lifespan="on", description="echo app", protocol="httptools", read_timeout=GENEROUS
    )
    thread.start(GENEROUS)
    yield thread
    thread.stop()


def connect(server: ServerThread) -> socket.socket:
    assert server.port is not None
    return socket.create_connection(("127.0.0.1", server.port), timeout=GENEROUS)


def read_response(sock: socket.socket, buffered: bytearray) -> tuple[int, dict[str, str], bytes]:
    """One response (Content-Length or chunked) from *sock*; *buffered* keeps what follows it."""

    def fill() -> None:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before a whole response")
        buffered.extend(chunk)

    while b"\r\n\r\n" not in buffered:
        fill()
    head, _, rest = bytes(buffered).partition(b"\r\n\r\n")
    buffered[:] = rest
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    if headers.get("transfer-encoding") == "chunked":
        body = b""
        while True:
            while b"\r\n" not in buffered:
                fill()
            size_line, _, rest = bytes(buffered).partition(b"\r\n")
            size = int(size_line, 16)
            while len(rest) < size + 2:
                fill()
                rest = bytes(buffered).partition(b"\r\n")[2]
            body += rest[:size]
            buffered[:] = rest[size + 2 :]
            if size == 0:
                break
    else:
        length = int(headers.get("content-length", "0"))
        while len(buffered) < length:
            fill()
        body = bytes(buffered[:length])
        buffered[:] = buffered[length:]
    return int(status_line.split(" ")[1]), headers, body


def closed(sock: socket.socket) -> bool:
    """True once the server has closed *sock* (reads to its end)."""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return True


def post(path: str, body: bytes, *extra: bytes) -> bytes:
    head = [b"POST " + path.encode() + b" HTTP/1.1", b"Host: x", b"Content-Length: %d" % len(body), *extra]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


# -- what a client of a JSON API does ----------------------------------------------------------
def test_httpx_clients_sync_and_async_get_answers_on_kept_alive_connections(server: ServerThread) -> None:
    with httpx.Client(base_url=server.url, timeout=GENEROUS) as client:
        answers = [client.post("/v1/chat/completions?cid=a", json={"n": n}).json() for n in range(3)]
    assert [json.loads(a["body"]) for a in answers] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert answers[0]["query"] == "cid=a"
    assert answers[0]["headers"]["content-type"] == "application/json"

    async def main() -> list[int]:
        async with httpx.AsyncClient(base_url=server.url, timeout=GENEROUS) as client:
            replies = await asyncio.gather(*(client.post("/x", content=b"y") for _ in range(4)))
        return [r.status_code for r in replies]

    assert asyncio.run(main()) == [200, 200, 200, 200]


def test_two_requests_on_one_connection_and_two_pipelined_in_one_write(server: ServerThread) -> None:
    buffered = bytearray()
    with connect(server) as sock:
        sock.sendall(post("/one", b"1"))
        assert json.loads(read_response(sock, buffered)[2])["body"] == "1"
        sock.sendall(post("/two", b"2") + post("/three", b"3"))
        second = json.loads(read_response(sock, buffered)[2])
        third = json.loads(read_response(sock, buffered)[2])
    assert (second["path"], third["path"]) == ("/two", "/three")


def test_an_app_that_waits_before_answering_keeps_pipelined_answers_in_order(server: ServerThread) -> None:
    with connect(server) as sock:
        sock.sendall(post("/later", b"first") + post("/now", b"second") + post("/later", b"third"))
        buffered = bytearray()
        answers = [read_response(sock, buffered) for _ in range(3)]
    assert [(status, json.loads(body)["path"], json.loads(body)["body"]) for status, _, body in answers] == [
        (200, "/later", "first"),
        (200, "/now", "second"),
        (200, "/later", "third"),
    ]


def test_a_chunked_request_body_is_put_together_and_its_trailers_ignored(server: ServerThread) -> None:
    request = (
        b"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"
    )
    with connect(server) as sock:
        sock.sendall(request[:40])
        sock.sendall(request[40:])
        status, _, body = read_response(sock, bytearray())
    assert status == 200
    assert json.loads(body)["body"] == "hello world"


def test_expect_100_continue_is_answered_before_the_body_is_sent(server: ServerThread) -> None:
    buffered = bytearray()
    with connect(server) as sock:
        sock.sendall(b"POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n")
        status, _, _ = read_response(sock, buffered)
        assert status == 100
        sock.sendall(b"ok")
        status, _, body = read_response(sock, buffered)
    assert status == 200
    assert json.loads(body)["body"] == "ok"


def test_an_unsized_answer_is_sent_chunked(server: ServerThread) -> None:
    with httpx.Client(base_url=server.url, timeout=GENEROUS) as client:
        response = client.post("/stream", content=b"s")
    assert response.headers["transfer-encoding"] == "chunked"
    assert response.json()["body"] == "s"


def test_head_gets_the_headers_and_no_body(server: ServerThread) -> None:
    with connect(server) as sock:
        sock.sendall(b"HEAD /h HTTP/1.1\r\nHost: x\r\n\r\n" + post("/after", b""))
        buffered = bytearray()
        assert sock.recv(65536, socket.MSG_PEEK)
        status, headers, body = read_response(sock, buffered)
        assert (status, body, headers.get("transfer-encoding")) == (200, b"", None)
        assert json.loads(read_response(sock, buffered)[2])["path"] == "/after"


@pytest.mark.parametrize(
    ("request_bytes", "closes"),
    [
        (post("/c", b"", b"Connection: close"), True),
        (b"POST /c HTTP/1.0\r\nHost: x\r\nContent-Length: 0\r\n\r\n", True),
        (post("/c", b""), False),
    ],
    ids=["1.1-close", "1.0", "1.1"],
)
def test_the_connection_header_and_version_decide_whether_it_stays_open(
    server: ServerThread, request_bytes: bytes, closes: bool
) -> None:
    with connect(server) as sock:
        sock.sendall(request_bytes)
        status, headers, _ = read_response(sock, bytearray())
        assert status == 200
        assert (headers.get("connection") == "close") is closes
        if closes:
            assert closed(sock)
        else:
            sock.sendall(request_bytes)
            assert read_response(sock, bytearray())[0] == 200


# -- bad input ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GARBAGE\r\n\r\n",
        b"POST /x HTTP/1.1\r\nHost x\r\n\r\n",
        b"POST /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ],
)
def test_a_malformed_request_gets_400_and_a_closed_connection(
    server: ServerThread, request_bytes: bytes
) -> None:
    with connect(server) as sock:
        sock.sendall(request_bytes)
        got, headers, body = read_response(sock, bytearray())
        assert (got, headers["connection"]) == (400, "close")
        assert b"Invalid HTTP request" in body
        assert closed(sock)
    with httpx.Client(base_url=server.url, timeout=GENEROUS) as client:
        assert client.post("/still-up").status_code == 200


def test_an_app_that_raises_gets_a_500_and_the_error_is_in_the_log(server: ServerThread) -> None:
    with connect(server) as sock:
        sock.sendall(post("/boom", b""))
        status, headers, body = read_response(sock, bytearray())
        assert (status, body, headers["connection"]) == (500, b"Internal Server Error", "close")
        assert closed(sock)
    assert any("the app broke" in line for line in server.logs)


def test_an_answer_the_app_leaves_unfinished_closes_the_connection(server: ServerThread) -> None:
    with connect(server) as sock:
        sock.sendall(post("/half", b""))
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 200 OK\r\n")
    assert data.endswith(b"1\r\n{\r\n")  # the part sent, then the connection closed


def test_the_app_hears_when_the_client_goes_away(server: ServerThread, echo: Echo) -> None:
    with connect(server) as sock:
        sock.sendall(post("/wait", b""))
    assert echo.disconnected.wait(GENEROUS)


@pytest.mark.parametrize("partial", [b"POST /x HT", b"POST /x HTTP/1.1\r\nContent-Length: 10\r\n"])
def test_headers_that_do_not_arrive_in_time_get_408_and_an_idle_connection_is_closed(
    echo: Echo, partial: bytes
) -> None:
    thread = ServerThread(echo, lifespan="on", description="echo app", protocol="httptools", read_timeout=0.2)
    thread.start(GENEROUS)
    try:
        with connect(thread) as sock:
            sock.sendall(partial)
            status, headers, body = read_response(sock, bytearray())
            assert (status, headers["connection"]) == (408, "close")
            assert body == b"the request headers did not arrive within 0.2s"
            assert closed(sock)
        with connect(thread) as sock:
            assert closed(sock)
    finally:
        thread.stop()


def test_stopping_closes_idle_kept_alive_connections(echo: Echo) -> None:
    thread = ServerThread(echo, lifespan="on", description="echo app", protocol="httptools")
    thread.start(GENEROUS)
    with connect(thread) as sock:
        sock.sendall(post("/x", b""))
        assert read_response(sock, bytearray())[0] == 200
        thread.stop()
        assert closed(sock)
    assert thread.join(GENEROUS)


def test_the_scope_carries_method_version_and_decoded_path(server: ServerThread) -> None:
    with connect(server) as sock:
        sock.sendall(b"PUT /a%20b?q=1 HTTP/1.0\r\nContent-Length: 0\r\n\r\n")
        answer = json.loads(read_response(sock, bytearray())[2])
    assert (answer["method"], answer["http_version"]) == ("PUT", "1.0")
    assert (answer["path"], answer["query"]) == ("/a b", "q=1")
