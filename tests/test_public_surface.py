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
    "pytest_synth_rl.plugin.interrupts",
    "pytest_synth_rl.plugin.markers",
    "pytest_synth_rl.secrets.masking",
    "pytest_synth_rl.plugin",
    "pytest_synth_rl.plugin.hooks",
    "pytest_synth_rl.plugin.fixtures",
    "pytest_synth_rl.plugin.progress",
    "pytest_synth_rl.reporting.render",
    "pytest_synth_rl.reporting.report",
    "pytest_synth_rl.secrets.forms",
    "pytest_synth_rl.plugin.settings",
    "pytest_synth_rl.reporting.summary",
    "pytest_synth_rl.reporting",
    "pytest_synth_rl.secrets",
    "pytest_synth_rl.client",
    "pytest_synth_rl.client.results",
}


def test_loading_the_plugin_imports_only_options_and_markers() -> None:
    code = (
        "import sys, pytest_synth_rl.plugin.hooks\n"
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


#: Importable from the top level for code written against earlier releases, but not advertised:
#: each has a module of its own that ``__all__`` users import it from.
FORMER_TOP_LEVEL = {
    "JobResult": "pytest_synth_rl.client",
    "JobExpectation": "pytest_synth_rl.assertions",
    "eventually": "pytest_synth_rl.assertions",
    "expect_job": "pytest_synth_rl.assertions",
    "Cassette": "pytest_synth_rl.recording",
    "ReplayPolicy": "pytest_synth_rl.fake.model",
    "Reply": "pytest_synth_rl.fake.model",
}


def test_the_top_level_lists_what_tests_and_conftests_write() -> None:
    public = set(pytest_synth_rl.__all__)
    fixture_types = {"SynthSettings", "TaskAppHandle", "SynthBackend", "FakeSynthBackend", "Clock"}
    fixture_types |= {"RLConfigRef", "SynthJobFactory", "ExpectJob", "ServedFake", "Replayer"}
    fixture_types |= {"BaselineCheck"}
    errors = {"SynthError", "ConfigError", "SynthUsageError", "JobFailedError", "JobTimeoutError"}
    assert fixture_types | errors <= public
    assert len(public) == 30
    assert not public & FORMER_TOP_LEVEL.keys()
    assert not set(dir(pytest_synth_rl)) & FORMER_TOP_LEVEL.keys()


@pytest.mark.parametrize("name", sorted(FORMER_TOP_LEVEL))
def test_a_former_top_level_name_still_resolves_to_its_modules_object(name: str) -> None:
    module = __import__(FORMER_TOP_LEVEL[name], fromlist=[name])
    assert getattr(pytest_synth_rl, name) is getattr(module, name)


#: Where the README of the release before the capability layout told users to import names from.
DOCUMENTED_PLACES = {
    "pytest_synth_rl.assertions": ["JobExpectation", "expect_job", "eventually"],
    "pytest_synth_rl.baselines": ["BaselineStore", "Tolerance"],
    "pytest_synth_rl.client": ["JobResult", "RLJob", "AsyncRLJob"],
    "pytest_synth_rl.config": ["build_rl_payload", "load_rl_config"],
    "pytest_synth_rl.errors": ["MarkerError", "ConfigError"],
    "pytest_synth_rl.fake.store": ["StoreFull"],
    "pytest_synth_rl.policies": ["Reply", "ReplayPolicy", "PolicyError", "ToolCall", "LearningPolicy"],
    "pytest_synth_rl.recording": ["Cassette", "use_cassette"],
    "pytest_synth_rl.taskapp": ["check_task_app_health", "InProcessTaskApp"],
}


@pytest.mark.parametrize("module", sorted(DOCUMENTED_PLACES))
def test_names_still_import_from_their_documented_place(module: str) -> None:
    names = DOCUMENTED_PLACES[module]
    done = subprocess.run(
        [sys.executable, "-c", f"from {module} import {', '.join(names)}; print({names[0]}.__name__)"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == names[0]
