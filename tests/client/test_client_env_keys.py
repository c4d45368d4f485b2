"""Environment-key upload and task app verification, against a handler that really opens the box.

The handler holds a real X25519 private key and decrypts each upload with PyNaCl, so a test
passes only if the wire format is right: the public key route, the sealed box, the body shape and
the bearer token on every request.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from client_support import API, API_KEY, BACKEND, TASK_KEY, TASK_URL, attach, make_job
from nacl.public import PrivateKey, SealedBox

from pytest_synth_rl.client import (
    MAX_ENV_KEY_BYTES,
    AsyncRLJob,
    EnvKeyUpload,
    RetryPolicy,
    TaskAppVerification,
    async_upload_environment_api_key,
    async_verify_task_app,
    upload_environment_api_key,
    verify_task_app,
)
from pytest_synth_rl.clock import VirtualClock
from pytest_synth_rl.errors import BackendError, EnvKeyUploadError, SynthUsageError, TaskAppVerificationError
from pytest_synth_rl.secrets.masking import Secret


@dataclass
class KeyStoreBackend:
    """The backend's three env-key routes and verify_task_app, as a MockTransport handler."""

    private_key: PrivateKey = field(default_factory=PrivateKey.generate)
    alg: str | None = "libsodium.sealedbox.v1"
    public_key_b64: str | None = None
    stored: dict[str, str] = field(default_factory=dict)
    requests: list[httpx.Request] = field(default_factory=list)
    failures: dict[str, list[int]] = field(default_factory=dict)
    verify_answer: dict[str, Any] = field(
        default_factory=lambda: {
            "any_ok": True,
            "candidates_first15": ["env_task_key_01"],
            "attempts": [{"path": "/health", "status": 200}, {"path": "/task_info", "status": 200}],
        }
    )

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.headers.get("authorization") != f"Bearer {API_KEY}":
            return httpx.Response(401, json={"detail": "bad bearer"})
        route = f"{request.method} {request.url.path}"
        pending = self.failures.get(route)
        if pending:
            return httpx.Response(pending.pop(0), headers={"retry-after": "2"}, json={"detail": "busy"})
        if route == "GET /api/v1/crypto/public-key":
            body: dict[str, Any] = {
                "public_key": self.public_key_b64
                or base64.b64encode(bytes(self.private_key.public_key)).decode()
            }
            if self.alg is not None:
                body["alg"] = self.alg
            return httpx.Response(200, json=body)
        if route == "POST /api/v1/env-keys":
            payload = json.loads(request.content)
            assert set(payload) == {"name", "ciphertext_b64"}
            plaintext = SealedBox(self.private_key).decrypt(base64.b64decode(payload["ciphertext_b64"]))
            self.stored[payload["name"]] = plaintext.decode()
            return httpx.Response(
                201, json={"id": "ek_1", "name": payload["name"], "updated_at": "2026-01-14T00:00:00Z"}
            )
        if route == "GET /api/v1/env-keys/verify":
            return httpx.Response(200, json={"present": "ENVIRONMENT_API_KEY" in self.stored})
        if route == "POST /api/rl/verify_task_app":
            assert json.loads(request.content) == {"endpoint_base_url": TASK_URL}
            return httpx.Response(200, json=self.verify_answer)
        return httpx.Response(404, json={"detail": "not found"})

    @property
    def routes(self) -> list[str]:
        return [f"{r.method} {r.url.path}" for r in self.requests]


def _upload(backend: KeyStoreBackend, **kwargs: Any) -> EnvKeyUpload:
    kwargs.setdefault("env_key", TASK_KEY)
    return upload_environment_api_key(
        BACKEND,
        API_KEY,
        transport=httpx.MockTransport(backend),
        clock=VirtualClock(),
        retry=RetryPolicy(seed=3),
        **kwargs,
    )


# -- upload ------------------------------------------------------------------------------------
def test_upload_seals_the_key_for_the_backend() -> None:
    backend = KeyStoreBackend()
    result = _upload(backend)
    assert backend.stored == {"ENVIRONMENT_API_KEY": TASK_KEY}
    assert backend.routes == ["GET /api/v1/crypto/public-key", "POST /api/v1/env-keys"]
    assert result == EnvKeyUpload(
        url=f"{API}/v1/env-keys",
        name="ENVIRONMENT_API_KEY",
        id="ek_1",
        updated_at="2026-01-14T00:00:00Z",
        verified=None,
    )
    post = backend.requests[1]
    assert post.headers["content-type"] == "application/json"
    assert TASK_KEY.encode() not in post.content  # sealed, never in clear


