"""One reader of a rollout answer's reward, for the fake's jobs and the contract check alike."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_synth_rl.fake import extract_reward
from pytest_synth_rl.fake.model.rewards import reward_of


@pytest.mark.parametrize(
    ("field", "metrics", "expected"),
    [
        ("reward_info", {"outcome_reward": 0.5}, ("outcome_reward", 0.5)),
        ("metrics", {"outcome_reward": None, "mean_return": 0.25}, ("mean_return", 0.25)),
        ("metrics", {"reward_mean": 1}, ("reward_mean", 1.0)),
        ("metrics", {"episode_returns": [1, 0]}, ("episode_returns", 0.5)),
        ("metrics", {"outcome_score": -2.0}, ("outcome_score", -2.0)),
    ],
)
def test_the_reward_and_the_key_it_came_from(
    field: str, metrics: dict[str, Any], expected: tuple[str, float]
) -> None:
    assert reward_of(metrics, field) == expected
    assert extract_reward(metrics, field) == expected[1]


@pytest.mark.parametrize(
    ("field", "metrics", "message"),
    [
        # Before, the fake read legacy names under reward_info while the contract check did not.
        (
            "reward_info",
            {"mean_return": 0.5},
            "'reward_info' has no reward: expected reward_info.outcome_reward; got keys ['mean_return']",
        ),
        # Before, the contract check passed what no job could run (the fake caps rewards at 1e12).
        ("metrics", {"outcome_reward": 1e300}, "metrics.outcome_reward is 1e+300 (float); expected a finite"),
        (
            "metrics",
            {"episode_returns": [1, "x"], "outcome_score": 0.3},
            "metrics.episode_returns must hold only numbers",
        ),
        (
            "metrics",
            {"outcome_reward": None},
            "'metrics' has no reward: metrics.outcome_reward is null; expected",
        ),
        ("metrics", [0.5], "'metrics' must be an object, got list"),
    ],
)
def test_what_is_no_reward_says_why(field: str, metrics: Any, message: str) -> None:
    with pytest.raises(ValueError, match=r".") as info:
        reward_of(metrics, field)
    assert str(info.value).startswith(message)
