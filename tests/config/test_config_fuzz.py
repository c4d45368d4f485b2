"""Whatever shape a config or an override takes, the builder answers with a payload or a ConfigError."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_synth_rl.config import build_rl_payload, build_rl_payload_from_mapping, load_rl_config
from pytest_synth_rl.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = ROOT / "examples" / "rl_minimal.toml"
TASK_URL = "http://127.0.0.1:8114"

SECTIONS = [
    "algorithm", "services", "model", "policy", "compute", "topology", "rollout", "training",
    "evaluation", "verifier", "rubric", "reference", "smoke", "tags", "vllm", "lora",
]  # fmt: skip
KEYS = [
    "type", "method", "variety", "task_url", "base", "source", "trainer_mode", "label", "model_name",
    "gpu_type", "gpu_count", "topology", "env_name", "policy_name", "max_turns", "episodes_per_batch",
    "max_concurrent_rollouts", "learning_rate", "batch_size", "seeds", "options", "provider", "model",
    "event", "outcome", "enabled", "weights", "env", "placement", "max_tokens", "extra",
]  # fmt: skip

# Values TOML can produce, plus the JSON-only null.
TOML_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**64), 2**64)
    | st.floats()
    | st.text(max_size=6)
    | st.sampled_from(
        ["online", "policy_gradient", "gspo", "Qwen/Qwen3-0.6B", "ft:Qwen/Qwen3-0.6B:j", "1", "yes"]
    )
    | st.datetimes()
    | st.dates()
    | st.times()
)
TOMLISH = st.recursive(
    TOML_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=10,
)


def outcome_of(call: Any) -> dict[str, Any] | ConfigError:
    """Run a build and return its payload or its ConfigError; anything else propagates."""
    try:
        payload: dict[str, Any] = call().payload
    except ConfigError as error:
        return error
    return payload


@settings(max_examples=80, deadline=None)
@given(
    edits=st.dictionaries(st.tuples(st.sampled_from(SECTIONS), st.sampled_from(KEYS)), TOMLISH, max_size=4)
)
def test_edited_configs_build_or_raise_config_error(edits: dict[tuple[str, str], Any]) -> None:
    config = load_rl_config(MINIMAL)
    for (section, key), value in edits.items():
        table = config.setdefault(section, {})
        if isinstance(table, dict):
            table[key] = value
    result = outcome_of(lambda: build_rl_payload_from_mapping(config, task_url=TASK_URL))
    if isinstance(result, ConfigError):
        assert result.problems
        assert all(problem.message for problem in result.problems)
    else:
        json.dumps(result, allow_nan=False)  # whatever is accepted can be sent


@settings(max_examples=80, deadline=None)
@given(config=st.dictionaries(st.sampled_from(SECTIONS) | st.text(max_size=4), TOMLISH, max_size=6))
def test_arbitrary_tomlish_dicts_raise_only_config_error(config: dict[str, Any]) -> None:
    result = outcome_of(lambda: build_rl_payload_from_mapping(config, task_url=TASK_URL))
    assert isinstance(result, ConfigError)  # nothing random is a complete valid config


@settings(max_examples=80, deadline=None)
@given(
    overrides=st.dictionaries(
        st.text(max_size=12) | st.sampled_from(["task_url", "model", "backend"]), TOMLISH, max_size=3
    )
)
def test_arbitrary_overrides_raise_only_config_error(overrides: dict[str, Any]) -> None:
    result = outcome_of(lambda: build_rl_payload(MINIMAL, task_url=TASK_URL, overrides=overrides))
    assert isinstance(result, (dict, ConfigError))


def test_a_table_that_is_not_a_table_gets_one_problem_not_one_per_key() -> None:
    with pytest.raises(ConfigError) as info:
        build_rl_payload(MINIMAL, task_url=TASK_URL, overrides={"rollout": None, "topology": None, "data": 1})
    assert info.value.keys == ["rollout", "topology"]
    with pytest.raises(ConfigError) as info:
        build_rl_payload_from_mapping({**load_rl_config(MINIMAL), "rollout": ["env_name"]}, task_url=TASK_URL)
    assert info.value.keys == ["rollout"]


def test_dates_are_reported_where_they_are() -> None:
    config = load_rl_config(MINIMAL)
    config["tags"] = {"when": [dt.date(2024, 1, 2)]}
    with pytest.raises(ConfigError) as info:
        build_rl_payload_from_mapping(config, task_url=TASK_URL)
    assert info.value.keys == ["tags.when[0]"]
