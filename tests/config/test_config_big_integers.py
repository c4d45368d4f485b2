"""Integers too large to send are a ConfigError naming where they are, however they were written.

Python refuses to convert integers of more than 4,300 digits to or from text (a bare
``ValueError``), and a JSON reader of a 64-bit field refuses anything from 2**63 on; TOML itself
only has 64-bit integers. So every integer of the config must be smaller than 2**63 in magnitude.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_synth_rl.config import build_rl_payload, parse_toml, problems, read_toml_file, schema
from pytest_synth_rl.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = ROOT / "examples" / "rl_minimal.toml"
TASK_URL = "http://127.0.0.1:8114"
EXPECTED = "expected an integer smaller than 2**63 in magnitude"
HINT = "use a smaller number, or quote it as a string if it is an identifier rather than a count"
TOO_BIG = f"{EXPECTED} (a TOML integer, and what a 64-bit backend field holds) (hint: {HINT})"


def build(overrides: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        build_rl_payload(MINIMAL, task_url=TASK_URL, overrides=overrides)
    return info.value


@pytest.mark.parametrize(
    ("edit", "line", "column", "digits"),
    [
        (("batch_size = 2", "batch_size = " + "9" * 5_000), 35, 14, "5,000"),
        (
            ("max_turns = 1\nbatch", "max_turns = 1\nbatch_size_list = [1, -" + "1_0" * 2_500 + "]\nbatch"),
            35,
            23,
            "5,000",
        ),
    ],
)
def test_an_integer_literal_too_long_to_convert_names_its_line(
    tmp_path: Path, edit: tuple[str, str], line: int, column: int, digits: str
) -> None:
    path = tmp_path / "rl.toml"
    path.write_text(MINIMAL.read_text().replace(*edit, 1))
    with pytest.raises(ConfigError) as info:
        read_toml_file(path)
    assert str(info.value) == (
        f"RL config {path} is invalid: line {line}, column {column}: "
        f"integer literal of {digits} digits; {EXPECTED} (hint: {HINT})"
    )
    assert info.value.path == str(path)


def test_a_long_digit_string_in_a_value_does_not_take_the_blame() -> None:
    text = 'note = "' + "7" * 5_000 + '"\nbig = ' + "8" * 4_301 + "\n"
    with pytest.raises(ConfigError) as info:
        parse_toml(text, source="rl.toml")
    (problem,) = info.value.problems
    assert (problem.line, problem.column, problem.message) == (
        2,
        7,
        f"integer literal of 4,301 digits; {EXPECTED}",
    )


def test_a_digit_string_where_an_integer_is_expected() -> None:
    error = build({"training.batch_size": "9" * 5_000})
    assert str(error) == (
        f"RL config {MINIMAL} is invalid: training.batch_size: expected an integer smaller than 2**63, "
        f"got '{'9' * 58}… (string) (hint: e.g. `batch_size = 2`)"
    )


@pytest.mark.parametrize(
    ("overrides", "key", "shown"),
    [
        ({"training.batch_size": 10**5_000}, "training.batch_size", "an integer of 5,001 digits"),
        ({"tags.x": 10**5_000}, "tags.x", "an integer of 5,001 digits"),
        ({"tags.x": {"y": [1, -(10**30)]}}, "tags.x.y[1]", "-1000000000000000000000000000000 (integer)"),
        ({"rollout.env_config": {"n": -(2**63)}}, "rollout.env_config.n", "-9223372036854775808 (integer)"),
    ],
    ids=["typed", "free-form", "nested", "-2**63"],
)
def test_an_integer_too_large_to_send_is_refused_where_it_is(
    overrides: dict[str, Any], key: str, shown: str
) -> None:
    error = build(overrides)
    assert str(error) == f"RL config {MINIMAL} is invalid: {key}: is {shown}; {TOO_BIG}"
    assert error.keys == [key]


def test_the_largest_64_bit_integers_are_sent_and_one_more_is_not() -> None:
    result = build_rl_payload(
        MINIMAL,
        task_url=TASK_URL,
        overrides={"tags.x": [2**63 - 1, -(2**63 - 1)], "training.batch_size": "+9_223_372_036_854_775_807"},
    )
    config = result.payload["data"]["config"]
    assert config["tags"]["x"] == [2**63 - 1, -(2**63 - 1)]
    assert config["training"]["batch_size"] == 2**63 - 1
    json.dumps(result.payload)
    error = build({"training.batch_size": 2**63})
    assert str(error) == (
        f"RL config {MINIMAL} is invalid: training.batch_size: is 9223372036854775808 (integer); {TOO_BIG}"
    )


@pytest.mark.parametrize(
    ("number", "digits"),
    [(0, 1), (9, 1), (10, 2), (-99, 2), (100, 3), (10**5_000 - 1, 5_000), (-(10**5_000), 5_001)],
    ids=["0", "9", "10", "-99", "100", "10**5000-1", "-10**5000"],
)
def test_digits_are_counted_without_writing_the_number(number: int, digits: int) -> None:
    assert problems.digit_count(number) == digits


def test_describe_shows_a_huge_integer_by_its_size() -> None:
    assert problems.describe(10**5_000) == "an integer of 5,001 digits"
    assert problems.describe(2**63) == "9223372036854775808 (integer)"
    with pytest.raises(
        ValueError, match=r"^expected an integer smaller than 2\*\*63, got '9{20}' \(string\)$"
    ):
        schema.to_int("9" * 20)
