"""End to end: record the real job client against the served fake backend, replay it offline.

The recorded run is also the baseline run, so this covers the CI-regression loop as a user
would wire it: record once, then every later run replays and is checked against the baseline.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from pytest_synth_rl.baselines import BaselineStore, Tolerance, check_baseline, summarize_job
from pytest_synth_rl.client import JobResult, RLJob
from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.fake import FakeSynthBackend
from pytest_synth_rl.recording import (
    REDACTED,
    Cassette,
    CassetteMismatchError,
    RecordingTransport,
    Replayer,
    use_cassette,
)

CONFIG = Path(__file__).resolve().parents[2] / "examples" / "rl_minimal.toml"
FAKE_KEY = "sk_fake_backend_key_8c1d2e3f4a5b"
NODE = "tests/test_recording_fake.py::test_job"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("BACKEND_BASE_URL", "SYNTH_BACKEND_URL", "SYNTH_API_KEY", "TASK_APP_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def served_fake() -> Iterator[str]:
    fake = FakeSynthBackend(api_key=FAKE_KEY, rollouts=False)
    fake.scenario(steps=3, polls=5)
    with fake.serve() as url:
        yield url
    fake.close()


def without_redacted(result: JobResult) -> list[dict[str, object]]:
    """Poll payloads minus the fields redaction replaces (the fake echoes the idempotency key)."""
    return [{k: v for k, v in r.payload.items() if k != "idempotency_key"} for r in result.history]


def run_job(
    backend: str, key: str, task_url: str, *, transport: RecordingTransport | None = None
) -> JobResult:
    with RLJob.from_config(
        CONFIG,
        backend_url=backend,
        api_key=key,
        task_app_url=task_url,
        skip_health_check=True,
        clock=VirtualClock(),
        transport=transport,
    ) as job:
        job.submit()
        return job.poll_until_complete(timeout=600, interval=10)


@pytest.mark.parametrize("how", ["transport", "respx"])
def test_record_the_client_against_the_served_fake_then_replay_offline(
    tmp_path: Path, served_fake: str, how: str
) -> None:
    url = served_fake
    path = tmp_path / "job.json"
    recorder: AbstractContextManager[object]
    if how == "transport":  # inject a recording transport into the job's own client
        transport = RecordingTransport(cassette=Cassette(path, test_id=NODE))
        live = run_job(url, FAKE_KEY, "http://127.0.0.1:8114", transport=transport)
        transport.save()
    else:  # record whatever httpx client the job makes, through respx
        recorder = use_cassette(path, mode="once", hosts=[url], test_id=NODE)
        with recorder:
            live = run_job(url, FAKE_KEY, "http://127.0.0.1:8114")
    assert live.succeeded
    assert len(live.history) == 5  # the scenario ends on the fifth status poll
    assert live.final_reward is not None

    store = BaselineStore(tmp_path / "baselines")
    check_baseline(store, NODE, live, update=True)

    text = path.read_text(encoding="utf-8")
    assert FAKE_KEY not in text
    submit = json.loads(text)["interactions"][0]["request"]
    assert submit["headers"]["authorization"] == f"Bearer {REDACTED}"
    assert submit["headers"]["idempotency-key"] == REDACTED
    assert submit["body"]["job_type"] == "rl"  # the payload is readable JSON

    # Replay with another key and another task app port: neither is part of the match.
    with use_cassette(path, mode="none") as replayer:
        replayed = run_job(url, "sk_replay_dummy_key_000000", "http://127.0.0.1:9999")
    assert replayer.recorded == 0
    assert replayer.unplayed() == []
    assert [r.status for r in replayed.history] == [r.status for r in live.history]
    assert without_redacted(replayed) == without_redacted(live)
    assert {r.payload["idempotency_key"] for r in replayed.history} == {REDACTED}
    assert replayed.final_reward == live.final_reward
    assert summarize_job(replayed) == summarize_job(live)
    assert check_baseline(store, NODE, replayed, tolerances={"final_reward": Tolerance(abs=0.01)}).ok


def test_replayed_job_with_a_changed_config_fails_with_the_payload_difference(
    tmp_path: Path, served_fake: str
) -> None:
    path = tmp_path / "job.json"
    transport = RecordingTransport(cassette=Cassette(path))
    run_job(served_fake, FAKE_KEY, "http://127.0.0.1:8114", transport=transport)
    transport.save()
    changed = tmp_path / "changed.toml"
    changed.write_text(CONFIG.read_text().replace('label = "plugin-smoke"', 'label = "renamed"'))
    with (
        Replayer(Cassette.load(path), mode="none", test_id=NODE),
        RLJob.from_config(
            changed,
            backend_url=served_fake,
            api_key="sk_replay_dummy_key_000000",
            task_app_url="http://127.0.0.1:8114",
            skip_health_check=True,
            clock=VirtualClock(),
        ) as job,
        pytest.raises(CassetteMismatchError) as caught,
    ):
        job.submit()
    text = str(caught.value)
    assert "no recorded interaction matches POST" in text
    assert '$.data.config.model.label: recorded "plugin-smoke", now "renamed"' in text
    assert "--synth-record=new" in text


def test_a_cassette_recorded_on_loopback_replays_as_the_hosted_backend(tmp_path: Path) -> None:
    # Record against the served fake, stop it, then replay with the client pointed at the public
    # backend URL: the host (also inside the payload) is not part of the match, and a request
    # that escaped the replay would have nowhere to go.
    path = tmp_path / "job.json"
    fake = FakeSynthBackend(api_key=FAKE_KEY, rollouts=False)
    fake.scenario(steps=3, polls=5)
    with fake.serve() as url:
        transport = RecordingTransport(cassette=Cassette(path))
        live = run_job(url, FAKE_KEY, "http://127.0.0.1:8114", transport=transport)
        transport.save()
    fake.close()
    with use_cassette(path, mode="none"):
        replayed = run_job("https://api.usesynth.ai", "sk_replay_dummy_key_000000", "http://127.0.0.1:8114")
    assert without_redacted(replayed) == without_redacted(live)
    assert {r.payload["idempotency_key"] for r in replayed.history} == {REDACTED}
    assert replayed.final_reward == live.final_reward
