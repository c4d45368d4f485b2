"""The memo of passing config checks: exact keys and a bounded, least-recently-used store."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_synth_rl.config.loader import read_toml_file
from pytest_synth_rl.config.tree import KEY_MAX_DEPTH as MAX_DEPTH
from pytest_synth_rl.config.tree import MemoInfo, PassedChecks, exact_key
from pytest_synth_rl.config.validate import (
    CHECKS,
    check_rl_config,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "arithmetic.toml"


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (1, 1.0),
        (1, True),
        (0, False),
        (1, "1"),
        (0.0, -0.0),
        (None, "None"),
        ([1, 2], [2, 1]),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}),  # order is kept in the payload, so it counts
        ({"a": [1]}, {"a": 1}),
        ([["a", 1]], {"a": 1}),
        ([], {}),
        # The key is flat: lengths and type marks must keep its reading unambiguous.
        ([[1], 2], [[1, 2]]),
        ({"a": {"b": 1}}, {"a": {}, "b": 1}),
        ([[], [[]]], [[[]], []]),
        (["dict", 0], [{}]),
        ([1.5], ["1.5"]),
        ({1: "a"}, {"1": "a"}),
        ({1.0: "a"}, {1: "a"}),
        ({True: 1}, {1: 1}),
        ({"a": "b", "c": "d"}, {"a": "c", "b": "d"}),
    ],
)
def test_values_that_compare_equal_or_look_alike_get_different_keys(a: object, b: object) -> None:
    assert exact_key(a) is not None
    assert exact_key(b) is not None
    assert exact_key(a) != exact_key(b)


def test_the_same_tree_gets_the_same_key_every_time() -> None:
    tree = {"a": [1, 2.5, True, None, "x"], "b": {"c": float("nan")}}
    copy = {"a": [1, 2.5, True, None, "x"], "b": {"c": float("nan")}}
    assert exact_key(tree) == exact_key(copy)
    assert hash(exact_key(tree)) == hash(exact_key(copy))


@pytest.mark.parametrize(
    "odd",
    [(1, 2), {1, 2}, b"bytes", OrderedDict(a=1), type("MyStr", (str,), {})("x"), object()],
)
def test_anything_but_plain_values_has_no_key(odd: object) -> None:
    assert exact_key(odd) is None
    assert exact_key({"ok": [1, {"nested": odd}]}) is None


def test_trees_deeper_than_the_limit_have_no_key() -> None:
    tree: object = 1
    for _ in range(MAX_DEPTH):
        tree = [tree]
    assert exact_key(tree) is not None
    assert exact_key([tree]) is None
    deep: object = 1
    for _ in range(10_000):
        deep = {"k": deep}
    assert exact_key(deep) is None  # no RecursionError either


def test_trees_of_more_than_ten_thousand_values_have_no_key() -> None:
    # A key is kept with its entry; one for a huge data table would pin hundreds of MB.
    assert exact_key(list(range(9_999))) is not None  # the list and its items: 10,000 values
    assert exact_key(list(range(10_000))) is None
    assert exact_key({"seeds": list(range(9_997))}) is not None  # the table, its key, the list
    assert exact_key({"seeds": list(range(9_998))}) is None


def test_the_store_counts_hits_and_misses_and_keeps_the_newest() -> None:
    memo: PassedChecks[str] = PassedChecks(maxsize=2)
    assert memo.get("a") is None
    memo.put("a", "A")
    memo.put("b", "B")
    assert memo.get("a") == "A"  # a is now the most recently used
    memo.put("c", "C")  # evicts b
    assert memo.get("b") is None
    assert (memo.get("a"), memo.get("c")) == ("A", "C")
    assert memo.info() == MemoInfo(hits=3, misses=2, size=2, maxsize=2)
    memo.put("a", "A2")  # replacing refreshes too
    memo.put("d", "D")  # evicts c
    assert (memo.get("a"), memo.get("c"), memo.get("d")) == ("A2", None, "D")
    memo.clear()
    assert memo.info() == MemoInfo(hits=0, misses=0, size=0, maxsize=2)
    assert memo.get("a") is None


# -- problems alone: the memo without copies -----------------------------------------------------
@pytest.fixture
def fresh_memo() -> Iterator[None]:
    CHECKS.clear()
    yield
    CHECKS.clear()


def example() -> dict[str, Any]:
    return read_toml_file(EXAMPLE)


def test_problems_alone_are_remembered_like_whole_checks(fresh_memo: None) -> None:
    assert list(check_rl_config(example(), fresh=False).problems) == []
    assert list(check_rl_config(example(), fresh=False).problems) == []
    assert check_rl_config(example()).problems.as_list() == []
    info = CHECKS.info()
    assert (info.hits, info.misses, info.size) == (2, 1, 1)


def test_a_config_that_differs_by_one_value_is_checked_again(fresh_memo: None) -> None:
    def batch_size(value: object) -> list[str]:
        tree = example()
        tree["training"]["batch_size"] = value
        return [problem.key for problem in check_rl_config(tree, fresh=False).problems.as_list()]

    assert batch_size(4) == []
    for look_alike in (4.5, [4], (4,)):
        assert batch_size(look_alike) == ["training.batch_size"], look_alike
    assert batch_size(4) == []


def test_a_check_remembered_without_a_copy_still_hands_out_copies(fresh_memo: None) -> None:
    returned = check_rl_config(example(), fresh=False).problems
    returned.add(("training",), "added by the caller")  # the caller's list, not the memo's entry
    assert check_rl_config(example(), fresh=False).problems.as_list() == []
    first = check_rl_config(example())
    first.config["training"]["batch_size"] = 999
    assert check_rl_config(example()).config["training"]["batch_size"] == 4
    assert check_rl_config(example()).problems.as_list() == []
