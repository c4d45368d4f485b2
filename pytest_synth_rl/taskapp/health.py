"""Is the task app up and accepting our key? The probe run before every job submission.

The backend will call the task app from the outside, so a job submitted against a task app that
is down, or that rejects the key it will be sent, wastes a training slot and fails minutes later
with a worse message. The probe asks ``/health`` and then ``/task_info`` with the key sent the
three ways task apps accept it (``X-API-Key``, ``X-API-Keys``, ``Authorization: Bearer``).

A ``/health`` answer of 401/403 that names the *expected key prefix* still proves the app is up
and speaking the contract ("auth-optional" health), so it counts as healthy; a 400 (the contract's
"wrong key") does not, because every later call would get the same 400. ``/task_info`` must be a
plain 200.

Connection problems are part of the answer, not an exception: the caller gets a
:class:`HealthReport` with ``ok=False`` and the error in ``detail``, and decides what to raise.
The sync and async probes share everything except the two ``GET`` calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from pytest_synth_rl.errors import TaskAppError
from pytest_synth_rl.secrets.masking import Secret, SecretHeaders, redact, register_secret
from pytest_synth_rl.taskapp.tls import shared_ssl_context

__all__ = [
    "HealthReport",
    "async_check_task_app_health",
    "check_task_app_health",
    "json_or_none",
    "task_app_auth_headers",
    "task_app_base_url",
]

_HEALTH = "/health"
_TASK_INFO = "/task_info"
_PATHS = (_HEALTH, _TASK_INFO)


def _key_value(api_key: str | Secret | None) -> str:
    if isinstance(api_key, Secret):
        return api_key.value
    return api_key or ""


def task_app_auth_headers(api_key: str | Secret | None) -> SecretHeaders:
    """The three headers a task app reads its key from; empty when there is no key.

    Sending all three matches every task app generation: some read only ``X-API-Key``, some
    only the bearer token, and ``X-API-Keys`` carries alias lists.
    """
    key = _key_value(api_key)
    if not key:
        return SecretHeaders()
    return SecretHeaders({"X-API-Key": key, "X-API-Keys": key, "Authorization": f"Bearer {key}"})


@dataclass(frozen=True)
class HealthReport:
    """The probe's verdict.

    ``health_status`` / ``task_info_status`` are the HTTP statuses (``None`` when that request
    did not complete or was not made); ``detail`` reads like ``/health=200, /task_info=200``.
    """

    ok: bool
    health_status: int | None
    task_info_status: int | None
    detail: str
    url: str = ""


def task_app_base_url(url: str) -> str:
    """Validate and normalise the task app base URL; a malformed one is the caller's bug."""
    text = (url or "").strip()
    try:
        parsed = httpx.URL(text)
    except (httpx.InvalidURL, TypeError) as exc:
        raise TaskAppError(
            f"task app URL {text!r} is not a valid URL ({exc})",
            url=text,
            hint="pass the task app base URL, e.g. http://127.0.0.1:8114",
        ) from exc
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise TaskAppError(
            f"task app URL {text!r} must be an absolute http:// or https:// URL",
            url=text,
            hint="pass the task app base URL, e.g. http://127.0.0.1:8114 (InProcessTaskApp.url)",
        )
    return text.rstrip("/")


def json_or_none(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _health_ok(response: httpx.Response) -> bool:
    """200, or a 401/403 that still speaks the contract by naming the expected key prefix."""
    if response.status_code == 200:
        return True
    if response.status_code not in (401, 403):
        return False
    body = json_or_none(response)
    if not isinstance(body, dict):
        return False
    if "expected_api_key_prefix" in body:
        return True
    detail = body.get("detail")
    return detail is not None and "expected prefix" in str(detail).lower()


def _describe_error(exc: Exception) -> str:
    text = str(exc).strip()
    return f"error ({type(exc).__name__}: {text})" if text else f"error ({type(exc).__name__})"


class _Probe:
    """The probe's state machine, driven by either the sync or the async ``GET``.

    The driver fetches each of ``_PATHS`` in order and hands back the response or the transport
    error; ``record`` says whether to go on. Keeping the decisions here leaves the two public
    functions as pure I/O loops.
    """

    def __init__(self, url: str) -> None:
        self.base = task_app_base_url(url)
        self.statuses: dict[str, int | None] = {_HEALTH: None, _TASK_INFO: None}
        self.parts: list[str] = []
        self.health_ok = False
        self.task_info_ok = False

    def record(self, path: str, outcome: httpx.Response | Exception) -> bool:
        """Record one outcome; return False when probing should stop (transport failure)."""
        if isinstance(outcome, Exception):
            self.parts.append(f"{path}={_describe_error(outcome)}")
            if path == _HEALTH:
                self.parts.append(f"{_TASK_INFO}=skipped")
            return False
        self.statuses[path] = outcome.status_code
        self.parts.append(f"{path}={outcome.status_code}")
        if path == _HEALTH:
            self.health_ok = _health_ok(outcome)
        else:
            self.task_info_ok = outcome.status_code == 200
        return True

    def report(self) -> HealthReport:
        return HealthReport(
            ok=self.health_ok and self.task_info_ok,
            health_status=self.statuses[_HEALTH],
            task_info_status=self.statuses[_TASK_INFO],
            detail=redact(", ".join(self.parts)),
            url=redact(self.base),
        )


def _timeout(timeout: float) -> httpx.Timeout:
    return httpx.Timeout(timeout)


def check_task_app_health(
    url: str,
    api_key: str | Secret | None,
    *,
    timeout: float = 10.0,
    client: httpx.Client | None = None,
) -> HealthReport:
    """Probe ``/health`` then ``/task_info`` of the task app at *url* (blocking).

    *client* lets callers reuse a pool or inject a transport; it is not closed here.
    """
    register_secret(api_key.value if isinstance(api_key, Secret) else api_key)
    probe = _Probe(url)
    headers = task_app_auth_headers(api_key)
    owned = client is None
    http = (
        client if client is not None else httpx.Client(timeout=_timeout(timeout), verify=shared_ssl_context())
    )
    try:
        for path in _PATHS:
            outcome: httpx.Response | Exception
            try:
                outcome = http.get(probe.base + path, headers=headers, timeout=_timeout(timeout))
            except httpx.TransportError as exc:
                outcome = exc
            if not probe.record(path, outcome):
                break
    finally:
        if owned:
            http.close()
    return probe.report()


async def async_check_task_app_health(
    url: str,
    api_key: str | Secret | None,
    *,
    timeout: float = 10.0,
    client: httpx.AsyncClient | None = None,
) -> HealthReport:
    """The same probe as :func:`check_task_app_health`, over ``httpx.AsyncClient``."""
    register_secret(api_key.value if isinstance(api_key, Secret) else api_key)
    probe = _Probe(url)
    headers = task_app_auth_headers(api_key)
    owned = client is None
    http = (
        client
        if client is not None
        else httpx.AsyncClient(timeout=_timeout(timeout), verify=shared_ssl_context())
    )
    try:
        for path in _PATHS:
            outcome: httpx.Response | Exception
            try:
                outcome = await http.get(probe.base + path, headers=headers, timeout=_timeout(timeout))
            except httpx.TransportError as exc:
                outcome = exc
            if not probe.record(path, outcome):
                break
    finally:
        if owned:
            await http.aclose()
    return probe.report()
