"""Overrides edit the parsed TOML before validation; the SDK's special keys keep their meaning."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_synth_rl.config import apply_overrides, build_rl_payload, load_rl_config
from pytest_synth_rl.config.loader import parse_dotted_key
from pytest_synth_rl.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = ROOT / "examples" / "rl_minimal.toml"
TASK_URL = "http://127.0.0.1:8114"


def config_with(overrides: dict[str, Any]) -> dict[str, Any]:
    payload = build_rl_payload(MINIMAL, task_url=TASK_URL, overrides=overrides).payload
    config: dict[str, Any] = payload["data"]["config"]
    return config


def test_dotted_keys_set_values_and_create_tables() -> None:
    config = config_with({"training.batch_size": 8, "rollout.env_config.difficulty": "easy"})
    assert config["training"]["batch_size"] == 8
    assert config["rollout"]["env_config"] == {"difficulty": "easy"}
    assert config["training"]["learning_rate"] == 5e-6  # siblings untouched


def test_overrides_apply_before_validation() -> None:
    # the file's [rollout] lacks nothing, but an override can break it ...
    with pytest.raises(ConfigError) as info:
        build_rl_payload(MINIMAL, task_url=TASK_URL, overrides={"rollout.env_name": ""})
    assert info.value.keys == ["rollout.env_name"]
    # ... or convert like the file would
    assert config_with({"rollout.max_turns": "7"})["rollout"]["max_turns"] == 7


def test_nested_dicts_deep_merge() -> None:
    config = config_with(
        {"training": {"batch_size": 16, "weight_sync": {"enable": True}}, "tags": {"team": "x"}}
    )
    assert config["training"]["batch_size"] == 16
    assert config["training"]["group_size"] == 2
    assert config["training"]["weight_sync"] == {"enable": True}
    assert config["tags"] == {"team": "x"}


def test_none_removes_a_key() -> None:
    config = load_rl_config(MINIMAL, overrides={"training": None, "topology.gpus_for_vllm": None})
    assert "training" not in config
    assert "gpus_for_vllm" not in config["topology"]


def test_quoted_segments_address_keys_with_dots_and_the_special_names() -> None:
    config = load_rl_config(
        MINIMAL, overrides={'tags."team.name"': "rl", '"model".label': "x", '"model"': None}
    )
    assert config["tags"] == {"team.name": "rl"}
    assert "model" not in config  # '"model"' is the table, not the special key


@pytest.mark.parametrize(
    ("key", "parts"),
    [
        ("a", ("a",)),
        ("a.b.c", ("a", "b", "c")),
        (" a . b ", ("a", "b")),
        ('a."b.c".d', ("a", "b.c", "d")),
        ('"a\\"q"', ('a"q',)),
        ('""', ("",)),
    ],
)
def test_parse_dotted_key(key: str, parts: tuple[str, ...]) -> None:
    assert parse_dotted_key(key) == parts


@pytest.mark.parametrize("key", ["a..b", ".a", "a.", 'a."b', 'a"b', '"a"b', "a. .b"])
def test_malformed_dotted_keys_are_config_errors(key: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_rl_config(MINIMAL, overrides={key: 1})
    assert info.value.keys == [key]
    assert "not a valid dotted key path" in str(info.value)


def test_special_keys_are_not_written_into_the_tree() -> None:
    config = load_rl_config(
        MINIMAL, overrides={"task_url": "http://127.0.0.1:1", "backend": "https://b", "model": "rl:x"}
    )
    assert config == load_rl_config(MINIMAL)


def test_special_key_model_with_a_table_value_explains_dotted_keys() -> None:
    with pytest.raises(ConfigError) as info:
        load_rl_config(MINIMAL, overrides={"model": {"base": "Qwen/Qwen3-4B"}})
    assert info.value.keys == ["model"]
    assert '"model.base"' in str(info.value)


@pytest.mark.parametrize(
    ("overrides", "origin", "spot"),
    [
        ({"rollout.env_name.difficulty": "easy"}, "rollout.env_name.difficulty", "rollout.env_name"),
        ({"rollout": {"env_name": {"x": 1}}}, "rollout", "rollout.env_name"),
        ({"compute.gpu_count.n": 1}, "compute.gpu_count.n", "compute.gpu_count"),
    ],
)
def test_paths_through_non_tables_name_the_override_key(
    overrides: dict[str, Any], origin: str, spot: str
) -> None:
    with pytest.raises(ConfigError) as info:
        build_rl_payload(MINIMAL, task_url=TASK_URL, overrides=overrides)
    assert info.value.keys == [origin]
    assert f"{spot} is " in info.value.problems[0].message
    assert "not a table" in info.value.problems[0].message
    assert info.value.path == str(MINIMAL)


def test_bad_override_containers_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_rl_config(MINIMAL, overrides=[("a", 1)])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="non-empty strings"):
        load_rl_config(MINIMAL, overrides={3: 1})  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match="non-string key"):
        load_rl_config(MINIMAL, overrides={"tags": {1: "x"}})


def test_apply_overrides_copies_instead_of_mutating() -> None:
    original: dict[str, Any] = {"training": {"batch_size": 1}, "tags": {"a": [1, 2]}}
    shared = {"extra": ["x"]}
    result = apply_overrides(original, {"training.batch_size": 2, "tags.b": shared})
    assert original == {"training": {"batch_size": 1}, "tags": {"a": [1, 2]}}
    result["tags"]["a"].append(3)
    result["tags"]["b"]["extra"].append("y")
    assert original["tags"]["a"] == [1, 2]
    assert shared == {"extra": ["x"]}
