"""The unscramble example suite, run as a team would: offline, split over two xdist workers, and
online against a fake served with the team's policy."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from pytest_synth_rl import LearningPolicy, linear
from pytest_synth_rl.plugin.session import ServedFake

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "unscramble"


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    for name in ("unscramble_task_app.py", "unscramble.toml", "conftest.py", "test_unscramble_regression.py"):
        shutil.copy(EXAMPLE / name, pytester.path / name)
    return pytester


@pytest.mark.parametrize("extra", [(), ("-n", "2")])
def test_the_example_suite_is_green_with_its_own_policy(
    suite: pytest.Pytester, extra: tuple[str, ...]
) -> None:
    result = suite.runpytest_subprocess("-p", "no:randomly", *extra)
    result.assert_outcomes(passed=4)


def test_without_the_teams_policy_the_reward_check_fails(suite: pytest.Pytester) -> None:
    (suite.path / "conftest.py").unlink()  # the built-in policy only knows arithmetic
    result = suite.runpytest_subprocess("-p", "no:randomly", "-k", "reward_improves")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*expected*reward*"])


def _team_policy() -> LearningPolicy:
    """The policy of the example's conftest, for a fake served apart from the suite."""
    spec = importlib.util.spec_from_file_location("unscramble_team_conftest", EXAMPLE / "conftest.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return LearningPolicy(module.solve, wrong=module.wrong, curve=linear(0.1, 0.9), seed=7)


@pytest.mark.slow
def test_the_example_suite_is_green_online_against_a_served_fake_with_the_teams_policy(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    synth_key, task_key = "sk_unscramble_online_0123456789", "env_unscramble_online_0123456789"
    monkeypatch.setenv("ENVIRONMENT_API_KEY", task_key)
    monkeypatch.setenv("SYNTH_API_KEY", synth_key)
    with ServedFake.start(api_key=synth_key, task_app_api_key=task_key, policy=_team_policy()) as served:
        result = suite.runpytest_subprocess(
            "-p", "no:randomly", f"--synth-backend={served.url}", "--synth-poll-interval=0.01"
        )
        jobs = served.fake.jobs
    # Online, the two offline-only tests skip; the reward check runs on the served fake's rollouts.
    result.assert_outcomes(passed=2, skipped=2)
    assert len(jobs) == 1
    assert jobs[0].status == "succeeded"
