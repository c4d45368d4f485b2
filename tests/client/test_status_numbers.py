"""One reading of a status's step, total and latest reward, for the live line and the baselines."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_synth_rl.baselines import summarize_job
from pytest_synth_rl.client.polling import Poller
from pytest_synth_rl.client.results import REWARD_PATHS, STEP_PATHS, number_at
from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.plugin.progress import progress_update


@pytest.mark.parametrize(
    ("payload", "step"),
    [
        ({"progress": {"completed": 3}, "step": 9}, 3.0),
        ({"step": 4}, 4.0),
        ({"current_step": 5}, 5.0),
        ({"metrics": {"step": 6}}, 6.0),
        ({"step": True, "current_step": 2}, 2.0),  # a bool is no step
        ({"step": "7"}, None),  # nor is text
        ({"step": float("nan")}, None),
    ],
)
def test_the_step_is_the_first_finite_number_found(payload: dict[str, Any], step: float | None) -> None:
    assert number_at(payload, STEP_PATHS) == step


def test_the_live_line_and_the_baseline_read_the_same_step_and_reward() -> None:
    # Before, {"metrics": {"step": 3}} gave the baseline a step and the live line none, and
    # {"current_step": 4} the other way round.
    clock = VirtualClock()
    poller = Poller("job_1", timeout=100, interval=10, clock=clock)
    for payload in (
        {"status": "running", "metrics": {"step": 3, "reward": 0.5}},
        {"status": "running", "current_step": 4},
    ):
        record = poller.record(payload)
        update = progress_update(poller, record)
        assert update.step == number_at(payload, STEP_PATHS)
        assert update.reward == number_at(payload, REWARD_PATHS)
    final = poller.record({"status": "succeeded", "current_step": 4, "metrics": {"reward": 0.75}})
    result = poller.finish()
    assert final.status == "succeeded"
    assert summarize_job(result)["steps"] == 4.0
