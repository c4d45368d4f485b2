"""The redaction contract: three independent rules scrub credentials, and a final scan proves it."""

from __future__ import annotations

import base64
import json

import pytest

from pytest_synth_rl.errors import SynthError
from pytest_synth_rl.recording.redaction import (
    REDACTED,
    SENSITIVE_HEADERS,
    Redactor,
    SecretLeakError,
    find_leaks,
    is_sensitive_name,
)
from pytest_synth_rl.secrets.masking import SECRET_ENV_VARS, register_secret, restore_registered_secrets

SECRET = "sk-redaction-secret-0123456789"


@pytest.fixture(autouse=True)
def _no_known_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Start from nothing known; the suite's registry fixture puts the old secrets back after."""
    for name in SECRET_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    restore_registered_secrets(())


def test_placeholder_and_credential_headers() -> None:
    assert REDACTED == "<redacted>"
    assert (
        frozenset(
            {
                "authorization",
                "proxy-authorization",
                "x-api-key",
                "x-api-keys",
                "idempotency-key",
                "cookie",
                "set-cookie",
            }
        )
        == SENSITIVE_HEADERS
    )
    assert issubclass(SecretLeakError, SynthError)


@pytest.mark.parametrize(
    "name",
    [
        "key",
        "keys",
        "api_key",
        "apikey",
        "APIKEY",
        "apiKey",
        "X-Api-Key",
        "token",
        "accessToken",
        "refresh.tokens",
        "secret",
        "client-secret",
        "secrets",
        "password",
        "passwd",
        "pwd",
        "db pwd",
        "authorization",
        "auth",
        "credential",
        "credentials",
        "cookie",
        "set-cookie",
    ],
)
def test_names_with_a_credential_word_are_sensitive(name: str) -> None:
    assert is_sensitive_name(name) is True


@pytest.mark.parametrize(
    "name", ["keyboard", "monkey", "turnkey", "authority", "tokenizer", "passage", "model"]
)
def test_words_that_merely_contain_a_credential_word_are_not(name: str) -> None:
    assert is_sensitive_name(name) is False


# -- headers -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(SENSITIVE_HEADERS - {"authorization", "proxy-authorization"}))
def test_every_credential_header_is_replaced(name: str) -> None:
    assert Redactor().header(name.title(), "session=abc123") == REDACTED


@pytest.mark.parametrize("name", ["Authorization", "proxy-authorization"])
def test_auth_headers_keep_their_scheme(name: str) -> None:
    redactor = Redactor()
    assert redactor.header(name, "Bearer abc.def") == "Bearer <redacted>"
    assert redactor.header(name, "  Basic dXNlcjpwYXNz  ") == "Basic <redacted>"
    assert redactor.header(name, "rawtokenwithoutscheme") == REDACTED
    assert redactor.header(name, "Bearer") == REDACTED


def test_a_header_named_like_a_credential_is_replaced_and_others_are_scrubbed_of_secrets() -> None:
    redactor = Redactor([SECRET])
    assert redactor.header("X-Session-Token", "plain") == REDACTED
    assert redactor.header("X-Debug", f"echo {SECRET}!") == "echo <redacted>!"
    assert redactor.header("Content-Type", "application/json") == "application/json"


def test_custom_credential_headers_and_placeholder() -> None:
    redactor = Redactor(headers=["X-Tenant"], placeholder="***")
    assert redactor.headers == frozenset({"x-tenant"})
    assert redactor.placeholder == "***"
    assert redactor.header("x-tenant", "acme") == "***"
    assert redactor.header("Authorization", "Bearer t") == "Bearer ***"  # a credential by its name
    assert redactor.header("Cookie", "a=b") == "***"


def test_headers_of_lowercases_names_and_collects_repeats_in_order() -> None:
    redactor = Redactor([SECRET])
    headers = [
        ("Accept", "a"),
        ("X-Trace", "1"),
        ("x-trace", f"2 {SECRET}"),
        ("X-TRACE", "3"),
        ("Set-Cookie", "s=1"),
        ("set-cookie", "s=2"),
    ]
    assert redactor.headers_of(headers) == {
        "accept": "a",
        "x-trace": ["1", "2 <redacted>", "3"],
        "set-cookie": [REDACTED, REDACTED],
    }


