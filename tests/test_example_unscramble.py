"""The unscramble example suite, run as a team would: offline, split over two xdist workers, and
online against a fake served with the team's policy."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pytest_synth_rl.fake.backend import load_policy
from pytest_synth_rl.plugin.session import ServedFake

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "unscramble"


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    shutil.copytree(EXAMPLE, pytester.path, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    return pytester


@pytest.mark.parametrize("extra", [(), ("-n", "2")])
def test_the_example_suite_is_green_with_its_own_policy(
    suite: pytest.Pytester, extra: tuple[str, ...]
) -> None:
    # One process is this one (the suite patches nothing global); two workers need their own.
    run = suite.runpytest_subprocess if extra else suite.runpytest
    result = run("-p", "no:randomly", *extra)
    result.assert_outcomes(passed=4)


def test_without_the_teams_policy_the_reward_check_fails(suite: pytest.Pytester) -> None:
    (suite.path / "conftest.py").unlink()  # the built-in policy only knows arithmetic
    result = suite.runpytest("-p", "no:randomly", "-k", "reward_improves")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*expected*reward*"])


@pytest.mark.slow
def test_the_example_suite_is_green_online_against_a_served_fake_with_the_teams_policy(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    synth_key, task_key = "sk_unscramble_online_0123456789", "env_unscramble_online_0123456789"
    monkeypatch.setenv("ENVIRONMENT_API_KEY", task_key)
    monkeypatch.setenv("SYNTH_API_KEY", synth_key)
    with ServedFake.start(
        api_key=synth_key, task_app_api_key=task_key, policy=load_policy(f"{EXAMPLE / 'policy.py'}:policy")
    ) as served:
        result = suite.runpytest_subprocess(
            "-p", "no:randomly", f"--synth-backend={served.url}", "--synth-poll-interval=0.01"
        )
        jobs = served.fake.jobs
    # Online, the two offline-only tests skip; the reward check runs on the served fake's rollouts.
    result.assert_outcomes(passed=2, skipped=2)
    assert len(jobs) == 1
    assert jobs[0].status == "succeeded"
