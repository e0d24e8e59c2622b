"""fsutil.atomic_write_many: several files replaced as atomic_write replaces one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gqueue import fsutil


def test_many_files_are_written_with_their_modes_and_no_temporaries(tmp_path: Path) -> None:
    kept = tmp_path / "kept.patch"
    kept.write_bytes(b"old")
    os.chmod(kept, 0o600)
    items = [(tmp_path / "q" / f"p{i}.patch", b"x" * i) for i in range(fsutil._BATCH + 3)] + [(kept, b"new")]
    fsutil.atomic_write_many(items)
    for path, data in items:
        assert path.read_bytes() == data
    assert kept.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "q" / "p1.patch").stat().st_mode & 0o777 == 0o644
    assert sorted(os.listdir(tmp_path / "q")) == sorted(f"p{i}.patch" for i in range(fsutil._BATCH + 3))


def test_a_failed_write_renames_nothing_and_leaves_no_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = tmp_path / "a.patch"
    first.write_bytes(b"old a")
    real_fsync = os.fsync
    calls = []

    def failing_fsync(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(fsutil.os, "fsync", failing_fsync)
    with pytest.raises(OSError):
        fsutil.atomic_write_many([(first, b"new a"), (tmp_path / "b.patch", b"new b")])
    assert first.read_bytes() == b"old a"
    assert sorted(os.listdir(tmp_path)) == ["a.patch"]


def test_the_syncs_of_many_files_wait_together_and_each_file_is_synced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import stat
    import threading
    import time

    real_fsync = os.fsync
    lock = threading.Lock()
    state = {"now": 0, "most": 0}
    synced_files: list[int] = []

    def slow_fsync(fd: int) -> None:  # a sync that waits on the disk, as a journal commit does
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
            if stat.S_ISREG(os.fstat(fd).st_mode):
                synced_files.append(os.fstat(fd).st_ino)
        time.sleep(0.02)
        real_fsync(fd)
        with lock:
            state["now"] -= 1

    monkeypatch.setattr(fsutil.os, "fsync", slow_fsync)
    items = [(tmp_path / f"p{i}.patch", b"x" * i) for i in range(12)]
    fsutil.atomic_write_many(items)
    assert state["most"] > 1
    assert sorted(synced_files) == sorted(path.stat().st_ino for path, _data in items)


def test_the_folder_is_synced_once_after_the_renames(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import stat

    real_fsync = os.fsync
    folders: list[tuple[int, list[str]]] = []

    def watching_fsync(fd: int) -> None:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            folders.append((info.st_ino, sorted(os.listdir(tmp_path / "q"))))
        real_fsync(fd)

    monkeypatch.setattr(fsutil.os, "fsync", watching_fsync)
    items = [(tmp_path / "q" / f"p{i}.patch", b"x") for i in range(fsutil._BATCH + 3)]
    fsutil.atomic_write_many(items)
    names = sorted(f"p{i}.patch" for i in range(fsutil._BATCH + 3))
    assert folders == [((tmp_path / "q").stat().st_ino, names)]  # once, every name in place


def test_copies_not_synced_sync_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(fsutil.os, "fsync", calls.append)
    fsutil.atomic_write_many([(tmp_path / f"c{i}", b"copy") for i in range(5)], sync=False)
    assert calls == []
    assert (tmp_path / "c4").read_bytes() == b"copy"
