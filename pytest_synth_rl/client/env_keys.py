"""Handing the task app's key to the backend, sealed, the way the hosted trainer learns it.

The trainer calls the task app with ``ENVIRONMENT_API_KEY``; a backend in another process (the
hosted one, or a served fake) cannot read the test's environment, so the key is uploaded
(contract §1.2 and §10.5): fetch the backend's X25519 public key, seal the key in a libsodium
sealed box (only the holder of the private key can open it, and the sender needs no key pair),
post the ciphertext, and optionally ask whether the backend now holds a key. Every request
carries the Synth API key as a bearer token and goes through the client's retry loop.

Wire format::

    GET  {api_base}/v1/crypto/public-key -> {"public_key": <base64, 32 bytes>,
                                             "alg": "libsodium.sealedbox.v1" (optional)}
    POST {api_base}/v1/env-keys          <- {"name": "ENVIRONMENT_API_KEY",
                                             "ciphertext_b64": <base64 sealed box>}
                                         -> 2xx {"id", "name", "updated_at"} (all optional)
    GET  {api_base}/v1/env-keys/verify   -> {"present": true}
"""

from __future__ import annotations

import base64
import binascii
import os
from dataclasses import dataclass
from functools import partial
from typing import Any

import httpx
from nacl.public import PublicKey, SealedBox

from pytest_synth_rl.client.calls import Call, read_object
from pytest_synth_rl.client.jobconfig import resolve_api_key, resolve_backend_url
from pytest_synth_rl.client.oneshot import (
    DEFAULT_ONESHOT_TIMEOUT,
    async_client_for,
    async_run,
    client_for,
    run,
)
from pytest_synth_rl.client.retry import RetryPolicy
from pytest_synth_rl.clock import Clock, RealClock
from pytest_synth_rl.config import normalize_backend_url
from pytest_synth_rl.errors import ConfigProblem, EnvKeyUploadError, SynthUsageError
from pytest_synth_rl.secrets.masking import Secret, SecretHeaders

__all__ = [
    "ENV_KEY_NAME",
    "MAX_ENV_KEY_BYTES",
    "SEALED_BOX_ALG",
    "EnvKeyUpload",
    "async_upload_environment_api_key",
    "seal_env_key",
    "upload_environment_api_key",
]

ENV_KEY_NAME = "ENVIRONMENT_API_KEY"
SEALED_BOX_ALG = "libsodium.sealedbox.v1"
#: The backend refuses larger plaintexts; checked before anything is sent.
MAX_ENV_KEY_BYTES = 8 * 1024

_FIX_BACKEND = (
    "check backend_url / BACKEND_BASE_URL: it must be a Synth backend (or a fake of it) that serves "
    "the environment-key routes under /api/v1"
)


@dataclass(frozen=True)
class EnvKeyUpload:
    """What the backend said about an uploaded key. ``verified`` is None when not asked."""

    url: str
    name: str
    id: str | None = None
    updated_at: str | None = None
    verified: bool | None = None


# -- pure parts: what to send, what answers mean -----------------------------------------------
def _auth(api_key: Secret) -> SecretHeaders:
    return SecretHeaders({"Authorization": f"Bearer {api_key.value}", "Accept": "application/json"})


def _unusable(response: httpx.Response, what: str, fix: str) -> EnvKeyUploadError:
    return EnvKeyUploadError(
        f"uploading {ENV_KEY_NAME} failed: {what}",
        method=response.request.method,
        url=str(response.request.url),
        status_code=response.status_code,
        response_text=response.text,
        hint=fix,
    )


