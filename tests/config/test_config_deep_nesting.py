"""Trees nested without end, from a file or from Python, are a ConfigError naming where.

Real configs are a few levels deep; the limit is 100 levels of key path. Deeper trees would make
every recursive rule exhaust the interpreter's stack, and a value that contains itself would
never end; both are refused where they enter (the TOML parse, the override, the mapping).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_synth_rl.config import build_rl_payload, build_rl_payload_from_mapping, load_rl_config, parse_toml
from pytest_synth_rl.config.validate import check_rl_config
from pytest_synth_rl.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = ROOT / "examples" / "rl_minimal.toml"
TASK_URL = "http://127.0.0.1:8114"
TOO_DEEP = (
    "is nested more than 100 levels deep; expected at most 100 levels of tables and arrays "
    "(hint: flatten it: an RL config is a few levels deep (keep deep data in a JSON string))"
)
ITSELF = (
    "contains itself (a table or array that holds a reference to itself) "
    "(hint: pass plain nested values: no table or array may contain itself)"
)


def nested(levels: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    cursor = root
    for _ in range(levels):
        cursor["k"] = {}
        cursor = cursor["k"]
    return root


def parse_error(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_toml(MINIMAL.read_text() + text, source="rl.toml")
    return info.value


def dotted_key_message(line: int, column: int, start: str) -> str:
    return (
        f"RL config rl.toml is invalid: line {line}, column {column}: the dotted key {start + '…'!r} has "
        "more than 100 parts; expected at most 100 levels of tables "
        f"(hint: flatten the key at line {line}: an RL config is a few levels deep)"
    )


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [
        ("\n[tags]\n" + ".".join(["k"] * 5_000) + " = 1\n", 40, 1),
        ("\n[" + ".".join(["k"] * 5_000) + "]\nx = 1\n", 39, 2),
        ("\n[[" + ".".join(["k"] * 101) + "]]\nx = 1\n", 39, 3),
    ],
    ids=["dotted key", "table header", "array of tables"],
)
def test_a_key_of_thousands_of_parts_is_refused_before_parsing(text: str, line: int, column: int) -> None:
    error = parse_error(text)
    assert str(error) == dotted_key_message(line, column, "k." * 20)
    assert (error.problems[0].line, error.problems[0].column) == (line, column)


def test_a_key_in_an_inline_table_counts_too() -> None:
    error = parse_error('\n[tags]\nx = {a = 1, "b c" . ' + "d." * 100 + "e = 2}\n")
    assert str(error) == dotted_key_message(40, 13, '"b c" . ' + "d." * 16)


def test_a_hundred_levels_are_accepted_and_one_more_is_not() -> None:
    header = "\n[" + ".".join(["k"] * 60) + "]\n"
    parsed = parse_toml(header + ".".join(["j"] * 40) + " = 1\n")
    assert len(str(parsed).split("{")) == 101  # 100 tables below the root
    error = parse_error(header + ".".join(["j"] * 41) + " = 1\n")
    assert str(error) == f"RL config rl.toml is invalid: k.k.k.k.k.k.k.k…: {TOO_DEEP}"
    assert error.keys == ["k.k.k.k.k.k.k.k…"]


def test_arrays_nested_deeper_than_the_limit_but_parsed_are_refused() -> None:
    error = parse_error("\n[tags]\nx = " + "[" * 200 + "]" * 200 + "\n")
    assert str(error) == f"RL config rl.toml is invalid: tags.x[0][0][0][0][0][0]…: {TOO_DEEP}"


def build(overrides: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        build_rl_payload(MINIMAL, task_url=TASK_URL, overrides=overrides)
    return info.value


def test_an_override_value_nested_thousands_deep_names_the_override() -> None:
    error = build({"tags.x": nested(5_000)})
    assert str(error) == (
        f"RL config {MINIMAL} is invalid: tags.x: override 'tags.x': "
        f"the value at tags.x.k.k.k.k.k.k… {TOO_DEEP}"
    )
    assert error.keys == ["tags.x"]


def test_an_override_value_that_contains_itself_names_where_and_one_used_twice_is_fine() -> None:
    shared = {"a": [1, 2]}
    result = build_rl_payload(
        MINIMAL, task_url=TASK_URL, overrides={"tags.x": {"one": shared, "two": shared}}
    )
    tags = result.payload["data"]["config"]["tags"]
    assert tags == {"x": {"one": {"a": [1, 2]}, "two": {"a": [1, 2]}}}
    assert tags["x"]["one"] is not tags["x"]["two"]
    table: dict[str, Any] = {"a": 1}
    table["me"] = table
    array: list[Any] = [1]
    array.append(array)
    error = build({"tags.x": {"ok": [table]}, "tags.y": 1})
    assert str(error) == (
        f"RL config {MINIMAL} is invalid: tags.x: override 'tags.x': the value at tags.x.ok[0].me {ITSELF}"
    )
    error = build({"tags": {"y": array}})
    assert (
        str(error)
        == f"RL config {MINIMAL} is invalid: tags: override 'tags': the value at tags.y[1] {ITSELF}"
    )


def test_an_override_key_of_thousands_of_parts() -> None:
    error = build({"tags." + ".".join(["k"] * 5_000): 1})
    assert str(error) == (
        f"RL config {MINIMAL} is invalid: tags.k.k.k.k.k.k.k…: override key 'tags.k.k.k.k.k.k.k…' has more "
        "than 100 parts; expected at most 100 levels of tables "
        '(hint: override a key of a few levels, like "training.batch_size")'
    )


def test_a_mapping_that_contains_itself() -> None:
    config = load_rl_config(MINIMAL)
    loop: dict[str, Any] = {}
    loop["me"] = loop
    config["tags"] = {"loop": loop}
    with pytest.raises(ConfigError) as info:
        build_rl_payload_from_mapping(config, task_url=TASK_URL)
    assert str(info.value) == f"RL config <mapping> is invalid: tags.loop.me: {ITSELF}"
    assert [problem.render() for problem in check_rl_config(config).problems] == [f"tags.loop.me: {ITSELF}"]


def shared_in_two_places(levels: int) -> dict[str, Any]:
    """A table holding the one below it twice, *levels* times: 2**levels leaves once expanded."""
    tree: dict[str, Any] = {"v": 1}
    for _ in range(levels):
        tree = {"x": tree, "y": tree}
    return tree


BIG = (
    "holds more than 100,000 values (a table or array shared in several places counts once per place) "
    "(hint: pass plain nested values: an RL config holds dozens "
    "(keep bulk data in a file the task app reads))"
)


def test_tables_shared_in_many_places_are_refused_instead_of_copied_into_billions() -> None:
    # Before, 40 levels of "x and y are the table below" copied 2**40 values: the build never ended.
    with pytest.raises(ConfigError) as info:
        build_rl_payload(MINIMAL, task_url=TASK_URL, overrides={"tags": shared_in_two_places(40)})
    assert str(info.value) == (
        f"RL config {MINIMAL} is invalid: tags: override 'tags': the value at tags.x.x.x.x.x.x.x… {BIG}"
    )
    check = check_rl_config({**load_rl_config(MINIMAL), "tags": shared_in_two_places(40)})
    (problem,) = check.problems
    assert problem.key.startswith("tags.x.x.x.x.x.x.x.x.x.x.")  # where the count ran over
    assert problem.message == BIG.split(" (hint: ")[0]


def test_a_table_shared_in_a_few_places_is_copied_once_per_place() -> None:
    tree = shared_in_two_places(15)  # 2**15 leaves, 2**16 values in all: under the limit
    built = build_rl_payload(MINIMAL, task_url=TASK_URL, overrides={"tags": tree}).payload
    copied = built["data"]["config"]["tags"]
    assert copied == tree
    assert copied["x"] is not copied["y"]  # a copy per place: editing one leaves the other alone
