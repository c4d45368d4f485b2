"""The rollout driver's HTTP client against a scripted raw-socket server: framing, reuse, bounds,
timeouts and failures, each with the words the job's error will carry."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator

import pytest
from hang_guard import finishes
from raw_server import GENEROUS, RawServer, read_request

from pytest_synth_rl.fake.http_post import PostFailure, PostPool

Script = Callable[[int, bytes], bytes | None]


def ok(body: bytes = b"{}", extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


class ScriptedServer(RawServer):
    """Answers each request with ``script(number, request)``: bytes to write (then the
    connection stays open unless the bytes are followed by ``CLOSE``), or None to hang up."""

    CLOSE = b"<close>"

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[bytes] = []
        self.release = threading.Event()
        self.received = threading.Event()
        self.hung_up = threading.Event()
        super().__init__()

    def serve(self, conn: socket.socket) -> None:
        try:
            self._exchange(conn)
        finally:
            conn.close()  # closed when hung_up says so
            self.hung_up.set()

    def _exchange(self, conn: socket.socket) -> None:
        buffer = b""
        while True:
            read = read_request(conn, buffer)
            if read is None:
                return
            head, body, buffer = read
            request = head + b"\r\n\r\n" + body
            self.requests.append(request)
            self.received.set()
            answer = self.script(len(self.requests), request)
            if answer is None:
                self.release.wait(GENEROUS)
                return
            conn.sendall(answer.removesuffix(self.CLOSE))
            if answer.endswith(self.CLOSE):
                return

    def stop(self) -> None:
        self.release.set()
        self.close()


@pytest.fixture
def serve() -> Iterator[Callable[[Script], ScriptedServer]]:
    servers: list[ScriptedServer] = []

    def start(script: Script) -> ScriptedServer:
        servers.append(ScriptedServer(script))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def pool() -> Iterator[PostPool]:
    posts = PostPool(timeout=GENEROUS, max_body=1000)
    yield posts
    posts.close()


def failure(call: Callable[[], object]) -> PostFailure:
    with pytest.raises(PostFailure) as caught:
        finishes(call)
    return caught.value


# -- the exchange ---------------------------------------------------------------------------------
def test_requests_carry_target_host_headers_and_body_and_reuse_one_connection(
    serve: Callable[[Script], ScriptedServer], pool: PostPool
) -> None:
    server = serve(lambda n, _: ok(b'{"n": %d}' % n))
    first = pool.post(
        server.url + "/rollout?x=1", b'{"a": 1}', {"X-API-Key": "k", "Content-Type": "application/json"}
    )
    second = pool.post(server.url + "/rollout?x=1", b"{}", {})
    assert (first.status_code, first.content, second.content) == (200, b'{"n": 1}', b'{"n": 2}')
    assert server.connections == 1
    port = server.url.rsplit(":", 1)[1]
    head, _, body = server.requests[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /rollout?x=1 HTTP/1.1"
    for line in (b"Host: 127.0.0.1:" + port.encode(), b"Content-Length: 8", b"X-API-Key: k"):
        assert line in lines
    assert body == b'{"a": 1}'


@pytest.mark.parametrize(
    ("answer", "content"),
    [
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nT: 1\r\n\r\n",
            b"abcde",
        ),
        (b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"after"), b"after"),
        (b"HTTP/1.1 204 No Content\r\n\r\n", b""),
        (b"HTTP/1.1 500 Oops\r\nContent-Length: 4\r\n\r\nboom", b"boom"),
    ],
    ids=["chunked", "interim-100", "204", "500"],
)
def test_each_framing_gives_the_whole_body_and_keeps_the_connection(
    serve: Callable[[Script], ScriptedServer], pool: PostPool, answer: bytes, content: bytes
) -> None:
    server = serve(lambda n, _: answer if n == 1 else ok())
    assert pool.post(server.url, b"", {}).content == content
    assert pool.post(server.url, b"", {}).content == b"{}"
    assert server.connections == 1


@pytest.mark.parametrize(
    "answer",
    [
        ok(b"x", b"Connection: close\r\n"),
        b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx",
        b"HTTP/1.1 200 OK\r\n\r\nx" + ScriptedServer.CLOSE,  # no length: the body ends with the connection
    ],
    ids=["connection-close", "http-1.0", "read-to-end"],
)
def test_an_answer_that_ends_the_connection_is_read_and_the_next_post_reconnects(
    serve: Callable[[Script], ScriptedServer], pool: PostPool, answer: bytes
) -> None:
    server = serve(lambda n, _: answer if n == 1 else ok())
    assert pool.post(server.url, b"", {}).content == b"x"
    assert pool.post(server.url, b"", {}).content == b"{}"
    assert server.connections == 2


def test_an_idle_connection_the_server_closed_is_not_used(
    serve: Callable[[Script], ScriptedServer], pool: PostPool
) -> None:
    server = serve(lambda n, _: ok() + ScriptedServer.CLOSE if n == 1 else ok(b"fresh"))
    pool.post(server.url, b"", {})
    assert server.hung_up.wait(GENEROUS)  # the server has hung up on the idle connection
    assert pool.post(server.url, b"", {}).content == b"fresh"
    assert server.connections == 2


def test_a_kept_alive_connection_closed_as_the_request_went_out_is_retried_once_afresh(
    serve: Callable[[Script], ScriptedServer], pool: PostPool
) -> None:
    # The race behind a task app that raises after its framework sent a 500: the server hangs up
    # on the kept-alive connection just as the next request goes out on it.
    answers = {1: ok(), 2: ScriptedServer.CLOSE, 3: ok(b"fresh")}
    server = serve(lambda n, _: answers.get(n, ScriptedServer.CLOSE))
    pool.post(server.url, b"", {})
    assert pool.post(server.url, b"{}", {}).content == b"fresh"
    assert server.connections == 2
    assert server.requests[1] == server.requests[2]  # the same request, sent again
    # A fresh connection that closes unanswered is a failure, never retried.
    caught = failure(lambda: pool.post(server.url, b"", {}))
    assert (caught.kind, len(server.requests)) == ("protocol", 5)
    assert "no complete response" in str(caught)


# -- bounds and failures --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("answer", "kind", "says"),
    [
        (ok(b"x" * 1001), "too_large", "the response body is 1001 bytes (Content-Length); at most 1000"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3e9\r\n" + b"x" * 1001 + b"\r\n0\r\n\r\n",
            "too_large",
            "the response body is more than 1000 bytes",
        ),
        (
            b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * 1001 + ScriptedServer.CLOSE,
            "too_large",
            "more than 1000 bytes",
        ),
        (
            b"HTTP/1.1 200 OK\r\nX: " + b"a" * 200_000 + b"\r\n\r\n",
            "too_large",
            "response head is too large",
        ),
        (b"HTTP/9 200 OK\r\n\r\n", "protocol", "no complete response"),
        (b"HTTP/1.1 200 OK\r\nbroken\r\n\r\n", "protocol", "no complete response"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", "protocol", "no complete response"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", "protocol", "no complete response"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "protocol", "no complete response"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n",
            "protocol",
            "no complete response",
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc" + ScriptedServer.CLOSE,
            "protocol",
            "no complete response",
        ),
        (b"HTTP/1.1 200 OK\r\nCont" + ScriptedServer.CLOSE, "protocol", "no complete response"),
        (b"" + ScriptedServer.CLOSE, "protocol", "no complete response"),
    ],
)
def test_a_bad_answer_is_a_failure_that_says_what_was_wrong(
    serve: Callable[[Script], ScriptedServer], pool: PostPool, answer: bytes, kind: str, says: str
) -> None:
    server = serve(lambda n, _: answer if n == 1 else ok())
    caught = failure(lambda: pool.post(server.url, b"", {}))
    assert caught.kind == kind
    assert says in str(caught)
    assert pool.post(server.url, b"", {}).content == b"{}"  # a broken connection is never reused


def test_a_server_that_never_answers_times_out_while_waiting(
    serve: Callable[[Script], ScriptedServer],
) -> None:
    server = serve(lambda n, _: None)
    posts = PostPool(timeout=0.2)
    caught = failure(lambda: posts.post(server.url, b"", {}))
    assert (caught.kind, str(caught)) == ("timeout", "timed out after 0.2s waiting for the response")
    posts.close()


def test_nobody_listening_is_a_connect_failure() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    posts = PostPool(timeout=GENEROUS)
    caught = failure(lambda: posts.post(url, b"", {}))
    assert caught.kind == "connect"
    assert "Connection refused" in str(caught)


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/x", "http://127.0.0.1:notaport/x", "http:///x"])
def test_a_url_that_is_not_http_is_a_connect_failure(url: str) -> None:
    caught = failure(lambda: PostPool(timeout=GENEROUS).post(url, b"", {}))
    assert caught.kind == "connect"
    assert repr(url) in str(caught)


@pytest.mark.parametrize(
    "headers", [{"X-Key": "a\r\nInjected: 1"}, {"Bad\nName": "v"}, {"X-Key": "snow\u2603"}]
)
def test_a_header_that_cannot_be_sent_fails_before_anything_is_sent(
    serve: Callable[[Script], ScriptedServer], pool: PostPool, headers: dict[str, str]
) -> None:
    server = serve(lambda n, _: ok())
    caught = failure(lambda: pool.post(server.url, b"", headers))
    assert caught.kind == "protocol"
    assert "the request could not be sent" in str(caught)
    assert server.requests == []


def test_closing_the_pool_ends_a_call_blocked_on_a_hung_server(
    serve: Callable[[Script], ScriptedServer],
) -> None:
    server = serve(lambda n, _: None)
    posts = PostPool(timeout=GENEROUS)
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            posts.post(server.url, b"", {})
        except PostFailure as exc:
            outcome.append(exc)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    assert server.received.wait(GENEROUS)
    posts.close()
    caller.join(GENEROUS)
    assert not caller.is_alive()
    assert isinstance(outcome[0], PostFailure)
    assert outcome[0].kind == "protocol"
    later = failure(lambda: posts.post(server.url, b"", {}))
    assert (later.kind, str(later)) == ("connect", "the connection pool is closed")
