"""The reward charts as their readers parse them: GitHub's Mermaid grammar, the SVG in a browser,
and the text around them (step summary heading, merged terminal table)."""

from __future__ import annotations

import itertools
import math
import re
import xml.etree.ElementTree as ET

import pytest

from pytest_synth_rl.reporting.html import reward_chart_svg
from pytest_synth_rl.reporting.report import JobRecord, RunReport, mermaid_chart

SVG = "{http://www.w3.org/2000/svg}"
LARGEST = 1.7976931348623157e308

# -- Mermaid xychart numbers --------------------------------------------------------------------
#: A number as Mermaid's xychart grammar reads it: no exponent, no "inf", no "nan".
MERMAID_NUMBER = re.compile(r"[+-]?(\d+(\.\d+)?|\.\d+)")
Y_AXIS = re.compile(r'    y-axis "reward(?: \(×10\^(?P<exponent>\d+)\))?" (?P<low>\S+) --> (?P<high>\S+)')


def _record(rewards: list[float], status: str = "succeeded") -> JobRecord:
    return JobRecord(test_id="t.py::test_x", job_id="job_1", status=status, backend="b", rewards=rewards)


def _chart_numbers(chart: str) -> tuple[float, float, list[float], float]:
    """The y axis bounds, the line's points and the axis unit (a power of ten) of a chart, each
    number checked against the grammar."""
    lines = chart.splitlines()
    axis = [m for line in lines if (m := Y_AXIS.fullmatch(line))]
    assert len(axis) == 1, chart
    (line,) = [line for line in lines if line.startswith("    line [")]
    points = line.removeprefix("    line [").removesuffix("]").split(", ")
    numbers = [axis[0]["low"], axis[0]["high"], *points]
    for number in numbers:
        assert MERMAID_NUMBER.fullmatch(number), f"{number!r} in {chart}"
        assert len(number) <= 40  # bounded, whatever the value
    unit = 10.0 ** int(axis[0]["exponent"] or 0)
    return float(numbers[0]), float(numbers[1]), [float(p) for p in points], unit


CURVES = {
    "tens of thousands and a tiny one": [12345.6, 5e-05, 0.5],
    "up to 1e12": [1e12, -1e9, 0.0, 7.0],
    "precision beyond four digits": [123456.5, 123457.5, 123458.5],
    "tiny next to ordinary": [1e-300, 0.5, 0.25],
    "all tiny": [1e-300, 2e-300, -1e-300],
    "small span": [0.1, 0.1 + 1e-9, 0.1 + 2e-9],
    "largest floats": [1e308, -1e308, 0.0],
    "flat at the largest float": [LARGEST, LARGEST],
    "largest and smallest": [-LARGEST, 5e-324, LARGEST],
    "just beyond 1e12": [2.5e12, 1e12 + 0.5],
    "flat negative": [-3.0, -3.0, -3.0],
    "one point": [0.42],
}


@pytest.mark.parametrize("rewards", list(CURVES.values()), ids=list(CURVES))
def test_every_number_in_a_mermaid_chart_is_a_plain_decimal_mermaid_reads(rewards: list[float]) -> None:
    # Before, `{:.4g}` wrote 1.235e+04, 5e-05, 1e+12, -1e+308: GitHub drew no chart at all.
    low, high, points, unit = _chart_numbers(mermaid_chart(_record(rewards)))
    assert len(points) == len(rewards)
    assert low < high
    assert all(low <= p <= high for p in points)
    # The shape stays: values apart by more than a millionth of the curve's span stay in order
    # (a curve flat to 1e-12 of its size, such as one of 1e-300s, may print as flat).
    span = max(rewards) / 2 - min(rewards) / 2
    flat = span < 0.5e-12 * max(1.0, *map(abs, rewards))
    for (a, pa), (b, pb) in itertools.pairwise(zip(rewards, points, strict=True)):
        if flat:
            assert pa == pb
        elif b / 2 - a / 2 > span * 1e-6:
            assert pb > pa
        elif a / 2 - b / 2 > span * 1e-6:
            assert pb < pa
    # Each point is its reward (in the axis unit), to a hundred-thousandth of the axis.
    for reward, point in zip(rewards, points, strict=True):
        assert point == pytest.approx(reward / unit, rel=0, abs=(high - low) * 1e-5)


def test_mermaid_numbers_resolve_a_millionth_of_the_span_without_trailing_zeros() -> None:
    chart = mermaid_chart(_record([123456.5, 123457.5, 0.123456789 + 123456]))
    assert '    y-axis "reward" 123456.12346 --> 123457.5' in chart.splitlines()
    assert "    line [123456.5, 123457.5, 123456.12346]" in chart.splitlines()
    chart = mermaid_chart(_record([12345.6, 5e-05]))
    assert "    line [12345.6, 0]" in chart.splitlines()  # 5e-05 is 0 at this scale
    assert '    y-axis "reward" -1000000000 --> 1000000000000' in mermaid_chart(_record([1e12, -1e9]))


