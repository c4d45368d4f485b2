"""Validating an RL config as the SDK does, every step run and every problem kept; passes are remembered.
Which models RL may train (§7.3): ``SDK_EXPERIMENTAL`` and ``SDK_EXPERIMENTAL_MODELS`` are read each time."""

from __future__ import annotations

import datetime as dt
import math
import os
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, NamedTuple

from pytest_synth_rl.config.problems import KeyPath, ProblemList, describe, key_text
from pytest_synth_rl.config.rules import (
    check_algorithm_triple,
    check_reward_sections,
    inject_defaults,
    point_at_near_misses,
    precheck,
)
from pytest_synth_rl.config.schema import INT64_LIMIT, RL_CONFIG, check_section
from pytest_synth_rl.config.tree import PassedChecks, TreeShapeError, exact_key, plain_copy
from pytest_synth_rl.errors import ConfigProblem


def _qwen(names: str) -> frozenset[str]:
    """``Qwen/Qwen3-<name>`` for each name; a trailing ``+`` adds its ``-FP8`` variant too."""
    out: set[str] = set()
    for name in names.split():
        model = f"Qwen/Qwen3-{name.rstrip('+')}"
        out |= {model, f"{model}-FP8"} if name.endswith("+") else {model}
    return frozenset(out)


SUPPORTED_RL_MODELS = _qwen(
    "0.6B 1.7B 4B 8B 14B 30B-A3B 4B-2507 4B-Instruct-2507+ 30B-A3B-Instruct-2507+ 4B-Thinking-2507+ "
    "30B-A3B-Thinking-2507+ Coder-30B-A3B-Instruct+ VL-2B-Instruct VL-2B-Thinking VL-4B-Instruct "
    "VL-4B-Thinking VL-8B-Instruct VL-8B-Thinking"
)
EXPERIMENTAL_MODELS = _qwen(
    "235B-A22B-Instruct-2507+ 235B-A22B-Thinking-2507+ Coder-480B-A35B-Instruct+ 30B-A3B-Thinking-2507+ "
    "4B-Thinking-2507+"
)
KNOWN_BASE_MODELS = (
    SUPPORTED_RL_MODELS
    | EXPERIMENTAL_MODELS
    | _qwen("32B VL-30B-A3B-Instruct VL-30B-A3B-Thinking VL-32B-Instruct VL-32B-Thinking")
    | _qwen("VL-235B-A22B-Instruct VL-235B-A22B-Thinking")
)
FINE_TUNED_PREFIXES: tuple[str, ...] = ("ft:", "fft:", "qft:", "rl:")

_BY_LOWER: dict[str, str] = {name.lower(): name for name in KNOWN_BASE_MODELS}
_EXAMPLES = "Qwen/Qwen3-0.6B, Qwen/Qwen3-1.7B, Qwen/Qwen3-4B, Qwen/Qwen3-8B"
_MODEL_HINT = 'keep `base = "Qwen/Qwen3-0.6B"` for a base model or `source = "ft:…"` for a fine-tuned one'


class ModelRejected(ValueError):
    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message, self.hint = message, hint


class ResolvedModel(NamedTuple):
    payload_id: str  # what the payload sends
    base: str  # the canonical base model it trains


def experimental_models() -> frozenset[str]:
    """The experimental set in force: defaults plus ``SDK_EXPERIMENTAL_MODELS``."""
    extra = os.environ.get("SDK_EXPERIMENTAL_MODELS", "").split(",")
    return EXPERIMENTAL_MODELS | frozenset(part.strip() for part in extra if part.strip())


def experimental_allowed(allow_experimental: bool | None) -> bool:
    """The explicit argument wins; ``None`` defers to ``SDK_EXPERIMENTAL=1`` (exactly ``1``)."""
    if allow_experimental is not None:
        return bool(allow_experimental)
    return os.environ.get("SDK_EXPERIMENTAL", "0") == "1"


