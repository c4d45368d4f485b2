"""Compact text for assertion messages and the run report: statuses, reward curves, durations, tables."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

_BARS = "▁▂▃▄▅▆▇█"


def _mean(values: Sequence[float]) -> float:
    total = sum(values)
    if math.isfinite(total):
        return total / len(values)
    shares = sum(v / len(values) for v in values)
    return min(max(values), max(min(values), shares))


def finite_floats(values: Iterable[Any]) -> list[float]:
    return [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]


def sparkline(values: Sequence[float], width: int = 40) -> str:
    numbers = finite_floats(values)
    if not numbers:
        return ""
    if len(numbers) > width:
        size = len(numbers) / width
        numbers = [
            _mean(chunk)
            for i in range(width)
            if (chunk := numbers[int(i * size) : max(int((i + 1) * size), int(i * size) + 1)])
        ]
    low, high = min(numbers), max(numbers)
    half_span = high / 2 - low / 2
    if half_span < 0.5e-12:
        level = min(max(low, 0.0), 1.0)
        return _BARS[round(level * (len(_BARS) - 1))] * len(numbers)
    scale = (len(_BARS) - 1) / half_span
    return "".join(_BARS[round((v / 2 - low / 2) * scale)] for v in numbers)


def format_reward(value: float) -> str:
    return f"{value:.3f}" if abs(value) < 1e6 else f"{value:.4g}"


def format_duration(seconds: float | None) -> str:
    """``7200`` -> ``"2h00m"``; ``75.5`` -> ``"1m16s"``; ``0.0123`` -> ``"12.3ms"``."""
    if seconds is None:
        return "-"
    if seconds == 0:
        return "0s"
    if seconds < 1:
        return f"{seconds * 1000:.1f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def status_timeline(samples: Iterable[tuple[float, str, int]]) -> str:
    """Collapse ``(elapsed, status, polls)`` samples into runs: ``queued x3 (0s-20s) -> running x5 …``."""
    parts = []
    for status, group in itertools.groupby(samples, key=lambda sample: sample[1]):
        run = list(group)
        count, first, last = sum(polls for *_, polls in run), run[0][0], run[-1][0]
        span = format_duration(first) if count == 1 else f"{format_duration(first)}-{format_duration(last)}"
        parts.append(f"{status} x{count} ({span})")
    return " -> ".join(parts) or "(no polls)"


def reward_curve_line(rewards: Sequence[float]) -> str:
    """``first 0.25 -> last 0.75 (max 0.80, n=10) ▁▂▄▆█``, or ``(no rewards reported)``."""
    if not rewards:
        return "(no rewards reported)"
    return (
        f"first {format_reward(rewards[0])} -> last {format_reward(rewards[-1])} "
        f"(max {format_reward(max(rewards))}, n={len(rewards)}) {sparkline(rewards)}"
    )


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    text_rows = [[_cell(c) for c in row] for row in rows]
    widths = [
        max([len(h), *(len(row[i]) for row in text_rows if i < len(row))]) for i, h in enumerate(headers)
    ]
    lines = [list(headers), ["-" * w for w in widths], *text_rows]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip() for row in lines
    )


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={_cell(v)}" for k, v in value.items())
    return str(value)
