"""Validating a whole RL config: never stops early, never raises in check mode, names each problem."""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from test_fake_support import rl_payload

from pytest_synth_rl.config.validate import (
    CHECKS,
    ConfigCheck,
    check_rl_config,
    collect_config_problems,
    validate_rl_config,
)
from pytest_synth_rl.errors import ConfigError


def config(**sections: Any) -> dict[str, Any]:
    base = copy.deepcopy(rl_payload()["data"]["config"])
    for name, value in sections.items():
        base[name] = value
    return base


def rendered(check: ConfigCheck) -> list[str]:
    return [p.render() for p in check.problems]


def test_a_valid_config_is_normalized_with_its_model_chosen() -> None:
    check = check_rl_config(config())
    assert rendered(check) == []
    assert check.model_field == "base_model"
    assert check.model is not None
    assert check.model.payload_id == "Qwen/Qwen3-0.6B"
    assert check.config["compute"]["topology"]["reference_placement"] == "none"


@pytest.mark.parametrize(
    ("value", "shown"),
    [([1, 2], "an array of 2 item(s)"), (None, "nothing"), ("rl.toml", "'rl.toml' (string)")],
)
def test_something_that_is_not_a_table_is_one_problem(value: object, shown: str) -> None:
    check = check_rl_config(value)
    assert rendered(check) == [
        f"<config>: expected a table of sections, got {shown} (hint: the RL config must be a TOML table)"
    ]
    assert (check.config, check.model, check.model_field) == ({}, None, None)


def test_a_config_nested_too_deeply_is_a_problem_not_a_crash() -> None:
    deep: dict[str, Any] = {}
    cursor = deep
    for _ in range(5_000):
        cursor["a"] = {}
        cursor = cursor["a"]
    bad = config()
    bad["training"]["deep"] = deep
    check = check_rl_config(bad)
    assert rendered(check) == ["<config>: is nested too deeply to validate (hint: flatten the config)"]
    assert check.config == {}
    with pytest.raises(ConfigError, match="is nested too deeply"):
        validate_rl_config(bad)


def test_values_json_cannot_carry_are_named_where_they_are() -> None:
    bad = config()
    bad["training"].update(
        when=dt.date(2024, 1, 2),
        at=dt.time(1, 2),
        stamp=dt.datetime(2024, 1, 2, 3, 4, 5),
        xs=[1.0, float("inf")],
        n=float("nan"),
        raw=b"x",
        ok=[1, "a", True, None, {"k": 2.5}],
    )
    assert rendered(check_rl_config(bad)) == [
        "training.when: is a TOML date/time (2024-01-02); expected a value JSON can carry "
        '(hint: quote it as a string: "2024-01-02")',
        "training.at: is a TOML date/time (01:02:00); expected a value JSON can carry "
        '(hint: quote it as a string: "01:02:00")',
        "training.stamp: is a TOML date/time (2024-01-02T03:04:05); expected a value JSON can carry "
        '(hint: quote it as a string: "2024-01-02T03:04:05")',
        "training.xs[1]: is inf; expected a finite number (JSON cannot carry inf or nan) "
        "(hint: use a finite value)",
        "training.n: is nan; expected a finite number (JSON cannot carry inf or nan) "
        "(hint: use a finite value)",
        "training.raw: expected a JSON value (string, number, boolean, array, table), got b'x' (bytes) "
        "(hint: use plain TOML/JSON values in configs and overrides)",
    ]


def test_json_problems_and_model_problems_are_reported_together() -> None:
    bad = config()
    bad["training"]["n"] = float("-inf")
    bad["model"]["base"] = "Nope/Model"
    keys = [p.key for p in check_rl_config(bad).problems]
    assert keys == ["training.n", "model.base"]


# -- the model rule ----------------------------------------------------------------------------
def test_a_missing_key_points_at_its_misspelling() -> None:
    tree = config()
    tree["training"]["batch_sise"] = tree["training"].pop("batch_size")
    assert rendered(check_rl_config(tree)) == [
        "training.batch_size: missing; expected the batch size (required whenever [training] is present); "
        "found 'batch_sise'; did you mean 'batch_size'? (hint: add `batch_size = 2` under [training])"
    ]


def test_a_missing_model_table_is_explained() -> None:
    check = check_rl_config(config(model=None))
    assert rendered(check) == [
        "model: missing; the payload builder needs a [model] table with base or source "
        "([policy].model_name is not used to pick the trained model) "
        '(hint: add [model] with base = "Qwen/Qwen3-0.6B", trainer_mode = "lora", label = "…", '
        'or pass overrides={"model": "<model id>"})'
    ]
    assert check.model is None
    assert check.config["algorithm"]["variety"] == "gspo"


