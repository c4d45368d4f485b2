"""Offline mode: a stateful fake of Synth's RL backend on a virtual clock, mounted on respx for
this process (``with FakeSynthBackend() as fake:``) or served on loopback (``fake.serve()``)."""

from __future__ import annotations

from typing import Any

from pytest_synth_rl.fake.backend import DEFAULT_API_KEY, DEFAULT_BASE_URL, FakeRouteError, FakeSynthBackend
from pytest_synth_rl.fake.fake_job import FakeJob
from pytest_synth_rl.fake.faults import Fault
from pytest_synth_rl.fake.jobs import RolloutRecord
from pytest_synth_rl.fake.rollouts import extract_reward
from pytest_synth_rl.fake.scenario import Scenario
from pytest_synth_rl.fake.wire import LoggedRequest

__all__ = [
    "DEFAULT_API_KEY",
    "DEFAULT_BASE_URL",
    "FakeJob",
    "FakeRouteError",
    "FakeSynthBackend",
    "Fault",
    "LoggedRequest",
    "RolloutRecord",
    "Scenario",
    "extract_reward",
]


def __getattr__(name: str) -> Any:
    if name == "RecordedRequest":  # the request log's former name
        return LoggedRequest
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
