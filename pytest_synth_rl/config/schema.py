"""The typed shape of an RL config (the SDK's models, contract §2.1) and its declarative checker.

Each :class:`Section` lists its keys with a kind, whether required, and a default that is written
into the output when absent (the SDK serialises ``[policy].max_tokens = 512`` and the like).
Unknown keys are forwarded; ``None`` values are dropped at section level, as the SDK's dump does.
Unlike the SDK, every problem is collected.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pytest_synth_rl.config.coerce import CoercionError, describe, to_bool, to_float, to_int, to_str
from pytest_synth_rl.config.problems import KeyPath, ProblemList, format_key, key_text
from pytest_synth_rl.config.tree import plain_copy

__all__ = ["NO_DEFAULT", "RL_CONFIG", "Field", "Kind", "Section", "check_section"]

Kind = Literal["str", "int", "float", "bool", "table", "list_str", "list_int", "table_float", "section"]
#: Marker for "no default": an absent optional key stays absent.
NO_DEFAULT: Any = object()
_CONVERT: dict[str, Callable[[Any], Any]] = {"str": to_str, "int": to_int, "float": to_float, "bool": to_bool}
_EXPECTED = {
    "str": "a string",
    "int": "an integer",
    "float": "a number",
    "bool": "a boolean (true or false)",
    "table": "a table",
    "list_str": "an array of strings",
    "list_int": "an array of integers",
    "table_float": "a table of numbers",
    "section": "a table",
}
_STRING_KEYS = "table keys must be strings, got {}", "use string keys (TOML keys always are)"


@dataclass(frozen=True)
class Field:
    """One known key of a section; *constraint* returns what was expected when a value breaks it."""

    kind: Kind
    required: bool = False
    default: Any = NO_DEFAULT
    nullable: bool = True
    section: Section | None = None
    constraint: Callable[[Any], str | None] | None = None
    example: str | None = None
    expect: str | None = None

    @property
    def expected(self) -> str:
        return self.expect or _EXPECTED[self.kind]


@dataclass(frozen=True)
class Section:
    """A typed table, with an optional cross-key check run once its keys are valid."""

    fields: Mapping[str, Field]
    after: Callable[[dict[str, Any], KeyPath, ProblemList], None] | None = None


def _value_hint(name: str, spec: Field, expected: str) -> str:
    return f"e.g. `{spec.example}`" if spec.example else f"write {name} as {expected}"


def check_section(section: Section, value: object, path: KeyPath, problems: ProblemList) -> dict[str, Any]:
    """Validate *value* against *section*; the converted table (always a dict, best effort on errors)."""
    return _check(section, value, path, problems)[0]


def _check(
    section: Section, value: object, path: KeyPath, problems: ProblemList
) -> tuple[dict[str, Any], bool]:
    if not isinstance(value, Mapping):
        hint = f"write it as a [{format_key(path)}] table" if path else "the config must be a TOML table"
        problems.add(path, f"expected a table, got {describe(value)}", hint)
        return {}, False
    out: dict[str, Any] = {}
    valid = True  # False once a problem is found here, even one already recorded (and so dropped)
    for name, spec in section.fields.items():
        key_path = (*path, name)
        if name not in value:
            if spec.required:
                where = f"[{format_key(path)}]" if path else "the top level"
                hint = f"add `{spec.example or f'{name} = …'}` under {where}"
                problems.add(key_path, f"missing; expected {spec.expected}", hint)
                valid = False
            elif spec.default is not NO_DEFAULT:
                out[name] = plain_copy(spec.default)
            continue
        raw = value[name]
        if raw is None:
            if not (spec.nullable and not spec.required):
                message = f"expected {spec.expected}, got nothing (null)"
                problems.add(key_path, message, _value_hint(name, spec, spec.expected))
                valid = False
            continue
        ok, converted = _convert(spec, raw, key_path, problems)
        wanted = spec.constraint(converted) if ok and spec.constraint is not None else None
        if wanted is not None:
            problems.add(key_path, f"expected {wanted}, got {describe(raw)}", _value_hint(name, spec, wanted))
        if ok and wanted is None:
            out[name] = converted
        else:
            valid = False
    for key, raw in value.items():
        if key in section.fields:
            continue
        if not isinstance(key, str):
            problems.add((*path, key_text(key)), _STRING_KEYS[0].format(describe(key)), _STRING_KEYS[1])
            valid = False
        elif raw is not None:
            out[key] = plain_copy(raw)
    if valid and section.after is not None:
        before = len(problems)
        section.after(out, path, problems)
        valid = len(problems) == before
    return out, valid


def _convert(spec: Field, raw: Any, path: KeyPath, problems: ProblemList) -> tuple[bool, Any]:
    kind = spec.kind
    if kind in _CONVERT:
        try:
            return True, _CONVERT[kind](raw)
        except CoercionError as exc:
            expected = spec.expect or exc.expected
            problems.add(
                path, f"expected {expected}, got {describe(raw)}", _value_hint(str(path[-1]), spec, expected)
            )
            return False, None
    if kind == "section":
        assert spec.section is not None
        converted, valid = _check(spec.section, raw, path, problems)
        return valid, converted
    ok = True
    if kind in ("table", "table_float"):
        if not isinstance(raw, Mapping):
            hint = f"write it as a [{format_key(path)}] table"
            problems.add(path, f"expected {spec.expected}, got {describe(raw)}", hint)
            return False, None
        table: dict[str, Any] = {}
        for key, item in raw.items():
            if not isinstance(key, str):
                problems.add((*path, key_text(key)), _STRING_KEYS[0].format(describe(key)), _STRING_KEYS[1])
                ok = False
            elif kind == "table":
                table[key] = plain_copy(item)
            else:
                try:
                    table[key] = to_float(item)
                except CoercionError:
                    problems.add(
                        (*path, key), f"expected a number, got {describe(item)}", "use a number like 1.0"
                    )
                    ok = False
        return ok, table
    item_kind = "str" if kind == "list_str" else "int"
    if not isinstance(raw, (list, tuple)):
        example = "e.g. `[1, 2, 3]`" if item_kind == "int" else 'e.g. `["a", "b"]`'
        problems.add(path, f"expected {spec.expected}, got {describe(raw)}", example)
        return False, None
    hint = f"make every item of {format_key(path)} {_EXPECTED[item_kind]}"
    items: list[Any] = []
    for index, item in enumerate(raw):
        try:
            items.append(_CONVERT[item_kind](item))
        except CoercionError as exc:
            problems.add((*path, index), f"expected {exc.expected}, got {describe(item)}", hint)
            ok = False
    return ok, items


def _req(kind: Kind, example: str | None = None, expect: str | None = None) -> Field:
    return Field(kind, required=True, nullable=False, example=example, expect=expect)


def _opt(kind: Kind, example: str | None = None) -> Field:
    return Field(kind, example=example)


def _default(kind: Kind, value: Any, example: str | None = None) -> Field:
    return Field(kind, default=value, nullable=False, example=example)


def _sub(section: Section, *, required: bool = False) -> Field:
    return Field("section", section=section, required=required, nullable=not required)


def _exactly_one(
    first: str, other: str, missing: str, hint: str
) -> Callable[[dict[str, Any], KeyPath, ProblemList], None]:
    def check(table: dict[str, Any], path: KeyPath, problems: ProblemList) -> None:
        if bool(table.get(first)) == bool(table.get(other)):
            both = bool(table.get(first))
            problems.add(
                (*path, first),
                f"both {first} and {other} are set; expected exactly one" if both else missing,
                hint,
            )

    return check


_MODEL_ONE = _exactly_one(
    "base",
    "source",
    "missing; expected exactly one of base (a base model id) or source (a fine-tuned model id)",
    'keep `base = "Qwen/Qwen3-0.6B"` for a base model or `source = "ft:…"` for a fine-tuned one',
)
_POLICY_ONE = _exactly_one(
    "model_name",
    "source",
    "missing; expected exactly one of model_name or source",
    'set `model_name = "Qwen/Qwen3-0.6B"` or `source = "ft:…"`, not both',
)
_TOPOLOGY = Section(
    {
        "type": _opt("str", 'type = "single_node_split"'),
        "gpus_for_vllm": _opt("int", "gpus_for_vllm = 1"),
        "gpus_for_training": _opt("int", "gpus_for_training = 1"),
        "gpus_for_ref": _opt("int", "gpus_for_ref = 0"),
        "tensor_parallel": _opt("int", "tensor_parallel = 1"),
        "reference_placement": _opt("str", 'reference_placement = "none"'),
    }
)
_REWARD_KEYS: dict[str, Field] = {
    "step_rewards_enabled": _opt("bool"),
    "step_rewards_mode": _opt("str", 'step_rewards_mode = "off"'),
    "step_rewards_indicator_lambda": _opt("float"),
    "step_rewards_beta": _opt("float"),
    "step_rewards_strategy": _opt("str"),
    "event_rewards_kind": _opt("str", 'event_rewards_kind = "unique"'),
}
_TRAINING = {
    "num_epochs": _req("int", "num_epochs = 1"),
    "iterations_per_epoch": _req("int", "iterations_per_epoch = 1"),
    "gradient_accumulation_steps": _opt("int"),
    "max_accumulated_minibatch": _opt("int"),
    "max_turns": _req("int", "max_turns = 1"),
    "batch_size": _req("int", "batch_size = 2"),
    "group_size": _req("int", "group_size = 2"),
    "learning_rate": _req("float", "learning_rate = 5e-6"),
    "log_interval": _opt("int"),
    "weight_sync_interval": _opt("int"),
    **_REWARD_KEYS,  # deprecated flat spelling of [training.rewards]
    "weight_sync": _sub(
        Section(
            {
                "enable": _opt("bool", "enable = true"),
                "targets": _opt("list_str"),
                "mode": _opt("str"),
                "direct": _opt("bool"),
                "verify_every_k": _opt("int"),
            }
        )
    ),
    "lora": _sub(
        Section(
            {
                "r": _opt("int", "r = 16"),
                "alpha": _opt("int", "alpha = 32"),
                "dropout": _opt("float", "dropout = 0.05"),
                "target_modules": _opt("list_str"),
            }
        )
    ),
    "rewards": _sub(Section(dict(_REWARD_KEYS))),
}
_VERIFIER = {
    "type": _opt("str"),
    "timeout_s": _opt("int"),
    "enabled": _opt("bool"),
    "reward_blend": _opt("table_float"),
    "rubric": _sub(Section({"enabled": _default("bool", False), "reward_blend": _opt("table_float")})),
    "options": _sub(
        Section(
            {
                **dict.fromkeys(("event", "outcome"), _opt("bool")),
                **dict.fromkeys(("provider", "model", "rubric_id"), _opt("str")),
                "rubric_overrides": _opt("table"),
                "tracks": _opt("list_str"),
                "weights": _opt("table_float"),
                "max_concurrency": _opt("int"),
            }
        )
    ),
}
_SMOKE_KINDS: dict[str, Kind] = dict(
    task_url="str",
    env_name="str",
    policy_name="str",
    policy="str",
    model="str",
    max_steps="int",
    mock_backend="str",
    mock_port="int",
    return_trace="bool",
    use_mock="bool",
    task_app_name="str",
    task_app_port="int",
    task_app_env_file="str",
    task_app_force="bool",
    sqld_auto_start="bool",
    sqld_db_path="str",
    sqld_hrana_port="int",
    sqld_http_port="int",
)

#: The whole RL config: required [algorithm] and [services], typed sections, free-form tables.
RL_CONFIG = Section(
    {
        "algorithm": _sub(
            Section(
                {
                    "type": _req("str", 'type = "online"'),
                    "method": _req("str", 'method = "policy_gradient"'),
                    "variety": _req("str", 'variety = "gspo"'),
                }
            ),
            required=True,
        ),
        "services": _sub(
            Section(
                {
                    "task_url": _req(
                        "str",
                        'task_url = ""',
                        expect="a string (may be empty when the URL comes from the caller)",
                    ),
                    "verifier_url": _opt("str"),
                }
            ),
            required=True,
        ),
        "compute": _sub(
            Section(
                {
                    "gpu_type": _req("str", 'gpu_type = "H100"'),
                    "gpu_count": _req("int", "gpu_count = 1"),
                    "nodes": _opt("int", "nodes = 1"),
                    "topology": _sub(_TOPOLOGY),
                }
            )
        ),
        **dict.fromkeys(("topology", "vllm", "reference"), _opt("table")),
        "model": _sub(
            Section(
                {
                    "source": _opt("str", 'source = "ft:Qwen/Qwen3-0.6B:job-id"'),
                    "base": _opt("str", 'base = "Qwen/Qwen3-0.6B"'),
                    "trainer_mode": _req("str", 'trainer_mode = "lora"'),
                    "label": _req("str", 'label = "my-rl-model"'),
                },
                after=_MODEL_ONE,
            )
        ),
        "policy": _sub(
            Section(
                {
                    "model_name": _opt("str", 'model_name = "Qwen/Qwen3-0.6B"'),
                    "source": _opt("str"),
                    "max_tokens": _default("int", 512, "max_tokens = 512"),
                    "temperature": _default("float", 0.7, "temperature = 0.7"),
                    "top_p": _default("float", 0.95, "top_p = 0.95"),
                    "top_k": _opt("int", "top_k = 50"),
                    "repetition_penalty": _default("float", 1.0, "repetition_penalty = 1.0"),
                    "stop_sequences": _opt("list_str"),
                    "trainer_mode": _req("str", 'trainer_mode = "lora"'),
                    "label": _req("str", 'label = "my-rl-model"'),
                    "inference_url": _opt("str"),
                },
                after=_POLICY_ONE,
            )
        ),
        "lora": _opt("table"),
        "rollout": _sub(
            Section(
                {
                    "env_name": _req("str", 'env_name = "math"'),
                    "policy_name": _req("str", 'policy_name = "math-single-step"'),
                    "env_config": _opt("table"),
                    "policy_config": _opt("table"),
                    "max_turns": _req("int", "max_turns = 1"),
                    "episodes_per_batch": _req("int", "episodes_per_batch = 4"),
                    "max_concurrent_rollouts": _req("int", "max_concurrent_rollouts = 2"),
                    "batches_per_step": _opt("int", "batches_per_step = 1"),
                }
            )
        ),
        "evaluation": _sub(
            Section(
                {
                    "instances": _req("int", "instances = 8"),
                    "every_n_iters": _req("int", "every_n_iters = 10"),
                    "seeds": _req("list_int", "seeds = [0, 1, 2]"),
                }
            )
        ),
        "training": _sub(Section(_TRAINING)),
        "rubric": _opt("table"),
        "verifier": _sub(Section(_VERIFIER)),
        "tags": _opt("table"),
        "smoke": _sub(Section({name: _opt(kind) for name, kind in _SMOKE_KINDS.items()})),
    }
)
