"""Task-app verification before a submit (contract §10.3): probe the app with each key the fake would send."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import httpx

from pytest_synth_rl.fake.keys import EnvKeys
from pytest_synth_rl.secrets.masking import Secret, mask_secret
from pytest_synth_rl.taskapp.health import check_task_app_health
from pytest_synth_rl.taskapp.loopback import is_loopback_url

__all__ = ["probe_task_app"]


def probe_task_app(
    url: str,
    keys: EnvKeys,
    client: httpx.Client,
    *,
    any_url: bool,
    set_aside: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext,
) -> dict[str, Any]:
    """``{any_ok, endpoint_base_url, candidates_first15, attempts}`` for the task app at *url*
    (``/health`` and ``/task_info``); keys appear only masked. Only loopback unless *any_url*."""
    candidates = keys.candidates()
    answer: dict[str, Any] = {
        "any_ok": False,
        "endpoint_base_url": url,
        "candidates_first15": [mask_secret(key.value) for _, key in candidates],
    }
    if not (is_loopback_url(url) or any_url):
        error = (
            f"not probed: {url!r} is not on loopback and this fake only calls "
            "loopback task apps (create it with rollouts=True to allow any http(s) URL)"
        )
        return {**answer, "attempts": [{"status": None, "error": error}]}
    attempts: list[dict[str, Any]] = []
    tries: list[tuple[str, Secret | None]] = list(candidates) or [("none", None)]
    for source, key in tries:
        with set_aside():  # network I/O: other requests go on meanwhile
            report = check_task_app_health(url, key, client=client)
        attempts.append(
            {
                "status": report.task_info_status,
                "health_status": report.health_status,
                "task_info_status": report.task_info_status,
                "ok": report.ok,
                "key_source": source,
                "key_first15": mask_secret(key.value) if key else "<none>",
                "detail": report.detail,
            }
        )
    return {**answer, "any_ok": any(a["ok"] for a in attempts), "attempts": attempts}
