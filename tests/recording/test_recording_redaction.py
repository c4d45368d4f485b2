"""Secrets never reach a cassette: redaction rules, and the scan that refuses leaky files."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx
import pytest
from test_recording_support import LoopbackServer, make_backend_app

from pytest_synth_rl.errors import SynthError
from pytest_synth_rl.recording import (
    REDACTED,
    Cassette,
    Interaction,
    RecordedRequest,
    RecordedResponse,
    RecordingTransport,
    Redactor,
    SecretLeakError,
    find_leaks,
    use_cassette,
)
from pytest_synth_rl.recording.redaction import is_sensitive_name

SYNTH_KEY = "sk_live_SYNTHabcdef0123456789"
ENV_KEY = "envkey_0f1e2d3c4b5a69788796"
OPENAI_KEY = "sk-proj-OPENAIzyxwvu98765"
EXPLICIT = "tok_explicit_only_5566778899"  # not in the environment: passed to the redactor
FIELD_SECRET = "field-only-secret-value-42"  # known to nobody: caught by its field name only
IDEMPOTENCY = "idem-2f6c1a9e-77b4"


@pytest.fixture
def secrets_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYNTH_API_KEY", SYNTH_KEY)
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)


def _record_everything(path: Path, url: str) -> httpx.Response:
    transport = RecordingTransport(cassette=Cassette(path), redactor=Redactor(secrets=[EXPLICIT]))
    with httpx.Client(transport=transport) as client:
        response = client.post(
            f"{url}/echo",
            params={"api_key": SYNTH_KEY, "note": f"uses {ENV_KEY} inline", "page": "2"},
            headers={
                "Authorization": f"Bearer {SYNTH_KEY}",
                "X-API-Key": ENV_KEY,
                "X-API-Keys": f"{ENV_KEY},{EXPLICIT}",
                "Idempotency-Key": IDEMPOTENCY,
                "Cookie": f"session={EXPLICIT}",
                "X-Trace": f"carries {OPENAI_KEY}",
            },
            json={
                "job_type": "rl",
                "data": {
                    "config": {"policy": {"max_tokens": 512, "temperature": 0.7}},
                    "credentials": {"client_secret": FIELD_SECRET, "password": FIELD_SECRET},
                    "notes": [f"key is {OPENAI_KEY}", "harmless"],
                    "keys": [FIELD_SECRET, FIELD_SECRET + "-2"],
                },
            },
        )
    transport.save(secrets=[EXPLICIT])
    return response


def test_recorded_cassette_contains_no_secret_anywhere(tmp_path: Path, secrets_in_env: None) -> None:
    app, _ = make_backend_app()
    path = tmp_path / "secrets.json"
    with LoopbackServer(app) as server:
        live = _record_everything(path, server.url)

    # The caller still got the real, unredacted exchange.
    assert live.json()["headers"]["x-api-key"] == ENV_KEY
    assert live.headers["x-session-token"] == ENV_KEY

    data = path.read_bytes()
    for secret in (SYNTH_KEY, ENV_KEY, OPENAI_KEY, EXPLICIT, FIELD_SECRET, IDEMPOTENCY):
        assert secret.encode() not in data, f"secret {secret[:6]}… leaked into the cassette"
    # nor any 10+ character chunk of one (e.g. a key cut in half by encoding)
    for secret in (SYNTH_KEY, ENV_KEY, OPENAI_KEY, EXPLICIT):
        assert all(secret[i : i + 10].encode() not in data for i in range(len(secret) - 9))

    interaction = json.loads(data)["interactions"][0]
    request, response = interaction["request"], interaction["response"]
    # request: headers, query, body
    assert request["headers"]["authorization"] == f"Bearer {REDACTED}"
    assert request["headers"]["x-api-key"] == REDACTED
    assert request["headers"]["x-api-keys"] == REDACTED
    assert request["headers"]["idempotency-key"] == REDACTED
    assert request["headers"]["cookie"] == REDACTED
    assert request["headers"]["x-trace"] == f"carries {REDACTED}"
    assert f"api_key={REDACTED}" in request["url"]
    assert "page=2" in request["url"]
    assert request["body"]["data"]["credentials"] == {"client_secret": REDACTED, "password": REDACTED}
    assert request["body"]["data"]["notes"] == [f"key is {REDACTED}", "harmless"]
    assert request["body"]["data"]["keys"] == [REDACTED, REDACTED]
    # numbers under token-ish names are not credentials
    assert request["body"]["data"]["config"]["policy"] == {"max_tokens": 512, "temperature": 0.7}
    # response: echoed headers/body, set-cookie and token header
    echoed = response["body"]
    assert echoed["headers"]["authorization"] == f"Bearer {REDACTED}"
    assert echoed["query"]["api_key"] == REDACTED
    assert echoed["query"]["note"] == f"uses {REDACTED} inline"
    assert echoed["body"]["data"]["credentials"]["client_secret"] == REDACTED
    assert response["headers"]["set-cookie"] == REDACTED
    assert response["headers"]["x-session-token"] == REDACTED


def test_redacted_cassette_still_replays_the_same_request(tmp_path: Path, secrets_in_env: None) -> None:
    app, _ = make_backend_app()
    path = tmp_path / "secrets.json"
    with LoopbackServer(app) as server:
        _record_everything(path, server.url)
    with use_cassette(path, mode="none", secrets=[EXPLICIT]), httpx.Client() as client:
        replayed = client.post(
            f"{server.url}/echo",
            params={"api_key": "a-different-key-at-replay", "note": f"uses {ENV_KEY} inline", "page": "2"},
            json={
                "job_type": "rl",
                "data": {
                    "config": {"policy": {"max_tokens": 512, "temperature": 0.7}},
                    "credentials": {"client_secret": "other", "password": "other"},
                    "notes": [f"key is {OPENAI_KEY}", "harmless"],
                    "keys": ["x", "y"],
                },
            },
        )
    assert replayed.status_code == 200
    assert replayed.json()["query"]["api_key"] == REDACTED


def test_leak_scan_refuses_a_cassette_that_still_holds_a_secret(tmp_path: Path, secrets_in_env: None) -> None:
    path = tmp_path / "leaky.json"
    path.write_text('{"interactions": [], "version": 1}\n', encoding="utf-8")
    cassette = Cassette(path)
    # Bypass the recorder (which would redact) to simulate a rule that missed a value.
    cassette.append(
        Interaction(
            RecordedRequest("GET", "https://api.usesynth.ai/api/rl/jobs/job-1"),
            RecordedResponse(200, {"content-type": "application/json"}, {"debug": f"key={SYNTH_KEY}"}),
        )
    )
    with pytest.raises(SecretLeakError) as caught:
        cassette.save()
    assert isinstance(caught.value, SynthError)
    assert "refusing to write cassette" in str(caught.value)
    assert SYNTH_KEY not in str(caught.value)
    assert "sk_l…89" in str(caught.value)  # masked, so the reader knows which key
    # the previous cassette is untouched and no temporary file is left behind
    assert path.read_text(encoding="utf-8") == '{"interactions": [], "version": 1}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["leaky.json"]


def test_leak_scan_catches_explicit_secrets_and_encoded_forms(tmp_path: Path) -> None:
    cassette = Cassette(tmp_path / "c.json")
    cassette.append(
        Interaction(
            RecordedRequest("GET", "https://h/x?token2=" + "a%2Fb%2Bsecret%3D%3D"),
            RecordedResponse(200, {}, "plain"),
        )
    )
    with pytest.raises(SecretLeakError):
        cassette.save(secrets=["a/b+secret=="])  # present only URL-encoded
    assert not (tmp_path / "c.json").exists()

    quoted = 'pa"ss\\word-123'
    assert find_leaks(json.dumps({"v": quoted}).encode(), [quoted]) == ['pa"s…23']
    blob = base64.b64encode(b"\x00\xff" + EXPLICIT.encode()).decode()
    document = {"body": blob, "body_encoding": "base64"}
    assert find_leaks(json.dumps(document).encode(), [EXPLICIT]) == ["tok_…99"]
    assert find_leaks(b'{"body": "clean"}', [EXPLICIT]) == []


def test_binary_and_form_bodies_are_redacted(tmp_path: Path, secrets_in_env: None) -> None:
    redactor = Redactor()
    request = httpx.Request(
        "POST",
        "https://user:hunter2-password@h.example/upload/" + SYNTH_KEY,
        content=b"\x00\xff" + SYNTH_KEY.encode() + b"\x01",
        headers={"content-type": "application/octet-stream"},
    )
    from pytest_synth_rl.recording.cassette import capture_request

    captured = capture_request(request, redactor)
    assert captured.body_encoding == "base64"
    assert base64.b64decode(captured.body) == b"\x00\xff" + REDACTED.encode() + b"\x01"
    assert captured.url == f"https://user:{REDACTED}@h.example/upload/{REDACTED}"

    form = httpx.Request(
        "POST",
        "https://h.example/login",
        data={"username": "ada", "password": "correct horse", "client_secret": "cs-123456"},
    )
    captured_form = capture_request(form, redactor)
    assert captured_form.body == f"username=ada&password={REDACTED}&client_secret={REDACTED}"


@pytest.mark.parametrize(
    ("name", "sensitive"),
    [
        ("Authorization", True),
        ("X-API-Key", True),
        ("x-api-keys", True),
        ("api_key", True),
        ("apiKey", True),
        ("accessToken", True),
        ("client-secret", True),
        ("ENVIRONMENT_API_KEY", True),
        ("password", True),
        ("idempotency_key", True),
        ("max_tokens", True),  # a token-ish name; only text values are redacted under it
        ("keyboard", False),
        ("monkey", False),
        ("tokenizer", False),
        ("author", False),
        ("status", False),
        ("content-type", False),
        ("keep-alive", False),
        ("public_key", False),  # published to be used: a replayed key upload seals to it
        ("publicKey", False),
        ("private_key", True),
        ("ciphertext_b64", True),
    ],
)
def test_sensitive_names(name: str, sensitive: bool) -> None:
    assert is_sensitive_name(name) is sensitive


def test_header_redaction_keeps_the_auth_scheme() -> None:
    redactor = Redactor()
    assert redactor.header("Authorization", "Bearer abc.def") == f"Bearer {REDACTED}"
    assert redactor.header("authorization", "Basic dXNlcjpwYXNz") == f"Basic {REDACTED}"
    assert redactor.header("authorization", "rawtokenvalue") == REDACTED
    assert redactor.header("X-Auth-Token", "t") == REDACTED
    assert redactor.header("accept", "application/json") == "application/json"


def test_secrets_registered_after_the_redactor_was_made_are_still_scrubbed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    redactor = Redactor()
    assert redactor.text("x sk_late_arrival_123456 y") == "x sk_late_arrival_123456 y"
    monkeypatch.setenv("GROQ_API_KEY", "sk_late_arrival_123456")
    assert redactor.text("x sk_late_arrival_123456 y") == f"x {REDACTED} y"
