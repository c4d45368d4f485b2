"""Reward curves where people look: pytest-html rows, the step summary, merged shard reports."""

from __future__ import annotations

import html
import itertools
import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from pytest_synth_rl.__main__ import main as cli
from pytest_synth_rl.baselines import BaselineStore
from pytest_synth_rl.plugin.session import offline_job_id_prefix
from pytest_synth_rl.reporting.html import reward_chart_svg
from pytest_synth_rl.reporting.merge import MergeError, merge_baselines, merge_reports
from pytest_synth_rl.reporting.report import JobRecord, RunReport, mermaid_chart

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SVG = "{http://www.w3.org/2000/svg}"
CURVE = [0.2, 0.3, 0.4, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8]

SUITE = f"""
import pytest

pytestmark = [
    pytest.mark.synth_task_app("arithmetic_task_app.py"),
    pytest.mark.synth_rl(config="arithmetic.toml"),
]


@pytest.mark.synth_scenario(reward_curve={CURVE!r})
def test_a_learns(synth_rl_job, synth_expect, synth_baseline):
    job = synth_rl_job()
    job.submit()
    synth_baseline(synth_expect(job).to_succeed(within=7200).result)


@pytest.mark.synth_scenario(reward_curve=[0.1, 0.2, 0.15, 0.3] + [0.1] * 6, outcome="failed", fail_at_step=4)
def test_b_fails(synth_rl_job):
    job = synth_rl_job()
    job.submit()
    job.poll_until_complete(timeout=7200, interval=10)


@pytest.mark.synth_scenario(reward_curve=[0.5] * 10)
def test_c_flat(synth_rl_job):
    job = synth_rl_job()
    job.submit()
    job.poll_until_complete(timeout=7200, interval=10)
"""


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    for name in ("arithmetic_task_app.py", "arithmetic.toml"):
        shutil.copy(EXAMPLES / name, pytester.path / name)
    pytester.makepyfile(test_jobs=SUITE)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    return pytester


def _run(suite: pytest.Pytester, *args: str) -> pytest.RunResult:
    return suite.runpytest("-p", "no:randomly", "--synth-poll-interval=1", *args)


def _svg_values(svg: ET.Element, name: str) -> list[float]:
    line = svg.find(f"{SVG}polyline[@class='{name}']")
    assert line is not None, f"no {name} curve"
    values = [float(v) for v in line.attrib["data-values"].split()]
    points = [tuple(map(float, p.split(","))) for p in line.attrib["points"].split()]
    assert len(points) == len(values)
    # y is one linear map of the values (higher reward, higher on screen), x steps evenly.
    ys = [y for _, y in points]
    if max(values) > min(values):
        scale = (ys[0] - ys[-1]) / (values[-1] - values[0]) if values[-1] != values[0] else None
        for (_, y), v in zip(points, values, strict=True):
            if scale is not None:
                assert y == pytest.approx(ys[0] - scale * (v - values[0]), abs=0.11)
    xs = [x for x, _ in points]
    gaps = {round(b - a, 1) for a, b in itertools.pairwise(xs)}
    assert len(gaps) <= 2  # even spacing up to rounding
    return values


def _html_rows(report: Path) -> dict[str, list[dict[str, Any]]]:
    text = report.read_text(encoding="utf-8")
    blob = re.search(r'data-jsonblob="([^"]*)"', text)
    assert blob is not None
    tests: dict[str, list[dict[str, Any]]] = json.loads(html.unescape(blob.group(1)))["tests"]
    return tests


