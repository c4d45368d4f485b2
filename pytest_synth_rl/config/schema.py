"""The typed shape of an RL config (the SDK's models, contract §2.1), its checker and its conversions:
unknown keys are forwarded, ``None`` dropped, scalars converted as the SDK's lax mode (``"2"`` -> ``2``)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_synth_rl.config.problems import KeyPath, ProblemList, describe, format_key, key_text
from pytest_synth_rl.config.tree import plain_copy

_WHITE_SPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000"
)
_INT_TEXT = re.compile(r"[+-]?[0-9]+(?:_[0-9]+)*(?:\.0+)?")
_FLOAT_TEXT = re.compile(
    r"[+-]?(?:inf|infinity|nan|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[+-]?[0-9]+)?)", re.IGNORECASE
)
_BOOL_WORDS = {"1": True, "on": True, "t": True, "true": True, "y": True, "yes": True}
_BOOL_WORDS |= {"0": False, "off": False, "f": False, "false": False, "n": False, "no": False}
INT64_LIMIT = 2**63
_INT64_DIGITS = len(str(INT64_LIMIT))
_TOO_BIG = "an integer smaller than 2**63"


_EXPECTED = {"str": "a string", "int": "an integer", "float": "a number", "bool": "a boolean (true or false)"}
_EXPECTED |= {"table": "a table", "section": "a table", "table_float": "a table of numbers"}
_EXPECTED |= {"list_str": "an array of strings", "list_int": "an array of integers"}
AfterCheck = Callable[[dict[str, Any], KeyPath, ProblemList], None]
Constraint = Callable[[Any], "str | None"]
_ITEM_KINDS = {"table_float": "float", "list_str": "str", "list_int": "int"}
_STRING_KEYS = "table keys must be strings, got {}", "use string keys (TOML keys always are)"


class CoercionError(ValueError):
    """A value cannot be converted to the wanted type; ``expected`` names that type for humans."""

    def __init__(self, expected: str, value: object) -> None:
        self.expected = expected
        super().__init__(f"expected {expected}, got {describe(value)}")


def to_str(value: Any) -> str:
    if isinstance(value, str):
        return value
    raise CoercionError("a string", value)


def to_int(value: Any) -> int:
    """Ints of any size (as the SDK), bools, integral floats and decimal strings below 2**63."""
    if isinstance(value, int):
        return int(value) if isinstance(value, bool) else value
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise CoercionError("an integer", value)
        if abs(value) >= float(INT64_LIMIT):
            raise CoercionError(_TOO_BIG, value)
        return int(value)
    if not isinstance(value, str) or not _INT_TEXT.fullmatch(text := value.strip(_WHITE_SPACE)):
        raise CoercionError("an integer", value)
    whole = text.split(".", 1)[0].replace("_", "")
    if len(whole.lstrip("+-").lstrip("0")) > _INT64_DIGITS or abs(int(whole)) >= INT64_LIMIT:
        raise CoercionError(_TOO_BIG, value)
    return int(whole)


def to_float(value: Any) -> float:
    """Numbers, bools and numeric strings (``inf``/``nan`` spellings, single ``_`` separators)."""
    if isinstance(value, (bool, float)):
        return float(value)
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:
            raise CoercionError("a number that fits a 64-bit float", value) from None
    if isinstance(value, str):
        if "_" in value:  # then the SDK does not trim, and refuses separators at an end or doubled
            ok = not (value.startswith("_") or value.endswith("_") or "__" in value)
            text = value.replace("_", "") if ok else ""
        else:
            text = value.strip(_WHITE_SPACE)
        if _FLOAT_TEXT.fullmatch(text):
            return float(text)
    raise CoercionError("a number", value)


def to_bool(value: Any) -> bool:
    """Bools, the numbers 0 and 1, and case-insensitive words (``true``, ``no``, ``on`` ...)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in _BOOL_WORDS:
        return _BOOL_WORDS[value.lower()]
    raise CoercionError(_EXPECTED["bool"], value)


_CONVERT: dict[str, Callable[[Any], Any]] = {"str": to_str, "int": to_int, "float": to_float, "bool": to_bool}


