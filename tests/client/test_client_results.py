"""Status vocabulary and result extraction (pure functions, no HTTP)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_synth_rl.client import TERMINAL_STATUSES, JobResult, is_terminal, job_status
from pytest_synth_rl.client.polling import summarize_history
from pytest_synth_rl.client.results import PollRecord, extract_error, extract_final_reward


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ({"status": "Running"}, "running"),
        ({"state": "QUEUED"}, "queued"),
        ({"status": None, "state": "failed"}, "failed"),
        ({"status": 3}, ""),
        ({}, ""),
    ],
)
def test_job_status(payload: dict[str, Any], expected: str) -> None:
    assert job_status(payload) == expected


def test_terminal_table() -> None:
    assert {"succeeded", "completed", "failed", "error", "cancelled", "canceled"} == TERMINAL_STATUSES
    assert is_terminal("CANCELED")
    assert not is_terminal("running")
    assert not is_terminal("")


@pytest.mark.parametrize(
    ("payload", "reward"),
    [
        ({"final_reward": 1}, 1.0),
        ({"final_reward": "0.25"}, 0.25),
        ({"results": {"final_reward": 0.5}}, 0.5),
        ({"metrics": {"reward": 0.75}}, 0.75),
        ({"results": {"metrics": {"reward": 0.1}}}, 0.1),
        ({"final_reward": None, "metrics": {"reward": 0.2}}, 0.2),
        ({"final_reward": True}, None),
        ({"final_reward": "n/a"}, None),
        ({"results": "oops"}, None),
        ({}, None),
    ],
)
def test_final_reward(payload: dict[str, Any], reward: float | None) -> None:
    assert extract_final_reward(payload) == reward


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        ({"status": "failed", "error": "boom"}, "boom"),
        ({"status": "failed", "error": {"message": "nested"}}, "nested"),
        ({"status": "failed", "error_message": "em"}, "em"),
        ({"status": "failed", "message": "msg"}, "msg"),
        ({"status": "succeeded", "message": "all good"}, None),
        ({"status": "succeeded", "error": "odd but reported"}, "odd but reported"),
        ({"status": "failed"}, None),
    ],
)
def test_error_text(payload: dict[str, Any], error: str | None) -> None:
    assert extract_error(payload) == error


def test_job_result_from_payload_tolerates_odd_shapes() -> None:
    result = JobResult.from_payload("j", {"status": "COMPLETED", "results": ["not", "a", "dict"]})
    assert result.succeeded
    assert result.results == {}
    assert result.final_reward is None
    assert "status='completed'" in repr(result)


def test_history_summary() -> None:
    history = [PollRecord(at=0.0, elapsed=float(t), status=s, payload={}) for t, s in enumerate("aabbbc")]
    assert summarize_history(history) == "a x2 (0-1s) -> b x3 (2-4s) -> c (5s)"
    assert summarize_history(history, limit=2) == "... -> b x3 (2-4s) -> c (5s)"
