"""Virtual time: a two-hour job polled every 10 s, offline, vs 720 bare MockTransport requests.

Ours: submit + 720 polls to the fake on a ``VirtualClock``, reached as the plugin's job fixtures
reach it (``transport=fake.transport()``); an info line gives the respx-mounted fake (plain httpx
code, no transport). The floor: 720 GETs through an ``httpx.MockTransport`` client. Medians of
wall and CPU, interleaved. Target: <= 1.3x wall. Run alone: ``python bench/bench_lifecycle.py [--quick]``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import SETTINGS, Sample, Stopwatch, medians, report, run_alone, scripted_job  # noqa: E402
from pytest_synth_rl.clock import VirtualClock  # noqa: E402
from pytest_synth_rl.fake import FakeSynthBackend  # noqa: E402

CONFIG = ROOT / "examples" / "rl_minimal.toml"
POLLS = 720
INTERVAL = 10.0
# The job ends 7190 s after submission, so polls at t = 0, 10, ..., 7190: exactly 720 of them.
DURATION = (POLLS - 1) * INTERVAL
REPEATS = 7
QUICK_REPEATS = 3
TARGET = 1.3


def run_ours(mounted: bool = False) -> Sample:
    clock = VirtualClock()
    with FakeSynthBackend(clock=clock, rollouts=False) as fake:
        fake.scenario(duration=DURATION, steps=10)
        job = scripted_job(fake, clock, CONFIG, transport=None if mounted else fake.transport())
        with job, Stopwatch() as watch:
            job.submit()
            result = job.poll_until_complete(timeout=DURATION + 60.0, interval=INTERVAL)
        polls = len(fake.calls("status"))
        if result.status != "succeeded" or polls != POLLS:
            raise RuntimeError(f"unexpected run: status={result.status} polls={polls}")
    fake.close()
    return watch.sample


def run_baseline() -> Sample:
    body = json.dumps({"id": "job_rl_000001", "status": "running", "progress": {"completed": 1}}).encode()

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-type": "application/json"})

    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        url = "https://api.usesynth.ai/api/rl/jobs/job_rl_000001"
        headers = {"Authorization": "Bearer sk_test_fake_backend_key"}
        with Stopwatch() as watch:
            for _ in range(POLLS):
                client.get(url, headers=headers).json()
        return watch.sample


def main() -> list[str]:
    contenders = {"ours": run_ours, "mounted": lambda: run_ours(mounted=True), "floor": run_baseline}
    times = medians(contenders, SETTINGS.pick(REPEATS, QUICK_REPEATS))
    ours, mounted, floor = times["ours"], times["mounted"], times["floor"]
    ratio = ours.wall / floor.wall
    line = report(
        f"virtual time: 2 h job polled every 10 s ({POLLS} polls + submit)",
        ours=ours.wall * 1000,
        ours_cpu=ours.cpu * 1000,
        baseline_name=f"{POLLS} bare MockTransport requests",
        baseline=floor.wall * 1000,
        baseline_cpu=floor.cpu * 1000,
        unit="ms",
        ratio=ratio,
        target_text=f"<= {TARGET:g}x wall",
        met=ratio <= TARGET,
    )
    info = (
        f"  info: the same job through the respx-mounted fake: {mounted.wall * 1000:.4g} ms "
        f"(CPU {mounted.cpu * 1000:.4g} ms) = {mounted.wall / floor.wall:.2f}x the floor"
    )
    print(info, flush=True)
    return [line, info]


if __name__ == "__main__":
    run_alone(main)
