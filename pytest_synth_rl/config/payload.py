"""Building the ``POST /api/rl/jobs`` body from an RL config (contract §3).

The body is what the SDK's builder sends for every config it accepts (``json.dumps(sort_keys=True)``
identical); failures list every problem. A build from a file is remembered by the file's bytes
(read every time), its path, the arguments and the environment it reads; warnings are given again.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from pytest_synth_rl.config.coerce import describe
from pytest_synth_rl.config.known_keys import config_warnings, warn_about_config
from pytest_synth_rl.config.loader import config_source, parse_file_bytes, read_config_bytes
from pytest_synth_rl.config.overrides import apply_overrides, split_overrides
from pytest_synth_rl.config.problems import config_error
from pytest_synth_rl.config.tree import MemoInfo, PassedChecks, copy_tree, exact_key, plain_copy
from pytest_synth_rl.config.urls import normalize_backend_url, resolve_task_url
from pytest_synth_rl.config.validate import check_rl_config
from pytest_synth_rl.errors import keywords_checked

__all__ = [
    "RLBuildResult",
    "build_memo_info",
    "build_rl_payload",
    "build_rl_payload_from_mapping",
    "clear_build_memo",
]

#: ``tags`` of every RL job the SDK submits (a TOML ``[tags]`` goes to ``data.config.tags``).
PAYLOAD_TAGS = {"source": "train-cli"}
#: Files larger than this are built afresh every time (a real RL config is a few KiB).
_MEMO_BYTES = 64 * 1024
#: What the build reads from the environment: the task URL and the experimental-model gates.
_ENVIRONMENT = ("TASK_APP_URL", "SDK_EXPERIMENTAL", "SDK_EXPERIMENTAL_MODELS")
#: (task_url, overrides, idempotency, allow_experimental, backend_url, allow_new_keys)
_Options = tuple[str | None, Mapping[str, Any] | None, str | None, bool | None, str | None, bool]


@dataclass(frozen=True)
class RLBuildResult:
    """The job body plus what the caller needs next: the task URL to health-check and the
    idempotency key to send as the ``Idempotency-Key`` header (never part of the body)."""

    payload: dict[str, Any]
    task_url: str
    idempotency: str | None


#: Remembered builds, each with the config to warn about again (None when it warned of nothing).
_BUILT: PassedChecks[tuple[RLBuildResult, dict[str, Any] | None]] = PassedChecks(maxsize=32)


@keywords_checked
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

    Task URL: ``overrides["task_url"]`` > *task_url* (or ``TASK_APP_URL`` when it is empty) >
    ``[services].task_url``. *backend_url* (or ``overrides["backend"]``) adds
    ``metadata.backend_base_url``. Raises :class:`~pytest_synth_rl.errors.ConfigError` listing
    every problem; unknown TOML keys are forwarded with a :class:`SynthConfigWarning`.
    """
    path = config_source(config_path)
    source = str(path)
    data = read_config_bytes(path)
    options: _Options = (task_url, overrides, idempotency, allow_experimental, backend_url, allow_new_keys)
    key = _memo_key(data, source, options)
    known = _BUILT.get(key) if key is not None else None
    if known is not None:
        if known[1] is not None:
            warn_about_config(known[1], source=source)
        return replace(known[0], payload=copy_tree(known[0].payload))
    result, config = _build(parse_file_bytes(data, source=source), source, options)
    if key is not None and exact_key(result.payload) is not None:  # a plain tree, not too big
        warned = config if config_warnings(config) else None  # the build's own copy, kept unchanged
        _BUILT.put(key, (replace(result, payload=copy_tree(result.payload)), warned))
    return result


def _memo_key(data: bytes, source: str, options: _Options) -> Hashable | None:
    """Everything a build from *data* depends on, or None: a large file, or arguments of types
    that could mean different things while comparing equal."""
    task_url, overrides, idempotency, allow_experimental, backend_url, allow_new_keys = options
    texts = (task_url, backend_url, idempotency)
    if len(data) > _MEMO_BYTES or any(text is not None and type(text) is not str for text in texts):
        return None
    if type(allow_new_keys) is not bool or not (
        allow_experimental is None or type(allow_experimental) is bool
    ):
        return None
    edits = exact_key(overrides)
    if edits is None:
        return None
    environment = tuple(os.environ.get(name) for name in _ENVIRONMENT)
    return (data, source, texts, edits, (allow_experimental, allow_new_keys), environment)


def build_memo_info() -> MemoInfo:
    """How often :func:`build_rl_payload` handed out a remembered build."""
    return _BUILT.info()


def clear_build_memo() -> None:
    """Forget every remembered build (and the counts)."""
    _BUILT.clear()


@keywords_checked
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
    """Like :func:`build_rl_payload` for a config already parsed (not modified); *source* names it."""
    if not isinstance(config, Mapping):
        message = f"expected a mapping of TOML sections, got {describe(config)}"
        raise config_error(message, "use build_rl_payload() for a TOML file path", path=source)
    options = (task_url, overrides, idempotency, allow_experimental, backend_url, allow_new_keys)
    return _build(config, source, options)[0]


def _build(raw: Mapping[str, Any], source: str, options: _Options) -> tuple[RLBuildResult, dict[str, Any]]:
    """The build, and the config it was made from (the file's, with the overrides applied)."""
    task_url, overrides, idempotency, allow_experimental, backend_url, allow_new_keys = options
    for name, value in (("task_url", task_url), ("backend_url", backend_url), ("idempotency", idempotency)):
        if value is not None and not isinstance(value, str):
            message = f"{name} expected a string, got {describe(value)}"
            raise config_error(message, f"pass {name} as a str", path=source)
    sdk, _ = split_overrides(overrides, source=source)
    config = apply_overrides(raw, overrides, source=source, allow_new_keys=allow_new_keys)
    warn_about_config(config, source=source)
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
    # The top-level compute is a copy: whoever stores the payload (the fake) may edit one, not both.
    payload: dict[str, Any] = {
        "job_type": "rl",
        "compute": plain_copy(data.get("compute", {})),
        "data": body,
        "tags": dict(PAYLOAD_TAGS),
    }
    backend = backend_url or sdk.backend
    if backend:
        payload["metadata"] = {"backend_base_url": normalize_backend_url(backend)}
    return RLBuildResult(payload, choice.url, idempotency), config
