"""Reading an RL config file: bounded bytes -> UTF-8 text -> TOML tree, every failure a ConfigError.

Failures name the file, line and column (with the source line and a caret), never a decoder or
parser traceback; devices, pipes, huge files and trees too deep are refused without hanging.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import stat
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_synth_rl.config.coerce import describe
from pytest_synth_rl.config.overrides import apply_overrides
from pytest_synth_rl.config.problems import config_error, short_key
from pytest_synth_rl.config.tree import MAX_DEPTH, TreeShapeError, copy_tree, plain_copy
from pytest_synth_rl.errors import ConfigError, ConfigProblem, keywords_checked

#: tomllib, or the same parser packaged for interpreters before 3.11.
tomllib: Any = importlib.import_module("tomllib" if sys.version_info >= (3, 11) else "tomli")

__all__ = [
    "MAX_CONFIG_BYTES",
    "config_source",
    "load_rl_config",
    "parse_file_bytes",
    "parse_toml",
    "read_config_bytes",
    "read_toml_file",
]

#: The largest config file read: a thousand times a real one, and seconds of parsing at worst.
MAX_CONFIG_BYTES = 8 * 1024 * 1024
#: Files up to this size are parsed once per content.
_CACHED_BYTES = 1024 * 1024
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_NOT_REGULAR = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
)
_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")
_AT_END = re.compile(r"\s*\(at end of document\)\s*$")
_SEGMENT = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\\n]|\\.)*"|'[^'\n]*')"""
# A key starts a line (after ``[`` or ``[[``) or follows ``{`` or ``,``: MAX_DEPTH dotted parts
# and yet another dot is one too many (the parser is quadratic in a dotted key's length).
_LONG_KEY = re.compile(
    rf"(?:^[ \t]*\[{{0,2}}|[{{,])[ \t]*(?P<key>(?:{_SEGMENT}[ \t]*\.[ \t]*){{{MAX_DEPTH}}})", re.MULTILINE
)
_INT_LIMIT = "an integer smaller than 2**63 in magnitude"
_INT_HINT = "use a smaller number, or quote it as a string if it is an identifier rather than a count"


def config_source(config_path: object) -> Path:
    """A ``str`` or path-like as a Path; anything else is a ConfigError."""
    if isinstance(config_path, (str, os.PathLike)):
        return Path(os.fspath(config_path))
    raise config_error(
        f"expected the path of a TOML file (str or os.PathLike), got {describe(config_path)}",
        "pass a path, or build_rl_payload_from_mapping() for a config you hold as a dict",
    )


def _file_error(path: Path, message: str, hint: str) -> ConfigError:
    return config_error(f"{path}: {message}", hint, path=str(path))


def _too_large(path: Path, size: str) -> ConfigError:
    return _file_error(
        path,
        f"is {size}; expected a TOML file of at most {MAX_CONFIG_BYTES:,} bytes",
        "an RL config is a few KiB: keep datasets and other bulk data out of it "
        "(the task app can load them itself)",
    )


def _unreadable(path: Path, exc: OSError) -> ConfigError:
    return _file_error(
        path, f"cannot be read: {exc.strerror or type(exc).__name__}", "check the file's permissions"
    )


def read_config_bytes(path: Path) -> bytes:
    """The file's bytes, or a ConfigError: opened non-blocking (a pipe would wait for a writer), checked
    with ``fstat`` on the descriptor, read only up to the limit (``/proc`` files report size 0)."""
    directory = "is a directory, expected a TOML file", "point at the .toml file itself"
    try:
        descriptor = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        raise _file_error(path, "file not found", f"check the path (relative to {Path.cwd()})") from None
    except IsADirectoryError:
        raise _file_error(path, *directory) from None
    except OSError as exc:
        raise _unreadable(path, exc) from None
    try:
        info = os.fstat(descriptor)
        mode, size = info.st_mode, info.st_size
        if stat.S_ISDIR(mode):
            raise _file_error(path, *directory)
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _NOT_REGULAR if test(mode)), "a special file")
            link = f" (a link to {os.path.realpath(path)})" if os.path.islink(path) else ""
            raise _file_error(
                path,
                f"is {kind}{link}, not a regular file; expected a TOML file",
                "point at the .toml file itself: devices, pipes and sockets are not read, "
                "as they may never end",
            )
        if size > MAX_CONFIG_BYTES:
            raise _too_large(path, f"{size:,} bytes")
        chunks: list[bytes] = []
        total = 0
        while total <= MAX_CONFIG_BYTES and (
            chunk := os.read(descriptor, min(1 << 20, MAX_CONFIG_BYTES + 1 - total))
        ):
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise _unreadable(path, exc) from None
    finally:
        os.close(descriptor)
    if total > MAX_CONFIG_BYTES:
        raise _too_large(path, f"more than {MAX_CONFIG_BYTES:,} bytes")
    return b"".join(chunks)