def test_both_base_and_source_is_one_problem() -> None:
    model = {**config()["model"], "source": "ft:Qwen/Qwen3-0.6B:abc"}
    check = check_rl_config(config(model=model))
    assert rendered(check) == [
        "model.base: both base and source are set; expected exactly one "
        '(hint: keep `base = "Qwen/Qwen3-0.6B"` for a base model or `source = "ft:…"` for a fine-tuned one)'
    ]
    assert (check.model, check.model_field) == (None, None)


def test_a_blank_base_is_one_problem() -> None:
    model = {**config()["model"], "base": "  "}
    assert rendered(check_rl_config(config(model=model))) == [
        "model.base: is blank; expected exactly one of base (a base model id) or source (a fine-tuned id) "
        '(hint: keep `base = "Qwen/Qwen3-0.6B"` for a base model or `source = "ft:…"` for a fine-tuned one)'
    ]


def test_a_fine_tuned_source_selects_the_model_field() -> None:
    model = {k: v for k, v in config()["model"].items() if k != "base"}
    check = check_rl_config(config(model={**model, "source": " ft:Qwen/Qwen3-0.6B:abc "}))
    assert rendered(check) == []
    assert check.model_field == "model"
    assert check.model is not None
    assert check.model.payload_id == "ft:Qwen/Qwen3-0.6B:abc"


def test_a_model_problem_found_earlier_is_not_reported_twice() -> None:
    model = {**config()["model"], "base": 5}
    check = check_rl_config(config(model=model))
    assert [p.key for p in check.problems] == ["model.base"]
    assert check.model is None


def test_an_unknown_model_is_rejected_where_it_was_written() -> None:
    model = {**config()["model"], "base": "Nope/Model"}
    [problem] = check_rl_config(config(model=model)).problems
    assert problem.key == "model.base"
    assert problem.message == "'Nope/Model' is not a supported model"


def test_a_model_override_forces_source_mode_and_blank_overrides_are_ignored() -> None:
    check = check_rl_config(config(), model_override="ft:Qwen/Qwen3-0.6B:j")
    assert (check.model_field, check.model and check.model.payload_id) == ("model", "ft:Qwen/Qwen3-0.6B:j")
    assert check_rl_config(config(), model_override="   ").model_field == "base_model"
    assert check_rl_config(config(), model_override=None).model_field == "base_model"
    bad = check_rl_config(config(), model_override="Nope/Model")
    assert [p.key for p in bad.problems] == ["overrides.model"]
    assert check_rl_config(config(model=None), model_override="ft:Qwen/Qwen3-0.6B:j").model_field == "model"


def test_select_model_false_skips_the_builders_choice() -> None:
    check = check_rl_config(config(model=None), select_model=False)
    assert (check.model, check.model_field) == (None, None)
    assert check.config["training"]["batch_size"] == 2


def test_experimental_models_need_permission_in_every_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SDK_EXPERIMENTAL", raising=False)
    model = {**config()["model"], "base": "Qwen/Qwen3-4B-Thinking-2507"}
    experimental = config(model=model)
    assert [p.key for p in check_rl_config(experimental).problems] == ["model.base"]
    assert rendered(check_rl_config(experimental, allow_experimental=True)) == []
    assert collect_config_problems(experimental, allow_experimental=True) == []
    assert [p.key for p in collect_config_problems(experimental)] == ["model.base"]
    validate_rl_config(experimental, allow_experimental=True)
    with pytest.raises(ConfigError):
        validate_rl_config(experimental, allow_experimental=False)


# -- raising and collecting --------------------------------------------------------------------
def test_validate_returns_the_normalized_config_or_raises_with_every_problem_and_the_path() -> None:
    assert validate_rl_config(config()) == check_rl_config(config()).config
    bad = config(model=None)
    bad["training"]["n"] = float("nan")
    with pytest.raises(ConfigError) as info:
        validate_rl_config(bad, path="rl.toml")
    assert info.value.path == "rl.toml"
    assert info.value.keys == ["training.n", "model"]
    assert str(info.value).startswith("RL config rl.toml has 2 problems:\n  - training.n: is nan")


def test_validate_passes_the_model_override_through() -> None:
    with pytest.raises(ConfigError, match=r"overrides\.model"):
        validate_rl_config(config(), model_override="Nope/Model")
    validate_rl_config(config(model=None), model_override="ft:Qwen/Qwen3-0.6B:j")


def test_collect_config_problems_never_raises_and_passes_options_through() -> None:
    assert collect_config_problems(config()) == []
    assert [p.key for p in collect_config_problems(config(), model_override="Nope/Model")] == [
        "overrides.model"
    ]
    assert [p.key for p in collect_config_problems(config(model=None))] == ["model"]
    assert collect_config_problems(config(model=None), model_override="ft:Qwen/Qwen3-0.6B:j") == []


