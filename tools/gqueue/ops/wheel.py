"""An overlay wheel: the upstream binary wheel with some members replaced, added or dropped.

Unchanged members are copied raw (see ``wheelzip``); the ``.dist-info`` folder is renamed
for the new version, METADATA gets the new ``Version:`` and nothing else, and RECORD is
written afresh. Hashes of copied members come from upstream's RECORD (the wheel itself is
verified against the sha256 in vendor-pin.txt before it gets here); a member RECORD does
not describe is decompressed and hashed.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ..errors import IntegrityError
from ..fsutil import fault_point
from .wheelzip import RawZipWriter


@dataclass(frozen=True)
class WheelName:
    distribution: str
    version: str
    rest: str  # [build tag-]python-abi-platform

    @classmethod
    def parse(cls, filename: str) -> "WheelName":
        if not filename.endswith(".whl") or filename.count("-") not in (4, 5):
            raise IntegrityError(f"'{filename}' is not a wheel file name")
        dist, version, rest = filename[:-4].split("-", 2)
        return cls(dist, version, rest)

    def with_version(self, version: str) -> "WheelName":
        return WheelName(self.distribution, version, self.rest)

    @property
    def filename(self) -> str:
        return f"{self.distribution}-{self.version.replace('-', '_')}-{self.rest}.whl"

    @property
    def dist_info(self) -> str:
        return f"{self.distribution}-{self.version.replace('-', '_')}.dist-info"


@dataclass(frozen=True)
class Overlay:
    """What changes: member path -> new bytes (None drops it); paths marked executable."""

    version: str
    files: dict[str, bytes | None]
    executable: frozenset[str] = frozenset()


@dataclass(frozen=True)
class OverlayStats:
    filename: str
    sha256: str
    size: int
    copied: int
    replaced: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def set_version(metadata: bytes, version: str) -> bytes:
    """METADATA with its ``Version:`` header replaced; every other byte kept."""
    lines = metadata.split(b"\n")
    for i, line in enumerate(lines):
        if not line.strip():
            break
        if line.startswith(b"Version:"):
            lines[i] = b"Version: " + version.encode()
            return b"\n".join(lines)
    raise IntegrityError("the upstream wheel's METADATA has no Version header")


def read_record(data: bytes) -> dict[str, tuple[str, int]]:
    rows: dict[str, tuple[str, int]] = {}
    for row in csv.reader(io.StringIO(data.decode("utf-8"))):
        if len(row) == 3 and row[1] and row[2]:
            rows[row[0]] = (row[1], int(row[2]))
    return rows


def render_record(rows: list[tuple[str, str, str]]) -> bytes:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerows(rows)
    return buf.getvalue().encode("utf-8")


def find_dist_info(names: list[str], distribution: str) -> str:
    tops = {n.split("/", 1)[0] for n in names if "/" in n}
    found = [t for t in tops if t.endswith(".dist-info") and t.lower().startswith(distribution.lower() + "-")]
    if len(found) != 1:
        raise IntegrityError(f"the upstream wheel has {len(found)} .dist-info folders for {distribution}, not one")
    return found[0]


def read_member(wheel: Path, name: str) -> bytes | None:
    with zipfile.ZipFile(wheel) as zf:
        try:
            return zf.read(name)
        except KeyError:
            return None


class _HashingFile:
    """A write-only file that hashes what goes through it."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        self.size += len(data)
        return self.handle.write(data)

    def tell(self) -> int:
        return self.size


def _order(names: list[str], dist_info: str) -> list[str]:
    """Sorted, with the .dist-info folder last and RECORD the very last member."""
    record = f"{dist_info}/RECORD"
    body = sorted(n for n in names if not n.startswith(dist_info + "/"))
    meta = sorted(n for n in names if n.startswith(dist_info + "/") and n != record)
    return body + meta + [record]


def write_overlay(upstream: Path, target_dir: Path, overlay: Overlay) -> OverlayStats:
    """Write the overlay wheel into ``target_dir`` (atomically) and describe it."""
    old_name = WheelName.parse(upstream.name)
    new_name = old_name.with_version(overlay.version)
    target_dir.mkdir(parents=True, exist_ok=True)
    with upstream.open("rb") as raw, zipfile.ZipFile(raw) as zf:
        infos = {i.filename: i for i in zf.infolist() if not i.is_dir()}
        old_info = find_dist_info(list(infos), old_name.distribution)
        new_info = new_name.dist_info
        upstream_record = read_record(zf.read(f"{old_info}/RECORD")) if f"{old_info}/RECORD" in infos else {}
        metadata = set_version(zf.read(f"{old_info}/METADATA"), overlay.version)

        sources: dict[str, zipfile.ZipInfo | bytes] = {}
        stats_replaced, stats_removed = [], []
        for name, info in infos.items():
            if name.startswith(old_info + "/"):
                rest = name[len(old_info) + 1 :]
                if rest == "RECORD":
                    continue
                sources[f"{new_info}/{rest}"] = metadata if rest == "METADATA" else info
                continue
            if name in overlay.files:
                data = overlay.files[name]
                if data is None:
                    stats_removed.append(name)
                    continue
                sources[name] = data
                stats_replaced.append(name)
            else:
                sources[name] = info
        added = sorted(n for n, d in overlay.files.items() if d is not None and n not in infos)
        for name in added:
            sources[name] = overlay.files[name]  # type: ignore[assignment]

        fd, tmp_name = tempfile.mkstemp(prefix=f".{new_name.filename}.", suffix=".tmp", dir=target_dir)
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb") as handle:
                out = _HashingFile(handle)
                writer = RawZipWriter(out)  # type: ignore[arg-type]
                rows: list[tuple[str, str, str]] = []
                copied = 0
                for name in _order([*sources, f"{new_info}/RECORD"], new_info):
                    if name == f"{new_info}/RECORD":
                        rows.append((name, "", ""))
                        writer.add_bytes(name, render_record(rows))
                        break
                    source = sources[name]
                    if isinstance(source, bytes):
                        writer.add_bytes(name, source, executable=name in overlay.executable)
                        rows.append((name, record_hash(source), str(len(source))))
                        continue
                    writer.copy_raw(raw, source, name)
                    copied += 1
                    rows.append((name, *_hash_of(zf, source, upstream_record)))
                writer.close()
            os.chmod(tmp, _new_file_mode())  # mkstemp made it 0600; a wheel is read by other users' pip
            fault_point("write")
            final = target_dir / new_name.filename
            os.replace(tmp, final)
        except BaseException:
            if tmp.exists():
                tmp.unlink()
            raise
    return OverlayStats(new_name.filename, out.digest.hexdigest(), out.size, copied,
                        sorted(stats_replaced), added, sorted(stats_removed))


def _new_file_mode() -> int:
    """The mode open() gives a new file: 0o666 less the umask (as pip and build leave a wheel)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def _hash_of(zf: zipfile.ZipFile, info: zipfile.ZipInfo, record: dict[str, tuple[str, int]]) -> tuple[str, str]:
    known = record.get(info.filename)
    if known is not None and known[1] == info.file_size and known[0].startswith("sha256="):
        return known[0], str(known[1])
    data = zf.read(info)
    return record_hash(data), str(len(data))
