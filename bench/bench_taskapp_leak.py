"""Memory over many start/stop cycles of a task app loaded from a ``.py`` path.

RSS after 300 cycles of the example task app vs after 10 warm-up cycles (target <= 1.10x).
Run alone: ``python bench/bench_taskapp_leak.py [--quick]`` (100 cycles).
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import SETTINGS, report, rss_mb, run_alone  # noqa: E402
from pytest_synth_rl.taskapp import InProcessTaskApp  # noqa: E402

TASK_APP = ROOT / "examples" / "arithmetic_task_app.py"
WARM_UP = 10
CYCLES = 300
QUICK_CYCLES = 100
TARGET = 1.10
KEY = "bench-taskapp-leak-key-0c1d"


def task_app_modules() -> int:
    return sum(1 for name in list(sys.modules) if name.startswith("_synth_task_app_"))


def cycle(times: int) -> None:
    for _ in range(times):
        with InProcessTaskApp(task_app_path=TASK_APP, api_key=KEY, export_api_key=False):
            pass


def main(cycles: int | None = None) -> list[str]:
    cycles = SETTINGS.pick(CYCLES, QUICK_CYCLES) if cycles is None else cycles
    cycle(WARM_UP)
    gc.collect()
    before = rss_mb()
    modules_before = task_app_modules()
    cycle(cycles)
    gc.collect()
    after = rss_mb()
    modules_after = task_app_modules()
    ratio = after / before
    line = report(
        f"RSS after {cycles} .py task app start/stop cycles (task app modules in sys.modules: "
        f"{modules_before} -> {modules_after})",
        ours=after,
        baseline_name=f"RSS after {WARM_UP} warm-up cycles",
        baseline=before,
        unit="MB",
        ratio=ratio,
        target_text=f"<= {TARGET:g}x",
        met=ratio <= TARGET,
    )
    return [line]


if __name__ == "__main__":
    run_alone(main)
