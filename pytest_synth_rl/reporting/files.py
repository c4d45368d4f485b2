"""Files written for the user: stable names and atomic replacement.

Baselines and cassettes are both "one small JSON file per test id", written while other pytest
workers (xdist) may be writing theirs, or even the same one; run reports are one file the user
names. Two rules make that safe:

* a file's name is a pure function of the test id, so every worker agrees on it and nothing
  machine-specific (absolute paths, worker ids, dates) ever ends up in a name;
* a regular file is never written in place: the text goes to a uniquely named temporary file in
  the same directory, is flushed to disk, and then :func:`os.replace` swaps it in. Readers see the
  old file or the new one, never a torn mix; with two writers of the same id the last ``replace``
  wins whole.

What the user named is kept what it is: a symbolic link is written through (the file it points to
is replaced, the link stays), and a path that is neither a regular file nor a directory (a
character device, a FIFO) is opened and written in place, never replaced.
"""

from __future__ import annotations

import contextlib
import difflib
import errno
import hashlib
import json
import os
import re
import stat
import tempfile
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "FileMiss",
    "UnreadableDocument",
    "atomic_write_text",
    "directory_path_problem",
    "file_path_problem",
    "find_file",
    "near_file_name",
    "parse_json_document",
    "safe_file_stem",
    "shell_quote",
    "write_error_reason",
]

# Readable characters kept in file names; everything else becomes "_". Brackets stay because
# parametrised node ids ("test_x[qwen-0.6b]") are the part people look for.
_UNSAFE = re.compile(r"[^A-Za-z0-9._\-\[\]]+")
_MAX_READABLE = 120


def safe_file_stem(test_id: str) -> str:
    """A stable, readable, collision-free file stem for a pytest node id.

    ``"tests/test_rl.py::TestJob::test_reward[qwen]"`` ->
    ``"tests.test_rl.py__TestJob__test_reward[qwen]-<10 hex>"``.

    Sanitising alone is lossy (``a/b`` and ``a.b`` would collide), so a short hash of the exact
    id is appended: the readable part is for humans, the hash keeps distinct ids apart. Both depend
    only on the id, which pytest builds relative to the rootdir, so every machine and every xdist
    worker derives the same name.
    """
    if not test_id or not test_id.strip():
        raise ValueError("a test id is required to name a per-test file (got an empty string)")
    readable = test_id.replace("::", "__").replace("/", ".").replace("\\", ".")
    readable = _UNSAFE.sub("_", readable).strip("._") or "test"
    readable = readable[:_MAX_READABLE]
    digest = hashlib.sha256(test_id.encode("utf-8")).hexdigest()[:10]
    return f"{readable}-{digest}"


def _temp_name(target: Path) -> Path:
    # pid + thread + xdist worker make the owner obvious when debugging; the uuid makes the name
    # unique even for two writers in the same thread (re-entrant saves).
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    token = f"{os.getpid()}-{threading.get_ident()}-{worker}-{uuid.uuid4().hex[:12]}"
    return target.with_name(f".{target.name}.{token}.tmp")


def atomic_write_text(
    path: str | os.PathLike[str],
    text: str,
    *,
    check: Callable[[Path], None] | None = None,
) -> Path:
    """Write *text* (UTF-8) to *path* and return *path*: the one way files are written for the user.

    A regular file (or a new one; missing directories are made) is replaced atomically. A symbolic
    link is written through: the file it points to is replaced, the link stays. An existing path
    that is neither a regular file nor a directory (a character device, a FIFO) is opened and
    written in place, never replaced. A failed write (a full disk or device) raises
    :class:`OSError`; nothing is reported as written that was not.

    *check*, if given, is called with a finished temporary file holding *text* before anything
    reaches *path*; if it raises, the temporary file is removed, the previous file (if any) is left
    untouched, and the exception propagates. That is how a cassette that still contains a secret
    is kept off disk.
    """
    target = Path(path)
    real = _through_links(target)
    if _is_special(real):
        data = text.encode("utf-8")
        if check is not None:
            _check_apart(data, check)
        _write_in_place(real, data)
        return target
    real.parent.mkdir(parents=True, exist_ok=True)
    temp = _temp_name(real)
    try:
        with open(temp, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if check is not None:
            check(temp)
        os.replace(temp, real)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    return target


def _through_links(target: Path) -> Path:
    """The path a write to *target* lands on: *target*, or the file its symbolic links lead to
    (which need not exist yet). A loop of links is an :class:`OSError`, as for any other write."""
    if not target.is_symlink():
        return target
    real = Path(os.path.realpath(target))
    if real.is_symlink():  # realpath stops on a link that leads back to itself
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(target))
    return real


