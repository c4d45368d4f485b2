"""Every validation rule refuses what the SDK refuses, names the key and says what was expected.

Each case edits the contract's minimal config with overrides (dotted keys; ``None`` deletes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_synth_rl.config import build_rl_payload, collect_config_problems, load_rl_config
from pytest_synth_rl.errors import ConfigError, ConfigProblem

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = ROOT / "examples" / "rl_minimal.toml"
CONFIGS = Path(__file__).resolve().parents[1] / "configs"
TASK_URL = "http://127.0.0.1:8114"
VALID_OPTIONS = {"provider": "openai", "model": "gpt-5-nano"}


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TASK_APP_URL", "SDK_EXPERIMENTAL", "SDK_EXPERIMENTAL_MODELS"):
        monkeypatch.delenv(name, raising=False)


def problems_for(overrides: dict[str, Any], **kwargs: Any) -> list[ConfigProblem]:
    kwargs.setdefault("task_url", TASK_URL)
    with pytest.raises(ConfigError) as info:
        build_rl_payload(MINIMAL, overrides=overrides, allow_new_keys=True, **kwargs)
    assert info.value.path == str(MINIMAL)
    return info.value.problems


# (rule, overrides, key, fragment of the message that says what was expected)
CASES: list[tuple[str, dict[str, Any], str, str]] = [
    ("1 algorithm missing", {"algorithm": None}, "algorithm", "expected an [algorithm] table"),
    (
        "1 algorithm empty",
        {"algorithm.type": None, "algorithm.method": None, "algorithm.variety": None},
        "algorithm",
        "missing or empty",
    ),
    ("1 algorithm not a table", {"algorithm": "online"}, "algorithm", "expected a table"),
    ("2 no model or policy", {'"model"': None}, "model", "expected a [model] table"),
    ("3 algorithm type", {"algorithm.type": "offline"}, "algorithm.type", 'expected "online"'),
    ("4 algorithm method", {"algorithm.method": "sft"}, "algorithm.method", 'expected "policy_gradient"'),
    ("5 algorithm variety", {"algorithm.variety": ""}, "algorithm.variety", 'expected "gspo"'),
    ("6 model id missing", {"model.base": None}, "model.base", "expected base"),
    ("6 trainer_mode empty", {"model.trainer_mode": ""}, "model.trainer_mode", '"lora", "qlora" or "full"'),
    ("6 label missing", {"model.label": None}, "model.label", "expected a label"),
    (
        "6 policy without model_name",
        {"policy": {"trainer_mode": "lora", "label": "p"}},
        "policy.model_name",
        "expected model_name",
    ),
    ("7 compute missing", {"compute": None}, "compute", "[compute] table"),
    ("7 gpu_type empty", {"compute.gpu_type": ""}, "compute.gpu_type", 'GPU type like "H100"'),
    ("7 gpu_count zero", {"compute.gpu_count": 0}, "compute.gpu_count", "non-zero GPU count"),
    ("8 rollout missing", {"rollout": None}, "rollout", "[rollout] table"),
    ("8 env_name empty", {"rollout.env_name": ""}, "rollout.env_name", "environment the task app serves"),
    ("8 policy_name missing", {"rollout.policy_name": None}, "rollout.policy_name", "a policy name"),
    ("9 topology missing", {"topology": None}, "topology", "[compute.topology]"),
    ("10 training key missing", {"training.learning_rate": None}, "training.learning_rate", "learning rate"),
    (
        "11 evaluation key missing",
        {"evaluation": {"instances": 2, "seeds": [1]}},
        "evaluation.every_n_iters",
        "how often to evaluate",
    ),
    (
        "12 compute.topology not a table",
        {"compute.topology": "split"},
        "compute.topology",
        "expected a table",
    ),
    (
        "13 verifier without options",
        {"verifier": {"rubric_id": "r"}},
        "verifier.options",
        "[verifier.options]",
    ),
    (
        "13 deprecated verifier.type",
        {"verifier": {"type": "synth", "options": VALID_OPTIONS}},
        "verifier.type",
        "no longer supported",
    ),
    (
        "13 deprecated options.tracks",
        {"verifier.options": {**VALID_OPTIONS, "tracks": ["a"]}},
        "verifier.options.tracks",
        "no longer supported",
    ),
    (
        "13 unknown provider",
        {"verifier.options": {"provider": "anthropic", "model": "m"}},
        "verifier.options.provider",
        '"openai", "groq", "gemini"',
    ),
    (
        "13 empty verifier model",
        {"verifier.options": {"provider": "groq", "model": ""}},
        "verifier.options.model",
        "non-empty model id",
    ),
    (
        "13 no verification track",
        {"verifier.options": {**VALID_OPTIONS, "event": False, "outcome": "no"}},
        "verifier.options.event",
        "at least one verification track",
    ),
    (
        "13 verifier timeout",
        {"verifier.options": {**VALID_OPTIONS, "timeout_s": 0}},
        "verifier.options.timeout_s",
        "> 0",
    ),
    ("13 rubric enabled without verifier", {"rubric.enabled": True}, "rubric.enabled", "[verifier]"),
    ("13 rubric weights all zero", {"rubric.weights": {"env": 0}}, "rubric.weights", "at least one"),
    ("13 rubric negative weight", {"rubric.weights.event": -1}, "rubric.weights.event", ">= 0"),
    ("13 deprecated rubric key", {"rubric.model": "gpt"}, "rubric.model", "no longer supported"),
    (
        "13 rubric event weight without event track",
        {
            "rubric": {"enabled": True, "weights": {"event": 1}},
            "verifier.options": {**VALID_OPTIONS, "event": False},
        },
        "rubric.weights.event",
        "[verifier.options].event is false",
    ),
    (
        "14 required rollout key",
        {"rollout.max_concurrent_rollouts": None},
        "rollout.max_concurrent_rollouts",
        "integer",
    ),
    (
        "14 integer type",
        {"rollout.max_turns": "many"},
        "rollout.max_turns",
        "expected an integer, got 'many'",
    ),
    ("14 fractional integer", {"training.batch_size": 2.5}, "training.batch_size", "expected an integer"),
    ("14 string type", {"compute.gpu_type": 100}, "compute.gpu_type", "expected a string, got 100"),
    ("14 boolean type", {"training.weight_sync.enable": "maybe"}, "training.weight_sync.enable", "boolean"),
    ("14 table type", {"rollout.env_config": "easy"}, "rollout.env_config", "expected a table"),
    (
        "14 array item type",
        {"evaluation": {"instances": 1, "every_n_iters": 1, "seeds": [1, "x"]}},
        "evaluation.seeds[1]",
        "integer",
    ),
    ("14 base and source", {"model.source": "ft:Qwen/Qwen3-0.6B:j"}, "model.base", "exactly one"),
    ("14 services without task_url", {"services.task_url": None}, "services.task_url", "expected a string"),
    (
        "14 policy model_name and source",
        {"policy": {"model_name": "Qwen/Qwen3-0.6B", "source": "ft:x", "trainer_mode": "lora", "label": "p"}},
        "policy.model_name",
        "exactly one",
    ),
    (
        "14 policy default type",
        {"policy": {"model_name": "m", "trainer_mode": "lora", "label": "p", "max_tokens": "lots"}},
        "policy.max_tokens",
        "integer",
    ),
    ("14 smoke is still type-checked", {"smoke.max_steps": "few"}, "smoke.max_steps", "integer"),
    ("builder method ppo", {"algorithm.method": "ppo"}, "algorithm.method", 'expected "policy_gradient"'),
    ("builder variety ppo", {"algorithm.variety": "ppo"}, "algorithm.variety", 'expected "gspo"'),
    ("builder blank base", {"model.base": "   "}, "model.base", "is blank"),
    ("builder unknown model", {"model.base": "gpt-4o"}, "model.base", "not a supported model"),
    ("builder SFT-only model", {"model.base": "Qwen/Qwen3-32B"}, "model.base", "does not support RL"),
    (
        "builder fine-tuned id as base",
        {"model.base": "ft:Qwen/Qwen3-0.6B:job"},
        "model.base",
        "plain base model id",
    ),
    (
        "builder experimental model",
        {"model.base": "Qwen/Qwen3-4B-Thinking-2507"},
        "model.base",
        "experimental",
    ),
    (
        "builder unknown fine-tuned base",
        {"model.base": None, "model.source": "ft:llama-3:job"},
        "model.source",
        "not a supported",
    ),
]


@pytest.mark.parametrize(("rule", "overrides", "key", "expected"), CASES, ids=[case[0] for case in CASES])
def test_each_rule_reports_its_key_what_was_expected_and_a_hint(
    rule: str, overrides: dict[str, Any], key: str, expected: str
) -> None:
    problems = problems_for(overrides)
    by_key = {problem.key: problem for problem in problems}
    assert key in by_key, f"{rule}: got {[p.render() for p in problems]}"
    assert expected in by_key[key].message
    assert by_key[key].hint


def test_missing_task_url_names_services_task_url_and_every_way_to_set_it() -> None:
    problems = problems_for({}, task_url=None)
    assert [p.key for p in problems] == ["services.task_url"]
    assert "TASK_APP_URL" in (problems[0].hint or "")
    assert "task_url=" in (problems[0].hint or "")


def test_sdk_leniencies_are_kept() -> None:
    """Things the SDK accepts must keep building: normalised variety, truthy gpu_count strings,
    a [model] with an empty trainer_mode when a non-empty [policy] is checked instead."""
    payload = build_rl_payload(
        MINIMAL,
        task_url=TASK_URL,
        overrides={
            "algorithm.variety": " GSPO ",
            "compute.gpu_count": "0",
            "model.trainer_mode": "",
            "policy": {"model_name": "Qwen/Qwen3-0.6B", "trainer_mode": "full", "label": "p"},
        },
    ).payload
    config = payload["data"]["config"]
    assert config["algorithm"]["variety"] == " GSPO "
    assert payload["compute"]["gpu_count"] == 0
    assert config["model"]["trainer_mode"] == ""


def test_a_config_with_many_problems_reports_all_of_them_once() -> None:
    path = CONFIGS / "rl_many_problems.toml"
    with pytest.raises(ConfigError) as info:
        build_rl_payload(path)
    error = info.value
    assert error.path == str(path)
    assert error.keys == [
        "algorithm.method",
        "model.label",
        "compute.gpu_count",
        "rollout.env_name",
        "training.group_size",
        "training.learning_rate",
        "verifier.options",
        "rollout.max_turns",
        "algorithm.variety",
    ]
    text = str(error)
    assert f"RL config {path} has 9 problems" in text
    for key in error.keys:
        assert f"  - {key}" in text


def test_collect_config_problems_matches_the_builder_without_task_url() -> None:
    config = load_rl_config(CONFIGS / "rl_many_problems.toml")
    keys = [problem.key for problem in collect_config_problems(config)]
    assert "services.task_url" not in keys
    assert len(keys) == 9
    assert collect_config_problems(load_rl_config(MINIMAL)) == []
