"""Offline, the fake backend's stand-in model answers the task app's chat calls: overriding the
``synth_policy`` fixture here plugs in the team's policy (``policy.py``), which knows this task."""

from __future__ import annotations

import pytest
from policy import policy

from pytest_synth_rl import LearningPolicy


@pytest.fixture
def synth_policy() -> LearningPolicy:
    return policy
