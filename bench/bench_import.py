"""What installing the plugin costs every pytest run: the import at pytest start.

pytest imports ``pytest_synth_rl.plugin`` through its entry point in every run, even runs that
never use it, so that import must stay small. Each fresh interpreter imports pytest, httpx and
respx (what any such environment already pays), then the plugin on top of them; the plugin's
import is its extra cost. Timed in CPU seconds of the process, so other processes competing for
the machine do not count, and the fastest of several runs after a warm-up (which writes bytecode
as an installed package has it) is kept.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import report  # noqa: E402

PLUGIN = "pytest_synth_rl.plugin.hooks"
TARGET_MS = 30.0
RUNS = 9

_PROBE = f"""
import time
start = time.process_time()
import pytest, httpx, respx
baseline = time.process_time()
import {PLUGIN}
print(baseline - start, time.process_time() - baseline)
"""


def measure_once(root: Path = ROOT, pycache: Path | None = None) -> tuple[float, float]:
    """(pytest+httpx+respx ms, plugin extra ms) from one fresh interpreter.

    With *pycache*, bytecode is written there (warm runs, as a user's second run is) and never
    into the source tree."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if pycache is not None:
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
    env["PYTHONPATH"] = str(root)
    done = subprocess.run(
        [sys.executable, "-c", _PROBE],
        cwd=root,
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=120,
    )
    baseline, extra = (float(x) * 1000 for x in done.stdout.split())
    return baseline, extra


def main(root: Path = ROOT) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="bench-import-pycache-") as pycache:
        measure_once(root, Path(pycache))  # warm-up: writes bytecode, fills the OS file cache
        samples = [measure_once(root, Path(pycache)) for _ in range(RUNS)]
    baseline = min(s[0] for s in samples)
    extra = min(s[1] for s in samples)
    return [
        report(
            "plugin import at pytest start",
            ours=extra,
            baseline_name="pytest+httpx+respx",
            baseline=baseline,
            unit="ms",
            ratio=extra / baseline if baseline else 0.0,
            target_text=f"<= {TARGET_MS:g} ms extra",
            met=extra <= TARGET_MS,
        )
    ]


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT)
