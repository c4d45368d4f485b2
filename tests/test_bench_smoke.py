"""The benchmark runner and its lines, on tiny configurations (no timing is asserted).

The benchmarks themselves are measurements run by hand or in a dedicated job; what must not rot
is the plumbing: every listed benchmark imports and has ``main``, the runner counts met and
missed targets, a crash is reported and turns the exit code non-zero, and the plugin-overhead
benchmark really runs generated suites and prints a line in the shared format.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

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

    only_fine = runner.run(["fine"], loader=benchmarks.__getitem__, echo=False)
    assert only_fine.exit_code == 0  # a missed target is a measurement, not a failure


def test_only_selects_benchmarks_and_rejects_unknown_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert runner.parse_args([]) == list(runner.BENCHMARKS)
    assert runner.parse_args(["--only", "xdist", "--only", "lifecycle"]) == ["xdist", "lifecycle"]
    with pytest.raises(SystemExit) as exit_info:
        runner.parse_args(["--only", "nope"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'nope'" in capsys.readouterr().err


@pytest.mark.slow
def test_plugin_overhead_runs_generated_suites_and_prints_a_target_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def tiny() -> list[str]:
        lines: list[str] = overhead.main(tests=2, variants=("scripted",), repeats=1)
        return lines

    result = runner.run(["plugin_overhead"], loader=lambda name: tiny, echo=False)
    assert result.exit_code == 0, result.crashed
    target = runner.TARGET_LINE.match(result.lines[0])
    assert target is not None, result.lines[0]
    assert target.group("target").startswith("plugin overhead per offline job test (scripted rewards")
    assert target.group("unit") == "ms/test "
    assert target.group("target_text") == "<= 2 ms/test above empty tests"
    assert result.summary() in {"1 targets: 1 met, 0 missed", "1 targets: 0 met, 1 missed"}
    assert re.fullmatch(
        r"  info: suite wall times for 2 tests: empty \S+ s, scripted \S+ s", result.lines[-1]
    )
    phases = r"first setup \d+ ms \(= [\d.]+ ms/test\), then setup [\d.]+ / call [\d.]+ / teardown [\d.]+ ms"
    head = r"  info: where a test's time goes \(medians of one extra run\): "
    assert re.fullmatch(rf"{head}empty: {phases}; scripted: {phases}", result.lines[-2])
    assert result.lines[0] in capsys.readouterr().out


def test_write_suite_rejects_unknown_kinds(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown suite kind 'fast'"):
        overhead.write_suite(tmp_path, "fast", 3)
    folder = overhead.write_suite(tmp_path, "immediate", 3, per_module=2)
    modules = sorted(p.name for p in folder.glob("test_*.py"))
    assert modules == ["test_immediate_000.py", "test_immediate_001.py"]
    text = (folder / modules[0]).read_text()
    assert "synth_scenario(immediate=True)" in text
    assert text.count("def test_job_") == 2
