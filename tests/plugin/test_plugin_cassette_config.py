"""The ``synth_cassette_config`` fixture configures cassette matching, strictly."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

SUITE = """
import pytest

pytestmark = [
    pytest.mark.synth_task_app("arithmetic_task_app.py"),
    pytest.mark.synth_rl(config="arithmetic.toml"),
]


@pytest.fixture
def synth_cassette_config():
    return {"ignores": ("json.metadata",)}


def test_recorded(synth_rl_job, synth_cassette):
    pass
"""


def test_an_unknown_cassette_config_key_is_rejected_with_a_suggestion(pytester: pytest.Pytester) -> None:
    for name in ("arithmetic_task_app.py", "arithmetic.toml"):
        shutil.copy(EXAMPLES / name, pytester.path / name)
    pytester.makepyfile(test_cfg=SUITE)
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:xdist")
    result.assert_outcomes(errors=1)
    assert (
        "SynthUsageError: invalid synth_cassette_config: synth_cassette_config['ignores']: 'ignores' is "
        "not a cassette option (hint: did you mean 'ignore'? known keys: match_on, ignore)"
    ) in result.stdout.str()


def test_a_directory_where_the_cassette_belongs_is_an_error(pytester: pytest.Pytester) -> None:
    from pytest_synth_rl.recording import cassette_path

    for name in ("arithmetic_task_app.py", "arithmetic.toml"):
        shutil.copy(EXAMPLES / name, pytester.path / name)
    pytester.makepyfile(test_cfg=SUITE.replace('"ignores"', '"ignore"'))
    where = cassette_path(pytester.path / "tests" / "cassettes", "test_cfg.py::test_recorded")
    where.mkdir(parents=True)
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:xdist")
    result.assert_outcomes(errors=1)
    text = result.stdout.str()
    problem = f"the cassette of test_cfg.py::test_recorded would be {where}, but that is a directory"
    assert f"CassetteError: {problem}" in text
    assert "remove or rename it: a cassette is one JSON file per test under synth_cassette_dir" in text


@pytest.mark.parametrize(
    ("returned", "reported"),
    [
        (
            '{"ignore": 5}',
            "synth_cassette_config['ignore']: is 5; expected a list of strings (hint: e.g. ['tags.run'])",
        ),
        (
            '{"match_on": "method"}',
            "synth_cassette_config['match_on']: is 'method'; expected a list of strings "
            "(hint: did you mean ['method']?)",
        ),
        (
            '{"match_on": ["methd"]}',
            "synth_cassette_config['match_on']: unknown request part 'methd'; did you mean 'method'?",
        ),
        (
            '{"ignore": ["."]}',
            "synth_cassette_config['ignore']: expected a dotted JSON path like 'tags.run', got '.'",
        ),
    ],
    ids=["int", "string-not-list", "unknown-part", "empty-path"],
)
def test_cassette_config_values_are_checked_at_setup_even_without_a_cassette(
    pytester: pytest.Pytester, returned: str, reported: str
) -> None:
    # Before: checked only when a cassette was used, and then a raw TypeError or one problem per letter.
    for name in ("arithmetic_task_app.py", "arithmetic.toml"):
        shutil.copy(EXAMPLES / name, pytester.path / name)
    pytester.makepyfile(test_cfg=SUITE.replace('{"ignores": ("json.metadata",)}', returned))
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:xdist")
    result.assert_outcomes(errors=1)
    assert f"SynthUsageError: invalid synth_cassette_config: {reported}" in result.stdout.str()
