"""Each record mode against a live loopback server, with pytest-recording / VCR.py semantics."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from test_recording_support import BackendState, LoopbackServer, make_backend_app, poll_job

from pytest_synth_rl.recording import CassetteMismatchError, RecordMode, RecordModeError, use_cassette

TEST_ID = "tests/test_modes.py::test_job"


@pytest.fixture
def server() -> Iterator[tuple[str, BackendState]]:
    app, state = make_backend_app()
    with LoopbackServer(app) as live:
        yield live.url, state


def urls_in(path: Path) -> list[str]:
    document = json.loads(path.read_text(encoding="utf-8"))
    return [i["request"]["url"].split("/", 3)[-1] for i in document["interactions"]]


def test_mode_names_and_aliases() -> None:
    assert RecordMode.parse("none") is RecordMode.NONE
    assert RecordMode.parse(" ONCE ") is RecordMode.ONCE
    assert RecordMode.parse("new_episodes") is RecordMode.NEW
    assert RecordMode.parse("all") is RecordMode.REWRITE
    with pytest.raises(RecordModeError, match="unknown record mode 'always': expected one of none, once"):
        RecordMode.parse("always")


def test_none_without_a_cassette_fails_with_the_command_that_records_it(
    tmp_path: Path, server: tuple[str, BackendState]
) -> None:
    url, state = server
    path = tmp_path / "missing.json"
    with (
        use_cassette(path, mode="none", hosts=[url], test_id=TEST_ID),
        httpx.Client() as client,
        pytest.raises(CassetteMismatchError) as caught,
    ):
        client.get(f"{url}/api/rl/jobs/job-1")
    assert f"cassette {path} does not exist" in str(caught.value)
    assert f'pytest --synth-backend=URL --synth-record=once "{TEST_ID}"' in str(caught.value)
    assert state.hits == 0
    assert not path.exists()


def test_none_replays_and_never_forwards_unknown_requests(
    tmp_path: Path, server: tuple[str, BackendState]
) -> None:
    url, state = server
    path = tmp_path / "c.json"
    with use_cassette(path, mode="once", hosts=[url]), httpx.Client() as client:
        poll_job(client, url)
    hits = state.hits
    with use_cassette(path, mode="none", hosts=[url]), httpx.Client() as client:
        assert poll_job(client, url) == ["queued", "running", "running", "succeeded"]
        with pytest.raises(CassetteMismatchError):
            client.get(f"{url}/text?q=new")
    assert state.hits == hits  # the live server saw nothing


def test_once_records_when_the_cassette_is_missing_then_replays(
    tmp_path: Path, server: tuple[str, BackendState]
) -> None:
    url, state = server
    path = tmp_path / "c.json"
    with use_cassette(path, mode="once", hosts=[url], test_id=TEST_ID) as first, httpx.Client() as client:
        assert poll_job(client, url) == ["queued", "running", "running", "succeeded"]
    assert first.recorded == 5
    assert state.hits == 5
    assert urls_in(path) == ["api/rl/jobs"] + ["api/rl/jobs/job-1"] * 4
    assert json.loads(path.read_text())["test_id"] == TEST_ID

    with use_cassette(path, mode="once", hosts=[url], test_id=TEST_ID) as second, httpx.Client() as client:
        assert poll_job(client, url) == ["queued", "running", "running", "succeeded"]
        # A cassette exists: new requests are an error, as in VCR's "once".
        with pytest.raises(CassetteMismatchError, match="record mode 'once'") as caught:
            client.get(f"{url}/text?q=new")
    # Online already: the modes that record what is missing, without a backend to add.
    assert "--synth-record=once only replays a cassette that exists" in str(caught.value)
    assert f'pytest --synth-record=new "{TEST_ID}"' in str(caught.value)
    assert f'pytest --synth-record=rewrite "{TEST_ID}"' in str(caught.value)
    assert second.recorded == 0
    assert state.hits == 5


def test_once_without_requests_writes_no_cassette(tmp_path: Path, server: tuple[str, BackendState]) -> None:
    url, _ = server
    path = tmp_path / "c.json"
    with use_cassette(path, mode="once", hosts=[url]):
        pass
    assert not path.exists()


def test_new_replays_known_requests_and_records_new_ones(
    tmp_path: Path, server: tuple[str, BackendState]
) -> None:
    url, state = server
    path = tmp_path / "c.json"
    with use_cassette(path, mode="rewrite", hosts=[url]), httpx.Client() as client:
        poll_job(client, url)
    assert state.hits == 5

    with use_cassette(path, mode="new", hosts=[url]) as replayer, httpx.Client() as client:
        assert poll_job(client, url) == ["queued", "running", "running", "succeeded"]
        assert state.hits == 5  # known requests were replayed, not forwarded
        assert client.get(f"{url}/text?q=1").text == "plain text, query was: q=1"
        assert client.get(f"{url}/text?q=1").text == "plain text, query was: q=1"
    assert replayer.replayed == 5
    assert replayer.recorded == 2
    assert state.hits == 7
    assert urls_in(path) == ["api/rl/jobs"] + ["api/rl/jobs/job-1"] * 4 + ["text?q=1"] * 2


def test_rewrite_forwards_everything_and_replaces_the_cassette(
    tmp_path: Path, server: tuple[str, BackendState]
) -> None:
    url, state = server
    path = tmp_path / "c.json"
    with use_cassette(path, mode="rewrite", hosts=[url]), httpx.Client() as client:
        client.get(f"{url}/text?q=old")
        client.get(f"{url}/text?q=shared")
    with use_cassette(path, mode="rewrite", hosts=[url]) as replayer, httpx.Client() as client:
        client.get(f"{url}/text?q=shared")
        client.get(f"{url}/text?q=fresh")
    assert replayer.replayed == 0
    assert state.hits == 4  # the request already on the cassette was forwarded again
    assert urls_in(path) == ["text?q=shared", "text?q=fresh"]


def test_rewrite_of_a_broken_cassette_replaces_it(tmp_path: Path, server: tuple[str, BackendState]) -> None:
    url, _ = server
    path = tmp_path / "c.json"
    path.write_text("{ not json", encoding="utf-8")
    with use_cassette(path, mode="rewrite", hosts=[url]), httpx.Client() as client:
        client.get(f"{url}/text?q=1")
    assert urls_in(path) == ["text?q=1"]


def test_rewrite_without_requests_removes_the_stale_cassette(
    tmp_path: Path, server: tuple[str, BackendState]
) -> None:
    url, _ = server
    path = tmp_path / "c.json"
    with use_cassette(path, mode="rewrite", hosts=[url]), httpx.Client() as client:
        client.get(f"{url}/text?q=1")
    assert path.exists()
    with use_cassette(path, mode="rewrite", hosts=[url]):
        pass
    assert not path.exists()


def test_recording_leaves_out_of_scope_loopback_traffic_alone(
    tmp_path: Path, server: tuple[str, BackendState]
) -> None:
    url, _ = server
    task_app, task_state = make_backend_app()
    path = tmp_path / "c.json"
    with (
        LoopbackServer(task_app) as live,
        use_cassette(path, mode="rewrite", hosts=[url]),
        httpx.Client() as client,
    ):
        poll_job(client, url)
        assert client.get(f"{live.url}/text?seed=1").status_code == 200
    assert task_state.requests == [("GET", "/text")]
    assert "text?seed=1" not in urls_in(path)
    assert len(urls_in(path)) == 5


def test_default_scope_records_only_non_loopback_hosts(
    tmp_path: Path, server: tuple[str, BackendState]
) -> None:
    # Without hosts=, a loopback server is treated like an in-process task app: it is neither
    # recorded nor replayed. Recording a loopback backend therefore needs hosts=[its URL].
    url, state = server
    path = tmp_path / "c.json"
    with use_cassette(path, mode="rewrite") as replayer, httpx.Client() as client:
        assert client.get(f"{url}/text?q=1").status_code == 200
    assert state.hits == 1
    assert replayer.recorded == 0
    assert not path.exists()


def test_recording_returns_live_responses_including_error_statuses(
    tmp_path: Path, server: tuple[str, BackendState]
) -> None:
    url, _ = server
    path = tmp_path / "c.json"
    with use_cassette(path, mode="rewrite", hosts=[url]), httpx.Client() as client:
        missing = client.get(f"{url}/api/rl/jobs/job-404")
        assert client.get(f"{url}/gzip").json() == {"compressed": True, "n": 3}
    assert missing.status_code == 404
    with use_cassette(path, mode="none"), httpx.Client() as client:
        again = client.get(f"{url}/api/rl/jobs/job-404")
    assert again.status_code == 404
    assert again.json() == {"detail": "job job-404 not found"}


def test_new_mode_sends_the_key_upload_to_the_backend_instead_of_replaying_it(tmp_path: Path) -> None:
    # Before: the upload matched the recorded one (its sealed key is not compared) and was replayed,
    # so the backend kept the recording run's key and this run's rollouts were refused.
    from pytest_synth_rl.client import upload_environment_api_key
    from pytest_synth_rl.fake import FakeSynthBackend

    path = tmp_path / "keys.json"
    fake = FakeSynthBackend(api_key="sk_test_recording_key_01")  # served only: not mounted on respx
    with fake.serve() as url:
        for mode, run_key in (
            ("rewrite", "env_key_of_the_recording_run_01"),
            ("new", "env_key_of_this_run_02"),
        ):
            with use_cassette(path, mode=mode, hosts=[url]) as replayer:
                assert upload_environment_api_key(
                    url, "sk_test_recording_key_01", run_key, verify=True
                ).verified
            assert (replayer.replayed, replayer.recorded) == (0, 3 if mode == "rewrite" else 0), mode
        routes = [request.route for request in fake.requests]
    fake.close()
    # Both runs reached the backend: the second run's key is the one it holds. The cassette keeps
    # one upload (what an offline replay needs), not one more per recording run.
    assert routes == ["public_key", "env_keys", "env_keys_verify"] * 2
    assert urls_in(path) == ["api/v1/crypto/public-key", "api/v1/env-keys", "api/v1/env-keys/verify"]
