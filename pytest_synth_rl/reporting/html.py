"""Reward curves in pytest-html reports: each job's curve as a small inline SVG (axes, reward and
baseline curves, the failure point, a band of statuses)."""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Sequence
from typing import Any
from xml.sax.saxutils import escape, quoteattr

import pytest

from pytest_synth_rl.baselines import BaselineError, BaselineStore
from pytest_synth_rl.plugin.settings import SynthSettings
from pytest_synth_rl.reporting.render import finite_floats as _finite
from pytest_synth_rl.reporting.summary import carried_records

WIDTH, HEIGHT = 480, 230
LEFT, RIGHT, TOP, BOTTOM = 56, 464, 30, 160
BAND_TOP, BAND_HEIGHT = 196, 14
CHAR_WIDTH, TEXT_HEIGHT = 6.5, 11
FAILURE_COLOR = "#d1242f"
SERIES = {
    "reward": ("#1f6feb", ' stroke-width="2"', 3.5),
    "baseline": ("#a5b1bd", ' stroke-width="6" stroke-opacity="0.7" stroke-linecap="round"', 5),
    "failure": (FAILURE_COLOR, ' stroke-width="2"', 5),
}
STATUS_COLORS = {
    "queued": "#afb8c1",
    "pending": "#afb8c1",
    "running": "#54aeff",
    "succeeded": "#2da44e",
    "failed": "#d1242f",
    "cancelled": "#bf8700",
}


def _num(value: float) -> str:
    return f"{value:.4g}"


def reward_chart_svg(
    rewards: Sequence[float],
    *,
    baseline: Sequence[float] = (),
    failed: bool = False,
    timeline: Sequence[Sequence[Any]] = (),
    title: str = "",
) -> str:
    """One ``<svg>`` of a reward curve; *timeline* holds ``(status, first_seconds, last_seconds)`` runs."""
    rewards, baseline = _finite(rewards), _finite(baseline)
    values = rewards + baseline
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    half_span = high / 2 - low / 2
    if half_span < 0.5e-12:
        low, high = low - 0.5, high + 0.5
        half_span = high / 2 - low / 2  # still 0 when 0.5 is lost in a value as large as 1e17
    steps = max(len(rewards), len(baseline))
    middle = (LEFT + RIGHT) / 2

    def x(index: int) -> float:  # index 0 is step 1; a single step stands in the middle
        return LEFT + (RIGHT - LEFT) * index / (steps - 1) if steps > 1 else middle

    def y(value: float) -> float:
        share = (value / 2 - low / 2) / half_span if half_span else 0.5  # a flat curve: mid-height
        return BOTTOM - share * (BOTTOM - TOP)

    ticks = {0: [], 1: [("x-only", middle, 1)]}.get(steps, [("x-min", LEFT, 1), ("x-max", RIGHT, steps)])
    step_x, step_anchor = (RIGHT, "end") if steps == 1 else (middle, "middle")
    below = BOTTOM + 14
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="synth-reward-chart" width="{WIDTH}" '
        f'height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11" '
        f'role="img" aria-label={quoteattr("reward curve " + title)}>',
        *([f"<title>{escape(title)}</title>"] if title else []),
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>',
        f'<line class="axis" x1="{LEFT}" y1="{BOTTOM}" x2="{RIGHT}" y2="{BOTTOM}" stroke="#57606a"/>',
        f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{BOTTOM}" stroke="#57606a"/>',
        f'<text class="y-max" x="{LEFT - 4}" y="{TOP + 4}" text-anchor="end">{_num(high)}</text>',
        f'<text class="y-min" x="{LEFT - 4}" y="{BOTTOM}" text-anchor="end">{_num(low)}</text>',
        f'<text x="{LEFT - 4}" y="{(TOP + BOTTOM) / 2 + 4}" text-anchor="end" fill="#57606a">reward</text>',
        *(f'<text class="{c}" x="{at}" y="{below}" text-anchor="middle">{n}</text>' for c, at, n in ticks),
        f'<text x="{step_x}" y="{below}" text-anchor="{step_anchor}" fill="#57606a">step</text>',
    ]
    if baseline:
        parts.extend(_curve("baseline", baseline, x, y))
    if rewards:
        parts.extend(_curve("reward", rewards, x, y))
    else:
        parts.append(
            f'<text x="{middle}" y="{(TOP + BOTTOM) / 2}" text-anchor="middle" '
            'fill="#57606a">no rewards reported</text>'
        )
    if failed:
        parts.append(_failure(rewards, x, y))
    legend = ["reward", *(["baseline"] if baseline else []), *(["failure"] if failed else [])]
    return "".join([*parts, *_legend(legend), *_timeline(timeline), "</svg>"])


