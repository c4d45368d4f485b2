"""What ``tests/`` and ``examples/`` share: the rootdir conftest both trees load.

The ``slow`` marker is registered here (``--strict-markers`` is on) so that either tree may use
it: it marks tests that run a whole pytest suite in a subprocess against a served fake, or a
benchmark. The full run keeps them; ``pytest -m "not slow"`` is the quick local loop.
"""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: runs a whole suite in a subprocess or a benchmark; deselect with -m 'not slow'"
    )
