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
