"""Where a job's backend, keys and task app come from: arguments, then the environment.

Resolved once, when the job object is made, so a job never changes target because the
environment changed, and a missing key is reported before anything is sent.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from pytest_synth_rl.config import normalize_backend_url
from pytest_synth_rl.errors import ConfigError, ConfigProblem, SynthUsageError
from pytest_synth_rl.secrets.masking import Secret, key_problem

DEFAULT_BACKEND_URL = "https://api.usesynth.ai"
#: Read in order when no ``backend_url`` is given, as ``--synth-backend`` reads them.
BACKEND_URL_ENV_VARS: tuple[str, ...] = ("SYNTH_BACKEND_URL", "BACKEND_BASE_URL")


def usage_error(key: str, message: str, hint: str) -> SynthUsageError:
    """A :class:`SynthUsageError` with one problem."""
    return SynthUsageError([ConfigProblem(key=key, message=message, hint=hint)])


def _text(value: str | None, env_name: str | None = None) -> str | None:
    """*value* stripped, else the environment variable *env_name* stripped; None when blank."""
    value = (value or "").strip() or (os.environ.get(env_name, "").strip() if env_name else "")
    return value or None


def resolve_backend_url(backend_url: str | None = None) -> str:
    """``backend_url``, then ``SYNTH_BACKEND_URL``, ``BACKEND_BASE_URL``, the public service."""
    source, value = "backend_url", _text(backend_url)
    for name in BACKEND_URL_ENV_VARS:
        if value is None:
            source, value = name, _text(None, name)
    if value is None:
        return DEFAULT_BACKEND_URL
    if not _is_http_url(value):
        hint = f"use e.g. {DEFAULT_BACKEND_URL} (with or without /api)"
        raise usage_error(source, f"{value!r} is not an absolute http(s) URL", hint)
    return value


@functools.lru_cache(maxsize=64)
def _is_http_url(value: str) -> bool:
    """Remembered: every job of a suite names the same backend, and parsing it is costly."""
    try:
        parsed = httpx.URL(value)
    except httpx.InvalidURL:
        return False
    return parsed.scheme in ("http", "https") and bool(parsed.host)


def resolve_api_key(api_key: str | Secret | None = None) -> Secret:
    """``api_key``, then ``SYNTH_API_KEY``; a job without a key is a configuration error."""
    if isinstance(api_key, Secret) and api_key:
        return api_key
    key = _key(api_key if isinstance(api_key, str) else None, "api_key", "SYNTH_API_KEY")
    if key is None:
        message, hint = "no Synth API key was given and SYNTH_API_KEY is not set", "set SYNTH_API_KEY in "
        raise usage_error("api_key", message, hint + "the environment or pass api_key=")
    return key


def _key(value: str | None, argument: str, env_name: str) -> Secret | None:
    """*value*, else *env_name*, as a key; one no HTTP header could carry is refused here."""
    text = _text(value, env_name)
    problem = key_problem(text) if text else None
    if problem is not None:
        raise usage_error(argument, problem, f"pass {argument}= or set {env_name} to the key")
    return Secret(text) if text else None


@dataclass
class RLJobConfig:
    """Everything needed to submit or follow one job, already resolved (field names as in the upstream SDK)"""

    config_path: Path | None
    backend_url: str
    api_key: Secret
    task_app_url: str | None = None
    task_app_api_key: Secret | None = None
    allow_experimental: bool | None = None
    overrides: Mapping[str, Any] | None = None
    idempotency_key: str | None = None
    tags: Mapping[str, str] | None = None
    allow_new_keys: bool = False
    api_base: str = field(init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.api_key, Secret):
            self.api_key = Secret(str(self.api_key))
        if self.task_app_api_key is not None and not isinstance(self.task_app_api_key, Secret):
            self.task_app_api_key = Secret(str(self.task_app_api_key))
        self.api_base = normalize_backend_url(self.backend_url)

    @classmethod
    def resolve(
        cls,
        config_path: str | os.PathLike[str] | None,
        *,
        backend_url: str | None = None,
        api_key: str | Secret | None = None,
        task_app_url: str | None = None,
        task_app_api_key: str | Secret | None = None,
        allow_experimental: bool | None = None,
        overrides: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        tags: Mapping[str, str] | None = None,
        allow_new_keys: bool = False,
    ) -> RLJobConfig:
        """Arguments first, then ``SYNTH_BACKEND_URL`` / ``BACKEND_BASE_URL``, ``SYNTH_API_KEY``,
        ``TASK_APP_URL``, ``ENVIRONMENT_API_KEY``; a *config_path* that is not a file is reported here."""
        path = Path(config_path) if config_path is not None else None
        if path is not None and not path.is_file():
            what = "is a directory, not a file" if path.is_dir() else "does not exist"
            hint = "pass the path of an RL TOML config (relative paths are resolved from the working "
            hint += f"directory, {os.getcwd()!r})"
            problem = ConfigProblem("config_path", f"RL config file {str(path)!r} {what}", hint)
            raise ConfigError([problem], path=str(path))
        bad = [k for k, v in (tags or {}).items() if not isinstance(k, str) or not isinstance(v, str)]
        if bad:
            message = f"tags must map strings to strings; bad entries: {bad!r}"
            raise usage_error("tags", message, 'e.g. tags={"suite": "nightly"}')
        return cls(
            config_path=path,
            backend_url=resolve_backend_url(backend_url),
            api_key=resolve_api_key(api_key),
            task_app_url=_text(task_app_url, "TASK_APP_URL"),
            task_app_api_key=(task_app_api_key or None)
            if isinstance(task_app_api_key, Secret)
            else _key(task_app_api_key, "task_app_api_key", "ENVIRONMENT_API_KEY"),
            allow_experimental=allow_experimental,
            overrides=dict(overrides) if overrides is not None else None,
            idempotency_key=_text(idempotency_key),
            tags=dict(tags) if tags is not None else None,
            allow_new_keys=allow_new_keys,
        )
