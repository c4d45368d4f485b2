"""Building the ``POST /api/rl/jobs`` body from an RL config (contract §3).

The output is byte-identical (as ``json.dumps(payload, sort_keys=True)``) to what the SDK's
builder produces for every config it accepts. Our additions are all about failure: every problem
is reported at once, overrides can edit the TOML tree, and nothing but a ConfigError escapes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, ConfigProblem
from .coerce import describe
from .known_keys import warn_unknown_keys
from .loader import config_source, read_toml_file
from .overrides import apply_overrides, split_overrides
from .tree import plain_copy
from .urls import normalize_backend_url, resolve_task_url
from .validate import check_rl_config

__all__ = ["RLBuildResult", "build_rl_payload", "build_rl_payload_from_mapping"]

#: ``tags`` of every RL job the SDK submits (a TOML ``[tags]`` goes to ``data.config.tags``).
PAYLOAD_TAGS = {"source": "train-cli"}


@dataclass(frozen=True)
class RLBuildResult:
    """The job body plus what the caller needs next: the task URL to health-check and the
    idempotency key to send as the ``Idempotency-Key`` header (never part of the body)."""

    payload: dict[str, Any]
    task_url: str
    idempotency: str | None


def build_rl_payload(
    config_path: str | os.PathLike[str],
    *,
    task_url: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    idempotency: str | None = None,
    allow_experimental: bool | None = None,
    backend_url: str | None = None,
    allow_new_keys: bool = False,
) -> RLBuildResult:
    """Read the TOML file at *config_path*, validate it and build the RL job payload.

    Task URL precedence: ``overrides["task_url"]`` > *task_url* (or env ``TASK_APP_URL`` when
    *task_url* is empty) > ``[services].task_url``; blank counts as missing. *backend_url* (or
    ``overrides["backend"]``; the argument wins) adds ``metadata.backend_base_url``.
    Raises :class:`~pytest_synth_rl.errors.ConfigError` listing every problem; an override that
    adds a key the config and schema do not have is one, unless *allow_new_keys*. Unknown TOML
    keys are forwarded unchanged (as the SDK does) with a :class:`SynthConfigWarning`.
    """
    path = config_source(config_path)
    return _build(
        read_toml_file(path),
        source=str(path),
        task_url=task_url,
        overrides=overrides,
        idempotency=idempotency,
        allow_experimental=allow_experimental,
        backend_url=backend_url,
        allow_new_keys=allow_new_keys,
    )


def build_rl_payload_from_mapping(
    config: Mapping[str, Any],
    *,
    task_url: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    idempotency: str | None = None,
    allow_experimental: bool | None = None,
    backend_url: str | None = None,
    source: str = "<mapping>",
    allow_new_keys: bool = False,
) -> RLBuildResult:
    """Like :func:`build_rl_payload` for a config already parsed into a mapping.

    *source* names the config in error messages. The mapping is not modified.
    """
    if not isinstance(config, Mapping):
        raise ConfigError(
            [
                ConfigProblem(
                    key="",
                    message=f"expected a mapping of TOML sections, got {describe(config)}",
                    hint="use build_rl_payload() for a TOML file path",
                )
            ],
            path=source,
        )
    return _build(
        config,
        source=source,
        task_url=task_url,
        overrides=overrides,
        idempotency=idempotency,
        allow_experimental=allow_experimental,
        backend_url=backend_url,
        allow_new_keys=allow_new_keys,
    )


def _check_text_argument(name: str, value: object, source: str) -> None:
    if value is not None and not isinstance(value, str):
        raise ConfigError(
            [
                ConfigProblem(
                    key="",
                    message=f"{name} expected a string, got {describe(value)}",
                    hint=f"pass {name} as a str",
                )
            ],
            path=source,
        )


def _build(
    raw: Mapping[str, Any],
    *,
    source: str,
    task_url: str | None,
    overrides: Mapping[str, Any] | None,
    idempotency: str | None,
    allow_experimental: bool | None,
    backend_url: str | None,
    allow_new_keys: bool,
) -> RLBuildResult:
    for name, value in (("task_url", task_url), ("backend_url", backend_url), ("idempotency", idempotency)):
        _check_text_argument(name, value, source)
    sdk, _ = split_overrides(overrides, source=source)
    config = apply_overrides(raw, overrides, source=source, allow_new_keys=allow_new_keys)
    warn_unknown_keys(config, source=source)
    checked = check_rl_config(config, allow_experimental=allow_experimental, model_override=sdk.model)
    problems = checked.problems
    services = checked.config.get("services")
    configured = services.get("task_url") if isinstance(services, Mapping) else None
    choice = resolve_task_url(
        override=sdk.task_url,
        argument=task_url,
        config_value=configured if isinstance(configured, str) else None,
    )
    if choice is None:
        problems.add(
            ("services", "task_url"),
            "is empty and no other task app URL was given; expected the URL of a running task app",
            "pass task_url= (e.g. the in-process task app's .url), set TASK_APP_URL, "
            'pass overrides={"task_url": …} or set [services].task_url',
        )
    if problems or choice is None or checked.model is None or checked.model_field is None:
        raise problems.as_error(source)

    data: dict[str, Any] = checked.config
    data.pop("smoke", None)  # CLI-only smoke-test knobs never reach the trainer
    reference = data.get("reference")
    if isinstance(reference, dict):
        reference.setdefault("placement", "none")
    else:
        data["reference"] = {"placement": "none"}
    data["services"]["task_url"] = choice.url  # one URL everywhere: no split between config and endpoint

    body: dict[str, Any] = {"endpoint_base_url": choice.url.rstrip("/"), "config": data}
    body[checked.model_field] = checked.model.payload_id
    payload: dict[str, Any] = {
        "job_type": "rl",
        # A separate copy: whoever stores the payload (the fake backend) may edit one, not both.
        "compute": plain_copy(data.get("compute", {})),
        "data": body,
        "tags": dict(PAYLOAD_TAGS),
    }
    backend = backend_url or sdk.backend
    if backend:
        payload["metadata"] = {"backend_base_url": normalize_backend_url(backend)}
    return RLBuildResult(payload=payload, task_url=choice.url, idempotency=idempotency)
