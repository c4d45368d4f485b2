"""The served fake in another process: clients that only poll, only stream, or run a whole
suite finish their jobs, and the task app's key arrives by upload, not by environment."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from fake_process_support import HANG_TIMEOUT, fake_in_another_process
from test_fake_support import EXAMPLES, TASK_KEY, load_example, rl_payload

from pytest_synth_rl.client import upload_environment_api_key
from pytest_synth_rl.taskapp import InProcessTaskApp, task_app_auth_headers

SYNTH_KEY = "sk_test_other_process_0123456789"
TESTS = Path(__file__).resolve().parents[1]


def test_a_client_polling_every_second_finishes_its_job(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(fake_process_support=(TESTS / "fake_process_support.py").read_text())
    pytester.makepyfile(
        test_poller=f"""
        import httpx
        from fake_process_support import fake_in_another_process
        from pytest_synth_rl.client import RLJob
        from pytest_synth_rl.clock import VirtualClock

        def test_poll(tmp_path):
            with fake_in_another_process(tmp_path, {SYNTH_KEY!r}) as url:
                clock = VirtualClock()
                job = RLJob.from_config(
                    {str(EXAMPLES / "rl_minimal.toml")!r},
                    backend_url=url,
                    api_key={SYNTH_KEY!r},
                    task_app_url="https://task-app.example.com",
                    skip_health_check=True,
                    clock=clock,
                )
                job.submit()
                result = job.poll_until_complete(timeout=3600, interval=1.0)
                assert result.status == "succeeded"
                # One poll a (virtual) second; the job moved one stage per poll: 11 polls.
                assert clock.elapsed == 10.0
                admin = httpx.get(
                    url + "/_fake/jobs/" + job.job_id, headers={{"Authorization": "Bearer {SYNTH_KEY}"}}
                ).json()
                assert admin["polls"] == 11
                job.close()
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-q", timeout=HANG_TIMEOUT * 2)
    result.assert_outcomes(passed=1)


def test_the_cli_flow_works_against_a_plain_served_fake(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In the upstream CLI's order: verify the task app, probe it, submit, stream events with
    metrics after each, until the terminal event. Written from the contract."""
    monkeypatch.delenv("ENVIRONMENT_API_KEY", raising=False)
    app = load_example().create_app(api_key=TASK_KEY)
    with (
        InProcessTaskApp(app, api_key=TASK_KEY, export_api_key=False) as task_app,
        fake_in_another_process(tmp_path, SYNTH_KEY) as url,
        httpx.Client(
            base_url=url + "/api", headers={"Authorization": f"Bearer {SYNTH_KEY}"}, timeout=HANG_TIMEOUT
        ) as api,
        httpx.Client(
            base_url=task_app.url, headers=task_app_auth_headers(TASK_KEY), timeout=HANG_TIMEOUT
        ) as task,
    ):
        upload_environment_api_key(url, SYNTH_KEY, TASK_KEY)  # the CLI's preflight uploads the key
        # 1. verify_task_app
        verdict = api.post("/rl/verify_task_app", json={"endpoint_base_url": task_app.url})
        assert verdict.status_code == 200
        body = verdict.json()
        assert body["any_ok"] is True
        assert [a["status"] for a in body["attempts"]] == [200]
        assert TASK_KEY not in verdict.text
        # 2. the task app's /health and /task_info
        assert task.get("/health").status_code == 200
        assert task.get("/task_info").status_code == 200
        # 3. submit
        # An unscripted job runs its config's num_epochs * iterations_per_epoch steps: ask for 10.
        training = {**rl_payload()["data"]["config"]["training"], "iterations_per_epoch": 10}
        payload = rl_payload(task_app.url, training=training)
        created = api.post("/rl/jobs", json=payload)
        assert created.status_code == 201
        job_id = created.json()["id"]
        # 4. the event stream, with metrics after each event
        events: list[dict[str, Any]] = []
        metric_steps: list[int] = []
        with api.stream(
            "GET", f"/rl/jobs/{job_id}/events/stream", headers={"Accept": "text/event-stream"}
        ) as stream:
            assert stream.headers["content-type"] == "text/event-stream"
            for line in stream.iter_lines():
                if not line.startswith("data: "):
                    continue
                events.append(json.loads(line[6:]))
                points = api.get(f"/rl/jobs/{job_id}/metrics").json()["points"]
                metric_steps.append(max((p["step"] for p in points), default=0))
        types = [e["type"] for e in events]
        assert types[0] == "rl.job.created"
        assert types[-1] == "rl.train.completed"
        assert types.count("rl.train.step") == 10
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        assert metric_steps[-1] == 10
        assert metric_steps == sorted(metric_steps)
        final = api.get(f"/rl/jobs/{job_id}").json()
        assert final["status"] == "succeeded"
        assert final["final_reward"] == events[-1]["data"]["final_reward"]


@pytest.mark.slow
def test_the_example_suite_is_green_online_against_a_fake_in_another_process(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ENVIRONMENT_API_KEY", raising=False)
    for name in ("arithmetic.toml", "arithmetic_task_app.py", "test_arithmetic_regression.py"):
        pytester.makefile(Path(name).suffix, **{Path(name).stem: (EXAMPLES / name).read_text()})
    with fake_in_another_process(tmp_path, SYNTH_KEY) as url:
        monkeypatch.setenv("SYNTH_API_KEY", SYNTH_KEY)
        result = pytester.runpytest_subprocess(
            "-p",
            "no:randomly",
            "-q",
            f"--synth-backend={url}",
            "--synth-poll-interval=0.01",
            "--synth-verify-task-app",
            timeout=HANG_TIMEOUT * 3,
        )
        result.assert_outcomes(passed=4, skipped=1)
        logged = httpx.get(url + "/_fake/requests", headers={"Authorization": f"Bearer {SYNTH_KEY}"}).json()
    routes = (
        [r["route"] for r in logged["requests"]] if isinstance(logged, dict) else [r["route"] for r in logged]
    )
    assert routes.count("env_keys") == 1  # once per run per backend
    assert routes.count("verify_task_app") == 1
    assert routes.index("env_keys") < routes.index("submit")
    assert TASK_KEY not in json.dumps(logged)
