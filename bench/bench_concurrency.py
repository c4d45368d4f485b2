"""Concurrent rollouts, and the cost of one real-rollout job test.

1. A job's rollout rate at ``max_concurrent_rollouts = 4`` vs ``= 1`` against a ``/rollout`` that
   awaits 10 ms, on the session-style fake (target >= 3x; 32 rollouts a step as an info line).
2. One default-scenario job of ``examples/arithmetic.toml`` as ``synth_rl_job`` runs it (24
   rollouts): target <= 90 ms wall. Run alone: ``python bench/bench_concurrency.py [--quick]``.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Request

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import SETTINGS, Sample, Stopwatch, medians, report, run_alone  # noqa: E402
from pytest_synth_rl.client import RLJob  # noqa: E402
from pytest_synth_rl.clock import VirtualClock  # noqa: E402
from pytest_synth_rl.fake import FakeSynthBackend  # noqa: E402
from pytest_synth_rl.taskapp import InProcessTaskApp  # noqa: E402

CONFIG = ROOT / "examples" / "arithmetic.toml"
APP = ROOT / "examples" / "arithmetic_task_app.py"
KEY = "bench-concurrency-task-app-key-0123456789"
REPEATS = 5
WIDE_REPEATS = 3
JOB_REPEATS = 15
BUDGET_MS = 90.0


def _slow_app() -> FastAPI:
    app = FastAPI()
    http: dict[str, httpx.AsyncClient] = {}

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"healthy": True}

    @app.post("/rollout")
    async def rollout(request: Request) -> dict[str, Any]:
        body = await request.json()
        # One client for the app's life: building one per request costs an SSL context each
        # time (CPU under the GIL), which would serialize the requests this bench overlaps.
        client = http.get("client")
        if client is None:
            client = http["client"] = httpx.AsyncClient(trust_env=False)
        url = body["policy"]["config"]["inference_url"] + "/chat/completions"
        reply = await client.post(url, json={"messages": [{"role": "user", "content": "What is 1 + 2?"}]})
        reply.raise_for_status()
        await asyncio.sleep(0.010)  # the environment step
        return {"trace_correlation_id": body["trace_correlation_id"], "metrics": {"outcome_reward": 1.0}}

    return app


def _job(
    fake: FakeSynthBackend, clock: VirtualClock, task_url: str, overrides: dict[str, Any], **options: Any
) -> RLJob:
    return RLJob.from_config(
        CONFIG,
        backend_url=fake.base_url,
        api_key=fake.api_key,
        task_app_url=task_url,
        task_app_api_key=KEY,
        skip_health_check=True,
        clock=clock,
        overrides=overrides,
        **options,
    )


def rollout_job(
    fake: FakeSynthBackend, task_url: str, concurrency: int, *, per_step: int = 8, steps: int = 5
) -> tuple[Sample, int]:
    """(time, rollouts) of one job, run as the plugin runs jobs: the session's fake reset onto a
    fresh clock (its stub model server and rollout connections stay up between jobs)."""
    clock = VirtualClock()
    fake.reset(clock=clock)
    overrides = {"rollout.max_concurrent_rollouts": concurrency, "rollout.episodes_per_batch": per_step}
    with httpx.Client(transport=httpx.MockTransport(fake.handle)) as http:
        fake.scenario(immediate=True, steps=steps, eval_every=100)
        with _job(fake, clock, task_url, overrides, http_client=http) as job, Stopwatch() as watch:
            job.submit()
            result = job.poll_until_complete(timeout=60.0, interval=1.0)
        record = fake.job(result.job_id)
        if result.status != "succeeded":
            raise RuntimeError(f"bench job failed: {record.error}")
    return watch.sample, len(record.rollouts)


def job_test(fake: FakeSynthBackend, http: httpx.Client, task_url: str) -> None:
    """One job as the plugin runs it: the session's fake reset onto a fresh clock, reached
    through one shared ``MockTransport`` client (the stub model server stays up)."""
    clock = VirtualClock()
    fake.reset(clock=clock)
    with _job(fake, clock, task_url, {}, http_client=http) as job:
        job.submit()
        result = job.poll_until_complete(timeout=7200.0, interval=10.0)
    if result.status != "succeeded":
        raise RuntimeError(f"bench job failed: {fake.job(result.job_id).error}")


def rates(
    fake: FakeSynthBackend, task_url: str, concurrencies: dict[str, int], repeats: int, **job: int
) -> tuple[dict[str, Sample], int]:
    """Median time of a job at each concurrency (interleaved) and its rollout count."""
    counts: set[int] = set()

    def one(concurrency: int) -> Sample:
        sample, count = rollout_job(fake, task_url, concurrency, **job)
        counts.add(count)
        return sample

    times = medians({name: lambda c=c: one(c) for name, c in concurrencies.items()}, repeats)
    if len(counts) != 1:
        raise RuntimeError(f"the jobs ran different numbers of rollouts: {sorted(counts)}")
    return times, counts.pop()


def main() -> list[str]:
    lines = []
    narrow = FakeSynthBackend(task_app_api_key=KEY, max_rollouts_per_step=8)
    wide_fake = FakeSynthBackend(task_app_api_key=KEY, max_rollouts_per_step=32)
    levels = {"serial": 1, "concurrent": 4}
    with InProcessTaskApp(_slow_app(), api_key=KEY, export_api_key=False) as slow:
        times, count = rates(narrow, slow.url, levels, SETTINGS.pick(REPEATS, 3))
        wide, _ = rates(wide_fake, slow.url, levels, SETTINGS.pick(WIDE_REPEATS, 1), per_step=32, steps=2)
    narrow.close()
    wide_fake.close()
    ours, base = times["concurrent"], times["serial"]
    ratio = base.wall / ours.wall
    lines.append(
        report(
            "concurrent rollouts: max_concurrent_rollouts=4 vs 1, /rollout awaiting 10 ms",
            ours=count / ours.wall,
            ours_cpu=ours.cpu / count * 1000,
            baseline_name="serial",
            baseline=count / base.wall,
            baseline_cpu=base.cpu / count * 1000,
            unit="rollouts/s",
            cpu_unit="ms/rollout",
            ratio=ratio,
            target_text=">= 3.00x",
            met=ratio >= 3.0,
        )
    )
    wide_ratio = wide["serial"].wall / wide["concurrent"].wall
    line = f"  (for comparison, 32 rollouts a step instead of 8: {wide_ratio:.2f}x)"
    print(line, flush=True)
    lines.append(line)
    fake = FakeSynthBackend(task_app_api_key=KEY)
    with (
        InProcessTaskApp(task_app_path=APP, api_key=KEY) as app,
        httpx.Client(transport=httpx.MockTransport(fake.handle)) as http,
    ):
        # The warm-up run starts the stub model server, once per run.
        job = medians({"job": lambda: job_test(fake, http, app.url)}, SETTINGS.pick(JOB_REPEATS, 5))["job"]
    fake.close()
    ms = job.wall * 1000
    lines.append(
        report(
            "real-rollout job test (examples/arithmetic.toml, default scenario)",
            ours=ms,
            ours_cpu=job.cpu * 1000,
            baseline_name="budget",
            baseline=BUDGET_MS,
            unit="ms",
            ratio=ms / BUDGET_MS,
            target_text=f"<= {BUDGET_MS:g} ms wall",
            met=ms <= BUDGET_MS,
        )
    )
    return lines


if __name__ == "__main__":
    run_alone(main)
