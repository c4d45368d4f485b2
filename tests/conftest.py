# --- Secret isolation: secrets registered by a test stay in that test. ---------------------------
from collections.abc import Iterator

import pytest

from pytest_synth_rl.masking import registered_secrets, restore_registered_secrets


@pytest.fixture(autouse=True)
def _isolated_secret_registry() -> Iterator[None]:
    """Restore the masking registry after each test, so no test passes thanks to a neighbor."""
    snapshot = registered_secrets()
    yield
    restore_registered_secrets(snapshot)


# --- end of secret isolation ---------------------------------------------------------------------
