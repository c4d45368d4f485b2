"""pytest-synth-rl: put Synth RL training jobs under test.

Every capability is a plain library first (usable without pytest); :mod:`pytest_synth_rl.plugin`
wires them into fixtures, options and markers. ``__all__`` is what a test or a conftest
writes: fixture types, what tests construct (scenarios, policies, tolerances) and the errors they
catch. Everything else is imported from its module (``pytest_synth_rl.client``,
``.assertions``, ``.recording``, ``.policies``); the few names earlier releases exported here
still resolve. Names load on first access, so the plugin's import at pytest start stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .baselines import Tolerance
    from .client import AsyncRLJob, RLJob
    from .clock import Clock, VirtualClock
    from .errors import ConfigError, JobFailedError, JobTimeoutError, SynthError, SynthUsageError
    from .fake import FakeSynthBackend, Scenario
    from .masking import Secret
    from .policies import ChatRequest, LearningPolicy, Policy, ScriptedPolicy, linear
    from .recording import Replayer
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

if TYPE_CHECKING:  # exported here by earlier releases: still resolved, not in ``__all__``
    from .assertions import JobExpectation as JobExpectation
    from .assertions import eventually as eventually
    from .assertions import expect_job as expect_job
    from .client import JobResult as JobResult
    from .policies import ReplayPolicy as ReplayPolicy
    from .policies import Reply as Reply
    from .recording import Cassette as Cassette

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
    if name in __all__:  # a former name stays out of dir(), however often it is used
        globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "AsyncRLJob",
    "BaselineCheck",
    "ChatRequest",
    "Clock",
    "ConfigError",
    "ExpectJob",
    "FakeSynthBackend",
    "InProcessTaskApp",
    "JobFailedError",
    "JobTimeoutError",
    "LearningPolicy",
    "Policy",
    "RLConfigRef",
    "RLJob",
    "Replayer",
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
    "linear",
]
