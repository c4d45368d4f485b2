"""Cassettes replay across runs and xdist workers; what matching looks at is configurable."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from pytest_synth_rl.client import RLJob
from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.errors import SynthUsageError
from pytest_synth_rl.fake import FakeSynthBackend
from pytest_synth_rl.plugin.session import job_tags
from pytest_synth_rl.recording import (
    DEFAULT_IGNORED_PATHS,
    CassetteMismatchError,
    MatchConfig,
    RecordedRequest,
    request_key,
    use_cassette,
)

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "rl_minimal.toml"
TEST_ID = "tests/test_rl.py::test_train"


def _submit(backend_url: str, api_key: str, tags: dict[str, str]) -> str:
    job = RLJob.from_config(
        CONFIG,
        backend_url=backend_url,
        api_key=api_key,
        task_app_url="http://127.0.0.1:9/",
        task_app_api_key="cassette-match-task-key",
        skip_health_check=True,
        clock=VirtualClock(),
        tags=tags,
        idempotency_key="fixed-key-for-replay",
    )
    with job:
        return job.submit()


def test_a_cassette_recorded_on_worker_gw0_replays_on_main_in_another_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "cassette.json"
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", "run-X")
    recorded_tags = job_tags(TEST_ID)
    assert recorded_tags["worker"] == "gw0"
    fake = FakeSynthBackend(clock=VirtualClock(), rollouts=False)
    with fake.serve() as url, use_cassette(path, mode="once", test_id=TEST_ID, hosts=[url]):
        recorded_id = _submit(url, fake.api_key.value, recorded_tags)
    fake.close()
    assert '"worker": "gw0"' in path.read_text(encoding="utf-8")

    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", "run-Y")
    replay_tags = job_tags(TEST_ID)
    assert replay_tags["worker"] == "main"
    with use_cassette(path, mode="none", test_id=TEST_ID) as replayer:
        # The served fake is gone: only the recording can answer.
        assert _submit(url, "sk_test_other_key_123456", replay_tags) == recorded_id
    assert replayer.replayed == 1


def test_a_cassette_recorded_without_xdist_replays_under_it(tmp_path: Path) -> None:
    serial = RecordedRequest("POST", "http://h/api/rl/jobs", body={"tags": {"source": "s", "worker": "main"}})
    worker = RecordedRequest(
        "POST", "http://h/api/rl/jobs", body={"tags": {"source": "s", "worker": "gw1", "run": "abc"}}
    )
    assert request_key(serial) == request_key(worker)
    assert DEFAULT_IGNORED_PATHS == ("tags.run", "tags.worker", "tags.test")


def test_ignored_paths_and_match_on_are_configurable() -> None:
    a = RecordedRequest(
        "POST", "http://h:1/api/x?page=1", body={"data": {"seed": 1, "n": 2}, "tags": {"run": "1"}}
    )
    b = RecordedRequest(
        "POST", "http://g:2/api/x?page=2", body={"data": {"seed": 9, "n": 2}, "tags": {"run": "2"}}
    )
    assert request_key(a) != request_key(b)
    loose = MatchConfig(match_on=("method", "path", "body"), ignore=("data.seed", "tags.*"))
    assert request_key(a, match=loose) == request_key(b, match=loose)
    # Per-run tags count again once the default ignore list is replaced.
    strict_tags = MatchConfig(match_on=("method", "path", "body"), ignore=("data.seed",))
    assert request_key(a, match=strict_tags) != request_key(b, match=strict_tags)
    with_host = MatchConfig(match_on=("method", "host", "path", "body"), ignore=("data.seed", "tags"))
    assert request_key(a, match=with_host) != request_key(b, match=with_host)
    assert request_key(a, match=with_host).render() == "POST http://h:1/api/x"


def test_bad_match_options_are_refused_with_a_suggestion() -> None:
    with pytest.raises(SynthUsageError) as caught:
        MatchConfig(match_on=("method", "bodyy"), ignore=("",))
    assert [(p.key, p.message) for p in caught.value.problems] == [
        ("match_on", "unknown request part 'bodyy'; did you mean 'body'?"),
        ("ignore", "expected a dotted JSON path like 'tags.run', got ''"),
    ]


def test_replayer_passes_match_options_through(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(
        '{"version": 1, "interactions": [{"request": {"method": "POST", "url": "http://api.test/x", '
        '"headers": {"content-type": "application/json"}, "body": {"v": 1, "at": 5}}, '
        '"response": {"status": 200, "headers": {}, "body": "ok"}}]}',
        encoding="utf-8",
    )
    with use_cassette(path, mode="none", ignore=("at",)), httpx.Client() as client:
        assert client.post("http://api.test/x", json={"v": 1, "at": 6}).text == "ok"
    with use_cassette(path, mode="none"), httpx.Client() as client, pytest.raises(CassetteMismatchError):
        client.post("http://api.test/x", json={"v": 1, "at": 6})
