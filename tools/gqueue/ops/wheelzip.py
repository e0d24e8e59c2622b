"""Writing a zip (a wheel) whose unchanged members are copied raw from another zip.

Python's ``zipfile`` reads the source's central directory for us; the bytes of a member
are then copied as stored (still compressed), under a new local header with a fixed
timestamp. New members are deflated at a fixed level. The output is reproducible: the
same members in the same order give the same bytes.
"""

from __future__ import annotations

import struct
import zipfile
import zlib
from dataclasses import dataclass
from typing import BinaryIO

from ..errors import IntegrityError

# 1980-01-01 00:00:00, the earliest time a zip can hold.
DOS_TIME = 0
DOS_DATE = (0 << 9) | (1 << 5) | 1
LEVEL = 6
VERSION = 20
MADE_BY = (3 << 8) | VERSION  # unix
UTF8 = 0x800
FILE_MODE = 0o100644
EXEC_MODE = 0o100755
LIMIT = 0xFFFFFFFF

_LOCAL = struct.Struct("<IHHHHHIIIHH")
_CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")
_END = struct.Struct("<IHHHHIIH")
_LOCAL_SIG = 0x04034B50
_CENTRAL_SIG = 0x02014B50
_END_SIG = 0x06054B50
CHUNK = 1 << 20


@dataclass(frozen=True)
class Written:
    name: str
    flags: int
    method: int
    crc: int
    compressed: int
    size: int
    mode: int
    offset: int


class RawZipWriter:
    """Writes members one by one, then the central directory on ``close``."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.entries: list[Written] = []
        self.names: set[str] = set()

    def _header(self, name: str, flags: int, method: int, crc: int, compressed: int, size: int, mode: int) -> int:
        if name in self.names:
            raise IntegrityError(f"the wheel would hold '{name}' twice")
        self.names.add(name)
        offset = self.out.tell()
        if max(offset, compressed, size) > LIMIT:
            raise IntegrityError(f"'{name}' needs zip64, which the wheel writer does not produce")
        raw = name.encode("utf-8")
        self.out.write(_LOCAL.pack(_LOCAL_SIG, VERSION, flags, method, DOS_TIME, DOS_DATE, crc, compressed, size, len(raw), 0))
        self.out.write(raw)
        self.entries.append(Written(name, flags, method, crc, compressed, size, mode, offset))
        return offset

    def add_bytes(self, name: str, data: bytes, *, executable: bool = False) -> None:
        """A new member, deflated at a fixed level."""
        packer = zlib.compressobj(LEVEL, zlib.DEFLATED, -15)
        body = packer.compress(data) + packer.flush()
        self._header(name, UTF8, zipfile.ZIP_DEFLATED, zlib.crc32(data), len(body), len(data),
                     EXEC_MODE if executable else FILE_MODE)
        self.out.write(body)

    def copy_raw(self, source: BinaryIO, info: zipfile.ZipInfo, name: str | None = None) -> None:
        """Copy ``info``'s stored bytes from ``source`` (an open zip) without recompressing."""
        source.seek(info.header_offset)
        local = source.read(_LOCAL.size)
        if len(local) != _LOCAL.size or _LOCAL.unpack(local)[0] != _LOCAL_SIG:
            raise IntegrityError(f"bad local header for '{info.filename}' in the upstream wheel")
        name_len, extra_len = _LOCAL.unpack(local)[9:11]
        source.seek(info.header_offset + _LOCAL.size + name_len + extra_len)
        mode = info.external_attr >> 16 or FILE_MODE
        flags = (info.flag_bits & 0x6) | UTF8  # keep the deflate options; no data descriptor
        self._header(name or info.filename, flags, info.compress_type, info.CRC, info.compress_size, info.file_size, mode)
        left = info.compress_size
        while left:
            chunk = source.read(min(CHUNK, left))
            if not chunk:
                raise IntegrityError(f"the upstream wheel ends inside '{info.filename}'")
            self.out.write(chunk)
            left -= len(chunk)

    def close(self) -> None:
        start = self.out.tell()
        for e in self.entries:
            raw = e.name.encode("utf-8")
            self.out.write(_CENTRAL.pack(
                _CENTRAL_SIG, MADE_BY, VERSION, e.flags, e.method, DOS_TIME, DOS_DATE, e.crc,
                e.compressed, e.size, len(raw), 0, 0, 0, 0, e.mode << 16, e.offset,
            ))
            self.out.write(raw)
        size = self.out.tell() - start
        if len(self.entries) > 0xFFFF or start > LIMIT:
            raise IntegrityError("the wheel needs zip64, which the wheel writer does not produce")
        self.out.write(_END.pack(_END_SIG, 0, 0, len(self.entries), len(self.entries), size, start, 0))