def _read_public_key(response: httpx.Response) -> bytes:
    """The 32 raw bytes of the backend's X25519 public key, after checking the advertised algorithm."""
    body, note = read_object(response)
    alg = body.get("alg")
    if alg is not None and alg != SEALED_BOX_ALG:
        raise _unusable(
            response,
            f"the backend seals with alg {alg!r}, expected {SEALED_BOX_ALG!r}",
            "this client only speaks libsodium sealed boxes; " + _FIX_BACKEND,
        )
    encoded = body.get("public_key")
    if not isinstance(encoded, str) or not encoded.strip():
        reason = f" ({note})" if note else ""
        raise _unusable(response, f"the answer has no public_key string{reason}", _FIX_BACKEND)
    try:
        raw = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise _unusable(response, "public_key is not valid base64", _FIX_BACKEND) from None
    if len(raw) != PublicKey.SIZE:
        raise _unusable(
            response,
            f"public_key decodes to {len(raw)} bytes, expected {PublicKey.SIZE} (an X25519 key)",
            _FIX_BACKEND,
        )
    return raw


def seal_env_key(env_key: Secret, public_key: bytes) -> str:
    """The key sealed for the holder of *public_key*'s private half, base64-encoded."""
    ciphertext = SealedBox(PublicKey(public_key)).encrypt(env_key.value.encode("utf-8"))
    return base64.b64encode(ciphertext).decode("ascii")


def _read_upload(url: str, response: httpx.Response) -> EnvKeyUpload:
    body, _ = read_object(response)

    def text(key: str) -> str | None:
        value = body.get(key)
        return str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else None

    name = text("name") or ENV_KEY_NAME
    return EnvKeyUpload(url=url, name=name, id=text("id"), updated_at=text("updated_at"))


def _read_present(response: httpx.Response) -> bool:
    body, _ = read_object(response)
    return body.get("present") is True


def public_key_call(api_base: str, api_key: Secret) -> Call[bytes]:
    return Call(
        operation="public-key",
        method="GET",
        url=f"{api_base}/v1/crypto/public-key",
        parse=_read_public_key,
        headers=_auth(api_key),
        error_cls=EnvKeyUploadError,
        action=f"fetching the backend's public key to upload {ENV_KEY_NAME} failed",
        fix=_FIX_BACKEND,
    )


def upload_call(api_base: str, api_key: Secret, ciphertext_b64: str) -> Call[EnvKeyUpload]:
    url = f"{api_base}/v1/env-keys"
    return Call(
        operation="env-key-upload",
        method="POST",
        url=url,
        parse=partial(_read_upload, url),
        headers=_auth(api_key),
        json={"name": ENV_KEY_NAME, "ciphertext_b64": ciphertext_b64},
        error_cls=EnvKeyUploadError,
        action=f"uploading {ENV_KEY_NAME} failed",
        fix="the backend refused the sealed key; " + _FIX_BACKEND,
    )


def verify_call(api_base: str, api_key: Secret) -> Call[bool]:
    return Call(
        operation="env-key-verify",
        method="GET",
        url=f"{api_base}/v1/env-keys/verify",
        parse=_read_present,
        headers=_auth(api_key),
        error_cls=EnvKeyUploadError,
        action=f"checking that the backend holds {ENV_KEY_NAME} failed",
        fix=_FIX_BACKEND,
    )


def _resolve_env_key(env_key: str | Secret | None) -> Secret:
    """``env_key`` argument, then ``ENVIRONMENT_API_KEY``; within the backend's size limit."""
    value = env_key.value if isinstance(env_key, Secret) else env_key
    value = (value or "").strip() or os.environ.get(ENV_KEY_NAME, "").strip()
    if not value:
        raise SynthUsageError(
            [
                ConfigProblem(
                    key="env_key",
                    message=f"no task app key was given and {ENV_KEY_NAME} is not set",
                    hint=f"pass env_key= (the key the task app enforces) or set {ENV_KEY_NAME}",
                )
            ]
        )
    return env_key if isinstance(env_key, Secret) and env_key.value == value else Secret(value)


def _check_size(env_key: Secret, url: str) -> None:
    size = len(env_key.value.encode("utf-8"))
    if size > MAX_ENV_KEY_BYTES:
        raise EnvKeyUploadError(
            f"{ENV_KEY_NAME} ({env_key.masked}) is {size} bytes; the backend accepts at most "
            f"{MAX_ENV_KEY_BYTES} bytes (8 KiB), so it was not uploaded to {url}",
            url=url,
            hint="use a shorter task app key (e.g. 64 hex characters) in the task app and in env_key=",
        )


