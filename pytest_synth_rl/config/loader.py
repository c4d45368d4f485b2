"""Reading an RL config: bounded bytes -> UTF-8 text -> TOML tree -> overrides; failures are ConfigErrors
naming file, line and column. Overrides other than ``task_url``, ``model`` and ``backend`` edit the tree."""

from __future__ import annotations

import functools
import importlib
import json
import os
import re
import stat
import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

from pytest_synth_rl.config.problems import config_error, describe, format_key, key_text, short_key
from pytest_synth_rl.config.rules import check_override_keys
from pytest_synth_rl.config.tree import MAX_DEPTH, TreeShapeError, copy_tree, plain_copy
from pytest_synth_rl.errors import ConfigError, ConfigProblem, keywords_checked

tomllib: Any = importlib.import_module("tomllib" if sys.version_info >= (3, 11) else "tomli")

MAX_CONFIG_BYTES = 8 * 1024 * 1024
_CACHED_BYTES = 1024 * 1024
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_NOT_REGULAR = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
)
_POSITION = re.compile(r"\s*\((?:at line (\d+), column (\d+)|at end of document)\)\s*$")
_SEGMENT = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\\n]|\\.)*"|'[^'\n]*')"""
_LONG_KEY = re.compile(
    rf"(?:^[ \t]*\[{{0,2}}|[{{,])[ \t]*(?P<key>(?:{_SEGMENT}[ \t]*\.[ \t]*){{{MAX_DEPTH}}})", re.MULTILINE
)
_INT_LIMIT = "an integer smaller than 2**63 in magnitude"
_INT_HINT = "use a smaller number, or quote it as a string if it is an identifier rather than a count"


def config_source(config_path: object) -> Path:
    if isinstance(config_path, (str, os.PathLike)):
        return Path(os.fspath(config_path))
    message = f"expected the path of a TOML file (str or os.PathLike), got {describe(config_path)}"
    hint = "pass a path, or build_rl_payload_from_mapping() for a config you hold as a dict"
    raise config_error(message, hint)


def _file_error(path: Path, message: str, hint: str) -> ConfigError:
    return config_error(f"{path}: {message}", hint, path=str(path))


def read_config_bytes(path: Path) -> bytes:
    """The file's bytes, or a ConfigError; non-blocking (a pipe would wait), read up to the limit."""
    directory = "is a directory, expected a TOML file", "point at the .toml file itself"
    try:
        descriptor = os.open(path, _OPEN_FLAGS)
        try:
            info = os.fstat(descriptor)
            mode, size = info.st_mode, info.st_size
            if stat.S_ISDIR(mode):
                raise _file_error(path, *directory)
            if not stat.S_ISREG(mode):
                kind = next((name for test, name in _NOT_REGULAR if test(mode)), "a special file")
                link = f" (a link to {os.path.realpath(path)})" if os.path.islink(path) else ""
                hint = "point at the .toml file itself: devices, pipes and sockets are not read, "
                hint += "as they may never end"
                raise _file_error(path, f"is {kind}{link}, not a regular file; expected a TOML file", hint)
            with open(descriptor, "rb", closefd=False) as stream:
                data = b"" if size > MAX_CONFIG_BYTES else stream.read(size + 1)  # not a limit-sized buffer
                data += stream.read(MAX_CONFIG_BYTES + 1 - len(data)) if len(data) > size else b""  # it grew
        finally:
            os.close(descriptor)
    except FileNotFoundError:
        raise _file_error(path, "file not found", f"check the path (relative to {Path.cwd()})") from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise _file_error(path, f"cannot be read: {reason}", "check the file's permissions") from None
    if size > MAX_CONFIG_BYTES or len(data) > MAX_CONFIG_BYTES:
        shown = f"{size:,} bytes" if size > MAX_CONFIG_BYTES else f"more than {MAX_CONFIG_BYTES:,} bytes"
        hint = "an RL config is a few KiB: keep datasets and other bulk data out of it "
        hint += "(the task app can load them itself)"
        limit = f"expected a TOML file of at most {MAX_CONFIG_BYTES:,} bytes"
        raise _file_error(path, f"is {shown}; {limit}", hint)
    return data


