"""Record a real loopback conversation, replay it offline through respx."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest
import respx
from test_recording_support import LoopbackServer, make_backend_app, poll_job

from pytest_synth_rl.errors import SynthError
from pytest_synth_rl.recording import (
    AsyncRecordingTransport,
    Cassette,
    CassetteMismatchError,
    RecordingTransport,
    Replayer,
    use_cassette,
)

TEST_ID = "tests/test_rl.py::test_train[qwen]"


def record_job(path: Path, *, extra: Sequence[str] = ()) -> str:
    """Record submit + polls (+ extra GETs) against a real server; return the server URL (now dead)."""
    app, _ = make_backend_app()
    with LoopbackServer(app) as server:
        transport = RecordingTransport(cassette=Cassette(path, test_id=TEST_ID))
        with httpx.Client(transport=transport) as client:
            assert poll_job(client, server.url) == ["queued", "running", "running", "succeeded"]
            for suffix in extra:
                client.get(f"{server.url}{suffix}")
        transport.save()
        return server.url


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One real recording shared by the module's tests (replay only reads the file)."""
    path = tmp_path_factory.mktemp("replay") / "cassette.json"
    url = record_job(path, extra=["/gzip", "/binary"])
    return path, url


def test_replay_reproduces_the_recorded_job_offline(recorded: tuple[Path, str]) -> None:
    path, url = recorded
    # The server is stopped: any request that escaped the replay would fail to connect.
    with use_cassette(path, mode="none") as replayer, httpx.Client() as client:
        assert poll_job(client, url) == ["queued", "running", "running", "succeeded"]
        assert client.get(f"{url}/gzip").json() == {"compressed": True, "n": 3}
        assert client.get(f"{url}/binary").content == bytes(range(256))
    assert replayer.replayed == 7
    assert replayer.recorded == 0
    assert replayer.unplayed() == []


def test_polls_replay_in_recorded_order_then_the_last_response_repeats(recorded: tuple[Path, str]) -> None:
    path, url = recorded
    with use_cassette(path, mode="none"), httpx.Client() as client:
        job_id = client.post(f"{url}/api/rl/jobs", json={"job_type": "rl", "data": {"model": "m"}}).json()[
            "job_id"
        ]
        statuses = [client.get(f"{url}/api/rl/jobs/{job_id}").json()["status"] for _ in range(7)]
        # The submit also repeats its last (only) response when asked again.
        again = client.post(f"{url}/api/rl/jobs", json={"job_type": "rl", "data": {"model": "m"}})
    assert statuses == ["queued", "running", "running", "succeeded", "succeeded", "succeeded", "succeeded"]
    assert again.status_code == 201
    assert again.json() == {"job_id": "job-1", "status": "queued"}


def test_replay_matches_on_path_not_host(recorded: tuple[Path, str]) -> None:
    path, _ = recorded
    # Recorded against a loopback port, replayed against the hosted backend's URL.
    with use_cassette(path, mode="none"), httpx.Client() as client:
        assert poll_job(client, "https://api.usesynth.ai") == ["queued", "running", "running", "succeeded"]


def test_unmatched_request_error_lists_the_nearest_recorded_requests(recorded: tuple[Path, str]) -> None:
    path, url = recorded
    with (
        use_cassette(path, mode="none", test_id=TEST_ID),
        httpx.Client() as client,
        pytest.raises(CassetteMismatchError) as caught,
    ):
        client.post(f"{url}/api/rl/jobs", json={"job_type": "rl", "data": {"model": "other"}})
    text = str(caught.value)
    assert f"no recorded interaction matches POST {url}/api/rl/jobs" in text
    assert "record mode 'none'" in text
    assert str(path) in text
    assert "nearest recorded requests:" in text
    assert "uses method + path + query + body (for POST/PUT/PATCH); host, headers are ignored" in text
    first = text.split("nearest recorded requests:")[1].splitlines()[1]
    assert first.strip() == '1. POST /api/rl/jobs  [body $.data.model: recorded "m", now "other"]'
    # Replay only, as every cassette offline: recording needs a backend named on the command line.
    assert "offline, a cassette only replays (--synth-record applies online)" in text
    assert f'pytest --synth-backend=URL --synth-record=new "{TEST_ID}"' in text
    assert f'pytest --synth-backend=URL --synth-record=rewrite "{TEST_ID}"' in text
    assert isinstance(caught.value, SynthError)


