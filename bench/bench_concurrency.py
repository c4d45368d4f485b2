"""Concurrent rollouts and the cost of a real-rollout job test.

1. Rollout rate at ``rollout.max_concurrent_rollouts = 4`` vs ``= 1`` for a task app whose
   ``/rollout`` awaits 10 ms (an environment step) after its model call: a job of 5 steps x 8
   rollouts (and the final evaluation's 4) with an ``immediate`` scenario, its client reaching the
   fake through a ``MockTransport`` as the plugin's own jobs do (a respx-mounted fake would also
   tax the task app's own model call, which passes through respx), on the session-style fake
   (reset per job; its stub model server stays up). Target >= 3x. A step is folded only once
   its slowest rollout is back; the next step's first rollouts start in that tail (see
   ``fake/rollout_feed.py``). An informational line shows the rate at 32 rollouts a step.
2. One real-rollout job with the default example config (``examples/arithmetic.toml``, the fake's
   default scenario polled every 10 virtual seconds, as ``synth_rl_job`` + ``synth_expect`` run
   it: the session's fake reset onto a fresh clock, one shared ``MockTransport`` client), in ms,
   against the 100 ms budget (ratio = ours / budget; target <= 1.0x). The unscripted job runs the
   config's 1 x 4 steps (4 rollouts each, evaluations of 4 seeds at steps 2 and 4: 24 rollouts).

Medians of the repeats, in one process. Run alone: ``python bench/bench_concurrency.py``.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Request

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import report  # noqa: E402
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
BUDGET_MS = 100.0


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


def rollout_rate(
    fake: FakeSynthBackend, task_url: str, concurrency: int, *, per_step: int = 8, steps: int = 5
) -> float:
    """Rollouts a second over one job, run as the plugin runs jobs: the session's fake reset onto
    a fresh clock (its stub model server and rollout connections stay up between jobs)."""
    clock = VirtualClock()
    fake.reset(clock=clock)
    overrides = {"rollout.max_concurrent_rollouts": concurrency, "rollout.episodes_per_batch": per_step}
    with httpx.Client(transport=httpx.MockTransport(fake.handle)) as http:
        fake.scenario(immediate=True, steps=steps, eval_every=100)
        with _job(fake, clock, task_url, overrides, http_client=http) as job:
            started = time.perf_counter()
            job.submit()
            result = job.poll_until_complete(timeout=60.0, interval=1.0)
            elapsed = time.perf_counter() - started
        record = fake.job(result.job_id)
        if result.status != "succeeded":
            raise RuntimeError(f"bench job failed: {record.error}")
        count = len(record.rollouts)
    return count / elapsed


def job_test_ms(fake: FakeSynthBackend, http: httpx.Client, task_url: str) -> float:
    """One job as the plugin runs it: the session's fake reset onto a fresh clock, reached
    through one shared ``MockTransport`` client (the stub model server stays up)."""
    clock = VirtualClock()
    fake.reset(clock=clock)
    started = time.perf_counter()
    with _job(fake, clock, task_url, {}, http_client=http) as job:
        job.submit()
        result = job.poll_until_complete(timeout=7200.0, interval=10.0)
    elapsed = time.perf_counter() - started
    if result.status != "succeeded":
        raise RuntimeError(f"bench job failed: {fake.job(result.job_id).error}")
    return elapsed * 1000.0


def main() -> list[str]:
    lines = []
    narrow = FakeSynthBackend(task_app_api_key=KEY, max_rollouts_per_step=8)
    wide_fake = FakeSynthBackend(task_app_api_key=KEY, max_rollouts_per_step=32)
    with InProcessTaskApp(_slow_app(), api_key=KEY, export_api_key=False) as slow:
        for fake in (narrow, wide_fake):  # warm-up: each fake's stub model server starts once
            rollout_rate(fake, slow.url, 4)
        serial, concurrent = [], []
        for _ in range(REPEATS):
            serial.append(rollout_rate(narrow, slow.url, 1))
            concurrent.append(rollout_rate(narrow, slow.url, 4))
        wide = [
            rollout_rate(wide_fake, slow.url, 4, per_step=32, steps=2)
            / rollout_rate(wide_fake, slow.url, 1, per_step=32, steps=2)
            for _ in range(WIDE_REPEATS)
        ]
    narrow.close()
    wide_fake.close()
    ours, base = statistics.median(concurrent), statistics.median(serial)
    ratio = ours / base
    lines.append(
        report(
            "concurrent rollouts: max_concurrent_rollouts=4 vs 1, /rollout awaiting 10 ms",
            ours=ours,
            baseline_name="serial",
            baseline=base,
            unit="rollouts/s",
            ratio=ratio,
            target_text=">= 3.00x",
            met=ratio >= 3.0,
        )
    )
    line = f"  (for comparison, 32 rollouts a step instead of 8: {statistics.median(wide):.2f}x)"
    print(line, flush=True)
    lines.append(line)
    fake = FakeSynthBackend(task_app_api_key=KEY)
    with (
        InProcessTaskApp(task_app_path=APP, api_key=KEY) as app,
        httpx.Client(transport=httpx.MockTransport(fake.handle)) as http,
    ):
        job_test_ms(fake, http, app.url)  # warm-up: the stub model server starts once per run
        times = [job_test_ms(fake, http, app.url) for _ in range(JOB_REPEATS)]
    fake.close()
    ms = statistics.median(times)
    lines.append(
        report(
            "real-rollout job test (examples/arithmetic.toml, default scenario)",
            ours=ms,
            baseline_name="budget",
            baseline=BUDGET_MS,
            unit="ms",
            ratio=ms / BUDGET_MS,
            target_text="<= 1.00x",
            met=ms <= BUDGET_MS,
        )
    )
    return lines


if __name__ == "__main__":
    main()
