"""Files written by an earlier release (a baseline, a cassette, a run report) still load and work.

They were written by the release before the package was laid out by capability, by a real
offline run and a real recording against the served fake; see ``tests/data/legacy``.
"""

from __future__ import annotations

import json
from pathlib import Path

from pytest_synth_rl.baselines import BaselineStore
from pytest_synth_rl.client import RLJob
from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.recording import use_cassette
from pytest_synth_rl.reporting.merge import merge_reports

LEGACY = Path(__file__).resolve().parent / "data" / "legacy"
CONFIG = Path(__file__).resolve().parents[1] / "examples" / "rl_minimal.toml"
NODE = "tests/test_legacy.py::test_job"


def test_a_stored_baseline_loads_with_its_metrics_and_curve() -> None:
    baseline = BaselineStore(LEGACY / "baselines").load(NODE)
    assert baseline is not None
    assert baseline.test_id == NODE
    assert baseline.metrics["final_reward"] == 0.865149
    assert baseline.metrics["progress.total"] == 3.0
    assert baseline.reward_curve[-1] == 0.865149


def test_a_stored_cassette_replays_the_job_it_recorded() -> None:
    path = LEGACY / "cassette.json"
    recorded = json.loads(path.read_text(encoding="utf-8"))["interactions"]
    backend = recorded[0]["request"]["url"].split("/api/")[0]
    with (
        use_cassette(path, mode="none") as replayer,
        RLJob.from_config(
            CONFIG,
            backend_url=backend,
            api_key="sk_replay_dummy_key_000000",
            task_app_url="http://127.0.0.1:8114",
            skip_health_check=True,
            clock=VirtualClock(),
        ) as job,
    ):
        job.submit()
        result = job.poll_until_complete(timeout=600, interval=10)
    assert replayer.unplayed() == []
    assert result.succeeded
    assert result.final_reward == 0.865149


def test_a_stored_run_report_merges() -> None:
    report = merge_reports([LEGACY / "synth-report.json"])
    statuses = sorted(record.status for record in report.records)
    assert statuses == ["cancelled", "failed", *["succeeded"] * 5]
    by_test = {record.test_id: record for record in report.records}
    first = by_test["ex/test_arithmetic_regression.py::test_training_succeeds_and_the_reward_improves"]
    assert first.rewards == [0.5, 0.75, 1.0, 1.0]
    assert first.job_id == "job_rl_e392a8b3a0_000001"
