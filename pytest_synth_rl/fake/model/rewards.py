"""What counts as a reward (a number within ``±MAX_REWARD``) and where a rollout answer holds it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

MAX_REWARD = 1e12
REWARD_RANGE = f"a finite number from {-MAX_REWARD:g} to {MAX_REWARD:g}"
LEGACY_REWARD_KEYS: tuple[str, ...] = ("mean_return", "reward_mean", "episode_returns", "outcome_score")


def reward_in_range(value: object) -> bool:
    """Whether *value* is a number (not a bool, NaN or infinite) within ``±MAX_REWARD``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return -MAX_REWARD <= value <= MAX_REWARD


def reward_of(metrics: Any, field: str = "metrics") -> tuple[str, float]:
    """``(key, reward)`` read from a rollout answer's *field* (``metrics`` or ``reward_info``)."""
    if not isinstance(metrics, Mapping):
        raise ValueError(f"'{field}' must be an object, got {type(metrics).__name__}")
    keys = ("outcome_reward", *LEGACY_REWARD_KEYS) if field == "metrics" else ("outcome_reward",)
    for key in keys:
        raw = metrics.get(key)
        if raw is None:
            continue
        if key == "episode_returns":
            where = f"{field}.episode_returns must"
            if not isinstance(raw, Sequence) or isinstance(raw, str) or not raw:
                raise ValueError(f"{where} be a non-empty list of numbers, got {raw!r:.80}")
            if not all(reward_in_range(v) for v in raw):
                raise ValueError(f"{where} hold only numbers, each {REWARD_RANGE}, got {raw!r:.80}")
            return key, sum(float(v) for v in raw) / len(raw)
        if not reward_in_range(raw):
            raise ValueError(f"{field}.{key} is {raw!r:.80} ({type(raw).__name__}); expected {REWARD_RANGE}")
        return key, float(raw)
    legacy = f" (or a legacy {', '.join(LEGACY_REWARD_KEYS)})" if field == "metrics" else ""
    null = f"{field}.outcome_reward is null; " if "outcome_reward" in metrics else ""
    expected = f"expected {field}.outcome_reward{legacy}; got keys {sorted(metrics)[:12]}"
    raise ValueError(f"'{field}' has no reward: {null}{expected}")


def extract_reward(metrics: Any, field: str = "metrics") -> float:
    """The scalar reward in a rollout answer's *field* (see :func:`reward_of`)."""
    return reward_of(metrics, field)[1]