def test_unknown_path_error_names_the_path_difference(recorded: tuple[Path, str]) -> None:
    path, url = recorded
    with (
        use_cassette(path, mode="none"),
        httpx.Client() as client,
        pytest.raises(CassetteMismatchError) as caught,
    ):
        client.get(f"{url}/api/rl/jobs/job-9")
    assert "1. GET /api/rl/jobs/job-1  [path: recorded /api/rl/jobs/job-1]" in str(caught.value)


def test_replay_needs_no_api_key_and_ignores_idempotency_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "c.json"
    monkeypatch.setenv("SYNTH_API_KEY", "sk_live_recording_key_0123")
    app, _ = make_backend_app()
    with LoopbackServer(app) as server:
        headers = {"Authorization": "Bearer sk_live_recording_key_0123", "Idempotency-Key": "idem-aaaa-1111"}
        transport = RecordingTransport(cassette=Cassette(path))
        with httpx.Client(transport=transport) as client:
            client.post(f"{server.url}/api/rl/jobs", json={"job_type": "rl"}, headers=headers)
        transport.save()
    monkeypatch.delenv("SYNTH_API_KEY")
    with use_cassette(path, mode="none"), httpx.Client() as client:
        replayed = client.post(
            f"{server.url}/api/rl/jobs",
            json={"job_type": "rl"},
            headers={"Idempotency-Key": "idem-bbbb-2222"},
        )
    assert replayed.status_code == 201
    assert replayed.json()["job_id"] == "job-1"


