"""A build from a file is remembered, and never handed out stale or shared.

The tests check the memo's hit count, so none of them could pass merely because every build ran
afresh.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_synth_rl.config import SynthConfigWarning, build_rl_payload, build_rl_payload_from_mapping
from pytest_synth_rl.config.loader import read_toml_file
from pytest_synth_rl.config.payload import BUILDS
from pytest_synth_rl.config.tree import copy_tree, plain_copy
from pytest_synth_rl.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = ROOT / "examples" / "rl_minimal.toml"
TASK_URL = "http://127.0.0.1:8114"


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("TASK_APP_URL", "SDK_EXPERIMENTAL", "SDK_EXPERIMENTAL_MODELS"):
        monkeypatch.delenv(name, raising=False)
    BUILDS.clear()
    yield
    BUILDS.clear()


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "rl.toml"
    path.write_bytes(MINIMAL.read_bytes())
    return path


def hits() -> int:
    return BUILDS.info().hits


def fresh(path: Path, **kwargs: Any) -> dict[str, Any]:
    """The payload built without the memo (from the parsed file, as a mapping)."""
    return build_rl_payload_from_mapping(read_toml_file(path), **kwargs).payload


def containers(tree: Any) -> Iterator[int]:
    if isinstance(tree, (dict, list)):
        yield id(tree)
        for item in tree.values() if isinstance(tree, dict) else tree:
            yield from containers(item)


def test_a_repeated_build_is_remembered_and_every_caller_gets_a_payload_of_its_own(config: Path) -> None:
    first = build_rl_payload(config, task_url=TASK_URL)
    first.payload["data"]["config"]["training"]["batch_size"] = 999
    first.payload["compute"]["gpu_count"] = 7
    first.payload["tags"]["edited"] = "yes"
    second = build_rl_payload(config, task_url=TASK_URL)
    assert hits() == 1
    assert second.payload == fresh(config, task_url=TASK_URL)
    second.payload["data"]["config"]["rollout"]["max_turns"] = 5
    third = build_rl_payload(config, task_url=TASK_URL)
    assert hits() == 2
    assert third.payload == fresh(config, task_url=TASK_URL)
    assert third.task_url == TASK_URL
    assert not set(containers(second.payload)) & set(containers(third.payload))


def batch_size(path: Path) -> object:
    return build_rl_payload(path, task_url=TASK_URL).payload["data"]["config"]["training"]["batch_size"]


def test_a_file_rewritten_between_builds_is_read_again_even_with_the_same_size_and_time(
    config: Path,
) -> None:
    before = os.stat(config)
    assert batch_size(config) == 2
    text = config.read_text()
    config.write_text(text.replace("batch_size = 2", "batch_size = 3"))
    # As a file system with coarse timestamps would show two quick writes: nothing but the bytes differ.
    os.utime(config, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(config)
    identity = (before.st_size, before.st_mtime_ns, before.st_ino, before.st_dev)
    assert (after.st_size, after.st_mtime_ns, after.st_ino, after.st_dev) == identity
    assert batch_size(config) == 3
    config.write_text(text)
    assert batch_size(config) == 2
    assert hits() == 1  # the first content again


def test_other_overrides_are_another_build_and_an_edited_overrides_dict_is_seen(config: Path) -> None:
    overrides: dict[str, Any] = {"training.batch_size": 4}

    def batch_size() -> object:
        return build_rl_payload(config, task_url=TASK_URL, overrides=overrides).payload["data"]["config"][
            "training"
        ]["batch_size"]

    assert batch_size() == 4
    assert batch_size() == 4
    assert hits() == 1
    overrides["training.batch_size"] = 6
    assert batch_size() == 6
    overrides["training"] = {"group_size": 4}
    payload = build_rl_payload(config, task_url=TASK_URL, overrides=overrides).payload
    assert payload["data"]["config"]["training"]["group_size"] == 4
    assert build_rl_payload(config, task_url=TASK_URL).payload == fresh(config, task_url=TASK_URL)


def test_overrides_that_look_alike_are_other_builds(config: Path) -> None:
    def tags(**edits: Any) -> dict[str, Any]:
        overrides = {f"tags.{key}": value for key, value in edits.items()}
        built: dict[str, Any] = build_rl_payload(config, task_url=TASK_URL, overrides=overrides).payload
        return dict(built["data"]["config"]["tags"])

    for _ in range(2):
        assert tags(a=[1], b=2) == {"a": [1], "b": 2}
        assert tags(a=[1, "tags.b", 2]) == {"a": [1, "tags.b", 2]}
        for value in (1, True, 1.0, "1"):
            found = tags(a=value)["a"]
            assert (found, type(found)) == (value, type(value))
    assert hits() == 6  # the second round


def test_other_arguments_are_other_builds(config: Path) -> None:
    def build(**kwargs: Any) -> dict[str, Any]:
        return build_rl_payload(config, **{"task_url": TASK_URL, **kwargs}).payload

    assert build()["data"]["endpoint_base_url"] == TASK_URL
    assert build(task_url="http://127.0.0.1:9999")["data"]["endpoint_base_url"] == "http://127.0.0.1:9999"
    assert "metadata" not in build()
    assert build(backend_url="https://b.example")["metadata"] == {"backend_base_url": "https://b.example/api"}
    assert build(backend_url="https://c.example")["metadata"] == {"backend_base_url": "https://c.example/api"}
    assert build_rl_payload(config, task_url=TASK_URL, idempotency="key-1").idempotency == "key-1"
    assert build_rl_payload(config, task_url=TASK_URL, idempotency="key-2").idempotency == "key-2"
    assert build_rl_payload(config, task_url=TASK_URL).idempotency is None
    assert hits() == 2  # the third and the last build are the first one again


def test_the_environment_the_build_reads_is_part_of_the_memo(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASK_APP_URL", "http://127.0.0.1:7001")
    assert build_rl_payload(config).task_url == "http://127.0.0.1:7001"
    assert build_rl_payload(config).task_url == "http://127.0.0.1:7001"
    assert hits() == 1
    monkeypatch.setenv("TASK_APP_URL", "http://127.0.0.1:7002")
    assert build_rl_payload(config).task_url == "http://127.0.0.1:7002"
    build_rl_payload(config, task_url=TASK_URL)
    monkeypatch.setenv("SDK_EXPERIMENTAL_MODELS", "Qwen/Qwen3-0.6B")
    with pytest.raises(ConfigError, match="experimental"):
        build_rl_payload(config, task_url=TASK_URL)
    monkeypatch.setenv("SDK_EXPERIMENTAL", "1")
    build_rl_payload(config, task_url=TASK_URL)
    monkeypatch.delenv("SDK_EXPERIMENTAL")
    with pytest.raises(ConfigError, match="experimental"):
        build_rl_payload(config, task_url=TASK_URL)


def test_a_failed_build_is_not_remembered(config: Path) -> None:
    for _ in range(2):
        with pytest.raises(ConfigError, match="task_url"):
            build_rl_payload(config)
    assert (BUILDS.info().hits, BUILDS.info().size) == (0, 0)


def warned_lines(path: Path) -> list[tuple[str, int, str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build_rl_payload(path, task_url=TASK_URL)  # where the warnings point
    return [
        (Path(w.filename).name, w.lineno, str(w.message)) for w in caught if w.category is SynthConfigWarning
    ]


CALL_LINE = 1 + Path(__file__).read_text().splitlines().index(
    "        build_rl_payload(path, task_url=TASK_URL)  # where the warnings point"
)


def test_a_remembered_build_warns_again_at_the_callers_line(config: Path) -> None:
    config.write_text(config.read_text().replace("[training]", "[trainig]\nx = 1\n\n[training]"))
    first = warned_lines(config)
    second = warned_lines(config)
    assert hits() == 1
    assert first == second
    [(filename, lineno, message)] = first
    assert (filename, lineno) == (Path(__file__).name, CALL_LINE)
    assert "[trainig]" in message
    assert str(config) in message
    other = config.with_name("other.toml")
    other.write_bytes(config.read_bytes())
    assert [message for *_, message in warned_lines(other)] == [message.replace(str(config), str(other))]


def test_a_build_that_warned_about_nothing_stays_quiet(config: Path) -> None:
    assert warned_lines(config) == warned_lines(config) == []
    assert hits() == 1


def test_the_memo_is_bounded(config: Path) -> None:
    for index in range(BUILDS.info().maxsize + 5):
        build_rl_payload(config, task_url=f"http://127.0.0.1:{8000 + index}")
    info = BUILDS.info()
    assert info.size == info.maxsize


def test_builds_from_several_threads_each_get_the_right_payload(config: Path) -> None:
    expected = {port: fresh(config, task_url=f"http://127.0.0.1:{port}") for port in range(7000, 7004)}
    failures: list[str] = []

    def work(port: int) -> None:
        for _ in range(25):
            payload = build_rl_payload(config, task_url=f"http://127.0.0.1:{port}").payload
            if payload != expected[port]:
                failures.append(f"{port}: {payload}")
            payload["data"]["config"]["training"]["batch_size"] = port  # must not reach anyone else

    threads = [threading.Thread(target=work, args=(port,)) for port in expected]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert hits() > 0


def test_copy_tree_copies_what_plain_copy_made_without_sharing_containers() -> None:
    tree = plain_copy({"a": [1, {"b": [2.5, None, "x"]}, [[]]], "c": {"d": {"e": True}}, "f": ()})
    copied = copy_tree(tree)
    assert copied == tree
    assert not set(containers(copied)) & set(containers(tree))