def test_pytest_html_rows_hold_reward_svgs_matching_the_metrics(suite: pytest.Pytester) -> None:
    first = _run(suite, "--synth-update-baselines", "-k", "test_a")
    first.assert_outcomes(passed=1, deselected=2)
    baseline = BaselineStore(suite.path / "tests/baselines").load("test_jobs.py::test_a_learns")
    assert baseline is not None
    assert baseline.reward_curve == CURVE

    result = _run(suite, "--html=report.html", "--self-contained-html", "--synth-report=jobs.json")
    result.assert_outcomes(passed=3)
    jobs = {job["test_id"]: job for job in json.loads((suite.path / "jobs.json").read_text())["jobs"]}
    rows = _html_rows(suite.path / "report.html")
    for test_id, job in jobs.items():
        extras = [e for entry in rows[test_id] for e in entry.get("extras", [])]
        charts = [e["content"] for e in extras if e["format_type"] == "html" and "<svg" in e["content"]]
        assert len(charts) == 1, test_id
        svg = ET.fromstring(charts[0][charts[0].index("<svg") : charts[0].rindex("</svg>") + 6])
        assert svg.tag == f"{SVG}svg"
        assert _svg_values(svg, "reward") == job["rewards"]
        statuses = [g.attrib["data-status"] for g in svg.iter(f"{SVG}g") if g.get("class") == "status"]
        assert statuses == [run[0] for run in job["timeline"]]
        assert statuses[-1] == job["status"]
        legend = [t.text for t in svg.find(f"{SVG}g[@class='legend']").iter(f"{SVG}text")]  # type: ignore[union-attr]
        labels = {t.get("class"): t.text for t in svg.iter(f"{SVG}text") if t.get("class")}
        assert (labels["x-min"], labels["x-max"]) == ("1", str(len(job["rewards"])))
        if test_id.endswith("test_a_learns"):
            assert job["rewards"] == CURVE
            assert _svg_values(svg, "baseline") == CURVE
            assert legend == ["reward", "baseline"]
            assert (labels["y-min"], labels["y-max"]) == ("0.2", "0.8")
        elif test_id.endswith("test_b_fails"):
            assert job["status"] == "failed"
            failure = [g for g in svg.iter(f"{SVG}g") if g.get("class") == "failure"]
            assert [g.attrib["data-step"] for g in failure] == [str(len(job["rewards"]))]
            assert legend == ["reward", "failure"]
            # The legend's failure mark is the chart's: a ring, not a line.
            assert len(list(svg.find(f"{SVG}g[@class='legend']").iter(f"{SVG}circle"))) == 1  # type: ignore[union-attr]
            assert svg.find(f"{SVG}polyline[@class='baseline']") is None
        else:
            assert job["rewards"] == [0.5] * 10
            assert (labels["y-min"], labels["y-max"]) == ("0", "1")


def test_svg_without_rewards_or_timeline_is_still_valid() -> None:
    svg = ET.fromstring(reward_chart_svg([], failed=True, title='a "quoted" <test>'))
    texts = [t.text for t in svg.iter(f"{SVG}text")]
    assert {"no rewards reported", "failed before the first step"} <= set(texts)
    assert svg.find(f"{SVG}title").text == 'a "quoted" <test>'  # type: ignore[union-attr]


def _record(test_id: str, rewards: list[float], status: str = "succeeded") -> JobRecord:
    return JobRecord(test_id=test_id, job_id="job_1", status=status, backend="b", rewards=rewards)


def test_mermaid_chart_holds_the_job_points() -> None:
    chart = mermaid_chart(_record('t.py::test_"x"', [0.25, 0.5, 0.75]))
    assert chart.splitlines() == [
        "```mermaid",
        "xychart-beta",
        "    title \"t.py::test_'x' (job_1, succeeded)\"",
        '    x-axis "step" [1, 2, 3]',
        '    y-axis "reward" 0.25 --> 0.75',
        "    line [0.25, 0.5, 0.75]",
        "```",
    ]
    long = mermaid_chart(_record("t", [float(i) for i in range(1000)]), max_points=5)
    assert '    x-axis "step" [1, 251, 501, 750, 1000]' in long.splitlines()
    assert "    line [0, 250, 500, 749, 999]" in long.splitlines()


LARGEST = 1.7976931348623157e308


def test_rewards_of_any_finite_size_are_charted() -> None:
    # Before, the span 1e308 - -1e308 overflowed to inf: the sparkline raised "cannot convert float
    # NaN to integer", the SVG drew y=nan, and a flat 1e308 curve divided by zero.
    from pytest_synth_rl.reporting.render import reward_curve_line, sparkline

    assert sparkline([1e308, -1e308]) == "█▁"
    assert sparkline([LARGEST] * 40 + [-LARGEST] * 40, width=4) == "██▁▁"  # bucket means stay finite
    assert (
        reward_curve_line([1e308, 1e308, 1e308, -1e308])
        == "first 1e+308 -> last -1e+308 (max 1e+308, n=4) ███▁"
    )
    svg = ET.fromstring(reward_chart_svg([1e308, -1e308], baseline=[LARGEST, -LARGEST], failed=True))
    lines = {line.get("class"): line.get("points") for line in svg.iter(f"{SVG}polyline")}
    assert lines == {"reward": "56.0,58.8 464.0,131.2", "baseline": "56.0,30.0 464.0,160.0"}
    assert svg.find(f"{SVG}g[@class='failure']/{SVG}circle").get("cy") == "131.2"  # type: ignore[union-attr]
    flat = ET.fromstring(reward_chart_svg([1e308, 1e308]))
    assert [line.get("points") for line in flat.iter(f"{SVG}polyline")] == ["56.0,95.0 464.0,95.0"]
    chart = mermaid_chart(_record("t", [1e308, -1e308]))
    assert '    y-axis "reward (×10^308)" -1 --> 1' in chart.splitlines()
    assert "    line [1, -1]" in chart.splitlines()


