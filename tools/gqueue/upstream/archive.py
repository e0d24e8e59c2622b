"""Reading a source archive safely: members are streamed, never extracted by the archive library.

Refused: absolute names, ``..`` components, links that point out of the tree, hard links,
device files, and archives that unpack to more than ``MAX_TOTAL`` bytes (zip bombs).
"""

from __future__ import annotations

import posixpath
import stat
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from ..errors import IntegrityError
from ..progress import MeterFactory, null_meter

MAX_TOTAL = 8 << 30
MAX_MEMBER = 1 << 30
MAX_RATIO = 200
BOMB_FLOOR = 32 << 20  # below this many unpacked bytes the ratio is not checked


def _check_total(total: int, packed: int, archive: str) -> None:
    """Refuse archives that unpack to too much, absolutely or for their size (tar and zip bombs)."""
    if total > MAX_TOTAL:
        raise IntegrityError(f"archive unpacks to more than {MAX_TOTAL} bytes", path=archive)
    if total > BOMB_FLOOR and total > MAX_RATIO * max(packed, 1):
        raise IntegrityError(
            f"archive unpacks to {total} bytes from {packed}: more than {MAX_RATIO} times its size, "
            "refused as a decompression bomb", path=archive,
        )


@dataclass(frozen=True)
class Member:
    path: str  # relative to the single top folder
    mode: str  # git mode: 100644, 100755, 120000
    data: bytes


def _check_name(name: str, archive: str) -> list[str]:
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise IntegrityError(f"archive member '{name}' has an absolute path", path=archive)
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise IntegrityError(f"archive member '{name}' escapes the extraction folder", path=archive)
    return parts


def _check_link(parts: list[str], target: str, archive: str) -> None:
    if target.startswith("/"):
        raise IntegrityError(f"archive link '{'/'.join(parts)}' points to an absolute path", path=archive)
    resolved = posixpath.normpath(posixpath.join("/".join(parts[:-1]), target))
    if resolved == ".." or resolved.startswith("../"):
        raise IntegrityError(f"archive link '{'/'.join(parts)}' points out of the tree", path=archive)


def _strip_top(items: list[tuple[list[str], str, bytes]], archive: str) -> Iterator[Member]:
    tops = {parts[0] for parts, _, _ in items}
    strip = len(tops) == 1 and all(len(parts) > 1 for parts, _, _ in items)
    for parts, mode, data in items:
        rel = parts[1:] if strip else parts
        yield Member("/".join(rel), mode, data)


def read_archive(path: Path, *, meter: MeterFactory = null_meter) -> list[Member]:
    """The archive's files; ``meter`` counts them as they are read."""
    name = path.name
    bar = meter(f"reading {name}", None, "files")
    try:
        if name.endswith(".zip") or name.endswith(".whl"):
            return list(_read_zip(path, bar.advance))
        return list(_read_tar(path, bar.advance))
    finally:
        bar.close()


def check_tree_entry(name: str, mode: str, data: bytes, archive: str) -> Member:
    """One file of a tree that did not come from an archive (a git commit), checked as an
    archive member is: no absolute or escaping name, no link out of the tree."""
    parts = _check_name(name, archive)
    if not parts:
        raise IntegrityError(f"tree entry '{name}' has an empty name", path=archive)
    if mode == "120000":
        _check_link(parts, data.decode("utf-8", "surrogateescape"), archive)
    return Member("/".join(parts), mode, data)


def _read_tar(path: Path, tick: Callable[[int], None]) -> Iterator[Member]:
    archive = path.name
    packed = path.stat().st_size
    total = 0
    items: list[tuple[list[str], str, bytes]] = []
    files: dict[str, tuple[str, bytes]] = {}  # the regular files read so far, by their name in the archive
    try:
        with tarfile.open(path, "r:*") as tar:
            for info in tar:
                tick(1)
                parts = _check_name(info.name, archive)
                if not parts or info.isdir():
                    continue
                if info.islnk():  # tar's way to store a file twice: a copy of a file before it
                    key = _link_key(info.linkname, archive)
                    target = files.get(key) if key is not None else None
                    if target is None:
                        raise IntegrityError(f"archive member '{info.name}' is a hard link to '{info.linkname}', "
                                             "which is no file of the archive before it", path=archive)
                    total += len(target[1])
                    if total > MAX_TOTAL:
                        raise IntegrityError(f"archive unpacks to more than {MAX_TOTAL} bytes", path=archive)
                    items.append((parts, *target))
                    continue
                if info.ischr() or info.isblk() or info.isfifo() or info.isdev():
                    raise IntegrityError(f"archive member '{info.name}' is a device or pipe", path=archive)
                if info.issym():
                    _check_link(parts, info.linkname, archive)
                    items.append((parts, "120000", info.linkname.encode()))
                    continue
                if not info.isfile():
                    continue
                total += info.size
                if info.size > MAX_MEMBER or total > MAX_TOTAL:
                    raise IntegrityError(f"archive unpacks to more than {MAX_TOTAL} bytes", path=archive)
                _check_total(total, packed, archive)
                handle = tar.extractfile(info)
                data = handle.read() if handle else b""
                mode = "100755" if info.mode & stat.S_IXUSR else "100644"
                items.append((parts, mode, data))
                files["/".join(parts)] = (mode, data)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise IntegrityError(f"cannot read archive: {exc}", path=archive) from None
    yield from _strip_top(items, archive)


def _link_key(linkname: str, archive: str) -> str | None:
    """A hard link's target as the archive names its files (None for a name no member can have)."""
    try:
        return "/".join(_check_name(linkname, archive))
    except IntegrityError:
        return None


def _read_zip(path: Path, tick: Callable[[int], None]) -> Iterator[Member]:
    archive = path.name
    packed = path.stat().st_size
    total = 0
    items: list[tuple[list[str], str, bytes]] = []
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                tick(1)
                parts = _check_name(info.filename, archive)
                if not parts or info.is_dir():
                    continue
                total += info.file_size
                if info.file_size > MAX_MEMBER or total > MAX_TOTAL:
                    raise IntegrityError(f"archive unpacks to more than {MAX_TOTAL} bytes", path=archive)
                _check_total(total, packed, archive)
                if info.compress_size and info.file_size / info.compress_size > MAX_RATIO and info.file_size > 1 << 24:
                    raise IntegrityError(f"archive member '{info.filename}' looks like a zip bomb", path=archive)
                unix_mode = info.external_attr >> 16
                with zf.open(info) as handle:
                    data = handle.read(info.file_size + 1)
                if len(data) > info.file_size:
                    raise IntegrityError(f"archive member '{info.filename}' is larger than declared", path=archive)
                if stat.S_ISLNK(unix_mode):
                    _check_link(parts, data.decode("utf-8", "replace"), archive)
                    items.append((parts, "120000", data))
                    continue
                mode = "100755" if unix_mode & stat.S_IXUSR else "100644"
                items.append((parts, mode, data))
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise IntegrityError(f"cannot read archive: {exc}", path=archive) from None
    yield from _strip_top(items, archive)