def read_toml_file(config_path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and parse a TOML file; every failure (missing ... malformed, too deep) -> ConfigError."""
    path = config_source(config_path)
    return parse_file_bytes(read_config_bytes(path), source=str(path))


def parse_file_bytes(data: bytes, *, source: str) -> dict[str, Any]:
    """:func:`parse_toml` of a file's bytes, parsed once per content; the caller gets its own tree."""
    if len(data) > _CACHED_BYTES:
        return parse_toml(data, source=source)
    copied: dict[str, Any] = copy_tree(_parsed(data, source=source))
    return copied


def _position(text: str | bytes, offset: int) -> tuple[int, int]:
    newline: Any = b"\n" if isinstance(text, bytes) else "\n"
    return text.count(newline, 0, offset) + 1, offset - (text.rfind(newline, 0, offset) + 1) + 1


def parse_toml(data: bytes | str, *, source: str = "<string>") -> dict[str, Any]:
    """Parse TOML from bytes (must be UTF-8) or text, reporting errors with line and column."""
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line, column = _position(data, exc.start)
            message = f"not valid UTF-8 text (byte 0x{data[exc.start : exc.start + 1].hex()} at line {line}, "
            message += f"column {column}); expected a UTF-8 encoded TOML file"
            hint = "save the file as UTF-8 (is it a TOML file at all?)"
            raise ConfigError([ConfigProblem("", message, hint, line, column)], path=source) from None
    else:
        text = data
    problem = _long_key_problem(text)
    if problem is None:
        try:
            parsed = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            problem = _syntax_problem(exc, text)
        except RecursionError:
            problem = ConfigProblem("", "TOML nesting is too deep to parse", "flatten the arrays/tables")
        except ValueError:  # the only other one: an integer literal with too many digits to convert
            problem = _long_integer_problem(text)
    if problem is not None:
        raise ConfigError([problem], path=source)
    return _copied(parsed, source)  # too deep through table headers and dotted keys, which parse fine


def _copied(tree: Mapping[str, Any], source: str | None) -> dict[str, Any]:
    try:
        copied: dict[str, Any] = plain_copy(tree)
    except TreeShapeError as exc:
        raise config_error(exc.message, exc.hint, key=short_key(exc.path), path=source) from None
    return copied


def _long_key_problem(text: str) -> ConfigProblem | None:
    found = _LONG_KEY.search(text) if text.count(".") >= MAX_DEPTH else None
    if found is None:
        return None
    line, column = _position(text, found.start("key"))
    message = f"the dotted key {found.group('key')[:40] + '…'!r} has more than {MAX_DEPTH} parts; "
    hint = f"flatten the key at line {line}: an RL config is a few levels deep"
    return ConfigProblem("", f"{message}expected at most {MAX_DEPTH} levels of tables", hint, line, column)


def _long_integer_problem(text: str) -> ConfigProblem:
    getter = getattr(sys, "get_int_max_str_digits", None)  # 3.11 and late 3.10 releases
    limit = int(getter()) if getter is not None else 4300
    literal = re.compile(rf"[=\[,{{][ \t\r\n]*(?P<number>[+-]?[0-9](?:_?[0-9]){{{max(limit, 1)},}})")
    found = literal.search(text)
    if found is None:
        message = f"invalid TOML: an integer literal has more than {limit:,} digits; expected {_INT_LIMIT}"
        return ConfigProblem("", message, _INT_HINT)
    digits = sum(char.isdigit() for char in found.group("number"))
    message = f"integer literal of {digits:,} digits; expected {_INT_LIMIT}"
    return ConfigProblem("", message, _INT_HINT, *_position(text, found.start("number")))


def _syntax_problem(exc: Exception, text: str) -> ConfigProblem:
    message = str(exc)
    found = _POSITION.search(message)
    if found is None:
        return ConfigProblem("", f"invalid TOML: {message}", "fix the TOML syntax")
    raw, lines = message[: found.start()], text.split("\n")
    line, column = (int(found[1]), int(found[2])) if found[1] else (len(lines), len(lines[-1]) + 1)
    excerpt = ""
    if 1 <= line <= len(lines) and len(source_line := lines[line - 1].rstrip("\r")) <= 120:
        excerpt = f"\n    {source_line}\n    {' ' * max(column - 1, 0)}^"
    if "\ufeff" in text[:1] and line == 1:
        hint = "remove the byte-order mark at the start of the file (save as UTF-8 without BOM)"
    else:
        hint = f"fix the TOML syntax at line {line}, column {column}"
    return ConfigProblem("", f"invalid TOML: {raw}{excerpt}", hint, line, column)


SPECIAL_KEYS = ("task_url", "model", "backend")
_KEY_PART = re.compile(r'[ \t]*(?:"((?:[^"\\]|\\.)*)"[ \t]*|([^."]*))(\.|\Z)', re.DOTALL)


def parse_dotted_key(key: str, *, source: str | None = None) -> tuple[str, ...]:
    """``'rollout.env_config."a.b"'`` -> ``("rollout", "env_config", "a.b")``."""
    hint = 'use names separated by dots, like "training.batch_size" (quote a name containing a dot: '
    hint += "'tags.\"a.b\"')"
    bad = config_error(f"override key {key!r} is not a valid dotted key path", hint, key=key, path=source)
    parts: list[str] = []
    position = 0
    while (found := _KEY_PART.match(key, position)) is not None:
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
            message = f"override key {shown!r} has more than {MAX_DEPTH} parts; expected at most {MAX_DEPTH} "
            hint = 'override a key of a few levels, like "training.batch_size"'
            raise config_error(message + "levels of tables", hint, key=shown, path=source)
        position = found.end()
    raise bad


def split_overrides(
    overrides: Mapping[str, Any] | None, *, source: str | None = None
) -> tuple[dict[str, str | None], list[tuple[str, Any]]]:
    """Separate the special SDK keys (a str or None each) from tree edits, checking both for type errors."""
    special: dict[str, str | None] = {}
    edits: list[tuple[str, Any]] = []
    if not isinstance(overrides, (Mapping, type(None))):
        message = f"expected a mapping of override keys to values, got {describe(overrides)}"
        hint = 'pass e.g. overrides={"training.batch_size": 2}'
        raise config_error(message, hint, key="overrides", path=source)
    for key, value in (overrides or {}).items():
        if not isinstance(key, str) or not key.strip():
            message = f"override keys must be non-empty strings, got {describe(key)}"
            hint = 'use dotted names like "training.batch_size"'
            raise config_error(message, hint, key=key_text(key), path=source)
        if key not in SPECIAL_KEYS:
            edits.append((key, value))
        elif value is None or isinstance(value, str):
            special[key] = value
        else:
            model = 'to edit the [model] table use dotted keys such as "model.base"'
            hint = model if key == "model" else f'overrides["{key}"] must be a string (or None)'
            message = f'overrides["{key}"] expected a string, got {describe(value)}'
            raise config_error(message, hint, key=key, path=source)
    return special, edits


def apply_overrides(
    config: Mapping[str, Any],
    overrides: Mapping[str, Any] | None,
    *,
    source: str | None = None,
    allow_new_keys: bool = False,
) -> dict[str, Any]:
    """A copy of *config* with the non-special overrides applied; unknown new keys fail unless allowed."""
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
    result = _copied(config, source)
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
    """Apply one edit at *path* below *node*, which sits at *above*; a table merges key by key."""
    merge = isinstance(value, Mapping)
    for depth, segment in enumerate(path if merge else path[:-1]):
        child = node.get(segment)
        if child is None:
            child = node[segment] = {}
        elif not isinstance(child, MutableMapping):
            spot = format_key((*above, *path[: depth + 1]))
            message = f"override {origin!r} cannot be applied: {spot} is {describe(child)}, not a table"
            hint = f"override {spot} itself (or set it to None first) instead of a key inside it"
            raise config_error(message, hint, key=origin, path=source)
        node = child
    if not merge:
        if value is None:
            node.pop(path[-1], None)
        else:
            node[path[-1]] = value  # apply_overrides made it a fresh copy
        return
    for key, item in value.items():
        if not isinstance(key, str):
            message = f"override {origin!r} has a non-string key {describe(key)}"
            raise config_error(message, "table keys must be strings", key=origin, path=source)
        _apply(node, (key,), item, origin, source, (*above, *path))


@keywords_checked
def load_rl_config(
    config_path: str | os.PathLike[str],
    *,
    overrides: Mapping[str, Any] | None = None,
    allow_new_keys: bool = False,
) -> dict[str, Any]:
    """The parsed TOML with non-special *overrides* applied, not validated yet."""
    path = config_source(config_path)
    return apply_overrides(read_toml_file(path), overrides, source=str(path), allow_new_keys=allow_new_keys)


_parsed = functools.lru_cache(maxsize=64)(parse_toml)
