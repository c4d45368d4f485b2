"""Thousands of problems are collected in linear time and reported in a short message."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_synth_rl.config import build_rl_payload, load_rl_config, validate_rl_payload
from pytest_synth_rl.config.problems import ProblemList
from pytest_synth_rl.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = ROOT / "examples" / "rl_minimal.toml"
TASK_URL = "http://127.0.0.1:8114"
EVALUATION = {"evaluation.instances": 4, "evaluation.every_n_iters": 2}
SEED_HINT = "(hint: make every item of evaluation.seeds an integer)"
LIMITS_HINT = "the first 20 problems inside one table or array and 100 lines in all are listed"


class CountedKey(str):
    """A key part that counts how often it is compared or hashed (a path of equal but distinct
    strings, so that no comparison is skipped by identity)."""

    operations = 0

    def __eq__(self, other: object) -> bool:
        CountedKey.operations += 1
        return str.__eq__(self, other)

    def __hash__(self) -> int:
        CountedKey.operations += 1
        return str.__hash__(self)


def test_adding_a_problem_costs_the_same_however_many_came_before() -> None:
    problems = ProblemList()
    CountedKey.operations = 0
    for index in range(2_000):
        problems.add((CountedKey("evaluation"), CountedKey("seeds"), index), "expected an integer")
    assert len(problems) == 2_000
    # A few hashes and comparisons per problem (a quadratic walk would make 4 million).
    assert CountedKey.operations <= 10 * 2_000


def test_thousands_of_bad_items_list_twenty_and_count_the_rest() -> None:
    with pytest.raises(ConfigError) as info:
        build_rl_payload(
            MINIMAL, task_url=TASK_URL, overrides={**EVALUATION, "evaluation.seeds": ["x"] * 5_000}
        )
    listed = "".join(
        f"\n  - evaluation.seeds[{index}]: expected an integer, got 'x' (string) {SEED_HINT}"
        for index in range(20)
    )
    assert str(info.value) == (
        f"RL config {MINIMAL} has 5,000 problems (21 lines listed):{listed}\n"
        f"  - evaluation.seeds: ... and 4,980 more problems in evaluation.seeds (hint: {LIMITS_HINT})\n"
        "  hint: 20 of the 5,000 problems are listed; fix those and run again for the rest"
    )
    assert info.value.keys[-1] == "evaluation.seeds"
    assert info.value.total == 5_000


def test_twenty_bad_items_are_all_listed_and_the_twenty_first_is_counted() -> None:
    with pytest.raises(ConfigError) as info:
        build_rl_payload(MINIMAL, task_url=TASK_URL, overrides={**EVALUATION, "evaluation.seeds": ["x"] * 20})
    assert info.value.keys == [f"evaluation.seeds[{index}]" for index in range(20)]
    assert info.value.hint is None
    with pytest.raises(ConfigError) as info:
        build_rl_payload(MINIMAL, task_url=TASK_URL, overrides={**EVALUATION, "evaluation.seeds": ["x"] * 21})
    assert info.value.keys == [*(f"evaluation.seeds[{index}]" for index in range(20)), "evaluation.seeds"]
    assert info.value.problems[-1].message == "... and 1 more problem in evaluation.seeds"
    assert info.value.hint == "20 of the 21 problems are listed; fix those and run again for the rest"


def test_no_more_than_a_hundred_lines_are_listed_in_all() -> None:
    problems = ProblemList()
    for table in range(150):
        problems.add(("tags", f"t{table}", "x"), "is inf")
    rendered = [problem.render() for problem in problems]
    assert len(problems) == 150
    assert rendered[:2] == ["tags.t0.x: is inf", "tags.t1.x: is inf"]
    assert rendered[99] == "tags.t99.x: is inf"
    assert rendered[100:] == [f"<config>: ... and 50 more problems (hint: {LIMITS_HINT})"]
    assert str(problems.as_error("rl.toml")).endswith(
        "\n  hint: 100 of the 150 problems are listed; fix those and run again for the rest"
    )


def test_problems_under_a_listed_key_stay_dropped_when_counting() -> None:
    problems = ProblemList()
    for index in range(25):
        problems.add(("seeds", index), "bad")
    for index in range(25):
        problems.add(("seeds", index, "inner"), "below a broken key: dropped")
    problems.add(("seeds", 3), "the same key again: dropped")
    assert len(problems) == 25
    assert [problem.render() for problem in problems][-1] == (
        f"seeds: ... and 5 more problems in seeds (hint: {LIMITS_HINT})"
    )
    assert problems.has_under(("seeds",))
    assert problems.covers(("seeds", 24, "x"))
    assert not problems.has_under(("tags",))


def test_a_payload_with_thousands_of_bad_items_gets_a_short_answer() -> None:
    config = load_rl_config(MINIMAL, overrides={**EVALUATION, "evaluation.seeds": ["x"] * 5_000})
    config["services"]["task_url"] = TASK_URL
    payload = {
        "job_type": "rl",
        "data": {"endpoint_base_url": TASK_URL, "config": config, "base_model": "Qwen/Qwen3-0.6B"},
        "compute": config["compute"],
    }
    problems = validate_rl_payload(payload)
    assert len(problems) == 21
    assert problems[0].render() == (
        f"data.config.evaluation.seeds[0]: expected an integer, got 'x' (string) {SEED_HINT}"
    )
    assert problems[-1].render() == (
        "data.config.evaluation.seeds: ... and 4,980 more problems in data.config.evaluation.seeds "
        f"(hint: {LIMITS_HINT})"
    )


def test_unknown_override_keys_are_listed_up_to_a_hundred() -> None:
    with pytest.raises(ConfigError) as info:
        build_rl_payload(
            MINIMAL, task_url=TASK_URL, overrides={f"training.k{index}": 1 for index in range(1_000)}
        )
    assert info.value.keys == [*(f"training.k{index}" for index in range(100)), ""]
    assert info.value.problems[-1].render() == f"<config>: ... and 900 more problems (hint: {LIMITS_HINT})"
    assert info.value.hint == "100 of the 1,000 problems are listed; fix those and run again for the rest"
