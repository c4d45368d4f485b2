"""The benchmark runner and its lines, on tiny configurations (no timing is asserted).

The benchmarks themselves are measurements run by hand or in a dedicated job; what must not rot
is the plumbing: every listed benchmark imports and has ``main``, the runner counts met and
missed targets, a crash is reported and turns the exit code non-zero, ``--quick`` shrinks the
sizes, and the plugin-overhead benchmark really runs its generated suites (ours, the
pytest-httpx peer and the MockTransport floor) and prints lines in the shared format.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _load_runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_runner_under_test", BENCH / "run.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


runner = _load_runner()
overhead = importlib.import_module("bench.bench_plugin_overhead")  # importable once run.py set the path
common = importlib.import_module("bench._common")


@pytest.fixture
def quick() -> Iterator[None]:
    common.SETTINGS.quick = True
    try:
        yield
    finally:
        common.SETTINGS.quick = False


def test_every_listed_benchmark_exists_and_exposes_main() -> None:
    on_disk = {p.stem.removeprefix("bench_") for p in BENCH.glob("bench_*.py")}
    assert set(runner.BENCHMARKS) == on_disk
    for name in runner.BENCHMARKS:
        assert callable(runner.load(name))


def test_runner_counts_verdicts_and_reports_a_crash(capsys: pytest.CaptureFixture[str]) -> None:
    from bench._common import report

    def fine() -> list[str]:
        return [
            report(
                "a",
                ours=1.0,
                baseline_name="b",
                baseline=2.0,
                unit="ms",
                ratio=0.5,
                target_text="<= 1x",
                met=True,
                ours_cpu=0.75,
                baseline_cpu=1.5,
            ),
            report(
                "c: with colon",
                ours=3.0,
                baseline_name="d",
                baseline=1.0,
                unit="ms",
                ratio=3.0,
                target_text="<= 2x",
                met=False,
            ),
            "a skipped line that is not a target",
        ]

    def broken() -> list[str]:
        raise RuntimeError("no server")

    benchmarks = {"fine": fine, "broken": broken}
    result = runner.run(["fine", "broken"], loader=benchmarks.__getitem__)
    out = capsys.readouterr().out
    assert result.summary() == "2 targets: 1 met, 1 missed"
    assert "2 targets: 1 met, 1 missed" in out.splitlines()
    assert result.crashed == {"broken": "RuntimeError: no server"}
    assert "broken: crashed: RuntimeError: no server" in out
    assert result.exit_code == 1
    assert result.lines[0] == "a: ours 1 ms (CPU 0.75 ms) vs b 2 ms (CPU 1.5 ms) = 0.50x (target <= 1x): met"
    first = runner.TARGET_LINE.match(result.lines[0])
    assert first is not None
    assert first.group("ours", "unit", "ours_cpu", "cpu_unit") == ("1", "ms ", "0.75", "ms")
    assert first.group("baseline", "baseline_cpu", "ratio") == ("b 2 ms", "1.5", "0.50")
    second = runner.TARGET_LINE.match(result.lines[1])
    assert second is not None
    assert second.group("target", "ours_cpu", "baseline_cpu") == ("c: with colon", None, None)
    assert re.fullmatch(r"total time: \d+\.\d s", out.splitlines()[-1])

    only_fine = runner.run(["fine"], loader=benchmarks.__getitem__, echo=False)
    assert only_fine.exit_code == 0  # a missed target is a measurement, not a failure


def test_only_selects_benchmarks_and_rejects_unknown_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert runner.parse_args([]) == runner.Options(list(runner.BENCHMARKS), quick=False)
    chosen = runner.parse_args(["--only", "xdist", "--only", "lifecycle", "--quick"])
    assert chosen == runner.Options(["xdist", "lifecycle"], quick=True)
    with pytest.raises(SystemExit) as exit_info:
        runner.parse_args(["--only", "nope"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'nope'" in capsys.readouterr().err


def test_quick_shrinks_every_size_and_is_accepted_alone(quick: None, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: dict[str, Any] = {}

    def fake_measure(tests: int, variants: Any, repeats: int, **options: Any) -> None:
        asked.update(tests=tests, variants=tuple(variants), repeats=repeats, splits=options["splits"])
        raise StopIteration  # the sizes are what this test wants, not a run

    monkeypatch.setattr(overhead, "measure", fake_measure)
    with pytest.raises(StopIteration):
        overhead.main()
    assert asked == {"tests": 150, "variants": ("scripted",), "repeats": 3, "splits": None}
    assert overhead.QUICK_TESTS < overhead.TESTS
    assert overhead.QUICK_REPEATS < overhead.REPEATS
    xdist = importlib.import_module("bench.bench_xdist")
    assert xdist.QUICK_TESTS < xdist.TESTS
    assert common.SETTINGS.pick(xdist.TESTS, xdist.QUICK_TESTS) == xdist.QUICK_TESTS
    common.SETTINGS.quick = False
    common.run_alone(lambda: None, ["--quick"])  # a benchmark run alone takes --quick too
    assert common.SETTINGS.quick is True


def test_medians_interleave_and_take_samples_the_contenders_measured() -> None:
    calls: list[str] = []
    walls = iter([9.0, 1.0, 3.0])

    def measured() -> Any:
        calls.append("measured")
        return common.Sample(next(walls), 0.5)

    def timed() -> None:
        calls.append("timed")

    times = common.medians({"measured": measured, "timed": timed}, 3, warm_up=False)
    assert calls == ["measured", "timed", "timed", "measured", "measured", "timed"]
    assert times["measured"] == common.Sample(3.0, 0.5)  # what it returned, not the call's time
    assert times["timed"].wall >= 0.0
    assert times["timed"].cpu >= 0.0

    calls.clear()
    walls = iter([100.0, 2.0])  # the warm-up's sample is not one of the medians
    warmed = common.medians({"measured": measured, "timed": timed}, 1)
    assert calls == ["measured", "timed", "measured", "timed"]  # one warm-up run each comes first
    assert warmed["measured"] == common.Sample(2.0, 0.5)


@pytest.mark.slow
def test_plugin_overhead_runs_ours_and_both_floors_and_prints_target_lines(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The warm-up runs (a cache-warming copy of each timed run) are left out here: what they do is
    # checked on the medians alone above, and this test times nothing.
    monkeypatch.setattr(overhead, "medians", functools.partial(common.medians, warm_up=False))

    def tiny() -> list[str]:
        lines: list[str] = overhead.main(tests=2, variants=("scripted",), repeats=1)
        return lines

    result = runner.run(["plugin_overhead"], loader=lambda name: tiny, echo=False)
    assert result.exit_code == 0, result.crashed
    floor, peer = (runner.TARGET_LINE.match(line) for line in result.lines[:2])
    assert floor is not None, result.lines[0]
    assert peer is not None, result.lines[1]
    assert (
        floor.group("target")
        == "plugin overhead per offline job test (scripted rewards, no rollouts, 2 tests)"
    )
    assert floor.group("unit") == "ms/test "
    assert floor.group("cpu_unit") == "ms/test"
    assert floor.group("baseline").startswith("bare MockTransport tests (9 exchanges, shared client) ")
    assert floor.group("target_text") == "<= 1.3x on CPU per test above empty tests"
    assert peer.group("target").endswith(" vs pytest-httpx")
    assert peer.group("baseline").startswith("pytest-httpx tests (9 mocked exchanges) ")
    assert peer.group("target_text") == "< 1x on CPU per test above empty tests"
    for target in (floor, peer):
        assert target.group("ours_cpu") is not None
        assert target.group("baseline_cpu") is not None
    assert result.summary().startswith("2 targets: ")
    kinds = ("empty", "scripted", "httpx_mock", "mock_transport")
    times = ", ".join(rf"{kind} \S+ s \(CPU \S+ s\)" for kind in kinds)
    assert re.fullmatch(rf"  info: suite times for 2 tests: {times}", result.lines[-1])
    phases = r"first setup \d+ ms \(= [\d.]+ ms/test\), then setup [\d.]+ / call [\d.]+ / teardown [\d.]+ ms"
    head = r"  info: where a test's time goes \(medians of one extra run\): "
    split = "; ".join(f"{kind}: {phases}" for kind in kinds)
    assert re.fullmatch(rf"{head}{split}", result.lines[-2])
    assert result.lines[0] in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["httpx_mock", "mock_transport"])
def test_the_floor_suites_run_and_pass(kind: str, tmp_path: Path) -> None:
    folder = overhead.write_suite(tmp_path, kind, 3, per_module=2)
    exchanges = json.loads((folder / "exchanges.json").read_text())
    assert [(e["method"], e["status"]) for e in exchanges] == [("POST", 201)] + [("GET", 200)] * 8
    assert exchanges[-2]["body"]["status"] == "succeeded"
    assert exchanges[-1]["url"].split("?")[0].endswith("/metrics")
    text = (folder / f"test_{kind}_000.py").read_text()
    assert text.count("def test_job_") == 2
    assert ("httpx_mock.add_response(" in text) is (kind == "httpx_mock")
    assert ("httpx.MockTransport(handler)" in text) is (kind == "mock_transport")
    sample = overhead.run_suite(folder, 3)  # raises unless all 3 passed
    assert sample.wall > 0.0
    assert sample.cpu > 0.0


def test_write_suite_rejects_unknown_kinds(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown suite kind 'fast': use one of empty, default, "):
        overhead.write_suite(tmp_path, "fast", 3)
    folder = overhead.write_suite(tmp_path, "immediate", 3, per_module=2)
    modules = sorted(p.name for p in folder.glob("test_*.py"))
    assert modules == ["test_immediate_000.py", "test_immediate_001.py"]
    text = (folder / modules[0]).read_text()
    assert "synth_scenario(immediate=True)" in text
    assert text.count("def test_job_") == 2