def read_toml_file(config_path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and parse a TOML file; every failure (missing ... malformed, too deep) -> ConfigError."""
    path = config_source(config_path)
    return parse_file_bytes(read_config_bytes(path), source=str(path))


def parse_file_bytes(data: bytes, *, source: str) -> dict[str, Any]:
    """:func:`parse_toml` of a file's bytes, parsed once per content; the caller gets its own tree."""
    if len(data) > _CACHED_BYTES:
        return parse_toml(data, source=source)
    copied: dict[str, Any] = copy_tree(_parse_file_content(data, source))
    return copied


@functools.lru_cache(maxsize=64)
def _parse_file_content(data: bytes, source: str) -> dict[str, Any]:
    return parse_toml(data, source=source)  # errors are not cached: a broken file reports every time


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
            bad = ConfigProblem(
                key="",
                message=f"not valid UTF-8 text (byte 0x{data[exc.start : exc.start + 1].hex()} at line "
                f"{line}, column {column}); expected a UTF-8 encoded TOML file",
                hint="save the file as UTF-8 (is it a TOML file at all?)",
                line=line,
                column=column,
            )
            raise ConfigError([bad], path=source) from None
    else:
        text = data
    problem = _long_key_problem(text)
    if problem is None:
        try:
            parsed = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            problem = _syntax_problem(exc, text)
        except RecursionError:
            problem = ConfigProblem(
                key="", message="TOML nesting is too deep to parse", hint="flatten the arrays/tables"
            )
        except ValueError:  # the only other one: an integer literal with too many digits to convert
            problem = _long_integer_problem(text)
    if problem is not None:
        raise ConfigError([problem], path=source)
    try:
        copied: dict[str, Any] = plain_copy(parsed)
    except TreeShapeError as exc:  # deep through table headers and dotted keys, which parse fine
        raise config_error(exc.message, exc.hint, key=short_key(exc.path), path=source) from None
    return copied


def _long_key_problem(text: str) -> ConfigProblem | None:
    """The first dotted key or table header with more than ``MAX_DEPTH`` parts, if any."""
    found = _LONG_KEY.search(text) if text.count(".") >= MAX_DEPTH else None
    if found is None:
        return None
    line, column = _position(text, found.start("key"))
    return ConfigProblem(
        key="",
        message=f"the dotted key {found.group('key')[:40] + '…'!r} has more than {MAX_DEPTH} parts; "
        f"expected at most {MAX_DEPTH} levels of tables",
        hint=f"flatten the key at line {line}: an RL config is a few levels deep",
        line=line,
        column=column,
    )


def _long_integer_problem(text: str) -> ConfigProblem:
    """The parser's bare "too many digits" ValueError, placed at the literal."""
    getter = getattr(sys, "get_int_max_str_digits", None)  # 3.11 and late 3.10 releases
    limit = int(getter()) if getter is not None else 4300
    literal = re.compile(rf"[=\[,{{][ \t\r\n]*(?P<number>[+-]?[0-9](?:_?[0-9]){{{max(limit, 1)},}})")
    found = literal.search(text)
    if found is None:
        message = f"invalid TOML: an integer literal has more than {limit:,} digits; expected {_INT_LIMIT}"
        return ConfigProblem(key="", message=message, hint=_INT_HINT)
    digits = sum(char.isdigit() for char in found.group("number"))
    line, column = _position(text, found.start("number"))
    message = f"integer literal of {digits:,} digits; expected {_INT_LIMIT}"
    return ConfigProblem(key="", message=message, hint=_INT_HINT, line=line, column=column)


def _syntax_problem(exc: Exception, text: str) -> ConfigProblem:
    message = str(exc)
    raw = str(getattr(exc, "msg", None) or exc)
    line: int | None = getattr(exc, "lineno", None)
    column: int | None = getattr(exc, "colno", None)
    lines = text.split("\n")
    if found := _POSITION.search(message):
        line, column = int(found.group(1)), int(found.group(2))
        raw = message[: found.start()]
    elif at_end := _AT_END.search(message):
        raw = message[: at_end.start()]
        line, column = len(lines), len(lines[-1]) + 1
    if line is None or column is None:
        return ConfigProblem(key="", message=f"invalid TOML: {raw}", hint="fix the TOML syntax")
    excerpt = ""
    if 1 <= line <= len(lines) and len(source_line := lines[line - 1].rstrip("\r")) <= 120:
        excerpt = f"\n    {source_line}\n    {' ' * max(column - 1, 0)}^"
    if "\ufeff" in text[:1] and line == 1:
        hint = "remove the byte-order mark at the start of the file (save as UTF-8 without BOM)"
    else:
        hint = f"fix the TOML syntax at line {line}, column {column}"
    return ConfigProblem(key="", message=f"invalid TOML: {raw}{excerpt}", hint=hint, line=line, column=column)


@keywords_checked
def load_rl_config(
    config_path: str | os.PathLike[str],
    *,
    overrides: Mapping[str, Any] | None = None,
    allow_new_keys: bool = False,
) -> dict[str, Any]:
    """The parsed TOML with non-special *overrides* applied; not validated yet (the special keys are
    type-checked only)."""
    path = config_source(config_path)
    return apply_overrides(read_toml_file(path), overrides, source=str(path), allow_new_keys=allow_new_keys)