@dataclass(frozen=True)
class Field:
    """One known key of a section; *constraint* returns what was expected when a value breaks it."""

    kind: str
    required: bool = False
    default: Any = None  # written when the key is absent (None: it stays absent, or may be null)
    section: Section | None = None
    constraint: Constraint | None = None
    example: str | None = None
    expect: str | None = None

    @property
    def expected(self) -> str:
        return self.expect or _EXPECTED[self.kind]


@dataclass(frozen=True)
class Section:
    """A typed table, with an optional cross-key check run once its keys are valid."""

    fields: Mapping[str, Field]
    after: AfterCheck | None = None


def _value_hint(name: str, spec: Field, expected: str) -> str:
    return f"e.g. `{spec.example}`" if spec.example else f"write {name} as {expected}"


def check_section(
    section: Section, value: object, path: KeyPath, problems: ProblemList
) -> tuple[dict[str, Any], bool]:
    """*value* converted against *section* (always a dict, best effort on errors), and whether it is valid."""
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
            elif spec.default is not None:
                out[name] = plain_copy(spec.default)
            continue
        raw = value[name]
        if raw is None:
            if spec.required or spec.default is not None:
                message = f"expected {spec.expected}, got nothing (null)"
                problems.add(key_path, message, _value_hint(name, spec, spec.expected))
                valid = False
            continue
        ok, converted = _convert(spec, raw, key_path, problems)
        if ok:
            out[name] = converted
        valid = valid and ok
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
            value = _CONVERT[kind](raw)
            if spec.constraint is not None and (wanted := spec.constraint(value)) is not None:
                raise CoercionError(wanted, raw)
            return True, value
        except CoercionError as exc:
            expected = spec.expect or exc.expected
            hint = _value_hint(str(path[-1]), spec, expected)
            problems.add(path, f"expected {expected}, got {describe(raw)}", hint)
            return False, None
    if kind == "section":
        assert spec.section is not None
        converted, valid = check_section(spec.section, raw, path, problems)
        return valid, converted
    table = kind in ("table", "table_float")
    if not isinstance(raw, Mapping if table else (list, tuple)):
        hint = f"write it as a [{format_key(path)}] table"
        if not table:
            hint = "e.g. `[1, 2, 3]`" if kind == "list_int" else 'e.g. `["a", "b"]`'
        problems.add(path, f"expected {spec.expected}, got {describe(raw)}", hint)
        return False, None
    convert = plain_copy if kind == "table" else _CONVERT[_ITEM_KINDS[kind]]
    hint = (
        "use a number like 1.0" if table else f"make every item of {format_key(path)} {_EXPECTED[kind[5:]]}"
    )
    ok, items = True, []
    for key, item in raw.items() if isinstance(raw, Mapping) else enumerate(raw):
        if table and not isinstance(key, str):
            problems.add((*path, key_text(key)), _STRING_KEYS[0].format(describe(key)), _STRING_KEYS[1])
            ok = False
            continue
        try:
            items.append((key, convert(item)))
        except CoercionError as exc:
            problems.add((*path, key), f"expected {exc.expected}, got {describe(item)}", hint)
            ok = False
    return ok, dict(items) if table else [item for _, item in items]


def section_of(table: str, after: AfterCheck | None = None, **parts: Section | Constraint) -> Section:
    """A section from ``;``-separated ``name kind [example] [| expected]``: ``kind!`` is required, ``kind=``
    defaults to the example, ``kind=VALUE`` to VALUE (JSON); *parts* give sections and constraints."""
    fields: dict[str, Field] = {}
    for spec in table.split(";"):
        text, _, expect = spec.partition(" | ")
        name, kind, *rest = text.split(None, 2)
        value = rest[0].strip() if rest else None
        kind, mark, default = kind.partition("!") if "!" in kind else kind.partition("=")
        part = parts.get(name)
        fields[name] = Field(
            kind,
            required=mark == "!",
            default=json.loads(default or value or "null") if mark == "=" else None,
            section=part if isinstance(part, Section) else None,
            constraint=None if isinstance(part, Section) else part,
            example=f"{name} = {value}" if value is not None and not default else None,
            expect=expect or None,
        )
    return Section(fields, after)


