"""What installing the plugin costs every pytest run: the import at pytest start.

Fresh interpreters import pytest, httpx and respx (what such an environment pays anyway), then
the plugin on top; the plugin's import is its extra cost. Interleaved, after a warm-up that
writes bytecode; medians of CPU (the target: other load on the machine does not count) and wall.
Run alone: ``python bench/bench_import.py [--quick] [ROOT]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import SETTINGS, Sample, add_quick_flag, medians, report  # noqa: E402

PLUGIN = "pytest_synth_rl.plugin.hooks"
TARGET_MS = 30.0
RUNS = 9
QUICK_RUNS = 3

_PROBE = f"""
import sys, time
def now():
    return time.perf_counter(), time.process_time()
start = now()
import pytest, httpx, respx
baseline = now()
if sys.argv[1] == "plugin":
    import {PLUGIN}
    start, baseline = baseline, now()
print(baseline[0] - start[0], baseline[1] - start[1])
"""


def measure_once(root: Path = ROOT, pycache: Path | None = None, what: str = "plugin") -> Sample:
    """Seconds of one import in a fresh interpreter: pytest+httpx+respx (*what* ``"baseline"``)
    or the plugin on top of them (``"plugin"``).

    With *pycache*, bytecode is written there (warm runs, as a user's second run is) and never
    into the source tree."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if pycache is not None:
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
    env["PYTHONPATH"] = str(root)
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, what],
        cwd=root,
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=120,
    )
    wall, cpu = (float(x) for x in done.stdout.split())
    return Sample(wall, cpu)


def main(root: Path = ROOT) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="bench-import-pycache-") as raw:
        pycache = Path(raw)
        times = medians(
            {what: lambda w=what: measure_once(root, pycache, w) for what in ("plugin", "baseline")},
            SETTINGS.pick(RUNS, QUICK_RUNS),
        )
    extra, baseline = times["plugin"] * 1000, times["baseline"] * 1000
    return [
        report(
            "plugin import at pytest start",
            ours=extra.wall,
            ours_cpu=extra.cpu,
            baseline_name="pytest+httpx+respx",
            baseline=baseline.wall,
            baseline_cpu=baseline.cpu,
            unit="ms",
            ratio=extra.cpu / baseline.cpu if baseline.cpu else 0.0,
            target_text=f"<= {TARGET_MS:g} ms CPU extra",
            met=extra.cpu <= TARGET_MS,
        )
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    add_quick_flag(parser)
    parser.add_argument("root", nargs="?", type=Path, default=ROOT)
    args = parser.parse_args()
    SETTINGS.quick = args.quick
    main(args.root)