def test_the_builders_algorithm_rule_runs() -> None:
    bad = config()
    bad["algorithm"]["variety"] = "ppo"
    [problem] = check_rl_config(bad).problems
    assert problem.key == "algorithm.variety"
    assert problem.message == (
        "expected \"gspo\" (the payload builder supports only this RL algorithm), got 'ppo' (string)"
    )


def test_the_reward_section_rules_run() -> None:
    [problem] = check_rl_config(config(rubric={"enabled": True, "weights": {"env": 2.0}})).problems
    assert problem.key == "rubric.enabled"


def test_a_rejected_fine_tuned_source_is_reported_at_model_source() -> None:
    model = {k: v for k, v in config()["model"].items() if k != "base"}
    [problem] = check_rl_config(config(model={**model, "source": "ft:Nope/Model:x"})).problems
    assert problem.key == "model.source"
    assert problem.message == "'ft:Nope/Model:x' is not a supported model"


def test_a_check_cannot_be_changed_after_the_fact() -> None:
    check = check_rl_config(config())
    with pytest.raises(AttributeError):
        check.model = None  # type: ignore[misc]


# -- the memo of passing configs ---------------------------------------------------------------
@pytest.fixture
def fresh_memo() -> Iterator[None]:
    CHECKS.clear()
    yield
    CHECKS.clear()


def memo_counts() -> tuple[int, int, int]:
    info = CHECKS.info()
    return info.hits, info.misses, info.size


def test_a_repeated_check_is_reused_and_the_result_is_the_callers_to_change(fresh_memo: None) -> None:
    first = check_rl_config(config())
    assert memo_counts() == (0, 1, 1)
    first.config["training"]["batch_size"] = 999
    first.problems.add(("training",), "added by the caller")
    second = check_rl_config(config())
    assert memo_counts() == (1, 1, 1)
    assert second.config == check_rl_config(config(), select_model=True).config
    assert second.config["training"]["batch_size"] == 2
    assert rendered(second) == []
    assert (second.model, second.model_field) == (first.model, first.model_field)
    second.config["compute"]["gpu_count"] = 77
    assert check_rl_config(config()).config["compute"]["gpu_count"] == 1
    assert CHECKS.info().maxsize == 64


def test_a_config_that_fails_is_checked_again_every_time(fresh_memo: None) -> None:
    bad = config(model=None)
    for _ in range(2):
        assert [p.key for p in check_rl_config(bad).problems] == ["model"]
    assert memo_counts() == (0, 2, 0)


@pytest.mark.parametrize("bad", [2.5, [2], (2,)])
def test_a_failing_value_is_not_taken_for_a_passing_one_that_looks_alike(
    fresh_memo: None, bad: object
) -> None:
    passing = config()
    failing = config()
    passing["training"]["batch_size"] = 2
    failing["training"]["batch_size"] = bad
    assert rendered(check_rl_config(passing)) == []
    assert [p.key for p in check_rl_config(failing).problems] == ["training.batch_size"]
    assert rendered(check_rl_config(passing)) == []
    assert memo_counts()[0] == 1


def test_equal_values_of_different_types_come_back_as_they_went_in(fresh_memo: None) -> None:
    # 1 == 1.0 == True and 0.0 == -0.0, but the payload must carry exactly what was written.
    for value in (1, 1.0, True, 1, True, 1.0, "1", 0.0, -0.0, 0.0, -0.0):
        tree = config()
        tree["rollout"]["env_config"] = {"x": value}
        got = check_rl_config(tree).config["rollout"]["env_config"]["x"]
        assert (type(got), repr(got)) == (type(value), repr(value))
    assert memo_counts() == (5, 6, 6)


