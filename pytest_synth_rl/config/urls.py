"""Backend and task-app URLs: the ``/api`` base rule, the task-URL precedence (contract §1.1, §3),
and telling an http(s) URL from a typo of one (for every setting and value that takes a URL)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import NamedTuple

from pytest_synth_rl.errors import closest

_SHORT_SLASHES = re.compile(r"(https?):/{0,1}([^/].*)", re.IGNORECASE)


def normalize_backend_url(url: str) -> str:
    """``https://api.usesynth.ai`` -> ``https://api.usesynth.ai/api`` (idempotent; trailing slashes go)."""
    base = url.rstrip("/")
    return base if base.endswith("/api") else f"{base}/api"


def http_url_problem(text: str, example: str) -> str | None:
    """Why *text* is not an http(s) URL with a host, or None; a misspelt scheme gets a "did you mean"."""
    scheme, sep, rest = text.partition("://")
    if sep and scheme.lower() in ("http", "https") and rest.strip("/"):
        return None
    short = _SHORT_SLASHES.fullmatch(text.strip())
    near = closest(scheme.lower(), ("http", "https")) if sep and rest.strip("/") else None
    guess = f"{short[1].lower()}://{short[2]}" if short else f"{near}://{rest}" if near else None
    hint = f" (did you mean {guess!r}?)" if guess else ""
    return f"expected an http(s) URL such as {example}, got {text!r}{hint}"


class TaskUrlChoice(NamedTuple):
    url: str
    source: str


def resolve_task_url(
    *,
    override: str | None,
    argument: str | None,
    config_value: str | None,
    environ: Mapping[str, str] | None = None,
) -> TaskUrlChoice | None:
    """``overrides["task_url"]`` > argument (or ``TASK_APP_URL``) > config, trimmed; blank is missing."""
    env = os.environ if environ is None else environ
    env_source = "task_url argument" if argument else "TASK_APP_URL environment variable"
    for value, source in (
        (override, 'overrides["task_url"]'),
        (argument or env.get("TASK_APP_URL"), env_source),
        (config_value, "[services].task_url"),
    ):
        if value is not None and value.strip():
            return TaskUrlChoice(value.strip(), source)
    return None