def test_a_curve_beyond_1e12_is_charted_in_a_power_of_ten() -> None:
    chart = mermaid_chart(_record([1e308, -1e308, 5e307]))
    assert '    y-axis "reward (×10^308)" -1 --> 1' in chart.splitlines()
    assert "    line [1, -1, 0.5]" in chart.splitlines()


def test_nan_and_infinity_are_left_out_of_the_chart_and_the_other_steps_kept() -> None:
    chart = mermaid_chart(_record([0.25, math.nan, 0.5, math.inf, 0.75]))
    assert '    x-axis "step" [1, 3, 5]' in chart.splitlines()
    assert "    line [0.25, 0.5, 0.75]" in chart.splitlines()
    report = RunReport()
    report.extend([_record([math.nan, math.inf]), _record([0.5, math.nan])])
    assert report.render_markdown().count("```mermaid") == 1  # no chart without a point


# -- the step summary and the merged table ------------------------------------------------------
@pytest.mark.parametrize(("count", "heading"), [(1, "1 job"), (2, "2 jobs")])
def test_the_step_summary_heading_counts_jobs_in_the_singular_and_plural(count: int, heading: str) -> None:
    report = RunReport(mode="offline", backend="b")
    report.extend(_record([0.5]) for _ in range(count))
    assert report.render_markdown().splitlines()[0] == f"### RL jobs (offline, {heading})"


@pytest.mark.parametrize(
    ("mode", "backend", "title"),
    [
        ("offline", "https://api.usesynth.ai", "synth-rl jobs (offline, fake of https://api.usesynth.ai)"),
        ("online", "https://rl.example", "synth-rl jobs (online, https://rl.example)"),
    ],
)
def test_a_titled_terminal_table_starts_with_the_title_of_a_pytest_run(
    mode: str, backend: str, title: str
) -> None:
    report = RunReport(mode=mode, backend=backend)
    report.add(_record([0.5, 0.75]))
    assert report.title == title
    first, *table = report.render_terminal(titled=True).splitlines()
    assert first.strip("=") == f" {title} "
    assert len(first) == 80
    assert table == report.render_terminal().splitlines()
    assert table[0].startswith("test ")


# -- the SVG ------------------------------------------------------------------------------------
def _plot_area(svg: ET.Element) -> tuple[float, float, float, float]:
    """left, right, top, bottom of the plot, from its axes."""
    x_axis, y_axis = [line for line in svg.iter(f"{SVG}line") if line.get("class") == "axis"]
    return (
        float(x_axis.attrib["x1"]),
        float(x_axis.attrib["x2"]),
        float(y_axis.attrib["y1"]),
        float(y_axis.attrib["y2"]),
    )


def _tick_labels(svg: ET.Element) -> dict[str, ET.Element]:
    return {t.attrib["class"]: t for t in svg.iter(f"{SVG}text") if t.get("class", "").startswith("x-")}


def test_a_one_step_curve_is_a_dot_over_its_only_step() -> None:
    # Before, a one-point <polyline> drew nothing, and the step axis read 1 to 2.
    svg = ET.fromstring(reward_chart_svg([0.5]))
    left, right, top, bottom = _plot_area(svg)
    line = svg.find(f"{SVG}polyline[@class='reward']")
    assert line is not None
    assert line.attrib["data-values"] == "0.5"
    dot = svg.find(f"{SVG}circle[@class='reward-point']")
    assert dot is not None
    assert line.attrib["points"] == f"{dot.attrib['cx']},{dot.attrib['cy']}"
    assert float(dot.attrib["r"]) >= 2
    assert left < float(dot.attrib["cx"]) < right
    assert top <= float(dot.attrib["cy"]) <= bottom
    ticks = _tick_labels(svg)
    assert list(ticks) == ["x-only"]
    assert ticks["x-only"].text == "1"
    assert float(ticks["x-only"].attrib["x"]) == pytest.approx(float(dot.attrib["cx"]), abs=0.05)