def _is_special(path: Path) -> bool:
    """Whether *path* exists and is neither a regular file nor a directory (a device, a FIFO)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:  # missing (a new file) or unreadable: the write itself says what is wrong
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _write_in_place(path: Path, data: bytes) -> None:
    """Write *data* into the existing special file *path* (no temporary file, no replace)."""
    handle = os.open(path, os.O_WRONLY | getattr(os, "O_NOCTTY", 0))
    try:
        view = memoryview(data)
        while view:
            count = os.write(handle, view)
            if count <= 0:  # a device that takes nothing would loop forever
                raise OSError(errno.EIO, "the file took none of the data", str(path))
            view = view[count:]
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(handle)
        raise
    os.close(handle)


def _check_apart(data: bytes, check: Callable[[Path], None]) -> None:
    """Run *check* on a temporary copy of *data* kept apart from the special file it is meant for
    (next to a device there may be no place for it), then remove the copy."""
    handle, name = tempfile.mkstemp(prefix=".synth-rl-", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        check(Path(name))
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)


def _not_a_directory(path: Path) -> str:
    return f"{path} is a file, not a directory" if path.is_file() else f"{path} is not a directory"


def file_path_problem(path: str | os.PathLike[str], *, make_parents: bool = True) -> str | None:
    """Why a file cannot be written at *path*, judged without writing anything, or ``None``.

    Catches what a look at the path shows: *path* is a directory, or a part of its directory path is a
    file. With ``make_parents=False`` (appending to a file, as to ``$GITHUB_STEP_SUMMARY``) a
    missing directory is a problem too. Permissions and full disks are left to the write itself.
    """
    target = Path(path)
    try:
        if target.is_dir():
            return f"{target} is a directory"
        if str(path).endswith(("/", os.sep)):  # Path() drops the slash: it would write a file "name"
            return f"{path} ends with a slash, so it names a directory, not a file"
        for parent in target.parents:
            if parent.is_dir():
                if not make_parents and parent != target.parent:
                    return f"directory {target.parent} does not exist"
                return None
            if parent.exists() or parent.is_symlink():
                return _not_a_directory(parent)
    except OSError:  # an unreadable directory on the way: the write itself will say what is wrong
        return None
    return None


def directory_path_problem(path: str | os.PathLike[str]) -> str | None:
    """Why *path* cannot be (or be made) a directory to write files into, or ``None``."""
    target = Path(path)
    try:
        for candidate in (target, *target.parents):
            if candidate.is_dir():
                return None
            if candidate.exists() or candidate.is_symlink():
                return _not_a_directory(candidate)
    except OSError:
        return None
    return None


def write_error_reason(path: str | os.PathLike[str], error: OSError, *, make_parents: bool = True) -> str:
    """What went wrong writing *path*, in words: the path's shape if that explains *error*
    (:func:`file_path_problem`), else the system's reason ("Permission denied")."""
    return file_path_problem(path, make_parents=make_parents) or error.strerror or str(error)


def shell_quote(argument: str) -> str:
    """Double-quote *argument* for a POSIX shell, the way people write node ids in commands.

    Node ids contain ``[`` and ``::`` (glob and shell-special), so commands we print always quote
    them; ``"``, ``$``, backquote and backslash are escaped so the printed command is exact.
    """
    escaped = re.sub(r'(["$`\\])', r"\\\1", argument)
    return f'"{escaped}"'


class UnreadableDocument(ValueError):
    """A stored JSON file that cannot be read; the message says what is wrong, not which file."""


def parse_json_document(data: bytes | str) -> Any:
    """Parse a stored JSON file, turning every way it can be broken into :class:`UnreadableDocument`.

    Files get truncated, hand-edited, saved in another encoding or replaced by something else;
    the caller adds the file name, so the user learns which file is broken and how.
    """
    if isinstance(data, bytes):
        raw = data
        try:
            data = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            bad = raw[error.start : error.start + 1]
            raise UnreadableDocument(
                f"is not UTF-8 text (byte 0x{bad.hex()} at offset {error.start})"
            ) from None
    try:
        return json.loads(data)
    except json.JSONDecodeError as error:
        raise UnreadableDocument(
            f"is not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})"
        ) from None
    except RecursionError:
        raise UnreadableDocument("is nested too deeply to be a valid file") from None


#: Entries of a folder looked through for a near miss (a test folder has a few dozen).
_NEAR_SCAN_LIMIT = 2000


@dataclass(frozen=True)
class FileMiss:
    """Why :func:`find_file` found no file: *problem* in words, and the file *near* (written as
    the user wrote the path) that was most likely meant, for a "did you mean"."""

    problem: str
    near: str | None = None


def find_file(given: Path, folders: Sequence[Path]) -> Path | FileMiss:
    """*given* if it is an absolute file path, else the first file ``folder / given`` of *folders*
    (markers and jobs look in the test's folder, its config's and the rootdir); else a
    :class:`FileMiss` that says whether a directory was found instead or where it looked."""
    candidates = [given] if given.is_absolute() else list(dict.fromkeys(folder / given for folder in folders))
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    directories = [c for c in candidates if c.is_dir()]
    if directories:
        return FileMiss(f"{given!s} is a directory ({directories[0]}), not a file")
    near = near_file_name(candidates)
    if near is not None and given.parent != Path():
        near = str(given.parent / near)
    looked = ", ".join(str(c) for c in candidates)
    return FileMiss(f"{given!s} does not exist (looked in: {looked})", near)


def near_file_name(missing: Sequence[Path]) -> str | None:
    """The name of an existing file close to the missing *missing* paths' name, in their folders
    (``my_task_ap.py`` -> ``my_task_app.py``), for a "did you mean"; None when nothing is close."""
    names: list[str] = []
    for path in missing:
        try:
            with os.scandir(path.parent) as entries:
                for count, entry in enumerate(entries):
                    if count >= _NEAR_SCAN_LIMIT:
                        break
                    if entry.is_file():
                        names.append(entry.name)
        except OSError:
            continue
    if not missing:
        return None
    close = difflib.get_close_matches(missing[0].name, sorted(set(names)), n=1, cutoff=0.75)
    return close[0] if close else None
