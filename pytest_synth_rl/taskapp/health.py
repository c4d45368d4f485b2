"""The task app health probe run before every job submission: ``GET /health`` then ``GET /task_info``."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import httpx

from pytest_synth_rl.errors import TaskAppError
from pytest_synth_rl.secrets.masking import Secret, SecretHeaders, mask_secret, redact, register_secret
from pytest_synth_rl.taskapp.tls import shared_ssl_context

_PATHS = ("/health", "/task_info")
_Outcome = tuple[str, "httpx.Response | Exception"]


def task_app_auth_headers(api_key: str | Secret | None) -> SecretHeaders:
    """The key as ``X-API-Key``, ``X-API-Keys`` and ``Authorization: Bearer`` (empty without one)."""
    key = api_key.value if isinstance(api_key, Secret) else api_key or ""
    if not key:
        return SecretHeaders()
    return SecretHeaders({"X-API-Key": key, "X-API-Keys": key, "Authorization": f"Bearer {key}"})


def key_refused(status: int, content: bytes) -> bool:
    """Whether a task app's answer refuses the key: 401/403, or a 400 naming the key."""
    return status in (401, 403) or (status == 400 and any(w in content.lower() for w in (b"key", b"auth")))


def key_refusal(api_key: str | Secret | None, give_it: str) -> str:
    """Why a task app refused *api_key* (None: none sent) and how to fix it, passing *give_it*."""
    key = api_key.value if isinstance(api_key, Secret) else api_key
    if not key:
        return (
            "no task-app key was sent: set ENVIRONMENT_API_KEY to the key the task app expects, "
            f"or pass {give_it}"
        )
    return (
        f"the task app rejected the key {mask_secret(key)}, sent as X-API-Key, X-API-Keys and "
        f"Authorization: Bearer: pass {give_it} or set ENVIRONMENT_API_KEY to the key the task app expects"
    )


@dataclass(frozen=True)
class HealthReport:
    """The probe's verdict; statuses are None for a request that did not complete or was not
    made; ``detail`` reads like ``/health=200, /task_info=200``."""

    ok: bool
    health_status: int | None
    task_info_status: int | None
    detail: str
    url: str = ""


def task_app_base_url(url: str) -> str:
    """The task app base URL, checked and without a trailing slash; a malformed one raises."""
    text = (url or "").strip()
    try:
        parsed = httpx.URL(text)
        problem = (
            "" if parsed.scheme in ("http", "https") and parsed.host else "must be an absolute http(s) URL"
        )
    except (httpx.InvalidURL, TypeError) as exc:
        problem = f"is not a valid URL ({exc})"
    if problem:
        hint = "pass the task app base URL, e.g. http://127.0.0.1:8114 (InProcessTaskApp.url)"
        raise TaskAppError(f"task app URL {text!r} {problem}", url=text, hint=hint)
    return text.rstrip("/")


def json_or_none(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _health_ok(response: httpx.Response) -> bool:
    if response.status_code == 200:
        return True
    body = json_or_none(response) if response.status_code in (401, 403) else None
    if not isinstance(body, dict):
        return False
    return "expected_api_key_prefix" in body or "expected prefix" in str(body.get("detail") or "").lower()


def _report(base: str, outcomes: list[_Outcome]) -> HealthReport:
    statuses: dict[str, int | None] = dict.fromkeys(_PATHS)
    parts: list[str] = []
    ok = {path: False for path in _PATHS}
    for path, outcome in outcomes:
        if isinstance(outcome, Exception):
            text = f"{type(outcome).__name__}: {str(outcome).strip()}".removesuffix(": ")
            parts.append(f"{path}=error ({text})")
            parts += [f"{_PATHS[1]}=skipped"] if path == _PATHS[0] else []
            continue
        statuses[path] = outcome.status_code
        parts.append(f"{path}={outcome.status_code}")
        ok[path] = _health_ok(outcome) if path == _PATHS[0] else outcome.status_code == 200
    detail = redact(", ".join(parts))
    return HealthReport(all(ok.values()), statuses[_PATHS[0]], statuses[_PATHS[1]], detail, redact(base))


def _target(url: str, api_key: str | Secret | None) -> tuple[str, SecretHeaders]:
    register_secret(api_key.value if isinstance(api_key, Secret) else api_key)
    return task_app_base_url(url), task_app_auth_headers(api_key)


def check_task_app_health(
    url: str, api_key: str | Secret | None, *, timeout: float = 10.0, client: httpx.Client | None = None
) -> HealthReport:
    """Probe ``/health`` then ``/task_info`` of the task app at *url*; *client* (a pool or an
    injected transport) is not closed here."""
    base, headers = _target(url, api_key)
    http = client or httpx.Client(timeout=timeout, verify=shared_ssl_context())
    outcomes: list[_Outcome] = []
    with contextlib.nullcontext() if client else http:
        for path in _PATHS:
            try:
                outcomes.append((path, http.get(base + path, headers=headers, timeout=timeout)))
            except httpx.TransportError as exc:
                outcomes.append((path, exc))
                break
    return _report(base, outcomes)


async def async_check_task_app_health(
    url: str, api_key: str | Secret | None, *, timeout: float = 10.0, client: httpx.AsyncClient | None = None
) -> HealthReport:
    """The same probe as :func:`check_task_app_health`, over ``httpx.AsyncClient``."""
    base, headers = _target(url, api_key)
    http = client or httpx.AsyncClient(timeout=timeout, verify=shared_ssl_context())
    outcomes: list[_Outcome] = []
    async with contextlib.nullcontext() if client else http:
        for path in _PATHS:
            try:
                outcomes.append((path, await http.get(base + path, headers=headers, timeout=timeout)))
            except httpx.TransportError as exc:
                outcomes.append((path, exc))
                break
    return _report(base, outcomes)
