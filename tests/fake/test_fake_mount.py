"""Mounting on respx: the fake coexists with the test's own respx routes and with loopback traffic."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import respx
from respx.models import AllMockedAssertionError
from test_fake_support import API, auth, rl_payload, submit

from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.fake import FakeSynthBackend
from pytest_synth_rl.fake.model.inference import StubInference

OTHER = "https://api.openai.example/v1/models"


@pytest.fixture
def loopback_url() -> Iterator[str]:
    """A real server on 127.0.0.1 (the stub model answers GET /health)."""
    with StubInference().serve() as base:
        yield base.removesuffix("/v1") + "/health"


def test_users_respx_routes_keep_working_when_started_before_the_fake() -> None:
    with respx.mock(assert_all_called=False) as user:
        other = user.get(OTHER).respond(200, json={"data": ["m"]})
        with FakeSynthBackend(clock=VirtualClock()) as fake, httpx.Client() as client:
            assert client.get(OTHER).json() == {"data": ["m"]}
            assert submit(client, fake).startswith("job_")
        assert other.call_count == 1
        with httpx.Client() as client:
            assert client.get(OTHER).status_code == 200  # still mocked after the fake left
    fake.close()


def test_users_respx_routes_keep_working_when_started_after_the_fake() -> None:
    with FakeSynthBackend(clock=VirtualClock()) as fake:
        with respx.mock(assert_all_called=False) as user, httpx.Client() as client:
            other = user.post(OTHER).respond(201)
            assert client.post(OTHER).status_code == 201
            assert submit(client, fake).startswith("job_")
            assert other.called
        with httpx.Client() as client:  # the fake still answers after the user's mock ended
            assert client.get(f"{API}/rl/jobs", headers=auth(fake)).status_code == 200
    fake.close()


def test_works_with_respx_pytest_fixture(respx_mock: respx.MockRouter) -> None:
    route = respx_mock.get(OTHER).respond(200, text="ok")
    with FakeSynthBackend(clock=VirtualClock()) as fake, httpx.Client() as client:
        assert client.get(OTHER).text == "ok"
        assert client.get(f"{API}/rl/jobs", headers=auth(fake)).json()["object"] == "list"
    assert route.called
    fake.close()


def test_loopback_passes_through_even_under_a_strict_user_mock(loopback_url: str) -> None:
    with respx.mock(assert_all_mocked=True, assert_all_called=False) as user:
        user.get(OTHER).respond(204)
        with FakeSynthBackend(clock=VirtualClock()), httpx.Client() as client:
            response = client.get(loopback_url)
            assert response.json() == {"status": "ok", "service": "stub-inference"}


def test_a_users_explicit_loopback_route_wins(loopback_url: str) -> None:
    # respx asks routers in the order they started: the user's comes first here.
    with respx.mock(assert_all_called=False) as user, FakeSynthBackend(clock=VirtualClock()):
        user.get(loopback_url).respond(418)
        with httpx.Client() as client:
            assert client.get(loopback_url).status_code == 418


def test_unmocked_hosts_do_not_reach_the_network(loopback_url: str) -> None:
    with FakeSynthBackend(clock=VirtualClock()) as fake, httpx.Client() as client:
        with pytest.raises(AllMockedAssertionError, match="not mocked") as caught:
            client.get("https://example.org/anything")
        assert "FakeSynthBackend" in str(caught.value)
        assert client.get(loopback_url).status_code == 200  # loopback still fine
    fake.close()


def test_only_the_configured_origin_is_answered() -> None:
    with FakeSynthBackend("http://synth.test:8080/", clock=VirtualClock()) as fake, httpx.Client() as client:
        assert fake.api_base == "http://synth.test:8080/api"
        ok = client.get("http://synth.test:8080/api/rl/jobs", headers=auth(fake))
        assert ok.status_code == 200
        with pytest.raises(AllMockedAssertionError):
            client.get("http://synth.test:9090/api/rl/jobs", headers=auth(fake))
    fake.close()


def test_async_clients_reach_the_fake() -> None:
    import asyncio

    async def main(fake: FakeSynthBackend) -> tuple[int, int]:
        async with httpx.AsyncClient() as client:
            created = await client.post(f"{API}/rl/jobs", json=rl_payload(), headers=auth(fake))
            job_id = created.json()["id"]
            polled = await client.get(f"{API}/rl/jobs/{job_id}", headers=auth(fake))
            return created.status_code, polled.status_code

    with FakeSynthBackend(clock=VirtualClock()) as fake:
        assert asyncio.run(main(fake)) == (201, 200)
    fake.close()


def test_start_and_stop_are_idempotent_and_leave_respx_clean(loopback_url: str) -> None:
    # The fake stands in for a real server on loopback: mounted it answers, unmounted the server does.
    base = loopback_url.removesuffix("/health")
    fake = FakeSynthBackend(base, clock=VirtualClock())
    fake.start()
    fake.start()
    assert fake.mounted
    with httpx.Client() as client:
        assert client.get(f"{base}/api/rl/jobs", headers=auth(fake)).json()["object"] == "list"
    assert len(fake.requests) == 1  # answered once: one mount, however often started
    fake.stop()
    fake.stop()
    assert not fake.mounted
    with httpx.Client() as client:
        assert client.get(f"{base}/api/rl/jobs", headers=auth(fake)).status_code == 404  # the real server
    assert len(fake.requests) == 1
    with fake, httpx.Client() as client:  # mountable again
        assert client.get(f"{base}/api/rl/jobs", headers=auth(fake)).status_code == 200
    fake.close()


def test_two_fakes_on_different_hosts_coexist() -> None:
    with (
        FakeSynthBackend("https://a.synth.test", clock=VirtualClock()) as a,
        FakeSynthBackend("https://b.synth.test", clock=VirtualClock()) as b,
        httpx.Client() as client,
    ):
        client.post("https://a.synth.test/api/rl/jobs", json=rl_payload(), headers=auth(a))
        assert len(a.jobs) == 1
        assert b.jobs == []
        assert client.get("https://b.synth.test/api/rl/jobs", headers=auth(b)).json()["data"] == []
    a.close()
    b.close()
