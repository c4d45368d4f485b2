"""Overrides: the SDK's three special keys, plus dotted and nested edits of the TOML tree.

The SDK reads only ``task_url``, ``model`` and ``backend``; every other key is applied to the parsed
TOML before validation: ``{"training.batch_size": 2}`` sets one key (creating tables on the way),
``{"training": {...}}`` deep-merges, ``None`` removes a key, ``'tags."team.name"'`` quotes a dot.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from pytest_synth_rl.config.coerce import describe
from pytest_synth_rl.config.known_keys import check_override_keys
from pytest_synth_rl.config.problems import config_error, format_key, key_text, short_key
from pytest_synth_rl.config.tree import MAX_DEPTH, TreeShapeError, plain_copy
from pytest_synth_rl.errors import ConfigError

__all__ = ["SPECIAL_KEYS", "SdkOverrides", "apply_overrides", "parse_dotted_key", "split_overrides"]

#: Override keys with the SDK's meaning (``model`` trains that id in source mode); never applied.
SPECIAL_KEYS = ("task_url", "model", "backend")
#: One part of a dotted key: a JSON-style quoted name or a bare one, then a dot or the end.
_SEGMENT = re.compile(r'[ \t]*(?:"((?:[^"\\]|\\.)*)"[ \t]*|([^."]*))(\.|\Z)', re.DOTALL)


@dataclass(frozen=True)
class SdkOverrides:
    """The special override keys, type-checked."""

    task_url: str | None = None
    model: str | None = None
    backend: str | None = None


def parse_dotted_key(key: str, *, source: str | None = None) -> tuple[str, ...]:
    """``'rollout.env_config."a.b"'`` -> ``("rollout", "env_config", "a.b")``."""
    bad = config_error(
        f"override key {key!r} is not a valid dotted key path",
        'use names separated by dots, like "training.batch_size" (quote a name containing a dot: '
        "'tags.\"a.b\"')",
        key=key,
        path=source,
    )
    parts: list[str] = []
    position = 0
    while (found := _SEGMENT.match(key, position)) is not None:
        quoted, bare, dot = found.groups()
        if quoted is None and not bare.strip():
            raise bad
        try:
            parts.append(bare.strip() if quoted is None else json.loads(f'"{quoted}"'))
        except ValueError:
            raise bad from None
        if not dot:
            return tuple(parts)
        if len(parts) >= MAX_DEPTH:
            shown = short_key(parts)
            raise config_error(
                f"override key {shown!r} has more than {MAX_DEPTH} parts; "
                f"expected at most {MAX_DEPTH} levels of tables",
                'override a key of a few levels, like "training.batch_size"',
                key=shown,
                path=source,
            )
        position = found.end()
    raise bad


def split_overrides(
    overrides: Mapping[str, Any] | None, *, source: str | None = None
) -> tuple[SdkOverrides, list[tuple[str, Any]]]:
    """Separate the special SDK keys from tree edits, checking both for type errors."""
    if overrides is None:
        return SdkOverrides(), []
    if not isinstance(overrides, Mapping):
        message = f"expected a mapping of override keys to values, got {describe(overrides)}"
        raise config_error(
            message, 'pass e.g. overrides={"training.batch_size": 2}', key="overrides", path=source
        )
    special: dict[str, str | None] = {}
    edits: list[tuple[str, Any]] = []
    for key, value in overrides.items():
        if not isinstance(key, str) or not key.strip():
            message = f"override keys must be non-empty strings, got {describe(key)}"
            raise config_error(
                message, 'use dotted names like "training.batch_size"', key=key_text(key), path=source
            )
        if key not in SPECIAL_KEYS:
            edits.append((key, value))
        elif value is None or isinstance(value, str):
            special[key] = value
        else:
            hint = f'overrides["{key}"] must be a string (or None)'
            if key == "model":
                hint = 'to edit the [model] table use dotted keys such as "model.base"'
            raise config_error(
                f'overrides["{key}"] expected a string, got {describe(value)}', hint, key=key, path=source
            )
    return SdkOverrides(**special), edits


def apply_overrides(
    config: Mapping[str, Any],
    overrides: Mapping[str, Any] | None,
    *,
    source: str | None = None,
    allow_new_keys: bool = False,
) -> dict[str, Any]:
    """A copy of *config* with the non-special overrides applied; one adding a key neither the config
    nor the schema has is a ConfigError with a "did you mean", unless *allow_new_keys*."""
    parsed: list[tuple[tuple[str, ...], str, Any]] = []
    for key, value in split_overrides(overrides, source=source)[1]:
        path = parse_dotted_key(key, source=source)
        try:
            parsed.append((path, key, plain_copy(value, path)))
        except TreeShapeError as exc:
            message = f"override {key!r}: the value at {short_key(exc.path)} {exc.message}"
            raise config_error(message, exc.hint, key=key, path=source) from None
    if not allow_new_keys:
        added: list[tuple[tuple[str, ...], str]] = []

        def leaves(path: tuple[str, ...], value: Any, origin: str) -> None:
            if isinstance(value, Mapping) and value:
                for key, item in value.items():
                    leaves((*path, key_text(key)), item, origin)
            else:
                added.append((path, origin))

        for path, origin, value in parsed:
            if value is not None:
                leaves(path, value, origin)
        check_override_keys(config, added, source=source)
    try:
        result: dict[str, Any] = plain_copy(config)
    except TreeShapeError as exc:
        raise config_error(exc.message, exc.hint, key=short_key(exc.path), path=source) from None
    for path, key, value in parsed:
        _apply(result, path, value, key, source)
    return result


def _apply(
    node: MutableMapping[str, Any],
    path: tuple[str, ...],
    value: Any,
    origin: str,
    source: str | None,
    above: tuple[str, ...] = (),
) -> None:
    """Apply one edit at *path* below *node*; *above* is where *node* sits (for messages)."""
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
            message = f"override {origin!r} has a non-string key {describe(key)}"
            raise config_error(message, "table keys must be strings", key=origin, path=source)
        _apply(existing, (key,), item, origin, source, (*above, *path))


def _collision(origin: str, where: tuple[str, ...], found: object, source: str | None) -> ConfigError:
    spot = format_key(where)
    return config_error(
        f"override {origin!r} cannot be applied: {spot} is {describe(found)}, not a table",
        f"override {spot} itself (or set it to None first) instead of a key inside it",
        key=origin,
        path=source,
    )