def _curve(name: str, values: list[float], x: Any, y: Any) -> list[str]:
    color, style, radius = SERIES[name]
    points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
    data = " ".join(repr(v) for v in values)
    out = [
        f'<polyline class="{name}" data-values="{data}" points="{points}" fill="none" '
        f'stroke="{color}"{style}/>'
    ]
    if len(values) == 1:
        out.append(
            f'<circle class="{name}-point" cx="{x(0):.1f}" cy="{y(values[0]):.1f}" r="{radius}" '
            f'fill="{color}"/>'
        )
    return out


def _failure(rewards: list[float], x: Any, y: Any) -> str:
    label = f"failed after step {len(rewards)}" if rewards else "failed before the first step"
    width = CHAR_WIDTH * len(label)
    if rewards:
        cx, cy = x(len(rewards) - 1), y(rewards[-1])
        if cx - 8 - width >= LEFT + 2:
            tx, anchor = cx - 8, "end"
        else:
            tx, anchor = min(cx + 8, RIGHT - width), "start"
        ty = cy - 8 if cy - 8 - TEXT_HEIGHT >= TOP else cy + 8 + TEXT_HEIGHT
    else:
        tx, anchor = (LEFT + RIGHT) / 2 - width / 2 + 7, "start"  # centred with the ring before it
        ty = (TOP + BOTTOM) / 2 + 8 + TEXT_HEIGHT
        cx, cy = tx - 9, ty - 4
    return (
        f'<g class="failure" data-step="{len(rewards)}"><circle cx="{cx:.1f}" cy="{cy:.1f}" r="5" '
        f'fill="none" stroke="{FAILURE_COLOR}" stroke-width="2"/><text x="{tx:.1f}" y="{ty:.1f}" '
        f'text-anchor="{anchor}" fill="{FAILURE_COLOR}">{label}</text></g>'
    )


def _legend(names: list[str]) -> list[str]:
    out = ['<g class="legend">']
    left = LEFT
    for name in names:
        color, style, _ = SERIES[name]
        mark = f'<line x1="{left}" y1="14" x2="{left + 18}" y2="14" stroke="{color}"{style}/>'
        if name == "failure":
            mark = f'<circle cx="{left + 9}" cy="14" r="5" fill="none" stroke="{color}"{style}/>'
        out.append(f'{mark}<text x="{left + 22}" y="18">{name}</text>')
        left += 30 + 7 * len(name)
    return [*out, "</g>"]


def _timeline(runs: Sequence[Sequence[Any]]) -> list[str]:
    if not runs:
        return []
    times = [_finite([run[1], run[2]]) for run in runs]
    timed = all(len(pair) == 2 for pair in times)
    edges: list[float] = [*(pair[0] for pair in times), max(times[-1])] if timed else []
    if not edges or edges[-1] - edges[0] <= 0:  # untimed, or all at once: equal shares
        edges = list(range(len(runs) + 1))
    span = edges[-1] - edges[0]
    out = [
        f'<g class="timeline"><text x="{LEFT - 4}" y="{BAND_TOP + 11}" text-anchor="end" '
        'fill="#57606a">status</text>'
    ]
    for i, run in enumerate(runs):
        status = str(run[0])
        left = LEFT + (RIGHT - LEFT) * (edges[i] - edges[0]) / span
        width = max((RIGHT - LEFT) * (edges[i + 1] - edges[i]) / span, 3.0)
        when = "-".join(f"{_num(float(t))}s" if _finite([t]) else "?" for t in run[1:3])
        label = escape(status) if width > 7 * len(status) else ""
        out.append(
            f'<g class="status" data-status={quoteattr(status)}><title>{escape(status)} {when}</title>'
            f'<rect x="{left:.1f}" y="{BAND_TOP}" width="{width:.1f}" height="{BAND_HEIGHT}" '
            f'fill="{STATUS_COLORS.get(status, "#8c959f")}"/>'
            f'<text x="{left + 3:.1f}" y="{BAND_TOP + 11}" fill="#ffffff">{label}</text></g>'
        )
    return [*out, "</g>"]


class HtmlCurves:
    def __init__(self, config: pytest.Config, settings: SynthSettings) -> None:
        self.store = BaselineStore(config.rootpath / settings.baseline_dir)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: Any) -> Generator[None, Any, Any]:
        report = yield
        records = carried_records(report) if report.when == "teardown" else []
        if records:
            from pytest_html import extras  # type: ignore[import-untyped]

            baseline: list[float] = []
            if "synth_baseline" in getattr(item, "fixturenames", ()):
                with contextlib.suppress(BaselineError):
                    baseline = getattr(self.store.load(item.nodeid), "reward_curve", [])
            for record in records:
                title, failed = f"{record.job_id or '-'} ({record.status_label})", record.status == "failed"
                svg = reward_chart_svg(
                    record.rewards, baseline=baseline, failed=failed, timeline=record.timeline, title=title
                )
                chart = f'<div class="synth-rl-job"><p>RL job {title}</p>{svg}</div>'
                report.extras = [*getattr(report, "extras", []), extras.html(chart)]
        return report
