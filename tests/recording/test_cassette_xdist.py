"""Cassettes recorded through the plugin replay whatever the number of xdist workers.

A job's body carries per-run tags (``run``, ``worker``, ``test``) that differ between a serial
run and one under ``-n 2``; matching leaves them out by default, so a cassette recorded at
``-n 0`` replays at ``-n 2`` and the other way round. The served fake that is recorded from
fails every job with a marker error, which the offline fake never would: a passing replay is
proof that the answers came from the cassette. A cassette file that belongs to another test
is refused, naming both tests.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pytest_synth_rl.fake import FakeSynthBackend
from pytest_synth_rl.plugin.settings import new_task_app_key, resolve_settings, with_run_task_app_key
from pytest_synth_rl.recording import cassette_path

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SYNTH_KEY = "sk_live_cassette_xdist_key_5e0d7a"
MARKER = "recorded trainer failure 7f3e"
TEST_IDS = tuple(f"test_recorded.py::test_job_{index}" for index in range(4))

SUITE = f"""
import pytest

pytestmark = [
    pytest.mark.synth_task_app("arithmetic_task_app.py"),
    pytest.mark.synth_rl(config="arithmetic.toml"),
]


@pytest.mark.parametrize("batch", [1, 2])
def test_job_a(synth_rl_job, synth_expect, synth_cassette, batch):
    job = synth_rl_job(overrides={{"training.batch_size": batch}})
    job.submit()
    synth_expect(job).to_fail(error_contains={MARKER!r})

""" + "".join(
    f"""
def test_job_{index}(synth_rl_job, synth_expect, synth_cassette):
    job = synth_rl_job()
    job.submit()
    synth_expect(job).to_fail(error_contains={MARKER!r})
"""
    for index in range(4)
)


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    for name in ("arithmetic_task_app.py", "arithmetic.toml"):
        shutil.copy(EXAMPLES / name, pytester.path / name)
    pytester.makepyfile(test_recorded=SUITE)
    monkeypatch.delenv("SYNTH_API_KEY", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_TESTRUNUID", raising=False)
    return pytester


def _cassettes(pytester: pytest.Pytester) -> dict[str, dict[str, object]]:
    return {
        path.name: json.loads(path.read_text("utf-8"))
        for path in sorted((pytester.path / "tests" / "cassettes").glob("*.json"))
    }


def _submitted_tags(cassette: dict[str, object]) -> list[dict[str, str]]:
    interactions = cassette["interactions"]
    assert isinstance(interactions, list)
    return [
        item["request"]["body"]["tags"]
        for item in interactions
        if item["request"]["method"] == "POST" and item["request"]["url"].endswith("/rl/jobs")
    ]


def _record(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, workers: str) -> None:
    fake = FakeSynthBackend(api_key=SYNTH_KEY)
    fake.scenario(outcome="failed", error=MARKER)
    monkeypatch.setenv("SYNTH_API_KEY", SYNTH_KEY)
    try:
        with fake.serve() as url:
            run = pytester.runpytest if workers == "0" else pytester.runpytest_subprocess  # see _replay
            result = run(
                "-p",
                "no:randomly",
                "-n",
                workers,
                f"--synth-backend={url}",
                "--synth-record=once",
                "--synth-poll-interval=0.01",
            )
    finally:
        fake.close()
        monkeypatch.delenv("SYNTH_API_KEY")
    result.assert_outcomes(passed=6)


def _replay(pytester: pytest.Pytester, workers: str) -> pytest.RunResult:
    if workers == "0":  # one process: the run needs no process of its own
        return pytester.runpytest("-p", "no:randomly", "-n", workers)
    return pytester.runpytest_subprocess("-p", "no:randomly", "-n", workers)


@pytest.fixture(scope="module")
def serial_recording(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The cassettes of one serial record, made by the first test that asks and copied for the others."""
    return {"kept": tmp_path_factory.mktemp("serial-cassettes") / "cassettes"}


def _record_serially(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, recording: dict[str, Path]
) -> None:
    """Leave a serial record's cassettes in *pytester*'s tests/cassettes, recording them once a module."""
    kept, directory = recording["kept"], pytester.path / "tests" / "cassettes"
    if kept.is_dir():
        shutil.copytree(kept, directory)
    else:
        _record(pytester, monkeypatch, "0")
        shutil.copytree(directory, kept)


def test_recorded_serially_replays_on_two_workers(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, serial_recording: dict[str, Path]
) -> None:
    _record_serially(suite, monkeypatch, serial_recording)
    cassettes = _cassettes(suite)
    assert len(cassettes) == 6
    tags = [tag for cassette in cassettes.values() for tag in _submitted_tags(cassette)]
    assert len(tags) == 6
    assert {tag["worker"] for tag in tags} == {"main"}
    assert all("run" not in tag for tag in tags)
    result = _replay(suite, "2")
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(["*2 workers*"])


def test_recorded_on_two_workers_replays_serially(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _record(suite, monkeypatch, "2")
    cassettes = _cassettes(suite)
    tags = [tag for cassette in cassettes.values() for tag in _submitted_tags(cassette)]
    assert len(tags) == 6
    assert {tag["worker"] for tag in tags} <= {"gw0", "gw1"}
    assert len({tag["run"] for tag in tags}) == 1
    assert {tag["test"] for tag in tags} == {
        *(test_id for test_id in TEST_IDS),
        "test_recorded.py::test_job_a[1]",
        "test_recorded.py::test_job_a[2]",
    }
    _replay(suite, "0").assert_outcomes(passed=6)


def test_the_offline_fake_alone_does_not_pass_the_suite(suite: pytest.Pytester) -> None:
    """Without cassettes the offline fake succeeds every job, so the replays above really replayed."""
    result = _replay(suite, "0")
    result.assert_outcomes(failed=6)
    result.stdout.fnmatch_lines(["*expected job job_rl_* to fail, but it ended 'succeeded'*"])


def test_workers_share_the_run_task_app_key_unless_the_environment_set_one() -> None:
    """Under xdist each worker would otherwise generate and upload its own key, replacing the
    others' on the backend (the record at ``-n 2`` above failed its rollouts that way)."""
    handed = new_task_app_key()
    assert len(handed) == 64
    assert handed != new_task_app_key()
    settings = resolve_settings(cli={}, env={}, ini={})
    assert settings.task_app_api_key is None
    shared = with_run_task_app_key(settings, handed)
    assert shared.task_app_api_key is not None
    assert shared.task_app_api_key.value == handed
    assert with_run_task_app_key(settings, None) is settings
    given = resolve_settings(cli={}, env={"ENVIRONMENT_API_KEY": "env_key_from_the_user_1234"}, ini={})
    assert with_run_task_app_key(given, handed) is given


def test_a_cassette_of_another_test_is_refused_naming_both(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, serial_recording: dict[str, Path]
) -> None:
    _record_serially(suite, monkeypatch, serial_recording)
    directory = suite.path / "tests" / "cassettes"
    theirs, ours = TEST_IDS[0], TEST_IDS[1]
    shutil.copy(cassette_path(directory, theirs), cassette_path(directory, ours))
    result = suite.runpytest_subprocess("-p", "no:randomly", "-n", "2", "-k", "test_job_1")
    result.assert_outcomes(errors=1)
    out = result.stdout.str()
    assert f"was recorded for test {theirs!r}, not for {ours!r}" in out
    assert "re-record this test with --synth-record=rewrite" in out
