"""The ``POST /api/rl/jobs`` body the SDK builder makes from an RL config (contract §3), and the fake
backend's check of one received (never raises, keys problems by JSON path, allows experimental models)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from pytest_synth_rl.config.loader import (
    apply_overrides,
    config_source,
    parse_file_bytes,
    read_config_bytes,
    split_overrides,
)
from pytest_synth_rl.config.problems import ProblemList, config_error, describe
from pytest_synth_rl.config.rules import config_warnings, warn_about_config
from pytest_synth_rl.config.tree import PassedChecks, copy_tree, exact_key, plain_copy
from pytest_synth_rl.config.urls import http_url_problem, normalize_backend_url, resolve_task_url
from pytest_synth_rl.config.validate import ModelRejected, check_rl_config, resolve_rl_model
from pytest_synth_rl.errors import ConfigProblem, keywords_checked

PAYLOAD_TAGS = {"source": "train-cli"}
_MEMO_BYTES = 64 * 1024
_ENVIRONMENT = ("TASK_APP_URL", "SDK_EXPERIMENTAL", "SDK_EXPERIMENTAL_MODELS")


_Options = tuple[str | None, Mapping[str, Any] | None, str | None, bool | None, str | None, bool]


@dataclass(frozen=True)
class RLBuildResult:
    """The job body, the task URL to health-check and the ``Idempotency-Key`` header (not in the body)."""

    payload: dict[str, Any]
    task_url: str
    idempotency: str | None


BUILDS: PassedChecks[tuple[RLBuildResult, dict[str, Any] | None]] = PassedChecks(maxsize=32)


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
    """The RL job payload for the TOML file at *config_path*, or a ConfigError listing every problem;
    *backend_url* (or ``overrides["backend"]``) adds ``metadata.backend_base_url``."""
    path = config_source(config_path)
    source = str(path)
    data = read_config_bytes(path)
    options: _Options = (task_url, overrides, idempotency, allow_experimental, backend_url, allow_new_keys)
    arguments = exact_key(list(options)) if len(data) <= _MEMO_BYTES else None
    environment = tuple(os.environ.get(name) for name in _ENVIRONMENT)
    key = None if arguments is None else (data, source, arguments, environment)
    known = BUILDS.get(key) if key is not None else None
    if known is not None:
        if known[1] is not None:
            warn_about_config(known[1], source=source)
        return replace(known[0], payload=copy_tree(known[0].payload))
    result, config = _build(parse_file_bytes(data, source=source), source, options)
    if key is not None and exact_key(result.payload) is not None:  # a plain tree, not too big
        warned = config if config_warnings(config) else None  # the build's own copy, kept unchanged
        BUILDS.put(key, (replace(result, payload=copy_tree(result.payload)), warned))
    return result


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
    options: _Options = (task_url, overrides, idempotency, allow_experimental, backend_url, allow_new_keys)
    return _build(config, source, options)[0]


def _build(raw: Mapping[str, Any], source: str, options: _Options) -> tuple[RLBuildResult, dict[str, Any]]:
    task_url, overrides, idempotency, allow_experimental, backend_url, allow_new_keys = options
    for name, value in (("task_url", task_url), ("backend_url", backend_url), ("idempotency", idempotency)):
        if value is not None and not isinstance(value, str):
            message = f"{name} expected a string, got {describe(value)}"
            raise config_error(message, f"pass {name} as a str", path=source)
    sdk, _ = split_overrides(overrides, source=source)
    config = apply_overrides(raw, overrides, source=source, allow_new_keys=allow_new_keys)
    warn_about_config(config, source=source)
    checked = check_rl_config(config, allow_experimental=allow_experimental, model_override=sdk.get("model"))
    problems = checked.problems
    configured = _at(checked.config, ("services", "task_url"))
    choice = resolve_task_url(
        override=sdk.get("task_url"),
        argument=task_url,
        config_value=configured if isinstance(configured, str) else None,
    )
    if choice is None:
        message = "is empty and no other task app URL was given; expected the URL of a running task app"
        hint = "pass task_url= (e.g. the in-process task app's .url), set TASK_APP_URL, "
        hint += 'pass overrides={"task_url": …} or set [services].task_url'
        problems.add(("services", "task_url"), message, hint)
    if problems or choice is None or checked.model is None or checked.model_field is None:
        raise problems.as_error(source)
    data: dict[str, Any] = checked.config
    data.pop("smoke", None)  # CLI-only smoke-test knobs never reach the trainer
    data.setdefault("reference", {}).setdefault("placement", "none")  # a table once validated
    data["services"]["task_url"] = choice.url  # one URL everywhere: no split between config and endpoint
    body: dict[str, Any] = {"endpoint_base_url": choice.url.rstrip("/"), "config": data}
    body[checked.model_field] = checked.model.payload_id
    payload: dict[str, Any] = {
        "job_type": "rl",
        "compute": plain_copy(data.get("compute", {})),
        "data": body,
        "tags": dict(PAYLOAD_TAGS),
    }
    backend = backend_url or sdk.get("backend")
    if backend:
        payload["metadata"] = {"backend_base_url": normalize_backend_url(backend)}
    return RLBuildResult(payload, choice.url, idempotency), config


_HINT = "send the body build_rl_payload() produces from a valid config"
_ABSENT: Any = object()


def _at(tree: object, path: tuple[str, ...]) -> Any:
    for part in path:
        tree = tree.get(part, _ABSENT) if isinstance(tree, Mapping) else _ABSENT
    return tree


_TESTS: dict[str, Callable[[Any], bool]] = {
    "table": lambda value: isinstance(value, Mapping),
    "url": lambda value: isinstance(value, str) and bool(value.strip()),
    "text": lambda value: isinstance(value, str) and bool(value),
    "count": lambda value: type(value) is int and value != 0,
    "rl": lambda value: isinstance(value, str) and value == "rl",
    "table?": lambda value: value is _ABSENT or isinstance(value, Mapping),
    "str?": lambda value: value is _ABSENT or isinstance(value, str),
}
_URL_HINT = "build the payload with a task URL (task_url=, TASK_APP_URL or [services].task_url)"
_SHAPE = [
    ((), "table", "a JSON object", "send the body built by build_rl_payload()"),
    (("job_type",), "rl", '"rl"', 'set "job_type": "rl"'),
    (("data",), "table", "an object with endpoint_base_url and config", _HINT),
    (("data", "endpoint_base_url"), "url", "the task app's base URL", _URL_HINT),
    (("data", "config"), "table", "the RL config as an object", _HINT),
    (("compute",), "table", "an object with gpu_type and gpu_count", _HINT),
    (("compute", "gpu_type"), "text", 'a GPU type such as "H100"', _HINT),
    (("compute", "gpu_count"), "count", "a non-zero integer", _HINT),
    (("metadata",), "table?", "an object", _HINT),
    (("metadata", "backend_base_url"), "str?", "a string", _HINT),
]


def validate_rl_payload(
    payload: Mapping[str, Any], *, allow_experimental: bool | None = True
) -> list[ConfigProblem]:
    """Every problem with an RL job payload; an empty list means "would be accepted"."""
    problems = ProblemList()
    try:
        _check_payload(payload, allow_experimental, problems)
    except RecursionError:
        problems.add((), "is nested too deeply to validate", "send a flatter JSON body")
    return problems.as_list()


def _check_payload(payload: object, allow_experimental: bool | None, problems: ProblemList) -> None:
    for path, test, expected, hint in _SHAPE:
        if not _TESTS[test](value := _at(payload, path)):
            got = describe(None if value is _ABSENT else value)
            problems.add(path, f"expected {expected}, got {got}", hint)
    data, config = _at(payload, ("data",)), _at(payload, ("data", "config"))
    endpoint = _at(payload, ("data", "endpoint_base_url"))
    if not _TESTS["url"](endpoint):
        endpoint = None
    elif (problem := http_url_problem(endpoint, "http://127.0.0.1:8114")) is not None:
        message = problem.replace("an http(s) URL", "an http(s) URL the trainer can reach", 1)
        hint = "give the task app's full URL (task_url=, "
        hint += 'overrides["task_url"], TASK_APP_URL or [services].task_url)'
        if endpoint == "placeholder":
            hint = "the config had no task URL, so the builder sent a placeholder; pass task_url="
        problems.add(("data", "endpoint_base_url"), message, hint)
    if isinstance(config, Mapping):
        checked = check_rl_config(
            config, allow_experimental=allow_experimental, select_model=False, fresh=False
        )
        problems.extend(checked.problems, prefix=("data", "config"))
        task_url = _at(config, ("services", "task_url"))
        if endpoint is not None and isinstance(task_url, str) and task_url.rstrip("/") != endpoint:
            message = f"is {task_url!r} but data.endpoint_base_url is {endpoint!r}; expected the same URL"
            hint = "send the task URL in both places (the builder does this)"
            problems.add(("data", "config", "services", "task_url"), message, hint)
    if isinstance(data, Mapping):
        _check_model(data, config, allow_experimental, problems)
    compute, config_compute = _at(payload, ("compute",)), _at(config, ("compute",))
    if isinstance(compute, Mapping) and isinstance(config_compute, Mapping) and compute != config_compute:
        message = "differs from data.config.compute; expected a copy of the validated [compute] table"
        problems.add(("compute",), message, "send the [compute] table in both places (the builder does this)")


def _check_model(
    data: Mapping[str, Any], config: object, allow_experimental: bool | None, problems: ProblemList
) -> None:
    has_base = "base_model" in data
    key = "base_model" if has_base else "model"
    value, base = data.get(key), _at(config, ("model", "base"))
    if has_base == ("model" in data):
        message = "both data.base_model and data.model are set; expected exactly one"
        if not has_base:
            message = "missing; expected data.base_model (a base model id) or data.model (a fine-tuned id)"
        hint = "build the payload from a config with exactly one of [model].base / [model].source"
        problems.add(("data", "base_model"), message, hint)
        return
    if not isinstance(value, str):
        problems.add(("data", key), f"expected a model id string, got {describe(value)}", _HINT)
        return
    try:
        resolved = resolve_rl_model(value, fine_tuned=not has_base, allow_experimental=allow_experimental)
    except ModelRejected as exc:
        problems.add(("data", key), exc.message, exc.hint)
        return
    if has_base and not (isinstance(base, str) and base.strip()):
        message = "is set but data.config.model.base is missing; expected the base model named in the config"
        hint = "send data.model for a fine-tuned source, or include [model].base in data.config"
        problems.add(("data", "base_model"), message, hint)
        return
    try:  # a base the config check refused is reported there
        same = not has_base or resolve_rl_model(base, fine_tuned=False, allow_experimental=True) == resolved
    except ModelRejected:
        return
    if not same:
        message = f"is {value!r} but data.config.model.base is {base!r}; expected the same model"
        problems.add(("data", "base_model"), message, _HINT)
