"""Files written for the user: names from the test id, atomic replacement, path problems, reading JSON."""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import itertools
import json
import math
import os
import re
import stat
import sys
import tempfile
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from pytest_synth_rl.errors import closest
from pytest_synth_rl.secrets.masking import redact

_UNSAFE = re.compile(r"[^A-Za-z0-9._\-\[\]]+")
_MAX_READABLE = 120
_NEAR_SCAN_LIMIT = 2000


def masked_digest(test_id: str) -> str:
    """10 hex digits naming *test_id*, hashed once masked (a key leaves no fingerprint)."""
    return hashlib.sha256(redact(test_id).encode("utf-8", "surrogatepass")).hexdigest()[:10]


def safe_file_stem(test_id: str) -> str:
    if not test_id or not test_id.strip():
        raise ValueError("a test id is required to name a per-test file (got an empty string)")
    readable = redact(test_id).replace("::", "__").replace("/", ".").replace("\\", ".")
    readable = (_UNSAFE.sub("_", readable).strip("._") or "test")[:_MAX_READABLE]
    return f"{readable}-{masked_digest(test_id)}"


def atomic_write_text(
    path: str | os.PathLike[str], text: str, *, check: Callable[[Path], None] | None = None, sync: bool = True
) -> Path:
    """Write *text* to *path* atomically (devices in place); if *check* of the copy raises, nothing is.
    Without *sync*, the file survives the process, not the machine (no ``fsync``)."""
    target = Path(path)
    real = Path(os.path.realpath(target)) if target.is_symlink() else target
    if real.is_symlink():
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(target))
    mode = 0
    with contextlib.suppress(OSError):
        mode = os.stat(real).st_mode
    if mode and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        data = text.encode("utf-8")
        if check is not None:
            fd, name = tempfile.mkstemp(prefix=".synth-rl-", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(data)
                check(Path(name))
            finally:
                Path(name).unlink(missing_ok=True)
        _write_in_place(real, data)
        return target
    real.parent.mkdir(parents=True, exist_ok=True)
    temp = real.with_name(f".{real.name}.{os.getpid()}-{uuid.uuid4().hex[:12]}.tmp")
    try:
        with open(temp, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            if sync:
                os.fsync(handle.fileno())
        if check is not None:
            check(temp)
        os.replace(temp, real)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return target


def _write_in_place(path: Path, data: bytes) -> None:
    handle = os.open(path, os.O_WRONLY | getattr(os, "O_NOCTTY", 0))
    try:
        view = memoryview(data)
        while view:
            count = os.write(handle, view)
            if count <= 0:
                raise OSError(errno.EIO, "the file took none of the data", str(path))
            view = view[count:]
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(handle)
        raise
    os.close(handle)


def path_problem(
    path: str | os.PathLike[str], *, directory: bool = False, make_parents: bool = True
) -> str | None:
    """Why *path* cannot be written as a file (or with *directory*, be a folder to write into)."""
    target = Path(path)
    with contextlib.suppress(OSError):
        if not directory and target.is_dir():
            return f"{target} is a directory"
        if not directory and str(path).endswith(("/", os.sep)):
            return f"{path} ends with a slash, so it names a directory, not a file"
        for candidate in (target, *target.parents) if directory else target.parents:
            if candidate.is_dir():
                if not make_parents and candidate != target.parent:
                    return f"directory {target.parent} does not exist"
                return None
            if candidate.exists() or candidate.is_symlink():
                what = "a file, not a directory" if candidate.is_file() else "not a directory"
                return f"{candidate} is {what}"
    return None


def write_error_reason(path: str | os.PathLike[str], error: OSError, *, make_parents: bool = True) -> str:
    return path_problem(path, make_parents=make_parents) or error.strerror or str(error)


def shell_quote(argument: str) -> str:
    return '"' + re.sub(r'(["$`\\])', r"\\\1", argument) + '"'


MAX_JSON_DEPTH = 200
_MAX_SHOWN_FIELD = 200


class UnreadableDocument(ValueError):
    """Unreadable JSON: ``code`` says how, ``field`` is the JSON path at fault (``jobs[3].reward``)."""

    def __init__(self, code: str, problem: str, field: str = "") -> None:
        if len(field) > _MAX_SHOWN_FIELD:
            field = field[: _MAX_SHOWN_FIELD - 1] + "…"
        self.code, self.problem, self.field = code, problem, field
        super().__init__(f"at {field}: {problem}" if field else problem)


class _LongInt(NamedTuple):
    digits: int


def _int_or_long(text: str) -> int | _LongInt:
    try:
        return int(text)
    except ValueError:
        return _LongInt(len(text.lstrip("-")))


class _NeedsWalk(Exception):
    pass


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise _NeedsWalk
    return number


def parse_json_document(data: bytes | str, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Parse JSON read back; broken, a too-long int, NaN or too deep is :class:`UnreadableDocument`."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as error:
            bad = error.object[error.start : error.start + 1]
            raise UnreadableDocument(
                "invalid_json", f"is not UTF-8 text (byte 0x{bad.hex()} at offset {error.start})"
            ) from None
    too_deep = f"is nested too deeply to parse (more than {max_depth} levels)"
    try:
        try:
            if len(data) > sys.get_int_max_str_digits() or data.count("{") + data.count("[") > max_depth:
                raise _NeedsWalk
            return json.loads(data, parse_float=_finite, parse_constant=_finite)
        except _NeedsWalk:
            value = json.loads(data, parse_int=_int_or_long)
    except json.JSONDecodeError as error:
        raise UnreadableDocument(
            "invalid_json", f"is not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})"
        ) from None
    except RecursionError:
        raise UnreadableDocument("invalid_json", too_deep) from None
    pending: list[tuple[str, Any, int]] = [("", value, 1)]
    while pending:
        field, item, depth = pending.pop()
        if isinstance(item, _LongInt):
            limit = sys.get_int_max_str_digits()
            problem = f"must be an integer of at most {limit} digits, got {item.digits} digits"
            raise UnreadableDocument("number_too_long", problem, field)
        if isinstance(item, float) and not math.isfinite(item):
            raise UnreadableDocument("not_finite", f"must be a finite number, got {item!r}", field)
        if isinstance(item, (dict, list)) and depth > max_depth:
            raise UnreadableDocument("invalid_json", too_deep, field)
        if isinstance(item, dict):
            named = [(f"{field}.{key}" if field else key, v) for key, v in item.items()]
        elif isinstance(item, list):
            named = [(f"{field}[{index}]", v) for index, v in enumerate(item)]
        else:
            continue
        pending.extend((name, v, depth + 1) for name, v in reversed(named))
    return value


@dataclass(frozen=True)
class FileMiss:
    problem: str
    hint: str = ""  # "did you mean 'x'? " for a near miss


@functools.lru_cache(maxsize=256)
def _candidates(given: Path, folders: tuple[Path, ...]) -> tuple[Path, ...]:
    return (given,) if given.is_absolute() else tuple(dict.fromkeys(folder / given for folder in folders))


def find_file(given: Path, folders: Sequence[Path]) -> Path | FileMiss:
    """*given* if absolute, else the first file ``folder / given``; else a :class:`FileMiss`."""
    for candidate in (candidates := _candidates(given, tuple(folders))):
        if candidate.is_file():
            return candidate
    if directories := [c for c in candidates if c.is_dir()]:
        return FileMiss(f"{given!s} is a directory ({directories[0]}), not a file")
    names: set[str] = set()
    for path in candidates:
        with contextlib.suppress(OSError), os.scandir(path.parent) as entries:
            names.update(
                entry.name for entry in itertools.islice(entries, _NEAR_SCAN_LIMIT) if entry.is_file()
            )
    near = closest(candidates[0].name, sorted(names)) if candidates else None
    if near is not None and given.parent != Path():
        near = str(given.parent / near)
    hint = f"did you mean {near!r}? " if near is not None else ""
    return FileMiss(f"{given!s} does not exist (looked in: {', '.join(map(str, candidates))})", hint)
