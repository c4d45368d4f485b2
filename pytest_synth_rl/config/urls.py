"""Backend and task-app URLs: the ``/api`` base rule and the task-URL precedence (contract §1.1, §3).

Both the payload builder and the HTTP client need the same ``api_base`` rule, so it lives here on
its own rather than inside either of them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["TaskUrlChoice", "normalize_backend_url", "resolve_task_url"]


def normalize_backend_url(url: str) -> str:
    """``https://api.usesynth.ai`` -> ``https://api.usesynth.ai/api`` (idempotent).

    Strips trailing slashes and appends ``/api`` unless the URL already ends with it, which is
    where every RL endpoint lives.
    """
    base = url.rstrip("/")
    if not base.endswith("/api"):
        base = f"{base}/api"
    return base


def _clean(value: str | None) -> str | None:
    if value is None:
        return None
    stripped = value.strip()
    return stripped or None


@dataclass(frozen=True)
class TaskUrlChoice:
    """The resolved task URL and where it came from (for messages and reports)."""

    url: str
    source: str


def resolve_task_url(
    *,
    override: str | None,
    argument: str | None,
    config_value: str | None,
    environ: Mapping[str, str] | None = None,
) -> TaskUrlChoice | None:
    """Pick the task app URL: ``overrides["task_url"]`` > argument or ``TASK_APP_URL`` > config.

    Blank strings count as missing and the winner is whitespace-trimmed. As in the SDK, the
    environment is consulted only when the argument is empty (a whitespace-only argument hides
    ``TASK_APP_URL`` and then counts as missing). Returns ``None`` when nothing usable is set.
    """
    env = os.environ if environ is None else environ
    env_source = "task_url argument" if argument else "TASK_APP_URL environment variable"
    env_or_arg = argument or env.get("TASK_APP_URL")
    for value, source in (
        (override, 'overrides["task_url"]'),
        (env_or_arg, env_source),
        (config_value, "[services].task_url"),
    ):
        cleaned = _clean(value)
        if cleaned is not None:
            return TaskUrlChoice(cleaned, source)
    return None
