"""Memory of a long wait: a two-hour job polled every 100 ms offline (72,000 status polls).

This process's RSS after the wait vs after a 1,000-poll warm-up (target <= 1.10x: a wait's
history keeps what changed, not every poll); its wall and CPU are printed next to each other.
Run alone: ``python bench/bench_poll_memory.py [--quick]`` (a half-hour wait).
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import SETTINGS, Stopwatch, report, rss_mb, run_alone, scripted_job  # noqa: E402
from pytest_synth_rl.client import JobResult  # noqa: E402
from pytest_synth_rl.clock import VirtualClock  # noqa: E402
from pytest_synth_rl.fake import FakeSynthBackend  # noqa: E402

CONFIG = ROOT / "examples" / "rl_minimal.toml"
INTERVAL = 0.1
DURATION = 7200.0
QUICK_DURATION = 1800.0  # half an hour: 18,000 polls
WARM_UP = 100.0  # seconds of virtual time: 1,000 polls
STEPS = 10
TARGET = 1.10


def wait(duration: float) -> JobResult:
    """Submit a job lasting *duration* virtual seconds and poll it to its end every 100 ms."""
    clock = VirtualClock()
    with FakeSynthBackend(clock=clock, rollouts=False) as fake:
        fake.scenario(duration=duration, steps=STEPS)
        job = scripted_job(fake, clock, CONFIG)
        with job:
            job.submit()
            result = job.poll_until_complete(timeout=duration + 60.0, interval=INTERVAL)
    fake.close()
    if result.status != "succeeded":
        raise RuntimeError(f"unexpected run: status={result.status} polls={result.polls}")
    return result


def main() -> list[str]:
    duration = SETTINGS.pick(DURATION, QUICK_DURATION)
    wait(WARM_UP)
    gc.collect()
    before = rss_mb()
    with Stopwatch() as watch:
        result = wait(duration)
    gc.collect()
    after = rss_mb()
    took = watch.sample
    line = f"the {duration:g} s wait: {result.polls} polls in {took.wall:.2f} s wall (CPU {took.cpu:.2f} s)"
    print(line, flush=True)
    return [
        line,
        report(
            f"RSS after a {duration:g} s wait polled every {INTERVAL:g} s ({result.polls} polls, "
            f"{len(result.history)} kept in its history)",
            ours=after,
            baseline_name="after a 1,000-poll warm-up wait",
            baseline=before,
            unit="MB",
            ratio=after / before,
            target_text=f"<= {TARGET:g}x",
            met=after / before <= TARGET,
        ),
    ]


if __name__ == "__main__":
    run_alone(main)
