"""A known secret is found and removed in its encoded disguises, not only verbatim."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest

from pytest_synth_rl.recording import (
    REDACTED,
    Cassette,
    Interaction,
    RecordedRequest,
    RecordedResponse,
    Redactor,
    SecretLeakError,
    find_leaks,
)
from pytest_synth_rl.secrets.forms import base64_cores, contains, scrub
from pytest_synth_rl.secrets.masking import redact

KEY = "sk_live_Q7+x/Zp9Kw"  # has base64-special characters, so std and urlsafe forms differ
MASKED = "sk_l…Kw"


def _unicode_escaped(text: str) -> str:
    return "".join(f"\\u{ord(char):04x}" for char in text)


def _b64_forms(blob: bytes) -> list[str]:
    standard = base64.b64encode(blob).decode()
    urlsafe = base64.urlsafe_b64encode(blob).decode()
    return [standard, standard.rstrip("="), urlsafe, urlsafe.rstrip("=")]


# Prefixes of 0, 1, 2 and 3 bytes put the secret at every alignment of a base64 group.
BLOBS = [f"{user}:{KEY}".encode() for user in ("", "u", "us", "use")] + [
    KEY.encode(),
    f'{{"k": "{KEY}", "n": 1}}'.encode(),
]
ENCODED = [form for blob in BLOBS for form in _b64_forms(blob)]


@pytest.mark.parametrize("encoded", ENCODED)
def test_redact_replaces_a_whole_base64_token_that_carries_the_secret(encoded: str) -> None:
    assert redact(f"Authorization: Basic {encoded} (sent)", [KEY]) == f"Authorization: Basic {MASKED} (sent)"
    assert Redactor([KEY]).text(f"x={encoded};") == f"x={REDACTED};"


@pytest.mark.parametrize(
    "form",
    [
        quote(KEY, safe=""),
        quote(KEY, safe="").replace("%2B", "%2b").replace("%2F", "%2f"),
        quote_plus(KEY),
        _unicode_escaped(KEY),
        _unicode_escaped(KEY).upper().replace("\\U", "\\u"),
        json.dumps(KEY)[1:-1].replace("/", "\\/"),
        "sk_live_" + _unicode_escaped("Q7") + "%2Bx/Zp9Kw",  # mixed escapes
    ],
)
def test_redact_removes_percent_encoded_and_json_escaped_forms(form: str) -> None:
    assert redact(f"[{form}]", [KEY]) == f"[{MASKED}]"
    assert Redactor([KEY]).text(f"[{form}]") == f"[{REDACTED}]"


def test_unrelated_base64_and_text_are_left_alone() -> None:
    other = base64.b64encode(b"user:another-password").decode()
    text = f"Basic {other} and sk_live_Q7+ (a run too short to be the key)"
    assert redact(text, [KEY]) == text
    assert not contains(text, KEY)


def test_base64_cores_cover_three_alignments_in_both_alphabets() -> None:
    # b64("abcdef") = "YWJjZGVm"; after one filler byte "AGFiY2RlZg==", after two "AABhYmNkZWY=".
    assert [core for core, _ in base64_cores("abcdef")] == ["YWJjZGVm", "FiY2RlZ", "hYmNkZW"]
    assert [core for core, _ in base64_cores("ab?>?>")] == [
        "YWI/Pj8+",
        "YWI_Pj8-",
        "FiPz4/P",
        "FiPz4_P",
        "hYj8+Pz",
        "hYj8-Pz",
    ]


def test_scrub_merges_overlapping_matches_into_one_placeholder() -> None:
    token = base64.b64encode(f"{KEY}{KEY}".encode()).decode()
    assert scrub(f"<{token}>", KEY, "#") == "<#>"


def test_raw_bytes_bodies_lose_base64_forms_too() -> None:
    body = b"\xff\x00" + base64.b64encode(f"me:{KEY}".encode()) + b"\xfe"
    assert Redactor([KEY]).raw_bytes(body) == b"\xff\x00" + REDACTED.encode() + b"\xfe"


@pytest.mark.parametrize(
    "disguise",
    [
        base64.b64encode(f"user:{KEY}".encode()).decode(),
        base64.urlsafe_b64encode(f"us:{KEY}".encode()).decode().rstrip("="),
        quote(KEY, safe=""),
        _unicode_escaped(KEY),
    ],
)
def test_leak_scan_refuses_a_cassette_holding_an_encoded_secret(tmp_path: Path, disguise: str) -> None:
    # Built by hand, bypassing redaction, as a buggy rule would leave it.
    leaky = Interaction(
        request=RecordedRequest("POST", "http://127.0.0.1/x", body={"note": disguise}),
        response=RecordedResponse(200),
    )
    raw = json.dumps({"note": disguise}, ensure_ascii=True).encode()
    assert find_leaks(raw, [KEY]) == [MASKED]
    with pytest.raises(SecretLeakError) as caught:
        Cassette(tmp_path / "c.json", [leaky]).save(secrets=[KEY])
    assert f"1 secret(s) after redaction ({MASKED})" in str(caught.value)
    assert not (tmp_path / "c.json").exists()


def test_recorded_request_repr_masks_sensitive_query_values_and_headers() -> None:
    request = RecordedRequest(
        "GET",
        "http://127.0.0.1:8000/api/jobs?api_key=plainvalue123&limit=5&accessToken=abc",
        headers={"authorization": "Bearer plainvalue123", "accept": "application/json"},
        body={"password": "hunter2222", "n": 1},
    )
    assert repr(request) == (
        "RecordedRequest(method='GET', "
        "url='http://127.0.0.1:8000/api/jobs?api_key=<redacted>&limit=5&accessToken=<redacted>', "
        "headers={'authorization': 'Bearer <redacted>', 'accept': 'application/json'}, "
        "body={'password': '<redacted>', 'n': 1}, body_encoding=None)"
    )
    assert request.url.endswith("api_key=plainvalue123&limit=5&accessToken=abc")  # data unchanged


LONG_KEY = "sk_live_QXJ7pLm9Zt4Wv2Rb8Nc6Hd1Fg5Ks3Ty0"


@pytest.mark.parametrize(
    "part",
    [
        pytest.param(LONG_KEY[8:], id="without-prefix"),
        pytest.param(LONG_KEY[:15], id="first15"),
        pytest.param(LONG_KEY[-12:], id="last12"),
        pytest.param(LONG_KEY[10:30], id="middle"),
        pytest.param(LONG_KEY.upper(), id="upper"),
        pytest.param(LONG_KEY.swapcase()[5:25], id="swapped-part"),
        pytest.param(LONG_KEY.encode().hex(), id="hex"),
        pytest.param(LONG_KEY.encode().hex().upper(), id="HEX"),
    ],
)
def test_parts_and_spellings_of_a_key_are_masked(part: str) -> None:
    text = f'{{"allowed_first15": ["{part}"], "note": "x"}}'
    assert contains(text, LONG_KEY)
    masked = scrub(text, LONG_KEY, "<key>")
    assert masked == '{"allowed_first15": ["<key>"], "note": "x"}'


def test_short_runs_of_a_key_and_unrelated_text_stay() -> None:
    eleven = LONG_KEY[8:19]
    text = f"sk_live_ prefix alone, {eleven}, and a different key sk_live_ZZZZ9999ZZZZ9999"
    assert not contains(text, LONG_KEY)
    assert scrub(text, LONG_KEY, "<key>") == text


def test_a_short_run_from_the_middle_of_a_word_like_key_is_ordinary_text() -> None:
    key = "env_interrupted_task_app_key_5d0c7e"
    text = "test_interrupt.py::test_an_interrupted_online_run_cancels_its_job"
    assert not contains(text, key)  # "interrupted_" is 12 characters of the key, but its middle
    assert scrub(f"[{key[4:22]}]", key, "<key>") == "[<key>]"  # 18 from its middle are the key


def test_the_thresholds_are_12_at_either_end_and_16_in_the_middle() -> None:
    middle = LONG_KEY[10:]  # 30 characters after the key's first ten
    assert scrub(f"[{middle[:16]}]", LONG_KEY, "<key>") == "[<key>]"
    assert scrub(f"[{middle[:15]}]", LONG_KEY, "<key>") == f"[{middle[:15]}]"
    assert scrub(f"[{LONG_KEY[:12]}]", LONG_KEY, "<key>") == "[<key>]"
    assert scrub(f"[{LONG_KEY[:11]}]", LONG_KEY, "<key>") == f"[{LONG_KEY[:11]}]"
    assert scrub(f"[{LONG_KEY[-12:]}]", LONG_KEY, "<key>") == "[<key>]"
    assert scrub(f"[{LONG_KEY[-11:]}]", LONG_KEY, "<key>") == f"[{LONG_KEY[-11:]}]"
    # Two parts side by side are one part, masked once; two apart are masked apart.
    assert scrub(f"{LONG_KEY[:20]}{LONG_KEY[:20]}", LONG_KEY, "<key>") == "<key>"
    assert scrub(f"{LONG_KEY[:20]} {LONG_KEY[-20:]}", LONG_KEY, "<key>") == "<key> <key>"


def test_a_run_is_masked_whole_even_where_it_starts_mid_key() -> None:
    text = f"got {LONG_KEY[3:]}!"
    assert scrub(text, LONG_KEY, "<key>") == "got <key>!"
