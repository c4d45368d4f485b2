"""pytest-synth-rl: put Synth RL training jobs under test.

Every capability is a plain library first (usable without pytest); :mod:`pytest_synth_rl.plugin`
wires them into fixtures, options and markers. The names below are what a test or a conftest
writes; everything else is importable from its module. They load on first access, so the plugin's
import at pytest start stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .assertions import JobExpectation, eventually, expect_job
    from .baselines import Tolerance
    from .client import AsyncRLJob, JobResult, RLJob
    from .clock import Clock, VirtualClock
    from .errors import ConfigError, JobFailedError, JobTimeoutError, SynthError, SynthUsageError
    from .fake import FakeSynthBackend, Scenario
    from .masking import Secret
    from .policies import ChatRequest, LearningPolicy, Policy, ReplayPolicy, Reply, ScriptedPolicy, linear
    from .recording import Cassette, Replayer
    from .session import (
        BaselineCheck,
        ExpectJob,
        RLConfigRef,
        ServedFake,
        SynthBackend,
        SynthJobFactory,
        TaskAppHandle,
    )
    from .settings import SynthSettings
    from .taskapp import InProcessTaskApp, check_task_app_contract

__version__ = "0.1.0"

_HOMES = {
    "JobExpectation": "assertions",
    "eventually": "assertions",
    "expect_job": "assertions",
    "Tolerance": "baselines",
    "AsyncRLJob": "client",
    "JobResult": "client",
    "RLJob": "client",
    "Clock": "clock",
    "VirtualClock": "clock",
    "ConfigError": "errors",
    "JobFailedError": "errors",
    "JobTimeoutError": "errors",
    "SynthError": "errors",
    "SynthUsageError": "errors",
    "FakeSynthBackend": "fake",
    "Scenario": "fake",
    "Secret": "masking",
    "ChatRequest": "policies",
    "LearningPolicy": "policies",
    "Reply": "policies",
    "linear": "policies",
    "Policy": "policies",
    "ReplayPolicy": "policies",
    "ScriptedPolicy": "policies",
    "Cassette": "recording",
    "Replayer": "recording",
    "BaselineCheck": "session",
    "ExpectJob": "session",
    "RLConfigRef": "session",
    "ServedFake": "session",
    "SynthBackend": "session",
    "SynthJobFactory": "session",
    "TaskAppHandle": "session",
    "SynthSettings": "settings",
    "InProcessTaskApp": "taskapp",
    "check_task_app_contract": "taskapp",
}


def __getattr__(name: str) -> Any:
    """Load a public name from its module on first access (PEP 562)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'pytest_synth_rl' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])


__all__ = [
    "AsyncRLJob",
    "BaselineCheck",
    "Cassette",
    "ChatRequest",
    "Clock",
    "ConfigError",
    "ExpectJob",
    "FakeSynthBackend",
    "InProcessTaskApp",
    "JobExpectation",
    "JobFailedError",
    "JobResult",
    "JobTimeoutError",
    "LearningPolicy",
    "Policy",
    "RLConfigRef",
    "RLJob",
    "ReplayPolicy",
    "Replayer",
    "Reply",
    "Scenario",
    "ScriptedPolicy",
    "Secret",
    "ServedFake",
    "SynthBackend",
    "SynthError",
    "SynthJobFactory",
    "SynthSettings",
    "SynthUsageError",
    "TaskAppHandle",
    "Tolerance",
    "VirtualClock",
    "__version__",
    "check_task_app_contract",
    "eventually",
    "expect_job",
    "linear",
]
