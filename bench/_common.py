"""What every benchmark shares: the line format, wall + CPU medians, and the quick/full sizes.

``<target>: ours <x> <unit> (CPU <c> <unit>) vs <baseline> <y> <unit> (CPU <d> <unit>) = <ratio>x
(target <t>): met``
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


# -- sizes: full by default, smaller under --quick -------------------------------------------------
@dataclass
class Settings:
    """The run's size: ``quick`` runs every target with fewer repeats and smaller suites."""

    quick: bool = False

    def pick(self, full: T, quick: T) -> T:
        """*full* in a full run, *quick* under ``--quick``: each benchmark asks here for its sizes."""
        return quick if self.quick else full


SETTINGS = Settings()


def add_quick_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quick", action="store_true", help="fewer repeats and smaller suites (a rough, fast run)"
    )


def run_alone(main: Callable[[], object], argv: Sequence[str] | None = None) -> None:
    """A benchmark's ``__main__`` without options of its own: only ``--quick``."""
    parser = argparse.ArgumentParser()
    add_quick_flag(parser)
    SETTINGS.quick = parser.parse_args(argv).quick
    main()


# -- timing: wall and CPU, medians, contenders interleaved -----------------------------------------
@dataclass(frozen=True)
class Sample:
    """Wall and CPU seconds of one run (CPU: user + system of the measured process or processes)."""

    wall: float
    cpu: float

    def __truediv__(self, count: float) -> Sample:
        return Sample(self.wall / count, self.cpu / count)

    def __mul__(self, factor: float) -> Sample:
        return Sample(self.wall * factor, self.cpu * factor)

    def __sub__(self, other: Sample) -> Sample:
        return Sample(self.wall - other.wall, self.cpu - other.cpu)


class Stopwatch:
    """``with Stopwatch() as watch: ...`` then ``watch.sample``: wall and this process's CPU."""

    sample: Sample

    def __enter__(self) -> Stopwatch:
        self._cpu = time.process_time()
        self._wall = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.perf_counter() - self._wall
        self.sample = Sample(wall, time.process_time() - self._cpu)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_process(command: Sequence[str], **options: Any) -> tuple[subprocess.CompletedProcess[str], Sample]:
    """``subprocess.run`` (output captured as text) and its wall and CPU seconds.

    CPU is the child's and its waited-for descendants' (xdist workers too), read from this
    process's ``RUSAGE_CHILDREN`` before and after, so nothing else may reap children meanwhile.
    """
    cpu = _children_cpu()
    wall = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False, **options)
    return done, Sample(time.perf_counter() - wall, _children_cpu() - cpu)


def medians(
    contenders: Mapping[str, Callable[[], Sample | None]], repeats: int, *, warm_up: bool = True
) -> dict[str, Sample]:
    """Median wall and median CPU of *repeats* runs of each contender, interleaved run by run.

    A contender returns the :class:`Sample` it measured itself (a part of its work, or a child
    process), or ``None`` to have the whole call timed here. The order flips every round, so
    drift on the machine hits every contender alike; one warm-up run each comes first.
    """
    samples: dict[str, list[Sample]] = {name: [] for name in contenders}
    order = list(contenders)
    if warm_up:
        for name in order:
            contenders[name]()
    for _ in range(repeats):
        for name in order:
            with Stopwatch() as watch:
                measured = contenders[name]()
            samples[name].append(measured if measured is not None else watch.sample)
        order.reverse()
    return {
        name: Sample(statistics.median(s.wall for s in runs), statistics.median(s.cpu for s in runs))
        for name, runs in samples.items()
    }


# -- the line -----------------------------------------------------------------------------------
def _cpu(value: float | None, unit: str) -> str:
    return "" if value is None else f" (CPU {value:.4g} {unit})"


def report(
    target: str,
    *,
    ours: float,
    baseline_name: str,
    baseline: float,
    unit: str,
    ratio: float,
    target_text: str,
    met: bool,
    ours_cpu: float | None = None,
    baseline_cpu: float | None = None,
    cpu_unit: str | None = None,
) -> str:
    """Print and return one benchmark line in the project's format (CPU next to wall when given)."""
    cpu_unit = unit if cpu_unit is None else cpu_unit
    unit_text = f" {unit}" if unit else ""
    line = (
        f"{target}: ours {ours:.4g}{unit_text}{_cpu(ours_cpu, cpu_unit)} vs {baseline_name} "
        f"{baseline:.4g}{unit_text}{_cpu(baseline_cpu, cpu_unit)} "
        f"= {ratio:.2f}x (target {target_text}): {'met' if met else 'missed'}"
    )
    print(line, flush=True)
    return line


def rss_mb(pid: int | str = "self") -> float:
    """Resident memory of process *pid* (this one by default), in MB, from ``/proc/<pid>/statm``."""
    with open(f"/proc/{pid}/statm", encoding="ascii") as handle:
        resident_pages = int(handle.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def scripted_job(fake: Any, clock: Any, config: Any, **options: Any) -> Any:
    """An ``RLJob`` from *config* against *fake* on *clock*, for a job with scripted rewards (no
    task app is reached); *options* go to ``RLJob.from_config`` (a transport, an http_client)."""
    from pytest_synth_rl.client import RLJob

    return RLJob.from_config(
        config,
        backend_url=fake.base_url,
        api_key=fake.api_key,
        task_app_url="https://task-app.example.com",
        task_app_api_key="bench-task-app-key",
        skip_health_check=True,
        clock=clock,
        **options,
    )
