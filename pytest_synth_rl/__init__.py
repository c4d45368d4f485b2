"""pytest-synth-rl: put Synth RL training jobs under test.

Every capability is a plain library first (usable without pytest); :mod:`pytest_synth_rl.plugin`
wires them into fixtures, options and markers.
"""

from __future__ import annotations

from .clock import Clock, RealClock, ScaledClock, VirtualClock
from .errors import (
    BackendError,
    ConfigError,
    ConfigProblem,
    JobFailedError,
    JobSubmitError,
    JobTimeoutError,
    SynthError,
    TaskAppError,
)
from .masking import Secret, mask_secret, redact

__version__ = "0.1.0"

__all__ = [
    "BackendError",
    "Clock",
    "ConfigError",
    "ConfigProblem",
    "JobFailedError",
    "JobSubmitError",
    "JobTimeoutError",
    "RealClock",
    "ScaledClock",
    "Secret",
    "SynthError",
    "TaskAppError",
    "VirtualClock",
    "__version__",
    "mask_secret",
    "redact",
]
