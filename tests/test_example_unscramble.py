"""The unscramble example suite, run as a team would: offline, and split over two xdist workers."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

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
