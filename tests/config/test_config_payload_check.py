"""Checking received payloads (for the fake backend): all problems, keyed by JSON path, never raising."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_synth_rl.config import (
    build_rl_payload,
    collect_config_problems,
    load_rl_config,
    validate_rl_payload,
)
from pytest_synth_rl.errors import ConfigProblem

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = ROOT / "examples" / "rl_minimal.toml"
CONFIGS = Path(__file__).resolve().parents[1] / "configs"
TASK_URL = "http://127.0.0.1:8114"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TASK_APP_URL", "SDK_EXPERIMENTAL", "SDK_EXPERIMENTAL_MODELS"):
        monkeypatch.delenv(name, raising=False)


def good_payload(**overrides: Any) -> dict[str, Any]:
    return build_rl_payload(
        MINIMAL, task_url=TASK_URL, backend_url="https://api.usesynth.ai", **overrides
    ).payload


def keys(problems: list[ConfigProblem]) -> list[str]:
    return [problem.key for problem in problems]


def test_built_payloads_are_accepted() -> None:
    assert validate_rl_payload(good_payload()) == []
    assert validate_rl_payload(good_payload(overrides={"model": "ft:Qwen/Qwen3-0.6B:j"})) == []
    assert validate_rl_payload(build_rl_payload(CONFIGS / "rl_full.toml").payload) == []
    golden = json.loads((CONFIGS / "rl_full.expected.json").read_text())
    assert validate_rl_payload(golden) == []


def tampered(edit: Any) -> list[str]:
    payload = copy.deepcopy(good_payload())
    edit(payload)
    return keys(validate_rl_payload(payload))


def test_wrong_job_type() -> None:
    assert tampered(lambda p: p.update(job_type="sft")) == ["job_type"]


def test_config_problems_are_reported_under_data_config() -> None:
    def edit(payload: dict[str, Any]) -> None:
        payload["data"]["config"]["rollout"]["env_name"] = ""
        payload["data"]["config"]["training"].pop("group_size")

    assert tampered(edit) == ["data.config.rollout.env_name", "data.config.training.group_size"]


def test_placeholder_endpoint_is_refused_with_an_explanation() -> None:
    payload = build_rl_payload(MINIMAL, overrides={"services": None}).payload
    problems = validate_rl_payload(payload)
    assert keys(problems) == ["data.endpoint_base_url"]
    assert "placeholder" in (problems[0].hint or "")


def test_a_misspelt_endpoint_scheme_is_refused_with_a_did_you_mean() -> None:
    payload = build_rl_payload(MINIMAL, task_url="htp://127.0.0.1:8114").payload
    (problem,) = validate_rl_payload(payload)
    assert (problem.key, problem.message) == (
        "data.endpoint_base_url",
        "expected an http(s) URL the trainer can reach such as http://127.0.0.1:8114, got "
        "'htp://127.0.0.1:8114' (did you mean 'http://127.0.0.1:8114'?)",
    )
    assert problem.hint == (
        "give the task app's full URL "
        '(task_url=, overrides["task_url"], TASK_APP_URL or [services].task_url)'
    )


def test_split_task_urls_are_refused() -> None:
    def edit(payload: dict[str, Any]) -> None:
        payload["data"]["config"]["services"]["task_url"] = "http://127.0.0.1:9999"

    assert tampered(edit) == ["data.config.services.task_url"]


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda p: p["data"].update(model="ft:Qwen/Qwen3-0.6B:j"), ["data.base_model"]),
        (lambda p: p["data"].pop("base_model"), ["data.base_model"]),
        (lambda p: p["data"].update(base_model="Qwen/Qwen3-4B"), ["data.base_model"]),
        (lambda p: p["data"].update(base_model="gpt-4o"), ["data.base_model"]),
        (lambda p: p["data"].update(base_model=7), ["data.base_model"]),
    ],
)
def test_model_fields_must_be_consistent(edit: Any, expected: list[str]) -> None:
    assert tampered(edit) == expected


def test_experimental_models_are_a_client_side_gate_only() -> None:
    payload = good_payload(overrides={"model": "ft:Qwen/Qwen3-4B-Thinking-2507:j"}, allow_experimental=True)
    assert validate_rl_payload(payload) == []
    assert keys(validate_rl_payload(payload, allow_experimental=False)) == ["data.model"]


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda p: p.update(compute="H100"), ["compute"]),
        (lambda p: p["compute"].update(gpu_count=2), ["compute"]),
        (lambda p: p["compute"].update(gpu_count=True), ["compute.gpu_count"]),
        (lambda p: p.update(metadata=[]), ["metadata"]),
        (lambda p: p.update(data=None), ["data"]),
    ],
)
def test_compute_and_envelope_shapes(edit: Any, expected: list[str]) -> None:
    assert tampered(edit) == expected


def test_collect_config_problems_takes_the_model_override_into_account() -> None:
    config = load_rl_config(MINIMAL)
    del config["model"]
    config["policy"] = {"model_name": "Qwen/Qwen3-0.6B", "trainer_mode": "lora", "label": "p"}
    assert keys(collect_config_problems(config)) == ["model"]
    assert collect_config_problems(config, model_override="ft:Qwen/Qwen3-0.6B:j") == []


def test_collect_config_problems_does_not_modify_its_input() -> None:
    config = load_rl_config(MINIMAL)
    del config["services"]
    before = json.dumps(config, sort_keys=True)
    assert collect_config_problems(config) == []
    assert json.dumps(config, sort_keys=True) == before


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8,
)
SECTION_NAMES = st.sampled_from(
    [
        "algorithm",
        "services",
        "model",
        "policy",
        "compute",
        "topology",
        "rollout",
        "training",
        "evaluation",
        "verifier",
        "rubric",
        "reference",
        "smoke",
        "tags",
        "options",
        "weights",
        "base",
        "source",
        "topology",
    ]
)
CONFIGISH = st.recursive(
    JSON,
    lambda inner: st.dictionaries(SECTION_NAMES | st.text(max_size=6), inner, max_size=6),
    max_leaves=12,
)


@settings(max_examples=80, deadline=None)
@given(value=CONFIGISH)
def test_collect_config_problems_never_raises(value: Any) -> None:
    problems = collect_config_problems(value)
    assert all(isinstance(problem, ConfigProblem) for problem in problems)
    if not isinstance(value, dict):
        assert problems


@settings(max_examples=80, deadline=None)
@given(
    value=CONFIGISH,
    where=st.lists(
        st.sampled_from(["data", "config", "compute", "rollout", "model", "services"]), max_size=3
    ),
)
def test_validate_rl_payload_never_raises(value: Any, where: list[str]) -> None:
    assert validate_rl_payload(value) or isinstance(value, dict)
    # garbage grafted into a valid payload at some depth
    payload: Any = good_payload()
    node = payload
    for key in where[:-1]:
        node = node.get(key) if isinstance(node, dict) and isinstance(node.get(key), dict) else node
    if where and isinstance(node, dict):
        node[where[-1]] = value
    problems = validate_rl_payload(payload)
    assert all(isinstance(problem, ConfigProblem) for problem in problems)


@settings(max_examples=80, deadline=None)
@given(
    mutation=st.dictionaries(
        st.sampled_from(["algorithm", "model", "compute", "rollout", "training"]), JSON, max_size=3
    )
)
def test_configs_with_garbage_sections_fail_cleanly(mutation: dict[str, Any]) -> None:
    config = load_rl_config(MINIMAL)
    config.update(mutation)
    for problem in collect_config_problems(config):
        assert problem.key
        assert problem.message
