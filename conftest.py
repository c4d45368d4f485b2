"""What ``tests/`` and ``examples/`` share: the rootdir conftest both trees load.

The ``slow`` marker is registered here (``--strict-markers`` is on) so that either tree may use
it: it marks tests that run a whole pytest suite in a subprocess against a served fake, or a
benchmark. The full run keeps them; ``pytest -m "not slow"`` is the quick local loop.
"""

from __future__ import annotations

import os
import sys

import pytest

# The suite starts many Python processes (xdist workers, pytester runs, the served fake). Where the
# environment sets PYTHONDONTWRITEBYTECODE, each of them would compile every module it imports
# again (about a second of CPU a process); the caches are kept as Python normally keeps them.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: runs a whole suite in a subprocess or a benchmark; deselect with -m 'not slow'"
    )
