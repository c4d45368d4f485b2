"""Asking the backend to reach the task app before submitting, as the upstream CLI does.

``POST {api_base}/rl/verify_task_app`` with ``{"endpoint_base_url": <task url>}`` makes the
backend call the task app with the key it holds (contract §10.3). The CLI aborts unless the
answer's ``any_ok`` is truthy, and on any HTTP status >= 400; so do :func:`verify_task_app` and
:func:`async_verify_task_app`. Knowing this before submitting turns a job that would fail an
hour later on its first rollout into an error that says which key the backend tried.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import httpx

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
from pytest_synth_rl.errors import ConfigProblem, SynthUsageError, TaskAppVerificationError
from pytest_synth_rl.secrets.masking import Secret, SecretHeaders, mask_secret

__all__ = ["TaskAppVerification", "async_verify_task_app", "verify_task_app", "verify_task_app_call"]


@dataclass(frozen=True)
class TaskAppVerification:
    """The backend's verdict on a task app.

    ``candidates_first15`` are the first characters of the keys it tried (shown masked in
    messages); ``attempts`` are its probes as it reported them, each usually with a ``status``.
    """

    task_url: str
    any_ok: bool
    candidates_first15: list[str] = field(default_factory=list)
    attempts: list[dict[str, Any]] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def statuses(self) -> list[Any]:
        """The ``status`` of every attempt, in order (None where an attempt has none)."""
        return [attempt.get("status") for attempt in self.attempts]

    def describe(self) -> str:
        """What was tried: masked key candidates and each attempt's status."""
        keys = ", ".join(mask_secret(c) for c in self.candidates_first15) or "none"
        tried = ", ".join(_attempt_text(a) for a in self.attempts) or "no attempts reported"
        return f"keys tried: {keys}; attempts: {tried}"


def _attempt_text(attempt: dict[str, Any]) -> str:
    where = attempt.get("path") or attempt.get("url") or attempt.get("endpoint")
    status = attempt.get("status", "?")
    return f"{where} -> {status}" if where else f"status {status}"


def _read_verification(task_url: str, response: httpx.Response) -> TaskAppVerification:
    body, _ = read_object(response)
    candidates = body.get("candidates_first15")
    attempts = body.get("attempts")
    result = TaskAppVerification(
        task_url=task_url,
        any_ok=bool(body.get("any_ok")),
        candidates_first15=[str(c) for c in candidates] if isinstance(candidates, list) else [],
        attempts=[a for a in attempts if isinstance(a, dict)] if isinstance(attempts, list) else [],
        raw=body,
    )
    if not result.any_ok:
        raise TaskAppVerificationError(
            f"Task app verification failed (auth): the backend could not reach {task_url} with any "
            f"key it holds; {result.describe()}",
            method=response.request.method,
            url=str(response.request.url),
            status_code=response.status_code,
            hint="upload the key the task app enforces with upload_environment_api_key(env_key=...) "
            "and check that the task app URL is reachable from the backend",
        )
    return result


def verify_task_app_call(api_base: str, api_key: Secret, task_url: str) -> Call[TaskAppVerification]:
    return Call(
        operation="verify-task-app",
        method="POST",
        url=f"{api_base}/rl/verify_task_app",
        parse=partial(_read_verification, task_url),
        headers=SecretHeaders({"Authorization": f"Bearer {api_key.value}", "Accept": "application/json"}),
        json={"endpoint_base_url": task_url},
        error_cls=TaskAppVerificationError,
        action=f"Task app verification failed for {task_url}",
        fix="the backend refused to verify the task app: check the task app URL (task_url= / "
        "TASK_APP_URL) and backend_url / BACKEND_BASE_URL",
    )


def _resolve_task_url(task_url: str | None) -> str:
    value = (task_url or "").strip() or os.environ.get("TASK_APP_URL", "").strip()
    if not value:
        raise SynthUsageError(
            [
                ConfigProblem(
                    key="task_url",
                    message="no task app URL was given and TASK_APP_URL is not set",
                    hint="pass task_url= (the task app's base URL, e.g. InProcessTaskApp(...).url)",
                )
            ]
        )
    return value


def verify_task_app(
    backend_url: str | None = None,
    api_key: str | Secret | None = None,
    task_url: str | None = None,
    *,
    http_client: httpx.Client | None = None,
    transport: httpx.BaseTransport | None = None,
    clock: Clock | None = None,
    retry: RetryPolicy | None = None,
    request_timeout: float = DEFAULT_ONESHOT_TIMEOUT,
) -> TaskAppVerification:
    """Have the backend probe the task app at *task_url* (``TASK_APP_URL`` if None).

    Raises :class:`TaskAppVerificationError` for HTTP status >= 400 or a falsy ``any_ok``.
    """
    api_base = normalize_backend_url(resolve_backend_url(backend_url))
    call = verify_task_app_call(api_base, resolve_api_key(api_key), _resolve_task_url(task_url))
    with client_for(http_client, transport, request_timeout) as client:
        return run(client, call, retry=retry or RetryPolicy(), clock=clock or RealClock())


async def async_verify_task_app(
    backend_url: str | None = None,
    api_key: str | Secret | None = None,
    task_url: str | None = None,
    *,
    http_client: httpx.AsyncClient | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    clock: Clock | None = None,
    retry: RetryPolicy | None = None,
    request_timeout: float = DEFAULT_ONESHOT_TIMEOUT,
) -> TaskAppVerification:
    """:func:`verify_task_app` over ``httpx.AsyncClient``."""
    api_base = normalize_backend_url(resolve_backend_url(backend_url))
    call = verify_task_app_call(api_base, resolve_api_key(api_key), _resolve_task_url(task_url))
    async with async_client_for(http_client, transport, request_timeout) as client:
        return await async_run(client, call, retry=retry or RetryPolicy(), clock=clock or RealClock())
