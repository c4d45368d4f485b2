"""Overrides: the SDK's three special keys, plus dotted and nested edits of the TOML tree.

The SDK reads only ``task_url``, ``model`` and ``backend``; every other key is applied to the parsed
TOML before validation: ``{"training.batch_size": 2}`` sets one key (creating tables on the way),
``{"training": {...}}`` deep-merges, ``None`` removes a key, ``'tags."team.name"'`` quotes a dot.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from pytest_synth_rl.config.coerce import describe
from pytest_synth_rl.config.known_keys import check_override_keys
from pytest_synth_rl.config.problems import config_error, format_key, key_text, short_key
from pytest_synth_rl.config.tree import MAX_DEPTH, TreeShapeError, plain_copy
from pytest_synth_rl.errors import ConfigError

__all__ = ["SPECIAL_KEYS", "SdkOverrides", "apply_overrides", "parse_dotted_key", "split_overrides"]

#: Override keys with the SDK's meaning; never applied to the TOML tree.
SPECIAL_KEYS = ("task_url", "model", "backend")


@dataclass(frozen=True)
class SdkOverrides:
    """The special override keys, type-checked."""

    task_url: str | None = None
    model: str | None = None
    backend: str | None = None


def _fail(key: str, message: str, hint: str, source: str | None) -> ConfigError:
    return config_error(message, hint, key=key, path=source)


def parse_dotted_key(key: str, *, source: str | None = None) -> tuple[str, ...]:
    """``'rollout.env_config."a.b"'`` -> ``("rollout", "env_config", "a.b")``."""
    parts: list[str] = []
    position, length = 0, len(key)
    while True:
        while position < length and key[position] in " \t":
            position += 1
        if position < length and key[position] == '"':
            segment, position = _quoted(key, position + 1)
        else:
            end = key.find(".", position)
            end = length if end < 0 else end
            segment = key[position:end].strip()
            if not segment or '"' in segment:
                raise _bad_key(key, source)
            position = end
        if segment is None:
            raise _bad_key(key, source)
        parts.append(segment)
        while position < length and key[position] in " \t":
            position += 1
        if position == length:
            return tuple(parts)
        if len(parts) >= MAX_DEPTH:
            raise _fail(
                short_key(parts),
                f"override key {short_key(parts)!r} has more than {MAX_DEPTH} parts; "
                f"expected at most {MAX_DEPTH} levels of tables",
                'override a key of a few levels, like "training.batch_size"',
                source,
            )
        if key[position] != ".":
            raise _bad_key(key, source)
        position += 1


def _quoted(key: str, position: int) -> tuple[str | None, int]:
    """Read a double-quoted segment starting after its opening quote; ``None`` if malformed."""
    chars: list[str] = []
    while position < len(key) and key[position] != '"':
        step = 2 if key[position] == "\\" else 1
        chars.append(key[position : position + step])
        position += step
    if position >= len(key):
        return None, position
    try:
        return json.loads('"' + "".join(chars) + '"'), position + 1
    except ValueError:
        return None, position + 1


def _bad_key(key: str, source: str | None) -> ConfigError:
    return _fail(
        key,
        f"override key {key!r} is not a valid dotted key path",
        'use names separated by dots, like "training.batch_size" (quote a name containing a dot: '
        "'tags.\"a.b\"')",
        source,
    )


def split_overrides(
    overrides: Mapping[str, Any] | None, *, source: str | None = None
) -> tuple[SdkOverrides, list[tuple[str, Any]]]:
    """Separate the special SDK keys from tree edits, checking both for type errors."""
    if overrides is None:
        return SdkOverrides(), []
    if not isinstance(overrides, Mapping):
        raise _fail(
            "overrides",
            f"expected a mapping of override keys to values, got {describe(overrides)}",
            'pass e.g. overrides={"training.batch_size": 2}',
            source,
        )
    special: dict[str, str | None] = {}
    edits: list[tuple[str, Any]] = []
    for key, value in overrides.items():
        if not isinstance(key, str) or not key.strip():
            raise _fail(
                key_text(key),
                f"override keys must be non-empty strings, got {describe(key)}",
                'use dotted names like "training.batch_size"',
                source,
            )
        if key in SPECIAL_KEYS:
            if value is not None and not isinstance(value, str):
                hint = (
                    'to edit the [model] table use dotted keys such as "model.base"'
                    if key == "model"
                    else f'overrides["{key}"] must be a string (or None)'
                )
                raise _fail(key, f'overrides["{key}"] expected a string, got {describe(value)}', hint, source)
            special[key] = value
            continue
        edits.append((key, value))
    return SdkOverrides(**special), edits


def apply_overrides(
    config: Mapping[str, Any],
    overrides: Mapping[str, Any] | None,
    *,
    source: str | None = None,
    allow_new_keys: bool = False,
) -> dict[str, Any]:
    """A copy of *config* with the non-special overrides applied.

    An override adding a key neither the config nor the schema has is a :class:`ConfigError` with
    a "did you mean", unless *allow_new_keys*; free-form tables and removals are always allowed.
    """
    _, edits = split_overrides(overrides, source=source)
    parsed = [_parsed_edit(key, value, source) for key, value in edits]
    if not allow_new_keys:
        check_override_keys(config, _added_paths(parsed), source=source)
    try:
        result: dict[str, Any] = plain_copy(config)
    except TreeShapeError as exc:
        raise config_error(exc.message, exc.hint, key=short_key(exc.path), path=source) from None
    for path, key, value in parsed:
        _apply(result, path, value, key, source)
    return result


def _parsed_edit(key: str, value: Any, source: str | None) -> tuple[tuple[str, ...], str, Any]:
    """``(path, key, bounded copy of value)``."""
    path = parse_dotted_key(key, source=source)
    try:
        return path, key, plain_copy(value, path)
    except TreeShapeError as exc:
        raise _fail(
            key, f"override {key!r}: the value at {short_key(exc.path)} {exc.message}", exc.hint, source
        ) from None


def _added_paths(parsed: list[tuple[tuple[str, ...], str, Any]]) -> list[tuple[tuple[str, ...], str]]:
    """Every key path the edits write (nested mappings expanded to their leaves)."""
    out: list[tuple[tuple[str, ...], str]] = []

    def leaves(path: tuple[str, ...], value: Any, origin: str) -> None:
        if isinstance(value, Mapping) and value:
            for key, item in value.items():
                leaves((*path, key_text(key)), item, origin)
        else:
            out.append((path, origin))

    for path, origin, value in parsed:
        if value is not None:
            leaves(path, value, origin)
    return out


def _apply(
    root: MutableMapping[str, Any],
    path: tuple[str, ...],
    value: Any,
    origin: str,
    source: str | None,
    above: tuple[str, ...] = (),
) -> None:
    """Apply one edit at *path* below *root*; *above* is where *root* sits (for messages)."""
    node = root
    for depth, segment in enumerate(path[:-1]):
        child = node.get(segment)
        if child is None:
            child = node[segment] = {}
        elif not isinstance(child, MutableMapping):
            raise _collision(origin, (*above, *path[: depth + 1]), child, source)
        node = child
    last = path[-1]
    if value is None:
        node.pop(last, None)
        return
    if not isinstance(value, Mapping):
        node[last] = plain_copy(value)
        return
    existing = node.get(last)
    if existing is None:
        existing = node[last] = {}
    elif not isinstance(existing, MutableMapping):
        raise _collision(origin, (*above, *path), existing, source)
    for key, item in value.items():
        if not isinstance(key, str):
            raise _fail(
                origin,
                f"override {origin!r} has a non-string key {describe(key)}",
                "table keys must be strings",
                source,
            )
        _apply(existing, (key,), item, origin, source, (*above, *path))


def _collision(origin: str, where: tuple[str, ...], found: object, source: str | None) -> ConfigError:
    spot = format_key(where)
    return _fail(
        origin,
        f"override {origin!r} cannot be applied: {spot} is {describe(found)}, not a table",
        f"override {spot} itself (or set it to None first) instead of a key inside it",
        source,
    )
