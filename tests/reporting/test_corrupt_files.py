"""A broken cassette or baseline file is reported naming the file and what is wrong with it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_synth_rl.baselines import BaselineError, BaselineStore
from pytest_synth_rl.recording import Cassette, CassetteError

TEST_ID = "tests/test_rl.py::test_train"
DEEP = "is nested too deeply to parse (more than 200 levels)"


def _interaction(url: str = "https://api.usesynth.ai/api/rl/jobs", **response: Any) -> dict[str, Any]:
    return {
        "request": {"method": "GET", "url": url, "headers": {}, "body": None},
        "response": {"status": 200, "headers": {}, "body": None, **response},
    }


def _cassette_file(tmp_path: Path, content: bytes | str) -> Path:
    path = tmp_path / "c.json"
    if isinstance(content, str):
        content = content.encode("utf-8")
    path.write_bytes(content)
    return path


def _doc(*interactions: dict[str, Any], test_id: str = TEST_ID) -> str:
    return json.dumps({"version": 1, "test_id": test_id, "interactions": list(interactions)})


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"version": 1, "interactions": [', "is not valid JSON (line 1, column 33: Expecting value)"),
        (
            b'{"version": 1, "interactions": [], "x": "\xff\xfe"}',
            "is not UTF-8 text (byte 0xff at offset 41)",
        ),
        ("[" * 100_000 + "]" * 100_000, DEEP),
    ],
    ids=["truncated", "not-utf8", "deep"],
)
def test_unreadable_cassettes_name_the_file_and_the_problem(
    tmp_path: Path, content: bytes | str, expected: str
) -> None:
    path = _cassette_file(tmp_path, content)
    with pytest.raises(CassetteError) as caught:
        Cassette.load(path)
    assert caught.value.message == f"{path} {expected}"


def test_a_cassette_body_that_is_not_base64_is_reported_at_load(tmp_path: Path) -> None:
    path = _cassette_file(tmp_path, _doc(_interaction(body="not base64!!", body_encoding="base64")))
    with pytest.raises(CassetteError) as caught:
        Cassette.load(path)
    assert caught.value.message.startswith(
        f"{path}: interactions[0].response.body: body_encoding is base64 but the body is not valid base64 ("
    )


def test_a_cassette_url_with_a_bad_port_is_reported_at_load(tmp_path: Path) -> None:
    path = _cassette_file(tmp_path, _doc(_interaction(url="http://127.0.0.1:99x/api")))
    with pytest.raises(CassetteError) as caught:
        Cassette.load(path)
    assert caught.value.message == (
        f"{path}: interactions[0].request.url: 'http://127.0.0.1:99x/api' is not a valid URL "
        "(Port could not be cast to integer value as '99x')"
    )


def test_a_cassette_url_without_a_host_is_reported_at_load(tmp_path: Path) -> None:
    path = _cassette_file(tmp_path, _doc(_interaction(url="/api/rl/jobs")))
    with pytest.raises(CassetteError) as caught:
        Cassette.load(path)
    assert caught.value.message == (
        f"{path}: interactions[0].request.url: '/api/rl/jobs' is not an absolute http(s) URL"
    )


def test_a_cassette_recorded_for_another_test_is_refused_naming_both_ids(tmp_path: Path) -> None:
    path = _cassette_file(tmp_path, _doc(_interaction(), test_id="tests/test_other.py::test_x"))
    with pytest.raises(CassetteError) as caught:
        Cassette.load_or_new(path, test_id=TEST_ID)
    assert caught.value.message == (
        f"cassette {path} was recorded for test 'tests/test_other.py::test_x', not for {TEST_ID!r}"
    )
    assert Cassette.load_or_new(path, test_id="tests/test_other.py::test_x").existed


def test_a_valid_cassette_still_loads(tmp_path: Path) -> None:
    body = "aGVsbG8="  # "hello"
    path = _cassette_file(tmp_path, _doc(_interaction(body=body, body_encoding="base64")))
    cassette = Cassette.load_or_new(path, test_id=TEST_ID)
    assert [i.response.content() for i in cassette] == [b"hello"]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            '{"version": 1, "metrics": {"a": 1',
            "is not valid JSON (line 1, column 34: Expecting ',' delimiter)",
        ),
        (b'{"metrics": {"\xc3\x28": 1}}', "is not UTF-8 text (byte 0xc3 at offset 14)"),
        ('{"metrics": ' * 50_000 + "1" + "}" * 50_000, DEEP),
    ],
    ids=["truncated", "not-utf8", "deep"],
)
def test_unreadable_baselines_name_the_file_and_the_problem(
    tmp_path: Path, content: bytes | str, expected: str
) -> None:
    store = BaselineStore(tmp_path)
    path = store.path_for(TEST_ID)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(BaselineError) as caught:
        store.load(TEST_ID)
    assert caught.value.message == f"baseline file {path} {expected}"