def _base_of(model_id: str, *, fine_tuned: bool) -> str | None:
    names = [model_id, *(part.strip() for part in model_id.split(":")[1:] if fine_tuned)]
    return next((_BY_LOWER[name.lower()] for name in names if name.lower() in _BY_LOWER), None)


def resolve_rl_model(model_id: str, *, fine_tuned: bool, allow_experimental: bool | None) -> ResolvedModel:
    """What the payload sends for *model_id* (a ``fine_tuned`` one names its base), or ModelRejected."""
    cleaned = model_id.strip()
    if not cleaned:
        raise ModelRejected("is empty; expected a model id", f"use a base model such as {_EXAMPLES}")
    if _base_of(cleaned, fine_tuned=True) is None:
        hint = f"use one of the RL base models ({_EXAMPLES}, …)"
        if fine_tuned:
            hint += " or a fine-tuned id that names one, like ft:Qwen/Qwen3-0.6B:<job-id>"
        raise ModelRejected(f"{cleaned!r} is not a supported model", hint)
    base = _base_of(cleaned, fine_tuned=fine_tuned)
    if base is None:
        message = f"{cleaned!r} is a fine-tuned model id, but this key expects a plain base model id"
        hint = "move it to [model].source (and remove [model].base), or use a base id such as Qwen/Qwen3-0.6B"
        raise ModelRejected(message, hint)
    if base in experimental_models() and not experimental_allowed(allow_experimental):
        hint = "pass allow_experimental=True or set SDK_EXPERIMENTAL=1 to use it, or pick a core model"
        raise ModelRejected(f"{base!r} is experimental and disabled", hint)
    if base not in SUPPORTED_RL_MODELS:
        message = f"{base!r} does not support RL (online policy_gradient / gspo) training"
        raise ModelRejected(message, f"pick an RL-capable base model such as {_EXAMPLES}")
    return ResolvedModel(base if cleaned.lower() in _BY_LOWER else cleaned, base)


ModelField = Literal["base_model", "model"]


@dataclass(frozen=True)
class ConfigCheck:
    config: dict[str, Any]
    problems: ProblemList
    model: ResolvedModel | None = None
    model_field: ModelField | None = None


CHECKS: PassedChecks[ConfigCheck] = PassedChecks(maxsize=64)


def check_rl_config(
    config: object,
    *,
    allow_experimental: bool | None = None,
    model_override: str | None = None,
    select_model: bool = True,
    fresh: bool = True,
) -> ConfigCheck:
    """Every rule on *config*, never raising; ``fresh=False`` shares a remembered config, to be read only."""
    key: Hashable | None = None
    checked: ConfigCheck | None = None
    if (tree := exact_key(config)) is not None:  # the model rules read the environment: part of the key
        environment = (experimental_allowed(allow_experimental), experimental_models())
        key = (tree, allow_experimental, model_override, select_model, environment)
        checked = CHECKS.get(key)
    if checked is None:
        checked = _check(config, allow_experimental, model_override, select_model)
        if key is not None and not checked.problems:
            CHECKS.put(key, checked)
    if checked.problems:
        return checked
    return replace(
        checked, config=plain_copy(checked.config) if fresh else checked.config, problems=ProblemList()
    )


def _check(
    config: object, allow_experimental: bool | None, model_override: str | None, select_model: bool
) -> ConfigCheck:
    problems = ProblemList()
    if not isinstance(config, Mapping):
        message = f"expected a table of sections, got {describe(config)}"
        problems.add((), message, "the RL config must be a TOML table")
        return ConfigCheck({}, problems)
    try:
        work: dict[str, Any] = plain_copy(config)
        precheck(work, problems)
        inject_defaults(work, problems)
        check_reward_sections(work, problems)
        normalized = check_section(RL_CONFIG, work, (), problems)[0]
        if isinstance(algorithm := normalized.get("algorithm"), Mapping):
            check_algorithm_triple(algorithm, ("algorithm",), problems)
        _check_json_values(normalized, (), problems)
        point_at_near_misses(config, problems)
    except (TreeShapeError, RecursionError) as exc:  # no rule could walk it, or the stack is nearly out
        if isinstance(exc, TreeShapeError) and not exc.deep:
            problems.add(exc.path, exc.message, exc.hint)
        else:
            problems.add((), "is nested too deeply to validate", "flatten the config")
        return ConfigCheck({}, problems)
    chosen = _choose_model(normalized, model_override, allow_experimental, problems) if select_model else ()
    return ConfigCheck(normalized, problems, *chosen)


