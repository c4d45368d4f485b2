"""HandlerClient answers as a MockTransport client would, and falls back to one where it must."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from pytest_synth_rl.fake.handler import HandlerClient


def echo(request: httpx.Request) -> httpx.Response:
    return httpx.Response(
        201,
        json={"method": request.method, "url": str(request.url), "body": request.content.decode()},
        headers={"x-seen-auth": request.headers.get("authorization", "")},
    )


def test_answers_match_a_mock_transport_client() -> None:
    with (
        HandlerClient(echo, base_url="https://api.example.com") as direct,
        httpx.Client(transport=httpx.MockTransport(echo), base_url="https://api.example.com") as reference,
    ):
        for client in (direct, reference):
            response = client.post("/api/rl/jobs", json={"a": 1}, headers={"Authorization": "Bearer k"})
            assert response.status_code == 201
            assert response.json() == {
                "method": "POST",
                "url": "https://api.example.com/api/rl/jobs",
                "body": '{"a":1}',
            }
            assert response.headers["x-seen-auth"] == "Bearer k"
            assert response.request.url == "https://api.example.com/api/rl/jobs"
            assert response.is_closed


def test_a_streamed_answer_is_left_unread() -> None:
    with HandlerClient(lambda request: httpx.Response(200, stream=httpx.ByteStream(b"abc"))) as client:
        request = client.build_request("GET", "https://api.example.com/x")
        response = client.send(request, stream=True)
        assert not response.is_closed
        assert response.read() == b"abc"


def test_cookies_an_answer_sets_are_kept_and_sent_after() -> None:
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("cookie"))
        return httpx.Response(200, headers={"set-cookie": "lb=node-2; Path=/"})

    with HandlerClient(handler) as client:
        client.get("https://api.example.com/a")
        client.get("https://api.example.com/b")
    assert client.cookies["lb"] == "node-2"
    assert seen == [None, "lb=node-2"]


def test_event_hooks_and_redirects_still_run() -> None:
    hooked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/old":
            return httpx.Response(307, headers={"location": "https://api.example.com/new"})
        return httpx.Response(200, text=request.url.path)

    with HandlerClient(
        handler, event_hooks={"request": [lambda request: hooked.append(request.url.path)]}
    ) as client:
        assert client.get("https://api.example.com/old", follow_redirects=True).text == "/new"
    assert hooked == ["/old", "/new"]
    with HandlerClient(handler) as client:
        assert client.get("https://api.example.com/old").status_code == 307
        assert client.get("https://api.example.com/old", follow_redirects=True).text == "/new"


def test_a_transport_error_from_the_handler_reaches_the_caller_with_its_request() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")  # no request attached, as a handler may raise it

    with HandlerClient(handler) as client, pytest.raises(httpx.ConnectError, match="refused") as raised:
        client.get("https://api.example.com/x")
    assert raised.value.request.url == "https://api.example.com/x"


def test_a_closed_client_refuses_to_send() -> None:
    client = HandlerClient(echo)
    client.close()
    with pytest.raises(RuntimeError, match="client has been closed"):
        client.get("https://api.example.com/x")


def test_only_the_plain_case_skips_the_steps_around_the_transport(caplog: pytest.LogCaptureFixture) -> None:
    # httpx logs each request from inside those steps: the direct path has none to log.
    caplog.set_level("INFO", logger="httpx")
    with HandlerClient(echo) as client:
        client.get("https://api.example.com/plain")
        client.get("https://api.example.com/authed", auth=("user", "pass"))
    logged = [record.getMessage() for record in caplog.records if record.name == "httpx"]
    assert len(logged) == 1
    assert "https://api.example.com/authed" in logged[0]


class Parts(httpx.SyncByteStream):
    """A body that arrives in parts (or breaks after the first), and says when it is closed."""

    def __init__(self, *, broken: bool = False) -> None:
        self.broken = broken
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        yield b"ab"
        if self.broken:
            raise httpx.ReadError("the body broke off")
        yield b"c"

    def close(self) -> None:
        self.closed = True


def test_an_unread_answer_is_read_for_the_caller() -> None:
    body = Parts()
    with HandlerClient(lambda request: httpx.Response(200, stream=body)) as client:
        response = client.get("https://api.example.com/x")
    assert response.content == b"abc"
    assert body.closed


def test_an_answer_that_breaks_while_read_is_closed() -> None:
    body = Parts(broken=True)
    with (
        HandlerClient(lambda request: httpx.Response(200, stream=body)) as client,
        pytest.raises(httpx.ReadError, match="broke off"),
    ):
        client.get("https://api.example.com/x")
    assert body.closed
