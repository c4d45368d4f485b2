"""A FIFO standing in for a device node (a special file that must be written in place, never
replaced), read in a thread so that writers never wait, and bounded so that nothing hangs.

The FIFO is held open for writing by the reader itself until the block ends: a read sees the end
only after the code under test has closed its end too, whether or not that code ever opened the
FIFO (code that replaces the path instead leaves the reader with nothing, and the test says so).
:func:`full_device` makes writes into such a file fail as a full device's do.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import pytest
from hang_guard import HANG_GUARD


class FifoReader:
    """``with FifoReader(path) as fifo:`` makes a FIFO at *path*; after the block, ``fifo.data``
    holds every byte written to it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data = b""
        self._chunks: list[bytes] = []
        self._thread: threading.Thread | None = None
        self._hold = -1

    def __enter__(self) -> FifoReader:
        os.mkfifo(self.path)
        # Opening the read end without waiting, then a write end, means no open ever blocks:
        # a writer's open finds a reader, and the reader sees no end until the hold is dropped.
        read_end = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        self._hold = os.open(self.path, os.O_WRONLY)
        os.set_blocking(read_end, True)

        def drain() -> None:
            with os.fdopen(read_end, "rb") as pipe:
                self._chunks.append(pipe.read())

        self._thread = threading.Thread(target=drain, name="fifo-reader", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        os.close(self._hold)
        assert self._thread is not None
        self._thread.join(HANG_GUARD)
        assert not self._thread.is_alive(), f"the reader of {self.path} did not finish: a writer hangs"
        self.data = b"".join(self._chunks)


def full_device(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    """Make every low-level write into the file at *path* fail as a full device does (ENOSPC);
    writes to anything else go through."""
    real_write: Callable[[int, bytes], int] = os.write
    device = os.stat(path)

    def write(fd: int, data: bytes) -> int:
        if os.path.samestat(os.fstat(fd), device):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