def test_step_summary_has_one_chart_per_job_with_rewards() -> None:
    report = RunReport()
    report.extend([_record("t::a", [0.1, 0.2]), _record("t::b", []), _record("t::c", [0.3])])
    markdown = report.render_markdown()
    assert markdown.count("```mermaid") == 2
    assert {"    line [0.1, 0.2]", "    line [0.3]"} <= set(markdown.splitlines())
    assert markdown.index("#### Reward curves") > markdown.index("| t::c |")


def test_step_summary_cells_are_literal_text() -> None:
    # Before: a test id with "<b>" in it went into the table as markup GitHub renders.
    report = RunReport()
    report.add(_record("t.py::test_weird[<b>c</b>|x&y]", [0.5]))
    (row,) = [line for line in report.render_markdown().splitlines() if line.startswith("| t.py::")]
    assert row.startswith("| t.py::test_weird[&lt;b&gt;c&lt;/b&gt;\\|x&amp;y] | job_1 | succeeded |")


# Compared runs differ only in wall time: offline job ids come from the test id, not the shard.
def _without_wall(data: dict[str, Any]) -> dict[str, Any]:
    for job in data["jobs"]:
        job["wall_seconds"] = None
    return data


def _summary_without_wall(text: str) -> str:
    # The wall column is the 5th of the job table.
    out = []
    for line in text.splitlines():
        cells = line.split(" | ")
        if line.startswith("| ") and len(cells) == 7 and "---" not in line:
            cells[4] = "<wall>"
        out.append(" | ".join(cells))
    return "\n".join(out)


def test_three_shards_merge_into_the_unsharded_table_summary_and_json(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = suite.path
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(path / "whole.md"))
    whole_run = _run(suite, "--synth-update-baselines", "--synth-report=whole.json")
    whole_run.assert_outcomes(passed=3)
    shards = []
    for index, name in enumerate(["test_a", "test_b", "test_c"], start=1):
        monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(path / f"shard{index}.md"))
        shard = _run(suite, "--synth-update-baselines", "-k", name, f"--synth-report=shard{index}.json")
        shard.assert_outcomes(passed=1, deselected=2)
        shards.append(str(path / f"shard{index}.json"))
    # Shards finish in any order: pass them shuffled.
    merged_args = [shards[2], shards[0], shards[1], "--report", str(path / "merged.json")]
    assert cli(["merge", *merged_args, "--summary", str(path / "merged.md")]) == 0

    whole = json.loads((path / "whole.json").read_text())
    merged = json.loads((path / "merged.json").read_text())
    assert [job["test_id"] for job in merged["jobs"]] == [
        "test_jobs.py::test_a_learns",
        "test_jobs.py::test_b_fails",
        "test_jobs.py::test_c_flat",
    ]
    assert _without_wall(merged) == _without_wall(whole)
    assert merged["jobs"][0]["rewards"] == CURVE
    assert [job["job_id"] for job in merged["jobs"]] == [
        offline_job_id_prefix(job["test_id"]) + "000001" for job in merged["jobs"]
    ]
    whole_md, merged_md = (path / "whole.md").read_text(), (path / "merged.md").read_text()
    assert merged_md.count("```mermaid") == 3
    assert _summary_without_wall(merged_md) == _summary_without_wall(whole_md)
    assert merge_reports(shards).render_terminal().splitlines()[2].startswith("test_jobs.py::test_a_learns")
    # Titled, the merged table reads like the unsharded run's.
    (whole_title,) = [line for line in whole_run.stdout.lines if " synth-rl jobs (" in line]
    merged_title = merge_reports(shards).render_terminal(titled=True).splitlines()[0]
    assert (
        merged_title.strip("= ")
        == whole_title.strip("= ")
        == "synth-rl jobs (offline, fake of https://api.usesynth.ai)"
    )


def test_merge_errors_name_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.json"
    RunReport(mode="offline", backend="b").write_json(good)
    corrupt = tmp_path / "cut.json"
    corrupt.write_text('{"version": 1, "jobs": [')
    assert cli(["merge", str(good), str(tmp_path / "gone.json")]) == 2
    assert f"error: shard report {tmp_path / 'gone.json'} does not exist" in capsys.readouterr().err
    with pytest.raises(MergeError, match=r"shard report .*cut\.json is not valid JSON \(line 1, column 25"):
        merge_reports([good, corrupt])
    other = tmp_path / "online.json"
    RunReport(mode="online", backend="https://x").write_json(other)
    with pytest.raises(
        MergeError, match=r"online\.json ran online against 'https://x', but .*good\.json ran"
    ):
        merge_reports([good, other])
    bad_row = tmp_path / "row.json"
    bad_row.write_text(json.dumps({"version": 1, "jobs": [{"test_id": "t", "rewrds": []}]}))
    with pytest.raises(MergeError, match=r"jobs\[0\] has unknown keys rewrds"):
        merge_reports([bad_row])


