"""Typed keys convert exactly as the SDK converts them, because the converted value is sent."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from pytest_synth_rl.config import build_rl_payload
from pytest_synth_rl.config.schema import CoercionError, to_bool, to_float, to_int, to_str
from pytest_synth_rl.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = ROOT / "examples" / "rl_minimal.toml"

INT_OK = [
    (3, 3),
    (True, 1),
    (2.0, 2),
    (-0.0, 0),
    ("7", 7),
    (" 7\t", 7),
    ("+7", 7),
    ("1_000", 1000),
    ("1.00", 1),
    ("007", 7),
    (2**70, 2**70),
]
INT_BAD = [
    2.5,
    math.inf,
    math.nan,
    2.0**63,
    "1.5",
    "1e3",
    "0x10",
    "",
    "seven",
    "1__0",
    "_1",
    [1],
    {"a": 1},
    None,
]
FLOAT_OK = [
    (1, 1.0),
    (False, 0.0),
    (0.25, 0.25),
    ("5e-6", 5e-6),
    (" 2 ", 2.0),
    ("1_0.5", 10.5),
    (".5", 0.5),
    ("1.", 1.0),
    ("1e400", math.inf),
    ("-Infinity", -math.inf),
]
FLOAT_BAD = ["", "abc", "0x1p3", " 1_0", "1__0", "_1", "1_", "1.0e", 2**1100, [1.0], None]
BOOL_OK = [
    (True, True),
    (0, False),
    (1.0, True),
    ("yes", True),
    ("OFF", False),
    ("t", True),
    ("0", False),
]
BOOL_BAD = [2, 0.5, "maybe", " true", "1.0", "", [True], None]


@pytest.mark.parametrize(("raw", "expected"), INT_OK)
def test_to_int_accepts(raw: Any, expected: int) -> None:
    result = to_int(raw)
    assert result == expected
    assert type(result) is int


@pytest.mark.parametrize("raw", INT_BAD)
def test_to_int_refuses(raw: Any) -> None:
    with pytest.raises(CoercionError, match="integer"):
        to_int(raw)


@pytest.mark.parametrize(("raw", "expected"), FLOAT_OK)
def test_to_float_accepts(raw: Any, expected: float) -> None:
    result = to_float(raw)
    assert result == expected
    assert type(result) is float


def test_to_float_keeps_nan() -> None:
    assert math.isnan(to_float("nan"))


@pytest.mark.parametrize("raw", FLOAT_BAD)
def test_to_float_refuses(raw: Any) -> None:
    with pytest.raises(CoercionError):
        to_float(raw)


@pytest.mark.parametrize(("raw", "expected"), BOOL_OK)
def test_to_bool_accepts(raw: Any, expected: bool) -> None:
    assert to_bool(raw) is expected


@pytest.mark.parametrize("raw", BOOL_BAD)
def test_to_bool_refuses(raw: Any) -> None:
    with pytest.raises(CoercionError, match="boolean"):
        to_bool(raw)


def test_strings_are_never_made_from_numbers() -> None:
    assert to_str("x") == "x"
    with pytest.raises(CoercionError, match="a string"):
        to_str(1)


def test_converted_values_are_what_the_payload_carries() -> None:
    payload = build_rl_payload(
        MINIMAL,
        task_url="http://127.0.0.1:8114",
        overrides={
            "training.learning_rate": 1,
            "training.batch_size": "4",
            "rollout.max_turns": 3.0,
            "compute.gpu_count": True,
            "policy": {
                "model_name": "Qwen/Qwen3-0.6B",
                "trainer_mode": "lora",
                "label": "p",
                "temperature": "1",
            },
        },
    ).payload
    text = json.dumps(payload["data"]["config"], sort_keys=True)
    assert '"learning_rate": 1.0' in text
    assert '"batch_size": 4,' in text
    assert '"max_turns": 3,' in text
    assert '"temperature": 1.0' in text
    assert payload["compute"]["gpu_count"] == 1
    assert type(payload["compute"]["gpu_count"]) is int


def test_conversion_failures_say_what_was_expected() -> None:
    with pytest.raises(ConfigError) as info:
        build_rl_payload(
            MINIMAL, task_url="http://127.0.0.1:8114", overrides={"training.learning_rate": "fast"}
        )
    (problem,) = info.value.problems
    assert problem.key == "training.learning_rate"
    assert problem.message == "expected a number, got 'fast' (string)"
    assert problem.hint == "e.g. `learning_rate = 5e-6`"


@pytest.mark.parametrize(
    ("key", "value", "bad_key", "expected", "hint"),
    [
        ("verifier.reward_blend", {"rubric": "high"}, "verifier.reward_blend.rubric", "a number", "1.0"),
        ("rubric.weights", {"event": [1]}, "rubric.weights.event", "a number", "event = "),
        ("evaluation.seeds", [1, "two"], "evaluation.seeds[1]", "an integer", "an integer"),
    ],
)
def test_a_bad_item_in_a_table_or_array_names_the_item_and_its_kind(
    key: str, value: Any, bad_key: str, expected: str, hint: str
) -> None:
    with pytest.raises(ConfigError) as info:
        build_rl_payload(MINIMAL, task_url="http://127.0.0.1:8114", overrides={key: value})
    found = {p.key: p for p in info.value.problems}
    assert bad_key in found, sorted(found)
    assert f"expected {expected}" in found[bad_key].message
    assert hint in (found[bad_key].hint or "")
