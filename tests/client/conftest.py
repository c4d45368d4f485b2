"""Fixtures every client test shares: no backend settings from the environment, a respx router,
and a handle on an existing job."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import respx
from client_support import attach, clear_client_env

from pytest_synth_rl.client import RLJob


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_client_env(monkeypatch)


@pytest.fixture
def router() -> Iterator[respx.MockRouter]:
    with respx.mock() as mock:
        yield mock


@pytest.fixture
def job() -> Iterator[RLJob]:
    with attach("job-1") as handle:
        yield handle
