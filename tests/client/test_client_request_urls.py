"""A call's request goes to exactly the URL httpx builds from the call's URL string and params,
though the parsed URL is remembered; and the backend URL's check is remembered the same way."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from pytest_synth_rl.client.jobconfig import resolve_backend_url
from pytest_synth_rl.client.retry import Call
from pytest_synth_rl.errors import SynthUsageError

URLS = [
    "https://api.usesynth.ai/api/rl/jobs",
    "https://api.usesynth.ai/api/rl/jobs/job_rl_000001/metrics",
    "https://api.usesynth.ai",
    "https://API.Example.com:443/api/rl/jobs/",
    "http://127.0.0.1:8000/api/rl/jobs/a%20b/events",
    "http://[::1]:9000/api/rl/jobs/x/./../y",
    "https://user:pw@example.com/api/rl/jobs/j ob/é/metrics",
    "https://bücher.example/api/rl/jobs/%zz",
    "https://example.com/api/rl/jobs/a?b=1",
    "https://example.com/api/rl/jobs/a#frag",
    "/api/rl/jobs/relative",
    "https://example.com:99999/api",
]
PARAMS: list[dict[str, Any] | None] = [
    None,
    {},
    {"after_step": -1, "limit": 200},
    {"since_seq": 0, "limit": 10_000},
    {"status": "running & more", "model": "Qwen/Qwen3-0.6B", "after": "#1+2=3 é"},
    {"flag": True, "limit": 1},
    {"ratio": 0.5},
    {"empty": ""},
]


def seen(request: httpx.Request) -> str:
    """The request's URL, its parts and the Host header derived from it."""
    url = request.url
    parts = (url.scheme, url.raw_host, url.port, url.raw_path, url.fragment, url.userinfo)
    return f"{url} {request.headers.get('host', '')} {parts!r}"


def httpx_url(client: httpx.Client, url: str, params: dict[str, Any] | None) -> str | type[Exception]:
    """What httpx itself makes of the string and params (or the error it raises)."""
    try:
        request = client.build_request("GET", url, params=dict(params) if params else None)
    except Exception as error:
        return type(error)
    return seen(request)


def call_url(client: httpx.Client, url: str, params: dict[str, Any] | None) -> str | type[Exception]:
    call: Call[Any] = Call(
        operation="status", method="GET", url=url, parse=lambda r: r, headers={}, params=params
    )
    try:
        request = call.build(client)
    except Exception as error:
        return type(error)
    return seen(request)


@pytest.fixture(scope="module")
def clients() -> Iterator[list[httpx.Client]]:
    """A plain client, one with a base URL and one with params of its own (made once: each
    client makes an SSL context)."""
    made = [
        httpx.Client(),
        httpx.Client(base_url="https://base.example/prefix"),
        httpx.Client(params={"limit": 5, "token": "t"}),
    ]
    yield made
    for client in made:
        client.close()


@pytest.mark.parametrize("params", PARAMS)
@pytest.mark.parametrize("url", URLS)
def test_a_call_is_sent_where_httpx_would_send_it(
    clients: list[httpx.Client], url: str, params: dict[str, Any] | None
) -> None:
    for client in clients:
        expected = httpx_url(client, url, params)
        assert call_url(client, url, params) == expected
        assert call_url(client, url, params) == expected  # remembered, still the same


def test_remembered_urls_are_told_apart_by_their_query(clients: list[httpx.Client]) -> None:
    url = "https://api.usesynth.ai/api/rl/jobs/job_1/metrics"
    client = clients[0]

    def sent(params: dict[str, Any] | None) -> str:
        return str(call_url(client, url, params)).split(" ")[0]

    for _ in range(2):
        for limit in (1, 10, 100):
            assert sent({"after_step": -1, "limit": limit}) == f"{url}?after_step=-1&limit={limit}"
        assert sent({"limit": "1"}) == f"{url}?limit=1"
        assert sent({"limit": True}) == f"{url}?limit=true"
        assert sent(None) == url


def test_the_backend_url_check_is_the_same_every_time() -> None:
    for _ in range(2):
        assert resolve_backend_url("https://api.example.com") == "https://api.example.com"
        for bad in (
            "api.example.com",
            "ftp://api.example.com",
            "https://",
            "http://[::1",
            "http://example.com:port",
        ):
            with pytest.raises(SynthUsageError, match="is not an absolute http"):
                resolve_backend_url(bad)
