"""CI regression features through the plugin: cassettes (record online, replay offline) and baselines."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from pytest_synth_rl.plugin.session import ServedFake

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SYNTH_KEY = "sk_live_cassette_secret_4242"
TASK_KEY = "env_key_cassette_secret_77"

SUITE = """
import pytest

pytestmark = [
    pytest.mark.synth_task_app("arithmetic_task_app.py"),
    pytest.mark.synth_rl(config="arithmetic.toml"),
]


def test_recorded(synth_cassette, synth_rl_job, synth_expect):
    job = synth_rl_job()
    job.submit()
    result = synth_expect(job).to_succeed(within=600).result
    print("OUTCOME", job.job_id, result.status, len(result.history), result.final_reward)
"""


@pytest.fixture
def example_dir(pytester: pytest.Pytester) -> pytest.Pytester:
    for name in ("arithmetic_task_app.py", "arithmetic.toml"):
        shutil.copy(EXAMPLES / name, pytester.path / name)
    return pytester


def _outcome(result: pytest.RunResult) -> list[str]:
    return next(line.split("OUTCOME", 1)[1].split() for line in result.outlines if "OUTCOME" in line)


@pytest.mark.slow
@pytest.mark.parametrize(
    "arguments",
    ["synth_cassette, synth_rl_job, synth_expect", "synth_rl_job, synth_expect, synth_cassette"],
    ids=["cassette-first", "cassette-last"],
)
def test_record_against_served_fake_then_replay_offline_without_key(
    example_dir: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, arguments: str
) -> None:
    example_dir.makepyfile(SUITE.replace("synth_cassette, synth_rl_job, synth_expect", arguments))
    monkeypatch.setenv("ENVIRONMENT_API_KEY", TASK_KEY)
    with ServedFake.start(polls_to_finish=4, api_key=SYNTH_KEY) as served:
        monkeypatch.setenv("SYNTH_API_KEY", SYNTH_KEY)
        recorded = example_dir.runpytest_subprocess(
            f"--synth-backend={served.url}",
            "--synth-record=once",
            "--synth-poll-interval=0.01",
            "-s",
            "--synth-report=recorded.json",
        )
        recorded.assert_outcomes(passed=1)
        assert len(served.fake.jobs) == 1
    cassettes = list((example_dir.path / "tests" / "cassettes").glob("*.json"))
    assert len(cassettes) == 1
    text = cassettes[0].read_text()
    assert SYNTH_KEY not in text
    assert TASK_KEY not in text
    assert json.loads(text)["interactions"]

    # Offline, no API key at all: the cassette replays the same job, polls and outcome.
    monkeypatch.delenv("SYNTH_API_KEY")
    replayed = example_dir.runpytest("-s", "--synth-report=replayed.json")  # offline: in-process
    replayed.assert_outcomes(passed=1)
    assert _outcome(replayed) == _outcome(recorded)
    assert _outcome(replayed)[1] == "succeeded"
    # The report's row comes from the cassette too: same status and reward curve, nothing lost
    # to requests made after the test body (the teardown's metrics read is recorded).
    reports = ("recorded.json", "replayed.json")
    rows = [json.loads((example_dir.path / name).read_text())["jobs"] for name in reports]
    assert [len(r) for r in rows] == [1, 1]
    recorded_row, replayed_row = rows[0][0], rows[1][0]
    assert replayed_row["status"] == recorded_row["status"] == "succeeded"
    assert recorded_row["rewards"], "the recorded run's report has a reward curve"
    assert replayed_row["rewards"] == recorded_row["rewards"]
    assert "could not finish" not in replayed.stdout.str() + replayed.stderr.str()

    # Online again with the cassette in place: "once" replays it, key upload included (its
    # recorded public key is not redacted: it is not a secret, and the upload seals to it).
    monkeypatch.setenv("SYNTH_API_KEY", SYNTH_KEY)
    with ServedFake.start(polls_to_finish=4, api_key=SYNTH_KEY) as served:
        again = example_dir.runpytest_subprocess(
            f"--synth-backend={served.url}", "--synth-record=once", "--synth-poll-interval=0.01", "-s"
        )
        again.assert_outcomes(passed=1)
        assert _outcome(again) == _outcome(recorded)


def test_offline_without_cassette_runs_on_the_fake(example_dir: pytest.Pytester) -> None:
    example_dir.makepyfile(SUITE)
    result = example_dir.runpytest("-s")
    result.assert_outcomes(passed=1)
    assert _outcome(result)[1] == "succeeded"
    assert not (example_dir.path / "tests" / "cassettes").exists()


BASELINE_SUITE = """
import pytest
from pytest_synth_rl import Tolerance