def test_a_one_step_baseline_is_a_dot_too() -> None:
    svg = ET.fromstring(reward_chart_svg([0.5], baseline=[0.7]))
    dots = {c.attrib["class"]: c for c in svg.iter(f"{SVG}circle") if c.get("class", "").endswith("-point")}
    assert set(dots) == {"reward-point", "baseline-point"}
    assert dots["reward-point"].attrib["cx"] == dots["baseline-point"].attrib["cx"]
    assert float(dots["baseline-point"].attrib["cy"]) < float(dots["reward-point"].attrib["cy"])  # 0.7 above
    # A one-point reward curve next to a longer baseline: a dot at step 1, the axis 1 to 3.
    svg = ET.fromstring(reward_chart_svg([0.5], baseline=[0.2, 0.4, 0.6]))
    assert [c.get("class") for c in svg.iter(f"{SVG}circle")] == ["reward-point"]
    assert {name: t.text for name, t in _tick_labels(svg).items()} == {"x-min": "1", "x-max": "3"}


def test_curves_of_several_points_have_no_dots() -> None:
    svg = ET.fromstring(reward_chart_svg([0.5, 0.6], baseline=[0.4, 0.5]))
    assert not [c for c in svg.iter(f"{SVG}circle") if c.get("class", "").endswith("-point")]


#: An average character of the chart's 11px sans-serif text is under this many pixels wide.
CHAR_WIDTH = 6.5


def _failure_label(svg: ET.Element) -> tuple[str, float, float, float]:
    """The failure label's text, its left and right ends (estimated) and its baseline."""
    text = svg.find(f"{SVG}g[@class='failure']/{SVG}text")
    assert text is not None
    assert text.text
    x, width = float(text.attrib["x"]), CHAR_WIDTH * len(text.text)
    anchor = text.get("text-anchor", "start")
    left = {"start": x, "middle": x - width / 2, "end": x - width}[anchor]
    return text.text, left, left + width, float(text.attrib["y"])


def test_a_job_that_failed_before_its_first_step_says_so_inside_the_plot() -> None:
    # Before: "failed after step 1", anchored left of the y axis (a browser showed "fter step 1"
    # over the "reward" axis title), and a step axis reading 1 to 2 with no points.
    svg = ET.fromstring(reward_chart_svg([], failed=True, timeline=[["running", 0, 5], ["failed", 6, 6]]))
    plot_left, plot_right, top, bottom = _plot_area(svg)
    text, left, right, baseline = _failure_label(svg)
    assert text == "failed before the first step"
    assert plot_left < left
    assert right < plot_right
    assert top + 11 <= baseline <= bottom
    group = svg.find(f"{SVG}g[@class='failure']")
    assert group is not None
    assert group.attrib["data-step"] == "0"
    ring = group.find(f"{SVG}circle")
    assert ring is not None
    assert plot_left < float(ring.attrib["cx"]) - 5
    assert _tick_labels(svg) == {}
    assert "no rewards reported" in [t.text for t in svg.iter(f"{SVG}text")]


FAILED_CURVES = {
    "one step": [0.5],
    "step 2 at the top": [0.1, 0.9],
    "step 2 at the bottom": [0.9, 0.1],
    "last step at the top": [0.1, 0.5, 0.9],
    "last step at the bottom": [0.9, 0.5, 0.1],
}


@pytest.mark.parametrize("rewards", list(FAILED_CURVES.values()), ids=list(FAILED_CURVES))
@pytest.mark.parametrize("steps", [None, 10], ids=["own-steps", "ten-step-baseline"])
def test_the_failure_label_stays_inside_the_plot(rewards: list[float], steps: int | None) -> None:
    baseline = [0.5] * steps if steps else []
    svg = ET.fromstring(reward_chart_svg(rewards, baseline=baseline, failed=True))
    plot_left, plot_right, top, bottom = _plot_area(svg)
    text, left, right, baseline_y = _failure_label(svg)
    assert text == f"failed after step {len(rewards)}"
    assert plot_left < left
    assert right <= plot_right
    assert top + 11 <= baseline_y <= bottom
    group = svg.find(f"{SVG}g[@class='failure']")
    assert group is not None
    assert group.attrib["data-step"] == str(len(rewards))


@pytest.mark.parametrize("unknown", [None, math.nan, math.inf])
def test_a_status_band_with_an_unknown_time_shares_the_band_evenly(unknown: float | None) -> None:
    # A NaN written to JSON reads back as null: the band once called float() on it.
    record = JobRecord(
        "t.py::test_x", "job_1", "failed", "b", timeline=[["queued", 0.0, unknown], ["failed", unknown, 5.0]]
    )
    svg = ET.fromstring(reward_chart_svg([], failed=True, timeline=record.to_json()["timeline"]))
    band = svg.findall(f"{SVG}g[@class='timeline']/{SVG}g")
    widths = [float(group.find(f"{SVG}rect").attrib["width"]) for group in band]  # type: ignore[union-attr]
    assert [group.attrib["data-status"] for group in band] == ["queued", "failed"]
    assert widths[0] == widths[1] > 0
    assert "queued 0s-?" in [title.text for title in svg.iter(f"{SVG}title")]
