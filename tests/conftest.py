"""Fixtures shared by several test modules (helpers that are plain functions stay importable
from the ``*_support`` modules)."""

from __future__ import annotations

from collections.abc import Iterator

import httptools  # noqa: F401  # see below
import httpx
import pytest
from test_fake_support import TASK_KEY, load_example

from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.fake import FakeSynthBackend
from pytest_synth_rl.secrets.masking import registered_secrets, restore_registered_secrets
from pytest_synth_rl.taskapp import InProcessTaskApp

# pytester's in-process runs drop the modules first imported inside them. httptools' compiled
# parser keeps the error classes of its first import, so a uvicorn imported again after such a run
# would no longer catch the parser's errors: httptools is imported once, here, before any run.


@pytest.fixture
def fake() -> Iterator[FakeSynthBackend]:
    """A fake backend on a virtual clock, mounted for the test."""
    with FakeSynthBackend(clock=VirtualClock(), task_app_api_key=TASK_KEY) as backend:
        yield backend
    backend.close()


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client() as c:
        yield c


@pytest.fixture(scope="module")
def example_task_app() -> Iterator[InProcessTaskApp]:
    """The example arithmetic task app, served once per module."""
    app = load_example().create_app(api_key=TASK_KEY)
    with InProcessTaskApp(app, api_key=TASK_KEY, export_api_key=False) as served:
        yield served


@pytest.fixture(autouse=True)
def _isolated_secret_registry() -> Iterator[None]:
    """Restore the masking registry after each test, so no test passes thanks to a neighbor."""
    snapshot = registered_secrets()
    yield
    restore_registered_secrets(snapshot)