# -- known secret values ------------------------------------------------------------------------
def test_secrets_are_looked_up_on_every_call() -> None:
    redactor = Redactor(["extra-secret-1", None, ""])
    assert redactor.secrets() == ["extra-secret-1"]
    register_secret(SECRET)
    assert redactor.secrets() == [SECRET, "extra-secret-1"]
    assert redactor.text(f"a {SECRET} b extra-secret-1") == "a <redacted> b <redacted>"


def test_text_replaces_raw_and_url_encoded_forms() -> None:
    secret = "ab cd/ef+gh=="
    redactor = Redactor([secret])
    assert redactor.text(f"[{secret}]") == "[<redacted>]"
    assert redactor.text("[ab%20cd%2Fef%2Bgh%3D%3D]") == "[<redacted>]"
    assert redactor.text("[ab+cd%2Fef%2Bgh%3D%3D]") == "[<redacted>]"
    assert redactor.text("nothing here", secrets=[]) == "nothing here"
    assert redactor.text(f"{secret}", secrets=["other-secret"]) == secret


def test_raw_bytes_are_scrubbed() -> None:
    redactor = Redactor([SECRET], placeholder="#")
    assert redactor.raw_bytes(b"\x00\xff" + SECRET.encode() + b"\x01") == b"\x00\xff#\x01"
    assert redactor.raw_bytes(b"clean") == b"clean"


# -- query strings and URLs ------------------------------------------------------------------
def test_query_replaces_credential_parameters_and_keeps_other_encodings() -> None:
    redactor = Redactor([SECRET])
    assert redactor.query("") == ""
    assert redactor.query("a=1%2B1&api_key=abc&b=x+y&flag&accessToken=") == (
        "a=1%2B1&api_key=<redacted>&b=x+y&flag&accessToken=<redacted>"
    )
    assert redactor.query(f"q=find {SECRET} now") == "q=find%20<redacted>%20now"
    assert redactor.query(f"{SECRET}=1") == "<redacted>=<redacted>"  # its name says "secret" too
    assert Redactor(["plainvalue1"]).query("plainvalue1=1") == "<redacted>=1"
    assert redactor.query("api_key") == "api_key"  # no value, nothing to hide


def test_url_redacts_userinfo_passwords_query_path_and_fragment() -> None:
    redactor = Redactor([SECRET])
    assert redactor.url("https://user:pa55@host.example:8443/p?x=1") == (
        "https://user:<redacted>@host.example:8443/p?x=1"
    )
    assert redactor.url("https://user@host.example/p") == "https://user@host.example/p"
    assert redactor.url(f"https://host.example/jobs/{SECRET}?token=t&k=v#{SECRET}") == (
        "https://host.example/jobs/<redacted>?token=<redacted>&k=v#<redacted>"
    )


# -- JSON -----------------------------------------------------------------------------------
def test_json_redacts_credential_fields_at_any_depth_and_secret_values_anywhere() -> None:
    redactor = Redactor([SECRET])
    document = {
        "config": {"api_key": "k1", "nested": [{"clientSecret": "s"}, {"name": "n"}]},
        "Authorization": "Bearer xyz",
        "token_count": 12,
        "keys": ["a", "b", 3],
        "note": f"uses {SECRET}",
        SECRET: True,
        "empty": None,
    }
    assert redactor.json(document) == {
        "config": {"api_key": REDACTED, "nested": [{"clientSecret": REDACTED}, {"name": "n"}]},
        "Authorization": "Bearer <redacted>",
        "token_count": 12,
        "keys": [REDACTED, REDACTED, 3],
        "note": "uses <redacted>",
        REDACTED: True,
        "empty": None,
    }
    assert document["config"]["api_key"] == "k1"  # a copy, not in place
    assert redactor.json(f"top {SECRET}") == "top <redacted>"
    assert redactor.json(["k1", 2.5]) == ["k1", 2.5]
    assert redactor.json({"v": SECRET}, secrets=[]) == {"v": SECRET}


