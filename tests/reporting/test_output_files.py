"""Files written for the user keep being what the user named: a regular file is replaced
atomically, a symbolic link is written through (the link stays), a special file (a device, a
FIFO) is written in place and never replaced, and a failed write is an error, never "written"."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest
from fifo_support import FifoReader, full_device

from pytest_synth_rl.reporting.files import atomic_write_text


def test_a_regular_file_is_still_replaced_whole(tmp_path: Path) -> None:
    file = tmp_path / "r.json"
    file.write_text("old\n")
    before = os.stat(file)
    assert atomic_write_text(file, "new\n") == file
    assert file.read_text() == "new\n"
    assert not os.path.samestat(os.stat(file), before), "written in place, not swapped in"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_a_symlink_is_written_through_and_stays_a_link(tmp_path: Path) -> None:
    # Before, the link was replaced by a regular file and the file it pointed to kept its old text.
    (tmp_path / "store").mkdir()
    target = tmp_path / "store" / "real.json"
    target.write_text("old\n")
    link = tmp_path / "link.json"
    link.symlink_to(Path("store") / "real.json")
    assert atomic_write_text(link, "new\n") == link
    assert link.is_symlink()
    assert os.readlink(link) == os.path.join("store", "real.json")
    assert target.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "store"]
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == ["real.json"]


def test_a_chain_of_links_ending_nowhere_creates_the_file_at_its_end(tmp_path: Path) -> None:
    first, second, end = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "out" / "end.json"
    second.symlink_to(end)
    first.symlink_to(second)
    atomic_write_text(first, "text\n")
    assert first.is_symlink()
    assert second.is_symlink()
    assert end.read_text() == "text\n"


def test_a_loop_of_links_is_an_error_and_replaces_no_link(tmp_path: Path) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.symlink_to(second)
    second.symlink_to(first)
    with pytest.raises(OSError, match="Too many levels of symbolic links") as raised:
        atomic_write_text(first, "text\n")
    assert raised.value.errno == errno.ELOOP
    assert first.is_symlink()
    assert second.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json"]


@pytest.mark.parametrize("through_a_link", [False, True])
def test_a_special_file_is_written_in_place_and_never_replaced(tmp_path: Path, through_a_link: bool) -> None:
    # Before, the FIFO (like a device node) was replaced by a regular file holding the text.
    link = tmp_path / "link"
    with FifoReader(tmp_path / "fifo") as fifo:
        if through_a_link:
            link.symlink_to("fifo")
        assert atomic_write_text(link if through_a_link else fifo.path, "text\n") == (
            link if through_a_link else fifo.path
        )
    assert fifo.data == b"text\n"
    assert stat.S_ISFIFO(os.lstat(fifo.path).st_mode)
    assert link.is_symlink() == through_a_link
    assert sorted(p.name for p in tmp_path.iterdir()) == (["fifo", "link"] if through_a_link else ["fifo"])


def test_a_special_file_that_fails_to_take_the_text_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before, a full device was replaced by a regular file and the write "succeeded".
    with FifoReader(tmp_path / "fifo") as fifo:
        full_device(monkeypatch, fifo.path)
        with pytest.raises(OSError, match="No space left on device") as raised:
            atomic_write_text(fifo.path, "text\n")
        monkeypatch.undo()
    assert raised.value.errno == errno.ENOSPC
    assert fifo.data == b""
    assert stat.S_ISFIFO(os.lstat(fifo.path).st_mode)


def test_a_check_that_refuses_the_text_keeps_it_out_of_a_special_file(tmp_path: Path) -> None:
    checked: list[Path] = []

    def refuse(temp: Path) -> None:
        assert temp.read_bytes() == "secret ✓\n".encode()
        checked.append(temp)
        raise ValueError("still holds a secret")

    with FifoReader(tmp_path / "fifo") as fifo, pytest.raises(ValueError, match="still holds a secret"):
        atomic_write_text(fifo.path, "secret ✓\n", check=refuse)
    assert fifo.data == b""
    assert len(checked) == 1
    assert not checked[0].exists(), "the checked copy was left behind"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]


def test_a_check_that_passes_lets_the_text_into_a_special_file(tmp_path: Path) -> None:
    with FifoReader(tmp_path / "fifo") as fifo:
        atomic_write_text(fifo.path, "fine\n", check=lambda temp: None)
    assert fifo.data == b"fine\n"


def test_reports_reach_the_disk_and_the_live_jobs_file_only_the_page_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_synth_rl.reporting.report import LiveJobs

    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    atomic_write_text(tmp_path / "report.json", "{}")
    assert len(synced) == 1
    live = LiveJobs(tmp_path / "gw0.live.json")
    live.add("test_a.py::test_one", "job_rl_1", "https://api.usesynth.ai")
    assert len(synced) == 1
    assert "job_rl_1" in (tmp_path / "gw0.live.json").read_text()
    live.discard("job_rl_1")
    assert not (tmp_path / "gw0.live.json").exists()