def _choose_model(
    config: Mapping[str, Any], override: str | None, allow: bool | None, problems: ProblemList
) -> tuple[ResolvedModel | None, ModelField | None]:
    """The builder's rule (§7.2): ``overrides["model"]``, else exactly one of [model].source / base."""
    field: ModelField = "model"
    if override := (override or "").strip():
        where, model_id = ("overrides", "model"), override
    elif problems.has_under(("model",)):
        return None, None  # already reported precisely
    elif not isinstance(table := config.get("model"), Mapping):
        message = "missing; the payload builder needs a [model] table with base or source "
        message += "([policy].model_name is not used to pick the trained model)"
        hint = 'add [model] with base = "Qwen/Qwen3-0.6B", trainer_mode = "lora", label = "…", '
        problems.add(("model",), message, hint + 'or pass overrides={"model": "<model id>"}')
        return None, None
    else:
        source, base = str(table.get("source") or "").strip(), str(table.get("base") or "").strip()
        if not source and not base:  # the schema let exactly one through, but it is only spaces
            message = "is blank; expected exactly one of base (a base model id) or source (a fine-tuned id)"
            problems.add(("model", "base"), message, _MODEL_HINT)
            return None, None
        where, model_id = ("model", "source" if source else "base"), source or base
        field = "model" if source else "base_model"
    try:
        return resolve_rl_model(model_id, fine_tuned=field == "model", allow_experimental=allow), field
    except ModelRejected as exc:
        problems.add(where, exc.message, exc.hint)
        return None, None


def _check_json_values(value: object, path: KeyPath, problems: ProblemList) -> None:
    if isinstance(value, Mapping):
        for key, item in value.items():
            _check_json_values(item, (*path, key_text(key)), problems)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_json_values(item, (*path, index), problems)
    elif isinstance(value, (dt.date, dt.time)):
        message = f"is a TOML date/time ({value.isoformat()}); expected a value JSON can carry"
        problems.add(path, message, f'quote it as a string: "{value.isoformat()}"')
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) >= INT64_LIMIT:
        message = f"is {describe(value)}; expected an integer smaller than 2**63 in magnitude "
        hint = "use a smaller number, or quote it as a string if it is an identifier rather than a count"
        problems.add(path, message + "(a TOML integer, and what a 64-bit backend field holds)", hint)
    elif isinstance(value, float) and not math.isfinite(value):
        message = f"is {value!r}; expected a finite number (JSON cannot carry inf or nan)"
        problems.add(path, message, "use a finite value")
    elif value is not None and not isinstance(value, (str, int, float, bool)):
        message = f"expected a JSON value (string, number, boolean, array, table), got {describe(value)}"
        problems.add(path, message, "use plain TOML/JSON values in configs and overrides")


def collect_config_problems(
    config: Mapping[str, Any], *, allow_experimental: bool | None = None, model_override: str | None = None
) -> list[ConfigProblem]:
    """Every problem in a parsed RL config, the builder's algorithm and model checks included."""
    checked = check_rl_config(
        config, allow_experimental=allow_experimental, model_override=model_override, fresh=False
    )
    return checked.problems.as_list()


def validate_rl_config(
    config: Mapping[str, Any],
    *,
    path: str | None = None,
    allow_experimental: bool | None = None,
    model_override: str | None = None,
) -> dict[str, Any]:
    """*config* normalised as the SDK's validator does, or a ConfigError listing every problem."""
    checked = check_rl_config(config, allow_experimental=allow_experimental, model_override=model_override)
    if checked.problems:
        raise checked.problems.as_error(path)
    return checked.config
