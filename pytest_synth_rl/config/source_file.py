"""Reading a config file's bytes, bounded: regular files only, at most :data:`MAX_CONFIG_BYTES`.

``Path.read_bytes()`` reads until the end of the file, and some paths have no end: a link to
``/dev/zero`` fills memory, a named pipe blocks until someone writes to it. A config is a regular
file, so anything else is refused by what it is, without reading; a regular file is refused by
its size, and the read itself stops after ``MAX_CONFIG_BYTES + 1`` bytes, because files such as
those under ``/proc`` report a size of 0.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from pytest_synth_rl.errors import ConfigError, ConfigProblem

__all__ = ["MAX_CONFIG_BYTES", "read_config_bytes"]

#: The largest config file read. RL configs are a few KiB, so 8 MiB is a thousand times more
#: than any real one needs. Time and memory grow with the number of values, not bytes: 64 MiB of
#: ``0,`` takes the TOML parser over a minute and the whole build two (and 2 GB); 8 MiB bounds
#: that worst case to seconds. Datasets belong to the task app, not in the config.
MAX_CONFIG_BYTES = 8 * 1024 * 1024

_CHUNK = 1024 * 1024
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_NOT_REGULAR = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
)


def file_problem(path: str, message: str, hint: str) -> ConfigError:
    """A ConfigError about the file as a whole: its path starts the message."""
    return ConfigError([ConfigProblem(key="", message=f"{path}: {message}", hint=hint)], path=path)


def read_config_bytes(path: Path) -> bytes:
    """The file's bytes; missing, unreadable, not a regular file or too large -> ConfigError.

    The file is opened non-blocking (opening a named pipe would otherwise wait for a writer)
    and checked with ``fstat`` on the open descriptor, so what is checked is what is read.
    """
    shown = str(path)
    try:
        descriptor = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        raise file_problem(shown, "file not found", f"check the path (relative to {Path.cwd()})") from None
    except IsADirectoryError:
        raise _directory(shown) from None
    except OSError as exc:
        raise _unreadable(shown, exc) from None
    try:
        _check_kind_and_size(path, os.fstat(descriptor))
        data = _read_at_most(descriptor, MAX_CONFIG_BYTES)
    except OSError as exc:
        raise _unreadable(shown, exc) from None
    finally:
        os.close(descriptor)
    if len(data) > MAX_CONFIG_BYTES:
        raise _too_large(shown, f"more than {MAX_CONFIG_BYTES:,} bytes")
    return data


def _read_at_most(descriptor: int, limit: int) -> bytes:
    """Up to ``limit + 1`` bytes: one more than allowed tells a file that is too large."""
    chunks: list[bytes] = []
    total = 0
    while total <= limit:
        chunk = os.read(descriptor, min(_CHUNK, limit + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def _check_kind_and_size(path: Path, info: os.stat_result) -> None:
    shown = str(path)
    if stat.S_ISDIR(info.st_mode):
        raise _directory(shown)
    if not stat.S_ISREG(info.st_mode):
        kind = next((name for test, name in _NOT_REGULAR if test(info.st_mode)), "a special file")
        link = f" (a link to {os.path.realpath(path)})" if os.path.islink(path) else ""
        raise file_problem(
            shown,
            f"is {kind}{link}, not a regular file; expected a TOML file",
            "point at the .toml file itself: devices, pipes and sockets are not read, as they may never end",
        )
    if info.st_size > MAX_CONFIG_BYTES:
        raise _too_large(shown, f"{info.st_size:,} bytes")


def _too_large(shown: str, size: str) -> ConfigError:
    return file_problem(
        shown,
        f"is {size}; expected a TOML file of at most {MAX_CONFIG_BYTES:,} bytes",
        "an RL config is a few KiB: keep datasets and other bulk data out of it "
        "(the task app can load them itself)",
    )


def _directory(shown: str) -> ConfigError:
    return file_problem(shown, "is a directory, expected a TOML file", "point at the .toml file itself")


def _unreadable(shown: str, exc: OSError) -> ConfigError:
    reason = exc.strerror or type(exc).__name__
    return file_problem(shown, f"cannot be read: {reason}", "check the file's permissions")
