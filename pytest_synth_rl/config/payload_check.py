"""Checking a received RL job payload, for the fake backend's ``POST /rl/jobs`` (422 on problems).

It gets JSON from any client, so it never raises: each wrong shape is a problem keyed by its JSON
path. Beyond the config rules it checks what the builder guarantees (job type, endpoint, model,
``compute``); experimental models are allowed, as that gate is the SDK's client-side opt-in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_synth_rl.config.coerce import describe
from pytest_synth_rl.config.models import ModelRejected, resolve_rl_model
from pytest_synth_rl.config.problems import ProblemList
from pytest_synth_rl.config.rules import truthy
from pytest_synth_rl.config.urls import http_url_problem
from pytest_synth_rl.config.validate import config_problems
from pytest_synth_rl.errors import ConfigProblem

__all__ = ["validate_rl_payload"]

_HINT = "send the body build_rl_payload() produces from a valid config"
_URL_SOURCES = "task_url=, TASK_APP_URL or [services].task_url"


def validate_rl_payload(
    payload: Mapping[str, Any], *, allow_experimental: bool | None = True
) -> list[ConfigProblem]:
    """Every problem with an RL job payload; an empty list means "would be accepted"."""
    problems = ProblemList()
    try:
        _check_payload(payload, allow_experimental, problems.add, problems)
    except RecursionError:
        problems.add((), "is nested too deeply to validate", "send a flatter JSON body")
    return problems.as_list()


def _check_payload(payload: object, allow_experimental: bool | None, add: Any, problems: ProblemList) -> None:
    if not isinstance(payload, Mapping):
        add(
            (),
            f"expected a JSON object, got {describe(payload)}",
            "send the body built by build_rl_payload()",
        )
        return
    job_type = payload.get("job_type")
    if not (isinstance(job_type, str) and job_type == "rl"):
        add(("job_type",), f'expected "rl", got {describe(job_type)}', 'set "job_type": "rl"')
    data = payload.get("data")
    if not isinstance(data, Mapping):
        add(("data",), f"expected an object with endpoint_base_url and config, got {describe(data)}", _HINT)
        data = {}
    endpoint = data.get("endpoint_base_url")
    if not isinstance(endpoint, str) or not endpoint.strip():
        hint = f"build the payload with a task URL ({_URL_SOURCES})"
        add(
            ("data", "endpoint_base_url"), f"expected the task app's base URL, got {describe(endpoint)}", hint
        )
        endpoint = None
    elif (problem := http_url_problem(endpoint, "http://127.0.0.1:8114")) is not None:
        message = problem.replace(
            "expected an http(s) URL", "expected an http(s) URL the trainer can reach", 1
        )
        hint = (
            "give the task app's full URL (task_url=, "
            'overrides["task_url"], TASK_APP_URL or [services].task_url)'
        )
        if endpoint == "placeholder":
            hint = "the config had no task URL, so the builder sent a placeholder; pass task_url="
        add(("data", "endpoint_base_url"), message, hint)
    config = data.get("config")
    if not isinstance(config, Mapping):
        add(("data", "config"), f"expected the RL config as an object, got {describe(config)}", _HINT)
        config = {}
    else:
        checked = config_problems(config, allow_experimental=allow_experimental, select_model=False)
        problems.extend(checked, prefix=("data", "config"))
        services = config.get("services")
        task_url = services.get("task_url") if isinstance(services, Mapping) else None
        if endpoint is not None and isinstance(task_url, str) and task_url.rstrip("/") != endpoint:
            add(
                ("data", "config", "services", "task_url"),
                f"is {task_url!r} but data.endpoint_base_url is {endpoint!r}; expected the same URL",
                "send the task URL in both places (the builder does this)",
            )
    _check_model(data, config, allow_experimental, add)
    _check_compute(payload.get("compute"), config.get("compute"), add)
    metadata = payload.get("metadata")
    if "metadata" in payload and not isinstance(metadata, Mapping):
        add(("metadata",), f"expected an object, got {describe(metadata)}", _HINT)
    elif isinstance(metadata, Mapping) and not isinstance(metadata.get("backend_base_url", ""), str):
        add(
            ("metadata", "backend_base_url"),
            f"expected a string, got {describe(metadata['backend_base_url'])}",
            _HINT,
        )


def _check_model(
    data: Mapping[str, Any], config: Mapping[str, Any], allow_experimental: bool | None, add: Any
) -> None:
    has_base, has_model = "base_model" in data, "model" in data
    if has_base == has_model:
        add(
            ("data", "base_model"),
            "both data.base_model and data.model are set; expected exactly one"
            if has_base
            else "missing; expected data.base_model (a base model id) or data.model (a fine-tuned id)",
            "build the payload from a config with exactly one of [model].base / [model].source",
        )
        return
    key = "base_model" if has_base else "model"
    value = data[key]
    if not isinstance(value, str):
        add(("data", key), f"expected a model id string, got {describe(value)}", _HINT)
        return
    try:
        resolved = resolve_rl_model(value, fine_tuned=has_model, allow_experimental=allow_experimental)
    except ModelRejected as exc:
        add(("data", key), exc.message, exc.hint)
        return
    model = config.get("model")
    base = model.get("base") if isinstance(model, Mapping) else None
    if not has_base:
        return
    if not (isinstance(base, str) and truthy(base.strip())):
        add(
            ("data", "base_model"),
            "is set but data.config.model.base is missing; expected the base model named in the config",
            "send data.model for a fine-tuned source, or include [model].base in data.config",
        )
        return
    try:
        configured = resolve_rl_model(base, fine_tuned=False, allow_experimental=True).base
    except ModelRejected:
        return  # reported under data.config.model.base
    if configured != resolved.base:
        message = f"is {value!r} but data.config.model.base is {base!r}; expected the same model"
        add(("data", "base_model"), message, _HINT)


def _check_compute(compute: object, config_compute: object, add: Any) -> None:
    if not isinstance(compute, Mapping):
        add(("compute",), f"expected an object with gpu_type and gpu_count, got {describe(compute)}", _HINT)
        return
    gpu_type, gpu_count = compute.get("gpu_type"), compute.get("gpu_count")
    if not isinstance(gpu_type, str) or not gpu_type:
        add(("compute", "gpu_type"), f'expected a GPU type such as "H100", got {describe(gpu_type)}', _HINT)
    if isinstance(gpu_count, bool) or not isinstance(gpu_count, int) or gpu_count == 0:
        add(("compute", "gpu_count"), f"expected a non-zero integer, got {describe(gpu_count)}", _HINT)
    if isinstance(config_compute, Mapping) and dict(compute) != dict(config_compute):
        add(
            ("compute",),
            "differs from data.config.compute; expected a copy of the validated [compute] table",
            "send the [compute] table in both places (the builder does this)",
        )
