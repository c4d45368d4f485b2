"""Rollout throughput: the fake driving real rollouts vs raw httpx requests to the same task app.

Ours: an ``immediate`` job through the fake, every rollout against the example task app served
by ``InProcessTaskApp``; the floor: the same request bodies POSTed with a plain ``httpx.Client``.
Medians of wall and CPU (as ms a rollout). Target: ours >= 70% of the floor's rate.
Run alone: ``python bench/bench_rollouts.py [--quick]``.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import SETTINGS, Sample, Stopwatch, medians, report, run_alone  # noqa: E402
from pytest_synth_rl.client import RLJob  # noqa: E402
from pytest_synth_rl.clock import VirtualClock  # noqa: E402
from pytest_synth_rl.fake import FakeSynthBackend  # noqa: E402
from pytest_synth_rl.fake.model.inference import StubInference  # noqa: E402
from pytest_synth_rl.taskapp import InProcessTaskApp, task_app_auth_headers  # noqa: E402

CONFIG = ROOT / "examples" / "arithmetic.toml"
APP = ROOT / "examples" / "arithmetic_task_app.py"
STEPS = 20
PER_STEP = 8
REPEATS = 5
QUICK_REPEATS = 3
TARGET = 0.70
KEY = "bench-rollouts-task-app-key-0123456789"


def run_ours(task_url: str) -> tuple[Sample, list[dict[str, Any]]]:
    """(time of submit + poll, rollout request bodies) for one job driven through the fake."""
    clock = VirtualClock()
    fake = FakeSynthBackend(clock=clock, task_app_api_key=KEY, max_rollouts_per_step=PER_STEP)
    with fake:
        fake.scenario(immediate=True, steps=STEPS)
        job = RLJob.from_config(
            CONFIG,
            backend_url=fake.base_url,
            api_key=fake.api_key,
            task_app_url=task_url,
            task_app_api_key=KEY,
            skip_health_check=True,
            clock=clock,
        )
        fake.inference  # the stub is started lazily by the first rollout, inside the timing  # noqa: B018
        with job, Stopwatch() as watch:
            job.submit()
            result = job.poll_until_complete(timeout=60.0, interval=1.0)
        rollouts = fake.job(result.job_id).rollouts
        if result.status != "succeeded":
            raise RuntimeError(f"bench job did not succeed: {result.status}: {fake.job(result.job_id).error}")
        bodies = [copy.deepcopy(r.request) for r in rollouts]
    fake.close()
    return watch.sample, bodies


def run_baseline(task_url: str, bodies: list[dict[str, Any]], inference_url: str) -> Sample:
    encoded = []
    for body in bodies:
        patched = copy.deepcopy(body)
        patched["policy"]["config"]["inference_url"] = inference_url
        encoded.append(json.dumps(patched).encode())
    headers = {**task_app_auth_headers(KEY), "Content-Type": "application/json"}
    with httpx.Client(trust_env=False) as client:
        client.get(
            f"{task_url}/health", headers=headers
        )  # open the connection first, as the fake's client has
        with Stopwatch() as watch:
            for content in encoded:
                response = client.post(f"{task_url}/rollout", content=content, headers=headers)
                if response.status_code != 200:
                    raise RuntimeError(f"baseline rollout failed: HTTP {response.status_code}")
        return watch.sample


def main() -> list[str]:
    with (
        InProcessTaskApp(task_app_path=APP, api_key=KEY) as task_app,
        StubInference().serve() as inference_url,
    ):
        _, bodies = run_ours(task_app.url)  # the baseline replays these very requests

        def ours() -> Sample:
            sample, again = run_ours(task_app.url)
            if len(again) != len(bodies):
                raise RuntimeError(f"the job ran {len(again)} rollouts, then {len(bodies)}")
            return sample

        times = medians(
            {"ours": ours, "raw": lambda: run_baseline(task_app.url, bodies, inference_url)},
            SETTINGS.pick(REPEATS, QUICK_REPEATS),
        )
    count = len(bodies)
    ours_rate, base_rate = count / times["ours"].wall, count / times["raw"].wall
    ratio = ours_rate / base_rate
    line = report(
        f"rollouts: fake-driven job ({count} rollouts) vs raw httpx -> uvicorn /rollout",
        ours=ours_rate,
        ours_cpu=times["ours"].cpu / count * 1000,
        baseline_name="raw httpx",
        baseline=base_rate,
        baseline_cpu=times["raw"].cpu / count * 1000,
        unit="rollouts/s",
        cpu_unit="ms/rollout",
        ratio=ratio,
        target_text=f">= {TARGET:.2f}x",
        met=ratio >= TARGET,
    )
    return [line]


if __name__ == "__main__":
    run_alone(main)