pytestmark = [
    pytest.mark.synth_task_app("arithmetic_task_app.py"),
    pytest.mark.synth_rl(config="arithmetic.toml"),
]


def test_reward_is_stable(synth_rl_job, synth_expect, synth_baseline, synth_backend):
    job = synth_rl_job()
    job.submit()
    result = synth_expect(job).to_succeed(within=7200).result
    synth_baseline(result, {"reward.*": Tolerance(abs=0.05)}, final_reward=Tolerance(abs=0.05))
"""


def test_baseline_missing_then_written_then_drift_fails_with_a_table(example_dir: pytest.Pytester) -> None:
    example_dir.makepyfile(test_base=BASELINE_SUITE)
    missing = example_dir.runpytest()
    missing.assert_outcomes(failed=1)
    missing.stdout.fnmatch_lines(["*--synth-update-baselines*test_base.py::test_reward_is_stable*"])

    example_dir.runpytest("--synth-update-baselines").assert_outcomes(passed=1)
    files = list((example_dir.path / "tests" / "baselines").glob("*.json"))
    assert len(files) == 1
    example_dir.runpytest().assert_outcomes(passed=1)  # deterministic offline: same metrics

    baseline = json.loads(files[0].read_text())
    baseline["metrics"]["final_reward"] += 0.5
    files[0].write_text(json.dumps(baseline))
    drifted = example_dir.runpytest()
    drifted.assert_outcomes(failed=1)
    drifted.stdout.fnmatch_lines(["*metric*baseline*now*tolerance*verdict*", "*final_reward*DRIFT*"])


def test_an_offline_cassette_mismatch_shows_the_users_line_and_a_fix_that_works_offline(
    example_dir: pytest.Pytester,
) -> None:
    from pytest_synth_rl.recording import cassette_path

    example_dir.makepyfile(test_cassette=SUITE)
    # A real recording of another job: its polls, but not this test's submission.
    legacy = json.loads((Path(__file__).resolve().parents[1] / "data/legacy/cassette.json").read_text())
    node = "test_cassette.py::test_recorded"
    path = cassette_path(example_dir.path / "tests" / "cassettes", node)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({**legacy, "test_id": node, "interactions": legacy["interactions"][1:]}))
    result = example_dir.runpytest("-p", "no:randomly")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "CassetteMismatchError: no recorded interaction matches POST" in text
    # One frame, the user's: neither httpx's nor the plugin's.
    assert re.findall(r"^(\S+\.py):\d+: ", text, re.MULTILINE) == ["test_cassette.py"]
    assert ">       job.submit()" in text
    assert f'--synth-backend=URL --synth-record=new "{node}"' in text
    assert "pytest --synth-record=" not in text  # online-only, with no backend to record from


STEPS_SUITE = """
import pytest

pytestmark = [
    pytest.mark.synth_task_app("arithmetic_task_app.py"),
    pytest.mark.synth_rl(config="arithmetic.toml"),
    pytest.mark.synth_scenario(steps=8, duration=60),
]


def test_result(synth_rl_job, synth_expect, synth_baseline):
    job = synth_rl_job()
    job.submit()
    synth_baseline(synth_expect(job).to_succeed(within=7200).result)


def test_job(synth_rl_job, synth_expect, synth_baseline):
    job = synth_rl_job()
    job.submit()
    synth_expect(job).to_succeed(within=7200)
    synth_baseline(job)


def test_own_wait(synth_rl_job, synth_baseline):
    job = synth_rl_job()
    job.submit()
    result = job.poll_until_complete()
    print("WAITED", [record.elapsed for record in result.history])
    synth_baseline(result)
"""


def test_baselines_come_from_the_jobs_steps_at_any_poll_interval(example_dir: pytest.Pytester) -> None:
    example_dir.makepyfile(test_steps=STEPS_SUITE)
    # Polls every 10 s see 6 of the 8 steps of a 60 s job; every 5 s, all of them.
    written = example_dir.runpytest("--synth-update-baselines", "--synth-poll-interval=10", "-s")
    written.assert_outcomes(passed=3)
    files = sorted((example_dir.path / "tests" / "baselines").glob("*.json"))
    assert len(files) == 3
    for stored in (json.loads(path.read_text()) for path in files):
        assert stored["metrics"]["reward.points"] == stored["metrics"]["steps"] == 8
        assert len(stored["reward_curve"]) == 8
    # A test's own wait follows the test's poll interval, as synth_expect's does.
    assert any("WAITED [0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0]" in line for line in written.outlines)
    for interval in ("5", "45"):
        again = example_dir.runpytest(f"--synth-poll-interval={interval}", "-s")
        again.assert_outcomes(passed=3)
    assert any("WAITED [0.0, 45.0, 90.0]" in line for line in again.outlines)
