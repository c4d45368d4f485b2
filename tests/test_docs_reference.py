"""The reference names everything the plugin registers, read from a real pytest configuration."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "reference"
#: Each kind of registered name: the page that must name it, and how pytest lists it.
KINDS = {
    "option": ("options.md", "--help", re.compile(r"(--synth-[a-z-]+)")),
    "ini option": ("options.md", "--help", re.compile(r"^  (synth_\w+) \(", re.M)),
    "fixture": ("fixtures.md", "--fixtures", re.compile(r"^(synth_\w+)", re.M)),
    "marker": ("markers.md", "--markers", re.compile(r"^@pytest\.mark\.(synth_\w+)", re.M)),
}


def registered(pytester: pytest.Pytester) -> dict[str, set[str]]:
    """Every ``synth`` option, ini option, fixture and marker pytest lists, by kind."""
    listings = {
        flag: pytester.runpytest_inprocess(
            flag, "-o", "asyncio_default_fixture_loop_scope=function"
        ).stdout.str()
        for flag in ("--help", "--fixtures", "--markers")
    }
    return {kind: set(pattern.findall(listings[flag])) for kind, (_, flag, pattern) in KINDS.items()}


def unnamed(pytester: pytest.Pytester) -> dict[str, set[str]]:
    """The registered names their reference page does not name (as code: `` `name` ``)."""
    missing: dict[str, set[str]] = {}
    for kind, names in registered(pytester).items():
        text = (REFERENCE / KINDS[kind][0]).read_text(encoding="utf-8")
        absent = {name for name in names if not re.search(rf"`{re.escape(name)}[`=( ]", text)}
        if absent:
            missing[kind] = absent
    return missing


def test_pytest_lists_the_plugin_s_names(pytester: pytest.Pytester) -> None:
    names = registered(pytester)
    assert {"--synth-backend", "--synth-record"} <= names["option"]
    assert {"synth_baseline_dir", "synth_task_app"} <= names["ini option"]
    assert {"synth_rl_job", "synth_fake_server"} <= names["fixture"]
    assert {"synth_rl", "synth_offline"} <= names["marker"]


def test_the_reference_names_every_registered_option_fixture_and_marker(pytester: pytest.Pytester) -> None:
    assert unnamed(pytester) == {}


def test_a_new_name_missing_from_the_reference_is_caught(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        import pytest

        def pytest_addoption(parser):
            parser.addoption("--synth-brand-new", action="store_true")
            parser.addini("synth_brand_new", "a new ini option")

        def pytest_configure(config):
            config.addinivalue_line("markers", "synth_brand_new: a new marker")

        @pytest.fixture
        def synth_brand_new():
            "A new fixture."
        """
    )
    assert unnamed(pytester) == {
        "option": {"--synth-brand-new"},
        "ini option": {"synth_brand_new"},
        "fixture": {"synth_brand_new"},
        "marker": {"synth_brand_new"},
    }
