"""Reading a config file is bounded: only regular files, at most 8 MiB, never waiting for a writer."""

from __future__ import annotations

import importlib
import os
import threading
from pathlib import Path

import pytest
from hang_guard import HANG_GUARD, finishes

from pytest_synth_rl.config import build_rl_payload, read_toml_file
from pytest_synth_rl.errors import ConfigError

NOT_READ = (
    "(hint: point at the .toml file itself: devices, pipes and sockets are not read, as they may never end)"
)
TOO_LARGE_HINT = (
    "(hint: an RL config is a few KiB: keep datasets and other bulk data out of it "
    "(the task app can load them itself))"
)
LIMIT = 8 * 1024 * 1024


def refused(path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        finishes(lambda: read_toml_file(path))
    assert info.value.path == str(path)
    return str(info.value)


def test_a_link_to_a_device_is_refused_without_reading_it(tmp_path: Path) -> None:
    link = tmp_path / "rl.toml"
    link.symlink_to(os.devnull)
    assert refused(link) == (
        f"RL config {link} is invalid: <config>: {link}: is a character device (a link to {os.devnull}), "
        f"not a regular file; expected a TOML file {NOT_READ}"
    )


def _write_into(fifo: Path, data: bytes) -> None:
    try:
        with open(fifo, "wb") as pipe:  # blocks until a reader opens the pipe
            pipe.write(data)
    except BrokenPipeError:
        pass  # the reader looked at what the file is and left


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_named_pipe_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "rl.toml"
    os.mkfifo(fifo)
    writer = threading.Thread(target=_write_into, args=(fifo, b'x = "from a pipe"\n'), daemon=True)
    writer.start()
    try:
        message = refused(fifo)
    finally:
        drain = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # lets a writer still waiting go on
        writer.join(HANG_GUARD)
        os.close(drain)
    assert message == (
        f"RL config {fifo} is invalid: <config>: {fifo}: is a named pipe (FIFO), not a regular file; "
        f"expected a TOML file {NOT_READ}"
    )


def test_a_file_over_the_limit_is_refused_by_its_size(tmp_path: Path) -> None:
    path = tmp_path / "rl.toml"
    with open(path, "wb") as sparse:
        sparse.truncate(LIMIT + 1)  # no data written: the size alone decides
    assert refused(path) == (
        f"RL config {path} is invalid: <config>: {path}: is 8,388,609 bytes; "
        f"expected a TOML file of at most 8,388,608 bytes {TOO_LARGE_HINT}"
    )
    with open(path, "wb") as sparse:
        sparse.truncate(LIMIT)
    with pytest.raises(ConfigError) as info:
        build_rl_payload(path, task_url="http://127.0.0.1:8114")
    assert info.value.problems[0].message.startswith("invalid TOML: ")  # read and parsed


def test_a_file_that_reports_no_size_is_read_only_up_to_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    status = Path("/proc/self/status")  # a regular file of size 0 that holds a kilobyte or so
    if not status.is_file() or status.stat().st_size != 0:
        pytest.skip("needs a procfs file that reports a size of 0")
    source_file = importlib.import_module("pytest_synth_rl.config.loader")
    monkeypatch.setattr(source_file, "MAX_CONFIG_BYTES", 16)
    assert refused(status) == (
        f"RL config {status} is invalid: <config>: {status}: is more than 16 bytes; "
        f"expected a TOML file of at most 16 bytes {TOO_LARGE_HINT}"
    )