def test_upload_with_verify_asks_the_verify_route() -> None:
    backend = KeyStoreBackend()
    result = _upload(backend, verify=True)
    assert result.verified is True
    assert backend.routes[-1] == "GET /api/v1/env-keys/verify"
    assert all(r.headers["authorization"] == f"Bearer {API_KEY}" for r in backend.requests)


def test_verify_that_finds_no_key_is_an_error() -> None:
    backend = KeyStoreBackend()
    original = backend.__call__

    def forgetful(request: httpx.Request) -> httpx.Response:
        response = original(request)
        backend.stored.clear()
        return response

    with pytest.raises(EnvKeyUploadError) as info:
        upload_environment_api_key(
            BACKEND,
            API_KEY,
            TASK_KEY,
            verify=True,
            transport=httpx.MockTransport(forgetful),
            clock=VirtualClock(),
        )
    message = str(info.value)
    assert message.startswith(
        f"the backend accepted ENVIRONMENT_API_KEY but {API}/v1/env-keys/verify does not report it present"
    )
    assert TASK_KEY not in message


def test_key_comes_from_the_environment_and_backend_url_gets_api(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVIRONMENT_API_KEY", "env-from-environment-0123456789")
    monkeypatch.setenv("SYNTH_API_KEY", API_KEY)
    backend = KeyStoreBackend()
    upload_environment_api_key(f"{BACKEND}/", transport=httpx.MockTransport(backend), clock=VirtualClock())
    assert backend.stored == {"ENVIRONMENT_API_KEY": "env-from-environment-0123456789"}
    assert str(backend.requests[0].url) == f"{API}/v1/crypto/public-key"


def test_missing_key_is_a_config_error() -> None:
    with pytest.raises(SynthUsageError) as info:
        upload_environment_api_key(BACKEND, API_KEY, transport=httpx.MockTransport(KeyStoreBackend()))
    assert info.value.keys == ["env_key"]
    assert "ENVIRONMENT_API_KEY is not set" in str(info.value)


def test_eight_kib_is_the_limit() -> None:
    backend = KeyStoreBackend()
    at_limit = "k" * MAX_ENV_KEY_BYTES
    _upload(backend, env_key=at_limit)
    assert backend.stored["ENVIRONMENT_API_KEY"] == at_limit
    backend.requests.clear()
    too_big = "k" * (MAX_ENV_KEY_BYTES + 1)
    with pytest.raises(EnvKeyUploadError) as info:
        _upload(backend, env_key=too_big)
    assert backend.requests == []  # nothing was sent
    message = str(info.value)
    assert "is 8193 bytes; the backend accepts at most 8192 bytes (8 KiB)" in message
    assert f"so it was not uploaded to {API}/v1/env-keys" in message
    assert "hint: use a shorter task app key" in message
    assert too_big not in message
    assert info.value.url == f"{API}/v1/env-keys"


def test_multibyte_keys_are_measured_in_bytes() -> None:
    with pytest.raises(EnvKeyUploadError, match="is 8193 bytes"):
        _upload(KeyStoreBackend(), env_key="é" * 4096 + "k")


@pytest.mark.parametrize(
    ("alg", "public_key", "fragment"),
    [
        ("rsa-oaep", None, "the backend seals with alg 'rsa-oaep', expected 'libsodium.sealedbox.v1'"),
        (None, "not base64!!", "public_key is not valid base64"),
        (None, base64.b64encode(b"x" * 16).decode(), "public_key decodes to 16 bytes, expected 32"),
    ],
    ids=["alg-mismatch", "not-base64", "short-key"],
)
def test_unusable_public_key_stops_before_upload(
    alg: str | None, public_key: str | None, fragment: str
) -> None:
    backend = KeyStoreBackend(alg=alg, public_key_b64=public_key)
    with pytest.raises(EnvKeyUploadError) as info:
        _upload(backend)
    assert backend.routes == ["GET /api/v1/crypto/public-key"]
    message = str(info.value)
    assert message.startswith(f"uploading ENVIRONMENT_API_KEY failed: {fragment}")
    assert f"request: GET {API}/v1/crypto/public-key -> HTTP 200" in message
    assert "hint:" in message
    assert backend.stored == {}


def test_missing_alg_is_accepted() -> None:
    backend = KeyStoreBackend(alg=None)
    _upload(backend)
    assert backend.stored == {"ENVIRONMENT_API_KEY": TASK_KEY}


def test_upload_retries_503_on_the_clock() -> None:
    backend = KeyStoreBackend(failures={"POST /api/v1/env-keys": [503, 503]})
    clock = VirtualClock()
    upload_environment_api_key(
        BACKEND, API_KEY, TASK_KEY, transport=httpx.MockTransport(backend), clock=clock, retry=RetryPolicy()
    )
    assert backend.routes == ["GET /api/v1/crypto/public-key"] + ["POST /api/v1/env-keys"] * 3
    assert backend.stored == {"ENVIRONMENT_API_KEY": TASK_KEY}
    assert clock.now() == pytest.approx(4.0)  # Retry-After: 2, twice


def test_exhausted_retries_list_every_attempt() -> None:
    backend = KeyStoreBackend(failures={"GET /api/v1/crypto/public-key": [503, 503, 503]})
    with pytest.raises(EnvKeyUploadError) as info:
        upload_environment_api_key(
            BACKEND,
            API_KEY,
            TASK_KEY,
            transport=httpx.MockTransport(backend),
            clock=VirtualClock(),
            retry=RetryPolicy(max_attempts=3),
        )
    message = str(info.value)
    assert message.startswith(
        "fetching the backend's public key to upload ENVIRONMENT_API_KEY failed: HTTP 503 after 3 attempts"
    )
    assert "attempts (3):" in message
    assert len(info.value.attempts) == 3


def test_missing_route_names_the_url_and_the_fix() -> None:
    def no_routes(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, json={"detail": "Not Found"})

    with pytest.raises(EnvKeyUploadError) as info:
        upload_environment_api_key(
            BACKEND, API_KEY, TASK_KEY, transport=httpx.MockTransport(no_routes), clock=VirtualClock()
        )
    error = info.value
    assert isinstance(error, BackendError)
    assert error.status_code == 404
    assert error.url == f"{API}/v1/crypto/public-key"
    assert "hint: check backend_url / BACKEND_BASE_URL" in str(error)


def test_wrong_api_key_is_reported_as_such() -> None:
    with pytest.raises(EnvKeyUploadError) as info:
        upload_environment_api_key(
            BACKEND,
            "sk_wrong_key_0123456789abcdef",
            TASK_KEY,
            transport=httpx.MockTransport(KeyStoreBackend()),
            clock=VirtualClock(),
        )
    message = str(info.value)
    assert "HTTP 401" in message
    assert "rejected the API key: check SYNTH_API_KEY" in message
    assert "sk_wrong_key_0123456789abcdef" not in message


def test_the_key_never_reaches_the_log(caplog: pytest.LogCaptureFixture) -> None:
    backend = KeyStoreBackend(failures={"POST /api/v1/env-keys": [503]})
    with caplog.at_level(logging.DEBUG):
        _upload(backend, env_key=Secret(TASK_KEY))
    assert "retrying" in caplog.text
    assert TASK_KEY not in caplog.text
    assert API_KEY not in caplog.text


def test_async_upload_matches_the_sync_one() -> None:
    backend = KeyStoreBackend()

    async def handler(request: httpx.Request) -> httpx.Response:
        return backend(request)

    result = asyncio.run(
        async_upload_environment_api_key(
            BACKEND,
            API_KEY,
            TASK_KEY,
            verify=True,
            transport=httpx.MockTransport(handler),
            clock=VirtualClock(),
        )
    )
    assert result.verified is True
    assert result.id == "ek_1"
    assert backend.stored == {"ENVIRONMENT_API_KEY": TASK_KEY}


def test_job_uploads_its_task_app_key(tmp_path: Path) -> None:
    from client_support import write_config

    backend = KeyStoreBackend()
    with make_job(
        write_config(tmp_path), task_app_api_key=TASK_KEY, transport=httpx.MockTransport(backend)
    ) as job:
        result = job.upload_environment_api_key(verify=True)
    assert result.verified is True
    assert backend.stored == {"ENVIRONMENT_API_KEY": TASK_KEY}


def test_attached_job_without_a_task_key_says_so() -> None:
    with (
        attach("job-1", transport=httpx.MockTransport(KeyStoreBackend())) as job,
        pytest.raises(SynthUsageError),
    ):
        job.upload_environment_api_key()


# -- verify_task_app ---------------------------------------------------------------------------
def _verify(backend: KeyStoreBackend) -> TaskAppVerification:
    return verify_task_app(
        BACKEND, API_KEY, TASK_URL, transport=httpx.MockTransport(backend), clock=VirtualClock()
    )


def test_verify_task_app_returns_the_backend_verdict() -> None:
    backend = KeyStoreBackend()
    result = _verify(backend)
    assert result.any_ok is True
    assert result.task_url == TASK_URL
    assert result.candidates_first15 == ["env_task_key_01"]
    assert result.statuses == [200, 200]
    assert backend.routes == ["POST /api/rl/verify_task_app"]


def test_verify_task_app_with_no_ok_attempt_fails() -> None:
    backend = KeyStoreBackend(
        verify_answer={
            "any_ok": False,
            "candidates_first15": ["env_task_key_01"],
            "attempts": [{"path": "/health", "status": 400}, {"path": "/task_info", "status": 400}],
        }
    )
    with pytest.raises(TaskAppVerificationError) as info:
        _verify(backend)
    message = str(info.value)
    assert message.startswith(
        f"Task app verification failed (auth): the backend could not reach {TASK_URL} with any key it "
        "holds; keys tried: env_…01; attempts: /health -> 400, /task_info -> 400"
    )
    assert "env_task_key_01" not in message
    assert "hint: upload the key the task app enforces" in message


@pytest.mark.parametrize("status", [400, 404, 422])
def test_verify_task_app_http_error_fails(status: int) -> None:
    def rejecting(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json={"detail": "endpoint_base_url unreachable"})

    with pytest.raises(TaskAppVerificationError) as info:
        verify_task_app(
            BACKEND, API_KEY, TASK_URL, transport=httpx.MockTransport(rejecting), clock=VirtualClock()
        )
    message = str(info.value)
    assert message.startswith(f"Task app verification failed for {TASK_URL}: HTTP {status}")
    assert f"request: POST {API}/rl/verify_task_app -> HTTP {status}" in message
    assert "endpoint_base_url unreachable" in message


def test_verify_task_app_retries_503() -> None:
    backend = KeyStoreBackend(failures={"POST /api/rl/verify_task_app": [503]})
    assert _verify(backend).any_ok
    assert backend.routes == ["POST /api/rl/verify_task_app"] * 2


def test_verify_task_app_needs_a_url() -> None:
    with pytest.raises(SynthUsageError) as info:
        verify_task_app(BACKEND, API_KEY, transport=httpx.MockTransport(KeyStoreBackend()))
    assert info.value.keys == ["task_url"]


def test_async_verify_and_job_methods(tmp_path: Path) -> None:
    from client_support import make_async_job, write_config

    backend = KeyStoreBackend()

    async def handler(request: httpx.Request) -> httpx.Response:
        return backend(request)

    async def scenario() -> tuple[TaskAppVerification, TaskAppVerification, EnvKeyUpload]:
        plain = await async_verify_task_app(
            BACKEND, API_KEY, TASK_URL, transport=httpx.MockTransport(handler), clock=VirtualClock()
        )
        job: AsyncRLJob = make_async_job(
            write_config(tmp_path), task_app_api_key=TASK_KEY, transport=httpx.MockTransport(handler)
        )
        async with job:
            return plain, await job.verify_task_app(), await job.upload_environment_api_key()

    plain, from_job, upload = asyncio.run(scenario())
    assert plain.any_ok
    assert from_job.task_url == TASK_URL
    assert upload.verified is None
    assert backend.stored == {"ENVIRONMENT_API_KEY": TASK_KEY}


def test_sync_job_verifies_its_task_app(tmp_path: Path) -> None:
    from client_support import write_config

    backend = KeyStoreBackend()
    with make_job(write_config(tmp_path), transport=httpx.MockTransport(backend)) as job:
        assert job.verify_task_app().any_ok
    assert json.loads(backend.requests[0].content) == {"endpoint_base_url": TASK_URL}