def test_a_changed_environment_is_seen_by_a_repeated_check(
    fresh_memo: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = {**config()["model"], "base": "Qwen/Qwen3-4B-Thinking-2507"}
    experimental = config(model=model)
    monkeypatch.setenv("SDK_EXPERIMENTAL", "1")
    assert rendered(check_rl_config(experimental)) == []
    monkeypatch.setenv("SDK_EXPERIMENTAL", "0")
    assert [p.key for p in check_rl_config(experimental).problems] == ["model.base"]
    assert rendered(check_rl_config(config())) == []
    monkeypatch.setenv("SDK_EXPERIMENTAL_MODELS", "Qwen/Qwen3-0.6B")
    assert [p.key for p in check_rl_config(config()).problems] == ["model.base"]
    assert memo_counts() == (0, 4, 2)


def test_options_are_part_of_what_is_remembered(fresh_memo: None) -> None:
    tree = config()
    assert check_rl_config(tree, select_model=False).model is None
    assert check_rl_config(tree).model_field == "base_model"
    assert check_rl_config(tree, model_override="ft:Qwen/Qwen3-0.6B:abc").model_field == "model"
    assert check_rl_config(tree, allow_experimental=True).model_field == "base_model"
    assert memo_counts() == (0, 4, 4)
    assert check_rl_config(tree).model_field == "base_model"
    assert check_rl_config(tree, select_model=False).model is None
    assert memo_counts() == (2, 4, 4)


def test_a_tree_without_an_exact_key_is_checked_every_time(fresh_memo: None) -> None:
    tree = config()
    tree["rollout"]["env_config"] = {"when": ("a", "b")}
    for _ in range(2):
        assert check_rl_config(tree).config["rollout"]["env_config"] == {"when": ["a", "b"]}
    assert memo_counts() == (0, 0, 0)


def test_the_memo_is_bounded_and_forgets_the_least_recently_used(fresh_memo: None) -> None:
    def sized(size: int) -> dict[str, Any]:
        tree = config()
        tree["training"]["batch_size"] = size
        return tree

    for size in range(1, 65):
        assert check_rl_config(sized(size)).config["training"]["batch_size"] == size
    assert check_rl_config(sized(1)).config["training"]["batch_size"] == 1  # 1 is now the newest
    assert memo_counts() == (1, 64, 64)
    check_rl_config(sized(65))  # evicts 2, the least recently used
    assert memo_counts() == (1, 65, 64)
    assert check_rl_config(sized(1)).config["training"]["batch_size"] == 1
    assert memo_counts() == (2, 65, 64)
    assert check_rl_config(sized(2)).config["training"]["batch_size"] == 2
    assert memo_counts() == (2, 66, 64)


def _rejected(model_id: str, **kwargs: object) -> tuple[str, str]:
    from pytest_synth_rl.config.validate import ModelRejected, resolve_rl_model

    with pytest.raises(ModelRejected) as caught:
        resolve_rl_model(model_id, **{"fine_tuned": False, "allow_experimental": False, **kwargs})  # type: ignore[arg-type]
    assert str(caught.value) == caught.value.message
    return caught.value.message, caught.value.hint


def test_the_model_rules_say_what_is_wrong_with_a_model_id_and_how_to_fix_it() -> None:
    examples = "Qwen/Qwen3-0.6B, Qwen/Qwen3-1.7B, Qwen/Qwen3-4B, Qwen/Qwen3-8B"
    assert _rejected("  ") == ("is empty; expected a model id", f"use a base model such as {examples}")
    message, hint = _rejected("gpt-4o", fine_tuned=True)
    assert message == "'gpt-4o' is not a supported model"
    assert hint == (
        f"use one of the RL base models ({examples}, …) or a fine-tuned id that names one, "
        "like ft:Qwen/Qwen3-0.6B:<job-id>"
    )
    assert _rejected("gpt-4o")[1] == f"use one of the RL base models ({examples}, …)"
    message, hint = _rejected("ft:Qwen/Qwen3-0.6B:job_1")
    assert (
        message
        == "'ft:Qwen/Qwen3-0.6B:job_1' is a fine-tuned model id, but this key expects a plain base model id"
    )
    assert hint.startswith("move it to [model].source (and remove [model].base)")
    message, hint = _rejected("Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8")
    assert message == "'Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8' is experimental and disabled"
    assert hint == "pass allow_experimental=True or set SDK_EXPERIMENTAL=1 to use it, or pick a core model"


def test_fp8_variants_are_known_only_where_the_table_says_so() -> None:
    from pytest_synth_rl.config.validate import SUPPORTED_RL_MODELS

    assert "Qwen/Qwen3-4B-Instruct-2507-FP8" in SUPPORTED_RL_MODELS
    assert "Qwen/Qwen3-4B-Instruct-2507" in SUPPORTED_RL_MODELS
    assert "Qwen/Qwen3-0.6B-FP8" not in SUPPORTED_RL_MODELS
    assert not any(model.endswith("+") for model in SUPPORTED_RL_MODELS)


def test_the_experimental_switch_is_exactly_sdk_experimental_1(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_synth_rl.config.validate import experimental_allowed, experimental_models

    monkeypatch.delenv("SDK_EXPERIMENTAL", raising=False)
    monkeypatch.delenv("SDK_EXPERIMENTAL_MODELS", raising=False)
    assert experimental_allowed(None) is False
    monkeypatch.setenv("SDK_EXPERIMENTAL", "1")
    assert experimental_allowed(None) is True
    assert experimental_allowed(False) is False
    monkeypatch.setenv("SDK_EXPERIMENTAL", "true")
    assert experimental_allowed(None) is False
    base = experimental_models()
    monkeypatch.setenv("SDK_EXPERIMENTAL_MODELS", " a/b , ,c/d")
    assert experimental_models() == base | {"a/b", "c/d"}