def _not_present(url: str) -> EnvKeyUploadError:
    return EnvKeyUploadError(
        f"the backend accepted {ENV_KEY_NAME} but {url} does not report it present",
        method="GET",
        url=url,
        hint="the upload did not stick: check that backend_url is one backend (not a load balancer "
        "over several) and that SYNTH_API_KEY is the account the trainer runs under",
    )


@dataclass(frozen=True)
class _Plan:
    api_base: str
    api_key: Secret
    env_key: Secret


def _plan(backend_url: str | None, api_key: str | Secret | None, env_key: str | Secret | None) -> _Plan:
    api_base = normalize_backend_url(resolve_backend_url(backend_url))
    plan = _Plan(api_base, resolve_api_key(api_key), _resolve_env_key(env_key))
    _check_size(plan.env_key, f"{api_base}/v1/env-keys")
    return plan


# -- the two drivers ---------------------------------------------------------------------------
def upload_environment_api_key(
    backend_url: str | None = None,
    api_key: str | Secret | None = None,
    env_key: str | Secret | None = None,
    *,
    verify: bool = False,
    http_client: httpx.Client | None = None,
    transport: httpx.BaseTransport | None = None,
    clock: Clock | None = None,
    retry: RetryPolicy | None = None,
    request_timeout: float = DEFAULT_ONESHOT_TIMEOUT,
) -> EnvKeyUpload:
    """Upload the task app's key to the backend, sealed to the backend's public key.

    ``backend_url`` -> ``SYNTH_BACKEND_URL`` -> ``BACKEND_BASE_URL`` -> the public service;
    ``api_key`` -> ``SYNTH_API_KEY``; ``env_key`` -> ``ENVIRONMENT_API_KEY``. With ``verify``, also
    asks ``GET /v1/env-keys/verify`` and raises unless the backend reports the key present.
    Raises :class:`EnvKeyUploadError` (naming the URL and the fix) for every failure.
    """
    plan = _plan(backend_url, api_key, env_key)
    options: dict[str, Any] = {"retry": retry or RetryPolicy(), "clock": clock or RealClock()}
    with client_for(http_client, transport, request_timeout) as client:
        public_key = run(client, public_key_call(plan.api_base, plan.api_key), **options)
        sealed = seal_env_key(plan.env_key, public_key)
        upload = run(client, upload_call(plan.api_base, plan.api_key, sealed), **options)
        if not verify:
            return upload
        check = verify_call(plan.api_base, plan.api_key)
        if not run(client, check, **options):
            raise _not_present(check.url)
    return EnvKeyUpload(upload.url, upload.name, upload.id, upload.updated_at, verified=True)


async def async_upload_environment_api_key(
    backend_url: str | None = None,
    api_key: str | Secret | None = None,
    env_key: str | Secret | None = None,
    *,
    verify: bool = False,
    http_client: httpx.AsyncClient | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    clock: Clock | None = None,
    retry: RetryPolicy | None = None,
    request_timeout: float = DEFAULT_ONESHOT_TIMEOUT,
) -> EnvKeyUpload:
    """:func:`upload_environment_api_key` over ``httpx.AsyncClient``."""
    plan = _plan(backend_url, api_key, env_key)
    options: dict[str, Any] = {"retry": retry or RetryPolicy(), "clock": clock or RealClock()}
    async with async_client_for(http_client, transport, request_timeout) as client:
        public_key = await async_run(client, public_key_call(plan.api_base, plan.api_key), **options)
        sealed = seal_env_key(plan.env_key, public_key)
        upload = await async_run(client, upload_call(plan.api_base, plan.api_key, sealed), **options)
        if not verify:
            return upload
        check = verify_call(plan.api_base, plan.api_key)
        if not await async_run(client, check, **options):
            raise _not_present(check.url)
    return EnvKeyUpload(upload.url, upload.name, upload.id, upload.updated_at, verified=True)
