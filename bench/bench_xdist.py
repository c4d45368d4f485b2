"""xdist speed-up on a rollout-bound suite: ``pytest -n 2`` vs ``pytest -n 0``, side by side.

The suite is generated like the plugin-overhead one (see :mod:`bench.bench_plugin_overhead`):
job tests under the fake's default scenario, each of which drives real rollouts against the
example task app served in-process. Each xdist worker starts its own task app and fake (port 0),
so the two workers share nothing but the machine. Both runs use the same interpreter and
``-p no:cacheprovider``; they alternate, and the median of the repeats is reported.

Target: at least 1.3x faster on 2 workers (this machine has 2 cores; worker start-up, the
second task app and the controller's bookkeeping keep it well below 2x).

Run alone: ``python bench/bench_xdist.py [--tests N] [--repeats R]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import report  # noqa: E402
from bench.bench_plugin_overhead import run_suite, write_suite  # noqa: E402

TESTS = 40
REPEATS = 3
WORKERS = 2
TARGET = 1.3


def measure(tests: int = TESTS, repeats: int = REPEATS, scenario: str = "default") -> dict[str, float]:
    """Median wall seconds of the suite with ``-n 0`` (``serial``) and ``-n 2`` (``xdist``)."""
    samples: dict[str, list[float]] = {"serial": [], "xdist": []}
    args = {"serial": ("-n", "0"), "xdist": ("-n", str(WORKERS))}
    with tempfile.TemporaryDirectory(prefix="bench-xdist-") as raw:
        folder = write_suite(Path(raw), scenario, tests)
        pycache = Path(raw) / "pycache"  # bytecode caches kept even under PYTHONDONTWRITEBYTECODE
        run_suite(folder, tests, "--collect-only", pycache=pycache)  # warm the caches
        for _ in range(repeats):
            for name, extra in args.items():
                samples[name].append(run_suite(folder, tests, *extra, pycache=pycache))
    return {name: statistics.median(values) for name, values in samples.items()}


def main(tests: int = TESTS, repeats: int = REPEATS) -> list[str]:
    seconds = measure(tests, repeats)
    speedup = seconds["serial"] / seconds["xdist"]
    line = report(
        f"xdist: {tests} rollout-bound job tests, -n {WORKERS} vs -n 0",
        ours=seconds["xdist"],
        baseline_name="-n 0",
        baseline=seconds["serial"],
        unit="s",
        ratio=speedup,
        target_text=f">= {TARGET:g}x faster on {WORKERS} workers",
        met=speedup >= TARGET,
    )
    return [line]


def _cli(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="pytest -n 2 vs -n 0 on a rollout-bound suite")
    parser.add_argument("--tests", type=int, default=TESTS)
    parser.add_argument("--repeats", type=int, default=REPEATS)
    args = parser.parse_args(argv)
    main(args.tests, args.repeats)


if __name__ == "__main__":
    _cli()
