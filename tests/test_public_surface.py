"""The top-level names resolve lazily, and loading the plugin imports only what options need."""

from __future__ import annotations

import subprocess
import sys

import pytest

import pytest_synth_rl

#: What loading the plugin at pytest start may import from this package.
STARTUP_MODULES = {
    "pytest_synth_rl",
    "pytest_synth_rl.errors",
    "pytest_synth_rl.interrupts",
    "pytest_synth_rl.markers",
    "pytest_synth_rl.masking",
    "pytest_synth_rl.plugin",
    "pytest_synth_rl.plugin_views",
    "pytest_synth_rl.progress",
    "pytest_synth_rl.render",
    "pytest_synth_rl.report",
    "pytest_synth_rl.secret_forms",
    "pytest_synth_rl.settings",
    "pytest_synth_rl.summary",
    "pytest_synth_rl.support",
    "pytest_synth_rl.support.poll_watch",
}


def test_loading_the_plugin_imports_only_options_and_markers() -> None:
    code = (
        "import sys, pytest_synth_rl.plugin\n"
        "heavy = ('uvicorn', 'httpx')\n"
        "print(sorted(m for m in sys.modules if m.startswith('pytest_synth_rl') or m in heavy))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert set(eval(done.stdout)) == STARTUP_MODULES


def test_every_public_name_resolves_from_its_module() -> None:
    for name in pytest_synth_rl.__all__:
        value = getattr(pytest_synth_rl, name)
        if name != "__version__":
            assert value.__name__ == name
    assert set(pytest_synth_rl.__all__) <= set(dir(pytest_synth_rl))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match=r"^module 'pytest_synth_rl' has no attribute 'RLJobz'$"):
        pytest_synth_rl.RLJobz  # type: ignore[attr-defined]  # noqa: B018
