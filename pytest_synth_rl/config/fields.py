"""A tiny declarative checker for typed config tables (what the SDK uses typed models for).

Each :class:`Section` lists its known keys with a kind (``int``, ``str``, nested section…), whether
the key is required, and a default that is *written into the output* when the key is absent (the
SDK serialises model defaults such as ``[policy].max_tokens = 512``). Unknown keys are kept as they
are and forwarded; ``None`` values are dropped at section level (never inside free-form tables),
exactly like the SDK's ``exclude_none`` dump. Unlike the SDK, every problem is collected.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pytest_synth_rl.config.coerce import CoercionError, describe, to_bool, to_float, to_int, to_str
from pytest_synth_rl.config.problems import KeyPath, ProblemList, format_key, key_text
from pytest_synth_rl.config.tree import plain_copy

__all__ = ["NO_DEFAULT", "Field", "Kind", "Section", "check_section"]

Kind = Literal["str", "int", "float", "bool", "table", "list_str", "list_int", "table_float", "section"]

#: Marker for "no default": an absent optional key stays absent.
NO_DEFAULT: Any = object()

_SCALARS: dict[str, tuple[Callable[[Any], Any], str]] = {
    "str": (to_str, "a string"),
    "int": (to_int, "an integer"),
    "float": (to_float, "a number"),
    "bool": (to_bool, "a boolean (true or false)"),
}

_EXPECTED: dict[str, str] = {
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

#: After-validator: sees the converted section (only when all its keys were valid).
AfterCheck = Callable[[dict[str, Any], KeyPath, ProblemList], None]
#: Constraint on a converted value: returns what was expected when violated, else ``None``.
Constraint = Callable[[Any], "str | None"]


@dataclass(frozen=True)
class Field:
    """One known key of a section."""

    kind: Kind
    required: bool = False
    default: Any = NO_DEFAULT
    nullable: bool = True
    section: Section | None = None
    constraint: Constraint | None = None
    example: str | None = None
    expect: str | None = None

    @property
    def expected(self) -> str:
        return self.expect or _EXPECTED[self.kind]


@dataclass(frozen=True)
class Section:
    """A typed table: known keys, plus an optional cross-key check run once the keys are valid."""

    fields: Mapping[str, Field]
    after: AfterCheck | None = None


def _where(path: KeyPath) -> str:
    return f"[{format_key(path)}]" if path else "the top level"


def _example_hint(name: str, spec: Field, parent: KeyPath) -> str:
    snippet = spec.example or f"{name} = …"
    return f"add `{snippet}` under {_where(parent)}"


def _value_hint(name: str, spec: Field, expected: str) -> str:
    return f"e.g. `{spec.example}`" if spec.example else f"write {name} as {expected}"


def check_section(section: Section, value: object, path: KeyPath, problems: ProblemList) -> dict[str, Any]:
    """Validate *value* against *section*; returns the converted table (best effort on errors).

    Problems go to *problems* under their dotted key. The returned dict is only meaningful when
    no problem was recorded, but it is always a dict so later rules can keep inspecting it.
    """
    return _check(section, value, path, problems)[0]


def _check(
    section: Section, value: object, path: KeyPath, problems: ProblemList
) -> tuple[dict[str, Any], bool]:
    if not isinstance(value, Mapping):
        problems.add(
            path,
            f"expected a table, got {describe(value)}",
            f"write it as a [{format_key(path)}] table" if path else "the config must be a TOML table",
        )
        return {}, False
    out: dict[str, Any] = {}
    valid = True
    for name, spec in section.fields.items():
        key_path = (*path, name)
        if name not in value:
            if spec.required:
                problems.add(key_path, f"missing; expected {spec.expected}", _example_hint(name, spec, path))
                valid = False
            elif spec.default is not NO_DEFAULT:
                out[name] = plain_copy(spec.default)
            continue
        raw = value[name]
        if raw is None:
            if spec.nullable and not spec.required:
                continue
            problems.add(
                key_path,
                f"expected {spec.expected}, got nothing (null)",
                _value_hint(name, spec, spec.expected),
            )
            valid = False
            continue
        ok, converted = _convert(spec, raw, key_path, problems)
        if not ok:
            valid = False
            continue
        if spec.constraint is not None:
            wanted = spec.constraint(converted)
            if wanted is not None:
                problems.add(
                    key_path, f"expected {wanted}, got {describe(raw)}", _value_hint(name, spec, wanted)
                )
                valid = False
                continue
        out[name] = converted
    for key, raw in value.items():
        if key in section.fields:
            continue
        if not isinstance(key, str):
            problems.add(
                (*path, key_text(key)),
                f"table keys must be strings, got {describe(key)}",
                "use string keys (TOML keys always are)",
            )
            valid = False
            continue
        if raw is None:
            continue
        out[key] = plain_copy(raw)
    if valid and section.after is not None:
        before = len(problems)
        section.after(out, path, problems)
        valid = len(problems) == before
    return out, valid


def _convert(spec: Field, raw: Any, path: KeyPath, problems: ProblemList) -> tuple[bool, Any]:
    kind = spec.kind
    if kind in _SCALARS:
        convert, _ = _SCALARS[kind]
        try:
            return True, convert(raw)
        except CoercionError as exc:
            expected = spec.expect or exc.expected
            hint = _value_hint(str(path[-1]), spec, expected)
            problems.add(path, f"expected {expected}, got {describe(raw)}", hint)
            return False, None
    if kind == "section":
        assert spec.section is not None
        converted, valid = _check(spec.section, raw, path, problems)
        return valid, converted
    if kind in ("table", "table_float"):
        return _convert_table(kind, raw, path, problems)
    return _convert_list(spec, raw, path, problems)


def _convert_table(kind: str, raw: Any, path: KeyPath, problems: ProblemList) -> tuple[bool, Any]:
    if not isinstance(raw, Mapping):
        expected = "a table of numbers" if kind == "table_float" else "a table"
        problems.add(
            path, f"expected {expected}, got {describe(raw)}", f"write it as a [{format_key(path)}] table"
        )
        return False, None
    out: dict[str, Any] = {}
    ok = True
    for key, item in raw.items():
        if not isinstance(key, str):
            problems.add(
                (*path, key_text(key)),
                f"table keys must be strings, got {describe(key)}",
                "use string keys (TOML keys always are)",
            )
            ok = False
            continue
        if kind == "table_float":
            try:
                out[key] = to_float(item)
            except CoercionError:
                problems.add(
                    (*path, key), f"expected a number, got {describe(item)}", "use a number like 1.0"
                )
                ok = False
        else:
            out[key] = plain_copy(item)
    return ok, out


def _convert_list(spec: Field, raw: Any, path: KeyPath, problems: ProblemList) -> tuple[bool, Any]:
    item_kind = "str" if spec.kind == "list_str" else "int"
    if not isinstance(raw, (list, tuple)):
        problems.add(
            path,
            f"expected {spec.expected}, got {describe(raw)}",
            "e.g. `[1, 2, 3]`" if item_kind == "int" else 'e.g. `["a", "b"]`',
        )
        return False, None
    convert, expected = _SCALARS[item_kind]
    hint = f"make every item of {format_key(path)} {expected}"
    out: list[Any] = []
    ok = True
    for index, item in enumerate(raw):
        try:
            out.append(convert(item))
        except CoercionError as exc:
            problems.add((*path, index), f"expected {exc.expected}, got {describe(item)}", hint)
            ok = False
    return ok, out
