"""The numbers an in-flight job status reports: its training step, total steps, latest reward.

The backend's status shape is open (the contract's RL guide shows ``progress.completed`` and
``metrics.reward``; ``step`` and others are common elsewhere), so each is looked for at a few
places, first found wins. One reading for the live progress line and the baselines alike, so the
same status never shows one step on screen and records another.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["REWARD_PATHS", "STEP_PATHS", "TOTAL_STEPS_PATHS", "number_at"]

Paths = tuple[tuple[str, ...], ...]

STEP_PATHS: Paths = (("progress", "completed"), ("step",), ("current_step",), ("metrics", "step"))
TOTAL_STEPS_PATHS: Paths = (("progress", "total"), ("total_steps",))
REWARD_PATHS: Paths = (("metrics", "reward"), ("reward",), ("metrics", "mean_reward"))


def number_at(payload: Mapping[str, Any], paths: Paths) -> float | None:
    """The first finite number (not a bool, not a string) at one of *paths* in *payload*."""
    for path in paths:
        value: Any = payload
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    return None
