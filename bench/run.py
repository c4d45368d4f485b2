"""Run every benchmark and summarise its target lines.

Each ``bench/bench_<name>.py`` exposes ``main() -> list[str]``; the runner counts the lines that
end in ``: met`` / ``: missed`` and prints the total time. Exit code 0 unless a benchmark crashed.
Usage: ``python bench/run.py [--quick] [--only NAME ...]`` (names: see :data:`BENCHMARKS`).
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: Benchmark name -> module, in the order they run (cheap and in-process first).
BENCHMARKS: dict[str, str] = {
    "taskapp": "bench.bench_taskapp",
    "lifecycle": "bench.bench_lifecycle",
    "rollouts": "bench.bench_rollouts",
    "concurrency": "bench.bench_concurrency",
    "plugin_overhead": "bench.bench_plugin_overhead",
    "xdist": "bench.bench_xdist",
    "import": "bench.bench_import",
    "faults": "bench.bench_faults",
    "taskapp_leak": "bench.bench_taskapp_leak",
    "fake_memory": "bench.bench_fake_memory",
    "poll_memory": "bench.bench_poll_memory",
}

from bench._common import SETTINGS, add_quick_flag  # noqa: E402

#: A target line as ``bench._common.report`` prints it (each CPU figure is optional).
TARGET_LINE = re.compile(
    r"^(?P<target>.+?): ours (?P<ours>\S+) (?P<unit>.*?)(?:\(CPU (?P<ours_cpu>\S+) (?P<cpu_unit>[^)]*)\) )?"
    r"vs (?P<baseline>.+?)(?: \(CPU (?P<baseline_cpu>\S+) [^)]*\))? = (?P<ratio>\S+)x "
    r"\(target (?P<target_text>.+)\): (?P<verdict>met|missed)$"
)

Benchmark = Callable[[], list[str]]


@dataclass
class RunResult:
    """Everything one run produced: the benchmarks' lines and which benchmarks crashed."""

    lines: list[str] = field(default_factory=list)
    crashed: dict[str, str] = field(default_factory=dict)

    @property
    def verdicts(self) -> list[str]:
        return [m.group("verdict") for m in map(TARGET_LINE.match, self.lines) if m is not None]

    @property
    def met(self) -> int:
        return self.verdicts.count("met")

    @property
    def missed(self) -> int:
        return self.verdicts.count("missed")

    def summary(self) -> str:
        return f"{self.met + self.missed} targets: {self.met} met, {self.missed} missed"

    @property
    def exit_code(self) -> int:
        return 1 if self.crashed else 0


def load(name: str) -> Benchmark:
    """The ``main`` of benchmark *name* (imported only now: each one pulls in its own stack)."""
    module = importlib.import_module(BENCHMARKS[name])
    main: Benchmark = module.main
    return main


def run(names: Sequence[str], *, loader: Callable[[str], Benchmark] = load, echo: bool = True) -> RunResult:
    """Run the benchmarks *names* in order; a crash is recorded and the next one still runs."""
    result = RunResult()
    run_started = time.perf_counter()
    for name in names:
        if echo:
            print(f"== {name}", flush=True)
        started = time.perf_counter()
        try:
            lines = loader(name)()
        except Exception as exc:  # reported below and in the exit code, never swallowed
            message = f"{type(exc).__name__}: {exc}"
            result.crashed[name] = message
            print(f"{name}: crashed: {message}", flush=True)
            traceback.print_exc(file=sys.stderr)
            continue
        result.lines.extend(lines)
        if echo:
            print(f"   ({name} took {time.perf_counter() - started:.1f} s)", flush=True)
    print(result.summary(), flush=True)
    if result.crashed:
        print(f"crashed: {', '.join(result.crashed)}", flush=True)
    print(f"total time: {time.perf_counter() - run_started:.1f} s", flush=True)
    return result


@dataclass
class Options:
    """What the command line asked for: the benchmarks to run, and whether to run them quick."""

    names: list[str]
    quick: bool = False


def parse_args(argv: Sequence[str] | None, known: Mapping[str, str] = BENCHMARKS) -> Options:
    parser = argparse.ArgumentParser(description="Run pytest-synth-rl's benchmarks side by side.")
    parser.add_argument(
        "--only",
        action="append",
        choices=list(known),
        metavar="NAME",
        help=f"run only this benchmark (repeatable): {', '.join(known)}",
    )
    add_quick_flag(parser)
    args = parser.parse_args(argv)
    return Options(list(args.only) if args.only else list(known), quick=args.quick)


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_args(argv)
    SETTINGS.quick = options.quick
    return run(options.names).exit_code


if __name__ == "__main__":
    sys.exit(main())