# -- the final scan ------------------------------------------------------------------------
def test_find_leaks_reports_masked_secrets_found_raw_escaped_or_encoded() -> None:
    secret = 'se"cret/va lue+1'
    assert find_leaks(b"clean", [secret]) == []
    assert find_leaks(f"x {secret} y".encode(), [secret]) == ['se"c…+1']
    escaped = json.dumps({"body": secret}).encode()
    assert b'se\\"cret' in escaped
    assert find_leaks(escaped.replace(secret.encode(), b""), [secret]) == ['se"c…+1']
    assert find_leaks(b"se%22cret%2Fva%20lue%2B1", [secret]) == ['se"c…+1']
    assert find_leaks(b"se%22cret%2Fva+lue%2B1", [secret]) == ['se"c…+1']


def test_find_leaks_scans_base64_bodies_of_a_cassette() -> None:
    register_secret(SECRET)
    body = base64.b64encode(b"\x00binary " + SECRET.encode()).decode()
    cassette = {"interactions": [{"response": {"body": body, "body_encoding": "base64"}}]}
    assert find_leaks(json.dumps(cassette).encode()) == ["sk-r…89"]
    cassette["interactions"][0]["response"]["body_encoding"] = "utf-8"
    clean_body = base64.b64encode(b"\x00binary only").decode()
    assert find_leaks(json.dumps({"body": clean_body, "body_encoding": "base64"}).encode()) == []
    assert find_leaks(json.dumps({"body": "not base64!", "body_encoding": "base64"}).encode()) == []
    assert find_leaks(json.dumps({"body": 12, "body_encoding": "base64"}).encode()) == []


def test_find_leaks_reads_bytes_that_are_not_json() -> None:
    register_secret(SECRET)
    assert find_leaks(b"\xff\xfe not json " + SECRET.encode()) == ["sk-r…89"]
    assert find_leaks(b"{not json " + SECRET.encode()) == ["sk-r…89"]


def test_find_leaks_lists_each_leaked_secret_longest_first() -> None:
    register_secret("first-secret-aaaa")
    register_secret("second-secret-bbbbbb")
    data = b"first-secret-aaaa second-secret-bbbbbb"
    assert find_leaks(data) == ["seco…bb", "firs…aa"]


def test_a_redacted_document_has_no_leaks() -> None:
    redactor = Redactor([SECRET])
    document = {
        "request": {
            "url": redactor.url(f"https://h.example/x?key={SECRET}"),
            "headers": redactor.headers_of([("X-Key", SECRET)]),
        },
        "response": {"body": redactor.json({"echo": SECRET})},
    }
    assert find_leaks(json.dumps(document).encode(), [SECRET]) == []


def test_query_uses_the_secrets_it_is_given() -> None:
    redactor = Redactor([SECRET])
    assert redactor.query(f"q={SECRET}", secrets=[]) == f"q={SECRET}"
    assert redactor.query("q=other-secret-1", secrets=["other-secret-1"]) == "q=<redacted>"


def test_a_truncated_escaped_secret_is_a_leak_while_its_start_or_end_remains() -> None:
    secret = 'se"cret/va lue+1'
    escaped = json.dumps(secret)[1:-1]  # se\"cret/va lue+1
    assert find_leaks(escaped.encode(), [secret]) == ['se"c…+1']
    assert find_leaks(escaped[1:].encode(), [secret]) == ['se"c…+1']  # "cret/va lue+1: its last 14
    assert find_leaks(escaped[:-1].encode(), [secret]) == []  # "cret/va lue+: 13 from its middle


def test_find_leaks_reads_a_json_escaped_secret_inside_a_base64_body() -> None:
    secret = 'se"cret/va lue+1'  # escaped in the JSON, so its base64 form never appears as it is
    body = base64.b64encode(json.dumps({"key": secret}).encode()).decode()
    assert find_leaks(json.dumps({"body": body, "body_encoding": "base64"}).encode(), [secret]) == ['se"c…+1']
    assert find_leaks(json.dumps({"body": body, "body_encoding": "utf-8"}).encode(), [secret]) == []
    assert find_leaks(json.dumps({"body": body}).encode(), [secret]) == []
