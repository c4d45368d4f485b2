"""Reading config files: every failure is a ConfigError that names the file and the spot."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_synth_rl.config import build_rl_payload, load_rl_config, parse_toml, read_toml_file
from pytest_synth_rl.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = ROOT / "examples" / "rl_minimal.toml"


def test_the_example_config_parses() -> None:
    config = read_toml_file(MINIMAL)
    assert config["model"]["base"] == "Qwen/Qwen3-0.6B"
    assert config["services"] == {"task_url": ""}


def test_every_read_of_a_file_gets_a_tree_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "rl.toml"
    path.write_bytes(MINIMAL.read_bytes() + b'\n[tags]\nlist = [[1, 2], {a = "b"}]\n')
    expected = parse_toml(path.read_bytes())
    first = read_toml_file(path)  # the file's parse is remembered from here on
    first["training"]["batch_size"] = 99
    first["tags"]["list"][0].append(3)
    first["tags"]["list"][1]["a"] = "c"
    del first["model"]
    assert read_toml_file(path) == expected
    assert load_rl_config(path) == expected


def test_syntax_error_reports_file_line_column_and_the_source_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text('[algorithm]\ntype = "online"\n\n[rollout]\nmax_turns = = 3\n')
    with pytest.raises(ConfigError) as info:
        build_rl_payload(path, task_url="http://127.0.0.1:8114")
    error = info.value
    assert error.path == str(path)
    (problem,) = error.problems
    assert (problem.line, problem.column) == (5, 13)
    assert "invalid TOML" in problem.message
    assert "max_turns = = 3" in problem.message
    assert "line 5, column 13" in (problem.hint or "")
    assert str(path) in str(error)
    assert f"RL config {path} is invalid: line 5, column 13: invalid TOML" in str(error)
    assert "<config>" not in str(error)


def test_syntax_error_at_end_of_document_still_has_a_position(tmp_path: Path) -> None:
    path = tmp_path / "unterminated.toml"
    path.write_text('[rollout]\nenv_name = "math')
    with pytest.raises(ConfigError) as info:
        read_toml_file(path)
    (problem,) = info.value.problems
    assert problem.line == 2
    assert problem.column is not None
    assert problem.column >= 1


def test_duplicate_keys_are_a_syntax_error(tmp_path: Path) -> None:
    path = tmp_path / "dup.toml"
    path.write_text("[compute]\ngpu_count = 1\ngpu_count = 2\n")
    with pytest.raises(ConfigError) as info:
        read_toml_file(path)
    assert info.value.problems[0].line == 3


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as info:
        build_rl_payload(path, task_url="http://127.0.0.1:8114")
    assert info.value.path == str(path)
    assert f"{path}: file not found" in str(info.value)


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory"):
        load_rl_config(tmp_path)


def test_non_utf8_bytes_point_at_the_offending_byte(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'[model]\nlabel = "caf\xe9"\n')
    with pytest.raises(ConfigError) as info:
        read_toml_file(path)
    (problem,) = info.value.problems
    assert (problem.line, problem.column) == (2, 13)
    assert "0xe9" in problem.message
    assert "UTF-8" in problem.message


def test_byte_order_mark_gets_a_specific_hint() -> None:
    with pytest.raises(ConfigError) as info:
        parse_toml("\ufeff[algorithm]\n".encode(), source="bom.toml")
    assert "byte-order mark" in (info.value.problems[0].hint or "")


def test_deeply_nested_arrays_are_a_config_error_not_a_crash() -> None:
    with pytest.raises(ConfigError):
        parse_toml("x = " + "[" * 5000 + "]" * 5000)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=300))
def test_arbitrary_bytes_give_a_dict_or_a_config_error(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "fuzz.toml"
    path.write_bytes(data)
    outcome: object
    try:
        outcome = read_toml_file(path)
    except ConfigError as error:
        outcome = error
    if isinstance(outcome, ConfigError):
        assert outcome.path == str(path)
        assert outcome.problems
    else:
        assert isinstance(outcome, dict)


TOMLISH = st.sampled_from(
    [
        "[a]\n",
        "x = 1\n",
        'y = "s"\n',
        "[[t]]\n",
        "z = [1, 2\n",
        "k = {a = 1}\n",
        "= 3\n",
        '"q" = true\n',
        "\n",
    ]
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(TOMLISH, max_size=8))
def test_toml_like_text_builds_or_fails_with_a_config_error(tmp_path: Path, lines: list[str]) -> None:
    path = tmp_path / "fuzz.toml"
    path.write_text(MINIMAL.read_text() + "".join(lines))
    outcome: object
    try:
        outcome = build_rl_payload(path, task_url="http://127.0.0.1:8114").payload
    except ConfigError as error:
        outcome = error
    if isinstance(outcome, ConfigError):
        assert outcome.problems
    else:
        assert isinstance(outcome, dict)
        assert outcome["job_type"] == "rl"