def test_loopback_urls_in_bodies_match_whatever_their_port(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    app, _ = make_backend_app()
    with LoopbackServer(app) as server:
        transport = RecordingTransport(cassette=Cassette(path))
        with httpx.Client(transport=transport) as client:
            payload = {"job_type": "rl", "data": {"endpoint_base_url": "http://127.0.0.1:8114"}}
            client.post(f"{server.url}/api/rl/jobs", json=payload)
        transport.save()
    with use_cassette(path, mode="none"), httpx.Client() as client:
        moved = {"job_type": "rl", "data": {"endpoint_base_url": "http://localhost:50321"}}
        assert client.post(f"{server.url}/api/rl/jobs", json=moved).status_code == 201
        elsewhere = {"job_type": "rl", "data": {"endpoint_base_url": "https://tunnel.example.com"}}
        with pytest.raises(CassetteMismatchError, match=r"data\.endpoint_base_url"):
            client.post(f"{server.url}/api/rl/jobs", json=elsewhere)


def test_loopback_task_app_passes_through_while_backend_is_replayed(recorded: tuple[Path, str]) -> None:
    path, url = recorded
    task_app, task_state = make_backend_app()
    with LoopbackServer(task_app) as live, use_cassette(path, mode="none"), httpx.Client() as client:
        assert poll_job(client, url)[-1] == "succeeded"
        answer = client.get(f"{live.url}/text?seed=3")
    assert answer.text == "plain text, query was: seed=3"
    assert task_state.requests == [("GET", "/text")]


def test_other_hosts_fail_clearly_and_never_reach_the_network(recorded: tuple[Path, str]) -> None:
    path, url = recorded
    with (
        use_cassette(path, mode="none"),
        httpx.Client() as client,
        pytest.raises(CassetteMismatchError) as caught,
    ):
        client.get("https://example.com/api/rl/jobs/job-1?x=1")
    # Path matches, so host-agnostic matching would serve it; it is the query that differs, and
    # the message says the host was never recorded.
    assert "nothing was recorded from https://example.com:443" in str(caught.value)
    assert f"recorded hosts: {url}" in str(caught.value)

    with (
        use_cassette(path, mode="none", hosts=[url]),
        httpx.Client() as client,
        pytest.raises(CassetteMismatchError) as blocked,
    ):
        client.get("https://example.com/health")
    assert "blocked GET https://example.com/health" in str(blocked.value)
    assert "outside the cassette's scope" in str(blocked.value)
    assert "only loopback requests may reach the network" in str(blocked.value)


def test_async_client_replays_in_order(recorded: tuple[Path, str]) -> None:
    path, url = recorded

    async def run() -> list[str]:
        async with httpx.AsyncClient() as client:
            job = await client.post(f"{url}/api/rl/jobs", json={"job_type": "rl", "data": {"model": "m"}})
            job_id = job.json()["job_id"]
            return [(await client.get(f"{url}/api/rl/jobs/{job_id}")).json()["status"] for _ in range(5)]

    with use_cassette(path, mode="none"):
        statuses = asyncio.run(run())
    assert statuses == ["queued", "running", "running", "succeeded", "succeeded"]


def test_async_recording_transport_records_a_replayable_cassette(tmp_path: Path) -> None:
    path = tmp_path / "async.json"
    app, state = make_backend_app()

    async def record(url: str) -> list[str]:
        transport = AsyncRecordingTransport(cassette=Cassette(path))
        async with httpx.AsyncClient(transport=transport) as client:
            job = await client.post(f"{url}/api/rl/jobs", json={"job_type": "rl"})
            job_id = job.json()["job_id"]
            statuses = [(await client.get(f"{url}/api/rl/jobs/{job_id}")).json()["status"] for _ in range(4)]
        transport.save()
        return statuses

    with LoopbackServer(app) as server:
        live = asyncio.run(record(server.url))
    assert live == ["queued", "running", "running", "succeeded"]
    assert state.hits == 5
    with use_cassette(path, mode="none"), httpx.Client() as client:
        client.post(f"{server.url}/api/rl/jobs", json={"job_type": "rl"})
        replayed = [client.get(f"{server.url}/api/rl/jobs/job-1").json()["status"] for _ in range(4)]
    assert replayed == live


def test_concurrent_pollers_share_one_recorded_sequence(recorded: tuple[Path, str]) -> None:
    path, url = recorded
    seen: list[str] = []
    lock = threading.Lock()
    with use_cassette(path, mode="none"), httpx.Client() as client:

        def poll_once() -> None:
            status = client.get(f"{url}/api/rl/jobs/job-1").json()["status"]
            with lock:
                seen.append(status)

        threads = [threading.Thread(target=poll_once) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    # Each recorded response is served exactly once, whatever the thread interleaving.
    assert sorted(seen) == sorted(["queued", "running", "running", "succeeded"])


def test_mount_on_an_existing_router_keeps_its_routes(recorded: tuple[Path, str]) -> None:
    path, url = recorded
    replayer = Replayer(Cassette.load(path), mode="none")
    with respx.mock(assert_all_called=False) as router:
        router.get(f"{url}/api/rl/jobs/job-1/events").respond(json={"events": [], "next_seq": 0})
        replayer.mount(router)
        with httpx.Client() as client:
            assert client.get(f"{url}/api/rl/jobs/job-1/events").json() == {"events": [], "next_seq": 0}
            assert client.get(f"{url}/api/rl/jobs/job-1").json()["status"] == "queued"
    assert replayer.finish() is None  # replay-only: nothing to write


def test_unplayed_lists_interactions_the_replay_did_not_use(recorded: tuple[Path, str]) -> None:
    path, url = recorded
    with use_cassette(path, mode="none") as replayer, httpx.Client() as client:
        client.get(f"{url}/gzip")
    unused = {(i.request.method, i.request.url.rsplit("/", 1)[-1]) for i in replayer.unplayed()}
    assert unused == {("POST", "jobs"), ("GET", "job-1"), ("GET", "binary")}
    assert len(replayer.unplayed()) == 6


def test_the_mismatch_error_states_the_matching_rule_in_use(recorded: tuple[Path, str]) -> None:
    path, url = recorded
    with (
        use_cassette(path, mode="none", test_id=TEST_ID, match_on=("method", "host", "path")),
        httpx.Client() as client,
        pytest.raises(CassetteMismatchError) as caught,
    ):
        client.get(f"{url}/api/rl/jobs/no-such-job")
    assert "matching uses method + host + path; query, body, headers are ignored" in str(caught.value)
