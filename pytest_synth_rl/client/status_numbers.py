"""The numbers an in-flight job status reports (training step, total steps, latest reward), each
looked for at a few places, first found wins: one reading for the live progress line and the
baselines alike."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

Paths = tuple[tuple[str, ...], ...]

STEP_PATHS: Paths = (("progress", "completed"), ("step",), ("current_step",), ("metrics", "step"))
TOTAL_STEPS_PATHS: Paths = (("progress", "total"), ("total_steps",))
REWARD_PATHS: Paths = (("metrics", "reward"), ("reward",), ("metrics", "mean_reward"))


def value_at(payload: Any, path: tuple[str, ...]) -> Any:
    """``payload[path[0]][path[1]]...``, or None where a step is missing or not a mapping."""
    for key in path:
        payload = payload.get(key) if isinstance(payload, Mapping) else None
    return payload


def number_at(payload: Mapping[str, Any], paths: Paths) -> float | None:
    """The first finite number (not a bool, not a string) at one of *paths* in *payload*."""
    for path in paths:
        value = value_at(payload, path)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    return None
