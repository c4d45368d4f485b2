"""pytest wiring for pytest-synth-rl (options, markers, fixtures). Kept thin on purpose."""

from __future__ import annotations
