"""Async jobs made by ``synth_rl_job.async_job``: their waits leave the test's event loop free,
and teardown finishes each job on the backend it was sent to."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pytest_synth_rl.fake import FakeSynthBackend

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
KEY = "sk_test_async_jobs_backend_key"

JUDGE_APP = """
import os

import httpx
from fastapi import FastAPI, Request

app = FastAPI()


@app.get("/health")
async def health():
    return {"healthy": True}


@app.get("/task_info")
async def task_info():
    return {"taskset": {"name": "judged"}}


@app.post("/rollout")
async def rollout(request: Request):
    body = await request.json()
    async with httpx.AsyncClient(trust_env=False) as client:  # the judge the test serves
        score = (await client.get(os.environ["JUDGE_URL"], timeout=20)).json()["score"]
    reward = {"outcome_reward": score}
    return {"trace_correlation_id": body["trace_correlation_id"], "reward_info": reward, "metrics": reward}
"""

JUDGE_SUITE = """
import asyncio

import pytest

pytestmark = [pytest.mark.synth_task_app("judge_app.py"), pytest.mark.synth_rl(config="arithmetic.toml")]


@pytest.mark.asyncio
async def test_a_judge_served_on_the_tests_loop(synth_rl_job, monkeypatch):
    async def judge(reader, writer):
        await reader.readuntil(b"\\r\\n\\r\\n")
        body = b'{"score": 0.75}'
        head = b"HTTP/1.1 200 OK\\r\\ncontent-type: application/json\\r\\nconnection: close\\r\\n"
        writer.write(head + b"content-length: %d\\r\\n\\r\\n" % len(body) + body)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(judge, "127.0.0.1", 0)
    monkeypatch.setenv("JUDGE_URL", "http://127.0.0.1:%d/" % server.sockets[0].getsockname()[1])
    async with server:
        async with synth_rl_job.async_job() as job:
            await job.submit()
            result = await job.poll_until_complete(timeout=7200)
    assert (result.status, result.final_reward) == ("succeeded", 0.75)
"""


def test_an_async_jobs_rollouts_leave_the_tests_event_loop_free(pytester: pytest.Pytester) -> None:
    # Before: the fake ran the job's rollouts on the test's event loop (in the poll and in the
    # clock's sleep), so a judge served on that loop never answered and every rollout failed.
    shutil.copy(EXAMPLES / "arithmetic.toml", pytester.path / "arithmetic.toml")
    (pytester.path / "judge_app.py").write_text(JUDGE_APP)
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_judged=JUDGE_SUITE)
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


OTHER_BACKEND_SUITE = """
import pytest

pytestmark = [
    pytest.mark.synth_task_app("arithmetic_task_app.py"),
    pytest.mark.synth_rl(config="arithmetic.toml"),
]


@pytest.mark.asyncio
async def test_left_running_on_another_backend(synth_rl_job):
    job = synth_rl_job.async_job(backend_url={other!r})
    await job.submit()
    await job.close()
"""


def test_teardown_cancels_an_async_job_on_the_backend_it_was_sent_to(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: teardown read and cancelled job_rl_000001 on the run's backend, not on the job's.
    for name in ("arithmetic_task_app.py", "arithmetic.toml"):
        shutil.copy(EXAMPLES / name, pytester.path / name)
    monkeypatch.setenv("SYNTH_API_KEY", KEY)
    run_backend, other_backend = FakeSynthBackend(api_key=KEY), FakeSynthBackend(api_key=KEY)
    other_backend.scenario(queue_time=3600)  # still queued when the test ends
    with run_backend.serve() as run_url, other_backend.serve() as other_url:
        pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
        pytester.makepyfile(test_other=OTHER_BACKEND_SUITE.format(other=other_url))
        result = pytester.runpytest(
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            f"--synth-backend={run_url}",
            "--synth-report=r.json",
        )
        statuses = [(job.id, job.status) for job in other_backend.jobs]
        on_the_run_backend = run_backend.jobs
    run_backend.close()
    other_backend.close()
    result.assert_outcomes(passed=1)
    assert statuses == [("job_rl_000001", "cancelled")]
    assert on_the_run_backend == []
    (row,) = json.loads((pytester.path / "r.json").read_text())["jobs"]
    assert (row["backend"], row["status"], row["cancelled_by_plugin"]) == (other_url, "cancelled", True)