def test_a_shard_given_twice_or_overlapping_shards_are_refused(tmp_path: Path) -> None:
    from pytest_synth_rl.reporting.report import JobRecord

    def shard(name: str, *tests: str) -> Path:
        report = RunReport(mode="offline", backend="b")
        report.extend(
            JobRecord(test_id=t, job_id="job_rl_000001", status="succeeded", backend="b") for t in tests
        )
        return report.write_json(tmp_path / name)

    one, two, three = shard("1.json", "t.py::a"), shard("2.json", "t.py::b"), shard("3.json", "t.py::a")
    assert [r.test_id for r in merge_reports([one, two]).records] == ["t.py::a", "t.py::b"]
    with pytest.raises(MergeError, match=r"shard report .*1\.json is given twice \(both name .*1\.json\)"):
        merge_reports([one, two, tmp_path / "." / "1.json"])
    with pytest.raises(MergeError) as caught:
        merge_reports([one, two, three])
    assert f"test t.py::a has jobs in two shard reports, {one} and {three}" in str(caught.value)
    assert "the shards' slices overlap" in str(caught.value)


def test_baselines_from_shards_merge_and_conflicts_name_file_and_key(tmp_path: Path) -> None:
    one, two, into = BaselineStore(tmp_path / "s1"), BaselineStore(tmp_path / "s2"), tmp_path / "all"
    one.save("t.py::a", {"reward.last": 0.8}, reward_curve=[0.1, 0.8])
    two.save("t.py::b", {"reward.last": 0.5})
    two.save("t.py::a", {"reward.last": 0.8}, reward_curve=[0.1, 0.8])  # same numbers twice: fine
    assert cli(["merge-baselines", str(one.directory), str(two.directory), "--into", str(into)]) == 0
    merged = BaselineStore(into)
    assert merged.load("t.py::a").reward_curve == [0.1, 0.8]  # type: ignore[union-attr]
    assert merged.load("t.py::b").metrics == {"reward.last": 0.5}  # type: ignore[union-attr]
    two.save("t.py::a", {"reward.last": 0.7})
    name = one.path_for("t.py::a").name
    with pytest.raises(
        MergeError, match=rf"baseline conflict in {re.escape(name)}: .* disagree on 'metrics\.reward\.last'"
    ):
        merge_baselines([one.directory, two.directory], into)


def test_reward_curves_are_drawn_only_when_an_html_report_is_written(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_probe="""
        def test_probe(request):
            plugin = request.config.pluginmanager.get_plugin("synth-rl-html")
            print("CURVES", type(plugin).__name__)
        """
    )
    plain = pytester.runpytest("-p", "no:randomly", "-s")
    plain.stdout.fnmatch_lines(["*CURVES NoneType"])
    with_html = pytester.runpytest("-p", "no:randomly", "-s", "--html=report.html")
    with_html.stdout.fnmatch_lines(["*CURVES HtmlCurves"])
    assert (pytester.path / "report.html").is_file()


def test_a_flat_curve_shows_its_level_on_the_reward_scale() -> None:
    # Before, every flat curve drew the middle bar: a job stuck at 0 looked like one stuck at 1.
    from pytest_synth_rl.reporting.render import sparkline

    assert sparkline([0.0] * 4) == "▁▁▁▁"
    assert sparkline([1.0] * 3) == "███"
    assert sparkline([0.5, 0.5]) == "▅▅"
    assert sparkline([-3.0, -3.0]) == "▁▁"  # outside 0..1: the nearest end
    assert sparkline([1e308] * 2) == "██"
    assert sparkline([0.2, 0.2, 0.8]) == "▁▁█"  # a curve with a range still scales to it


def test_a_record_read_back_is_checked_wherever_it_comes_from() -> None:
    # Before, only a report file's rows were checked; a worker's spooled row went in as it was.
    record = _record("t::a", [0.1, 0.2])
    assert JobRecord.from_json(record.to_json()) == record
    with pytest.raises(ValueError, match=r"^\.rewards is 'x', expected a list of numbers$"):
        JobRecord.from_json({**record.to_json(), "rewards": "x"})
    with pytest.raises(ValueError, match=r"^ is not a job row \(no test_id\)$"):
        JobRecord.from_json({"job_id": "j"})
