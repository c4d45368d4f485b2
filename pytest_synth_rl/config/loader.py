"""Reading an RL config file: bytes -> UTF-8 text -> TOML tree, every failure a ConfigError.

A broken config should fail with the file, line and column, not with a ``UnicodeDecodeError`` or a
parser traceback. We decode ourselves (to point at the offending byte) and translate the TOML
parser's "(at line X, column Y)" into a :class:`~pytest_synth_rl.errors.ConfigProblem` carrying
``line``/``column`` and the source line with a caret. A device, a file too large or a tree too
deep to walk is a ConfigError too, so nothing a file holds can hang or crash the reader.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from pytest_synth_rl.config.coerce import describe
from pytest_synth_rl.config.overrides import apply_overrides
from pytest_synth_rl.config.problems import short_key
from pytest_synth_rl.config.source_file import read_config_bytes
from pytest_synth_rl.config.toml_scan import long_integer_problem, long_key_problem
from pytest_synth_rl.config.tree import TreeShapeError, copy_tree, plain_copy
from pytest_synth_rl.errors import ConfigError, ConfigProblem, keywords_checked

__all__ = ["config_source", "load_rl_config", "parse_file_bytes", "parse_toml", "read_toml_file"]

_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")
_AT_END = re.compile(r"\s*\(at end of document\)\s*$")


def _toml() -> ModuleType:
    # tomllib is stdlib from 3.11; tomli is the same parser, packaged for older interpreters.
    return importlib.import_module("tomllib" if sys.version_info >= (3, 11) else "tomli")


def config_source(config_path: object) -> Path:
    """Accept a ``str`` or path-like; anything else (a dict, say) is a usage error."""
    if isinstance(config_path, (str, os.PathLike)):
        return Path(os.fspath(config_path))
    raise ConfigError(
        [
            ConfigProblem(
                key="",
                message=f"expected the path of a TOML file (str or os.PathLike), got {describe(config_path)}",
                hint="pass a path, or build_rl_payload_from_mapping() for a config you hold as a dict",
            )
        ]
    )


def read_toml_file(config_path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and parse a TOML file; missing, unreadable, not a regular file, too large, non-UTF-8,
    malformed or nested too deeply -> ConfigError."""
    path = config_source(config_path)
    return parse_file_bytes(read_config_bytes(path), source=str(path))


def parse_file_bytes(data: bytes, *, source: str) -> dict[str, Any]:
    """:func:`parse_toml` for the bytes of a config file, parsed once per content (see below);
    the caller gets a tree of its own."""
    if len(data) > _CACHED_BYTES:
        return parse_toml(data, source=source)
    copied: dict[str, Any] = copy_tree(_parse_file_content(data, source))  # a plain_copy'd tree
    return copied


#: Files up to this size are parsed once per content; a larger one is not kept in memory.
_CACHED_BYTES = 1024 * 1024


@functools.lru_cache(maxsize=64)
def _parse_file_content(data: bytes, source: str) -> dict[str, Any]:
    """Parsed TOML by file content: a suite building hundreds of jobs from one config parses it
    once. Callers get a deep copy, since overrides and validation edit the tree. Errors are not
    cached (lru_cache does not keep exceptions), so a broken file reports every time."""
    return parse_toml(data, source=source)


def parse_toml(data: bytes | str, *, source: str = "<string>") -> dict[str, Any]:
    """Parse TOML from bytes (must be UTF-8) or text, reporting errors with line and column."""
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line, column = _position_of_byte(data, exc.start)
            bad = data[exc.start : exc.start + 1].hex()
            problem = ConfigProblem(
                key="",
                message=f"not valid UTF-8 text (byte 0x{bad} at line {line}, column {column}); "
                "expected a UTF-8 encoded TOML file",
                hint="save the file as UTF-8 (is it a TOML file at all?)",
                line=line,
                column=column,
            )
            raise ConfigError([problem], path=source) from None
    else:
        text = data
    return _parse_text(text, source)


def _parse_text(text: str, source: str) -> dict[str, Any]:
    """tomllib's result as a copy bounded to MAX_DEPTH levels, every failure a ConfigError."""
    long_key = long_key_problem(text)
    if long_key is not None:
        raise ConfigError([long_key], path=source)
    toml = _toml()
    try:
        parsed = toml.loads(text)
    except toml.TOMLDecodeError as exc:
        raise ConfigError([_syntax_problem(exc, text)], path=source) from None
    except RecursionError:
        problem = ConfigProblem(
            key="", message="TOML nesting is too deep to parse", hint="flatten the arrays/tables"
        )
        raise ConfigError([problem], path=source) from None
    except ValueError:  # the only other one: an integer literal with too many digits to convert
        raise ConfigError([long_integer_problem(text)], path=source) from None
    try:
        copied: dict[str, Any] = plain_copy(parsed)
    except TreeShapeError as exc:  # deep through table headers and dotted keys, which parse fine
        problem = ConfigProblem(key=short_key(exc.path), message=exc.message, hint=exc.hint)
        raise ConfigError([problem], path=source) from None
    return copied


def _position_of_byte(data: bytes, offset: int) -> tuple[int, int]:
    line = data.count(b"\n", 0, offset) + 1
    column = offset - (data.rfind(b"\n", 0, offset) + 1) + 1
    return line, column


def _syntax_problem(exc: Exception, text: str) -> ConfigProblem:
    raw = str(getattr(exc, "msg", None) or exc)
    line: int | None = getattr(exc, "lineno", None)
    column: int | None = getattr(exc, "colno", None)
    message = str(exc)
    found = _POSITION.search(message)
    at_end = _AT_END.search(message)
    if found:
        line, column = int(found.group(1)), int(found.group(2))
        raw = message[: found.start()]
    elif at_end:
        raw = message[: at_end.start()]
        lines = text.split("\n")
        line, column = len(lines), len(lines[-1]) + 1
    if line is None or column is None:
        return ConfigProblem(key="", message=f"invalid TOML: {raw}", hint="fix the TOML syntax")
    lines = text.split("\n")
    excerpt = ""
    if 1 <= line <= len(lines):
        source_line = lines[line - 1].rstrip("\r")
        if len(source_line) <= 120:
            excerpt = f"\n    {source_line}\n    {' ' * max(column - 1, 0)}^"
    if "\ufeff" in text[:1] and line == 1:
        hint = "remove the byte-order mark at the start of the file (save as UTF-8 without BOM)"
    else:
        hint = f"fix the TOML syntax at line {line}, column {column}"
    return ConfigProblem(
        key="",
        message=f"invalid TOML: {raw}{excerpt}",
        hint=hint,
        line=line,
        column=column,
    )


@keywords_checked
def load_rl_config(
    config_path: str | os.PathLike[str],
    *,
    overrides: Mapping[str, Any] | None = None,
    allow_new_keys: bool = False,
) -> dict[str, Any]:
    """The parsed TOML with non-special *overrides* applied; not validated yet.

    The special keys (``task_url``, ``model``, ``backend``) are type-checked but not applied:
    they are inputs to the payload builder, not edits of the file.
    """
    path = config_source(config_path)
    parsed = read_toml_file(path)
    return apply_overrides(parsed, overrides, source=str(path), allow_new_keys=allow_new_keys)
