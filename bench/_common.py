"""Shared output format for every benchmark: one line per target, measured side by side.

``<target>: ours <x> vs <baseline> <y> = <ratio> (target <t>): met``
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable


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
) -> str:
    """Print and return one benchmark line in the project's format."""
    line = (
        f"{target}: ours {ours:.4g} {unit} vs {baseline_name} {baseline:.4g} {unit} "
        f"= {ratio:.2f}x (target {target_text}): {'met' if met else 'missed'}"
    )
    print(line, flush=True)
    return line


def best_of(fn: Callable[[], object], repeat: int = 5) -> float:
    """Median wall time of *repeat* calls of *fn* (seconds): robust to one noisy run."""
    times: list[float] = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def rss_mb(pid: int | str = "self") -> float:
    """Resident memory of process *pid* (this one by default), in MB, from ``/proc/<pid>/statm``."""
    with open(f"/proc/{pid}/statm", encoding="ascii") as handle:
        resident_pages = int(handle.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE") / 2**20
