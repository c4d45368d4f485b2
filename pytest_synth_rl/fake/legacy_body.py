"""The legacy create bodies of contract §1.2, turned into the payload shape the fake keeps.

``RLJob`` and the CLI send the §3 payload. Older clients of the same API do not: the SDK's
``JobsClient.rl.create`` sends ``model``, ``endpoint_base_url`` and ``trainer_id`` at the top
level, and the old ``RlClient.create_job`` sends ``{"job_type": "rl", "data": {model,
endpoint_base_url, trainer}}`` without a ``config``. A fake that refuses them breaks code that the
real backend serves, so they get a job too, checked for what they do carry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_synth_rl.config.http_urls import http_url_problem
from pytest_synth_rl.errors import ConfigProblem

__all__ = ["legacy_payload"]


def legacy_payload(payload: Mapping[str, Any]) -> tuple[dict[str, Any], list[ConfigProblem]] | None:
    """``(payload as the fake keeps it, problems)`` for a legacy create body; None for any other
    body (which the §3 checks then judge)."""
    data = payload.get("data")
    if "data" not in payload and "endpoint_base_url" in payload:
        fields, where = payload, ""
    elif isinstance(data, Mapping) and "config" not in data and {"model", "trainer"} & data.keys():
        fields, where = data, "data."
    else:
        return None
    problems = _problems(fields, where)
    endpoint = fields.get("endpoint_base_url")
    kept: dict[str, Any] = {
        "model": fields.get("model"),
        "endpoint_base_url": endpoint.rstrip("/") if isinstance(endpoint, str) else endpoint,
        "config": dict(fields.get("config") or {}) if isinstance(fields.get("config"), Mapping) else {},
    }
    for name in ("trainer", "trainer_id", "job_config_id"):
        if fields.get(name) is not None:
            kept[name] = fields[name]
    normalized: dict[str, Any] = {"job_type": "rl", "data": kept, "legacy_body": True}
    if isinstance(fields.get("metadata"), Mapping):
        normalized["metadata"] = dict(fields["metadata"])
    return normalized, problems


def _problems(fields: Mapping[str, Any], where: str) -> list[ConfigProblem]:
    problems = []
    model = fields.get("model")
    if not isinstance(model, str) or not model.strip():
        problems.append(ConfigProblem(f"{where}model", f"expected the model id, got {model!r:.60}", None))
    endpoint = fields.get("endpoint_base_url")
    problem = (
        http_url_problem(endpoint, "http://127.0.0.1:8114")
        if isinstance(endpoint, str)
        else f"expected the task app's URL, got {endpoint!r:.60}"
    )
    if problem is not None:
        problems.append(ConfigProblem(f"{where}endpoint_base_url", problem, None))
    trainer = fields.get("trainer")
    if trainer is not None and not isinstance(trainer, Mapping):
        problems.append(ConfigProblem(f"{where}trainer", f"expected an object, got {trainer!r:.60}", None))
    elif isinstance(trainer, Mapping):
        for name, least in (("batch_size", 1), ("group_size", 2)):
            value = trainer.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
                message = f"expected an integer >= {least}, got {value!r:.60}"
                problems.append(ConfigProblem(f"{where}trainer.{name}", message, None))
    config = fields.get("config")
    if config is not None and not isinstance(config, Mapping):
        problems.append(ConfigProblem(f"{where}config", f"expected an object, got {config!r:.60}", None))
    return problems
