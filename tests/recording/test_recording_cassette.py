"""The cassette file: readable, diff-friendly, strict when read, atomic when written."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_recording_support import LoopbackServer, make_backend_app

from pytest_synth_rl.recording import (
    Cassette,
    CassetteError,
    Interaction,
    RecordedRequest,
    RecordedResponse,
    RecordingTransport,
    cassette_path,
)
from pytest_synth_rl.recording.cassette import decode_body, encode_body
from pytest_synth_rl.reporting.files import safe_file_stem


@pytest.fixture(scope="module")
def recorded_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cassettes") / "c.json"
    app, _ = make_backend_app()
    with LoopbackServer(app) as server:
        transport = RecordingTransport(cassette=Cassette(path, test_id="tests/t.py::test_a"))
        with httpx.Client(transport=transport) as client:
            client.post(f"{server.url}/api/rl/jobs", json={"job_type": "rl", "data": {"b": 1, "a": 2}})
            client.get(f"{server.url}/text?q=1")
            client.get(f"{server.url}/binary")
            client.get(f"{server.url}/gzip")
        transport.save()
    return path


def test_file_layout_is_sorted_indented_and_newline_terminated(recorded_file: Path) -> None:
    text = recorded_file.read_text(encoding="utf-8")
    document = json.loads(text)
    assert text.endswith("}\n")
    assert text == json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    assert document["version"] == 1
    assert document["test_id"] == "tests/t.py::test_a"
    assert [sorted(i) for i in document["interactions"]] == [["request", "response"]] * 4


def test_bodies_are_stored_as_json_text_or_base64(recorded_file: Path) -> None:
    submit, text, binary, gzipped = json.loads(recorded_file.read_text())["interactions"]
    # JSON bodies are JSON values, not escaped strings
    assert submit["request"]["body"] == {"job_type": "rl", "data": {"a": 2, "b": 1}}
    assert submit["response"]["body"] == {"job_id": "job-1", "status": "queued"}
    assert submit["response"]["status"] == 201
    # text stays text; an empty request body is null
    assert text["response"]["body"] == "plain text, query was: q=1"
    assert text["request"]["body"] is None
    # bytes that are not UTF-8 are base64, flagged
    assert binary["response"]["body_encoding"] == "base64"
    # compressed responses are stored decoded, without the wire headers that no longer apply
    assert gzipped["response"]["body"] == {"compressed": True, "n": 3}
    for interaction in (submit, text, binary, gzipped):
        headers = interaction["response"]["headers"]
        assert "content-length" not in headers
        assert "content-encoding" not in headers
        assert "date" not in headers
        assert all(name == name.lower() for name in headers)


def test_load_round_trips(recorded_file: Path) -> None:
    cassette = Cassette.load(recorded_file)
    assert cassette.existed
    assert len(cassette) == 4
    assert cassette.interactions[2].response.content() == bytes(range(256))
    assert cassette.to_json() == recorded_file.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{ nope", "is not valid JSON (line 1, column 3"),
        ('{"version": 2, "interactions": []}', "has format version 2; this plugin reads version 1"),
        ('{"version": 1}', 'expected an object with an "interactions" list'),
        (
            '{"interactions": [{"request": {"method": "GET", "url": "http://h/"},'
            ' "response": {"status": 99}}]}',
            "interactions[0].response.status: expected an HTTP status 100-599, got 99",
        ),
        (
            '{"interactions": [{"request": {"url": "http://h/"}, "response": {"status": 200}}]}',
            "interactions[0].request.method: expected an HTTP method string, got None",
        ),
        (
            '{"interactions": [{"request": {"method": "GET", "url": "u", "headers": {"a": 1}},'
            ' "response": {"status": 200}}]}',
            "interactions[0].request.headers.a: expected a string or a list of strings, got 1",
        ),
        (
            '{"interactions": [{"request": {"method": "GET", "url": "u", "body_encoding": "zip"},'
            ' "response": {"status": 200}}]}',
            'interactions[0].request.body_encoding: expected "base64" or "text", got \'zip\'',
        ),
    ],
)
def test_malformed_cassettes_name_the_file_and_the_problem(
    tmp_path: Path, content: str, expected: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(CassetteError) as caught:
        Cassette.load(path)
    assert str(path) in str(caught.value)
    assert expected in str(caught.value)


def test_missing_cassette_error_and_load_or_new(tmp_path: Path) -> None:
    with pytest.raises(CassetteError, match="does not exist"):
        Cassette.load(tmp_path / "nope.json")
    fresh = Cassette.load_or_new(tmp_path / "nope.json", test_id="t::x")
    assert not fresh.existed
    assert len(fresh) == 0
    assert fresh.test_id == "t::x"


def test_save_is_atomic_and_leaves_no_temporary_files(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "dir" / "c.json"
    cassette = Cassette(target)
    cassette.append(
        Interaction(RecordedRequest("GET", "https://h/x"), RecordedResponse(200, {"set-cookie": ["a", "b"]}))
    )
    assert cassette.save() == target
    assert [p.name for p in target.parent.iterdir()] == ["c.json"]
    assert Cassette.load(target).interactions[0].response.headers == {"set-cookie": ["a", "b"]}


def test_json_typed_body_that_is_not_json_is_kept_as_text() -> None:
    headers = {"content-type": "application/json"}
    body, encoding = encode_body(b"{not json", headers)
    assert (body, encoding) == ("{not json", "text")
    assert decode_body(body, encoding, headers) == b"{not json"
    assert encode_body(b"", headers) == (None, None)
    assert encode_body(b'"just a string"', headers) == ("just a string", None)
    assert decode_body("just a string", None, headers) == b'"just a string"'


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_json_bodies_survive_encode_and_decode(value: Any) -> None:
    headers = {"content-type": "application/json; charset=utf-8"}
    raw = json.dumps(value).encode()
    body, encoding = encode_body(raw, headers)
    assert json.loads(decode_body(body, encoding, headers)) == value


@given(st.binary(max_size=64))
def test_any_bytes_survive_encode_and_decode(raw: bytes) -> None:
    headers = {"content-type": "application/octet-stream"}
    body, encoding = encode_body(raw, headers)
    assert decode_body(body, encoding, headers) == raw


def test_cassette_names_are_stable_readable_and_distinct(tmp_path: Path) -> None:
    node = "tests/test_rl.py::TestJob::test_reward[qwen-0.6b]"
    path = cassette_path(tmp_path, node)
    assert path.parent == tmp_path
    assert path.name.startswith("tests.test_rl.py__TestJob__test_reward[qwen-0.6b]-")
    assert path.suffix == ".json"
    assert cassette_path(tmp_path, node) == path  # pure function of the id
    assert safe_file_stem("tests/a.py::t") != safe_file_stem("tests.a.py::t")
    odd = safe_file_stem('tests/x.py::test[a b/c:"d"*?]')
    assert not set(odd) & set(' /\\:"*?<>|')
    assert len(safe_file_stem("tests/x.py::" + "t" * 500)) < 140
    with pytest.raises(ValueError, match="test id is required"):
        safe_file_stem("  ")


def test_a_key_in_a_test_id_is_masked_in_the_cassette_name_and_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before, the name held the key and a hash of it, and the cassette was refused as holding a key.
    key = "sk_live_stem_key_0123456789"
    monkeypatch.setenv("SYNTH_API_KEY", key)
    node = f"tests/t.py::test_keyed[{key}]"
    path = cassette_path(tmp_path, node)
    assert path.name.startswith("tests.t.py__test_keyed[sk_l_89]-")
    assert hashlib.sha256(node.encode()).hexdigest()[:10] not in path.name  # no fingerprint of the key
    assert cassette_path(tmp_path, node) == path
    Cassette(path, test_id=node).save()
    assert json.loads(path.read_text("utf-8"))["test_id"] == "tests/t.py::test_keyed[sk_l…89]"
    assert Cassette.load_or_new(path, test_id=node).existed  # found again, as this test's own