def _exactly_one(first: str, other: str) -> AfterCheck:
    both = f"both {first} and {other} are set; expected exactly one"
    missing = f"missing; expected exactly one of {first} (a base model id) or {other} (a fine-tuned model id)"
    hint = f'keep `{first} = "Qwen/Qwen3-0.6B"` for a base model '
    hint += f'or `{other} = "ft:…"` for a fine-tuned one'

    def check(table: dict[str, Any], path: KeyPath, problems: ProblemList) -> None:
        if bool(table.get(first)) == bool(table.get(other)):
            problems.add((*path, first), both if table.get(first) else missing, hint)

    return check


_REWARDS = (
    'step_rewards_enabled bool; step_rewards_mode str "off"; step_rewards_indicator_lambda float; '
    'step_rewards_beta float; step_rewards_strategy str; event_rewards_kind str "unique"'
)
_TRAINING = (
    "num_epochs int! 1; iterations_per_epoch int! 1; gradient_accumulation_steps int; "
    "max_accumulated_minibatch int; max_turns int! 1; batch_size int! 2; group_size int! 2; "
    "learning_rate float! 5e-6; log_interval int; weight_sync_interval int; "
    f"{_REWARDS}; weight_sync section; lora section; rewards section"  # flat: the deprecated spelling
)
_SMOKE = (
    "task_url str; env_name str; policy_name str; policy str; model str; max_steps int; mock_backend str; "
    "mock_port int; return_trace bool; use_mock bool; task_app_name str; task_app_port int; "
    "task_app_env_file str; task_app_force bool; sqld_auto_start bool; sqld_db_path str; "
    "sqld_hrana_port int; sqld_http_port int"
)
_POLICY = (
    'model_name str "Qwen/Qwen3-0.6B"; source str; max_tokens int= 512; temperature float= 0.7; '
    "top_p float= 0.95; top_k int 50; repetition_penalty float= 1.0; stop_sequences list_str; "
    'trainer_mode str! "lora"; label str! "my-rl-model"; inference_url str'
)
_VERIFIER_OPTIONS = (
    "event bool; outcome bool; provider str; model str; rubric_id str; rubric_overrides table; "
    "tracks list_str; weights table_float; max_concurrency int"
)
RL_CONFIG = section_of(
    "algorithm section!; services section!; compute section; topology table; vllm table; reference table; "
    "model section; policy section; lora table; rollout section; evaluation section; training section; "
    "rubric table; verifier section; tags table; smoke section",
    algorithm=section_of('type str! "online"; method str! "policy_gradient"; variety str! "gspo"'),
    services=section_of(
        'task_url str! "" | a string (may be empty when the URL comes from the caller); verifier_url str'
    ),
    compute=section_of(
        'gpu_type str! "H100"; gpu_count int! 1; nodes int 1; topology section',
        topology=section_of(
            'type str "single_node_split"; gpus_for_vllm int 1; gpus_for_training int 1; gpus_for_ref int 0; '
            'tensor_parallel int 1; reference_placement str "none"'
        ),
    ),
    model=section_of(
        'source str "ft:Qwen/Qwen3-0.6B:job-id"; base str "Qwen/Qwen3-0.6B"; trainer_mode str! "lora"; '
        'label str! "my-rl-model"',
        _exactly_one("base", "source"),
    ),
    policy=section_of(_POLICY, _exactly_one("model_name", "source")),
    rollout=section_of(
        'env_name str! "math"; policy_name str! "math-single-step"; env_config table; policy_config table; '
        "max_turns int! 1; episodes_per_batch int! 4; max_concurrent_rollouts int! 2; batches_per_step int 1"
    ),
    evaluation=section_of("instances int! 8; every_n_iters int! 10; seeds list_int! [0, 1, 2]"),
    training=section_of(
        _TRAINING,
        weight_sync=section_of(
            "enable bool true; targets list_str; mode str; direct bool; verify_every_k int"
        ),
        lora=section_of("r int 16; alpha int 32; dropout float 0.05; target_modules list_str"),
        rewards=section_of(_REWARDS),
    ),
    verifier=section_of(
        "type str; timeout_s int; enabled bool; reward_blend table_float; rubric section; options section",
        rubric=section_of("enabled bool=false; reward_blend table_float"),
        options=section_of(_VERIFIER_OPTIONS),
    ),
    smoke=section_of(_SMOKE),
)
