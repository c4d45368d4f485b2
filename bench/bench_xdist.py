"""xdist speed-up on a rollout-bound suite: ``pytest -n 2`` vs ``pytest -n 0``, side by side.

The suite is generated as in :mod:`bench.bench_plugin_overhead` (default scenario: real
rollouts against the example task app; each worker starts its own task app and fake). The runs
alternate; medians of wall and of the CPU of the whole process tree. Target: >= 1.5x on wall.

Run alone: ``python bench/bench_xdist.py [--quick] [--tests N] [--repeats R]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import SETTINGS, Sample, add_quick_flag, medians, report  # noqa: E402
from bench.bench_plugin_overhead import run_suite, write_suite  # noqa: E402

TESTS = 40
QUICK_TESTS = 20
REPEATS = 3
QUICK_REPEATS = 2
WORKERS = 2
TARGET = 1.5


def measure(tests: int, repeats: int, scenario: str = "default") -> dict[str, Sample]:
    """Median wall and CPU of the suite with ``-n 0`` (``serial``) and ``-n 2`` (``xdist``)."""
    args = {"serial": ("-n", "0"), "xdist": ("-n", str(WORKERS))}
    with tempfile.TemporaryDirectory(prefix="bench-xdist-") as raw:
        folder = write_suite(Path(raw), scenario, tests)
        pycache = Path(raw) / "pycache"  # bytecode caches kept even under PYTHONDONTWRITEBYTECODE
        run_suite(folder, tests, "--collect-only", pycache=pycache)  # warm the caches
        return medians(
            {
                name: lambda e=extra: run_suite(folder, tests, *e, pycache=pycache)
                for name, extra in args.items()
            },
            repeats,
            warm_up=False,
        )


def main(tests: int | None = None, repeats: int | None = None) -> list[str]:
    tests = SETTINGS.pick(TESTS, QUICK_TESTS) if tests is None else tests
    repeats = SETTINGS.pick(REPEATS, QUICK_REPEATS) if repeats is None else repeats
    times = measure(tests, repeats)
    serial, xdist = times["serial"], times["xdist"]
    speedup = serial.wall / xdist.wall
    line = report(
        f"xdist: {tests} rollout-bound job tests, -n {WORKERS} vs -n 0 (CPU: the process tree)",
        ours=xdist.wall,
        ours_cpu=xdist.cpu,
        baseline_name="-n 0",
        baseline=serial.wall,
        baseline_cpu=serial.cpu,
        unit="s",
        ratio=speedup,
        target_text=f">= {TARGET:g}x faster on {WORKERS} workers",
        met=speedup >= TARGET,
    )
    return [line]


def _cli(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="pytest -n 2 vs -n 0 on a rollout-bound suite")
    add_quick_flag(parser)
    parser.add_argument("--tests", type=int, help=f"tests in the suite ({TESTS}, {QUICK_TESTS} quick)")
    parser.add_argument("--repeats", type=int, help=f"runs of each ({REPEATS}, {QUICK_REPEATS} quick)")
    args = parser.parse_args(argv)
    SETTINGS.quick = args.quick
    main(args.tests, args.repeats)


if __name__ == "__main__":
    _cli()
