"""A download cache keyed by sha256: a file is fetched once and verified on every use."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
import urllib.error
import urllib.request
from urllib.parse import unquote
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

import platformdirs

from ..errors import IntegrityError, NetworkError, UsageError
from ..fsutil import fault_point
from ..lock import own_file, remove_unowned
from ..progress import MeterFactory, null_meter

CHUNK = 1 << 20
MAX_DOWNLOAD = 4 << 30  # a vLLM sdist is tens of MB, a CUDA wheel some hundreds


def cache_dir() -> Path:
    env = os.environ.get("GQUEUE_CACHE")
    return Path(env) if env else Path(platformdirs.user_cache_dir("gqueue"))


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def cached(sha256: str, filename: str) -> Path | None:
    target = cache_dir() / "sha256" / sha256[:2] / sha256 / filename
    return target if target.is_file() else None


def max_download() -> int:
    """The most bytes a download may have when the index does not say its size:
    ``GQUEUE_MAX_DOWNLOAD`` (bytes, or with a K, M or G suffix), else ``MAX_DOWNLOAD``."""
    raw = os.environ.get("GQUEUE_MAX_DOWNLOAD", "").strip()
    if not raw:
        return MAX_DOWNLOAD
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(raw[-1:].upper(), 1)
    number = raw[:-1] if scale > 1 else raw
    if not number.isdigit() or int(number) == 0:
        raise UsageError(f"GQUEUE_MAX_DOWNLOAD={raw!r} is not a number of bytes (such as 4G or 500M)")
    return int(number) * scale


def remove_leftovers(root: Path | None = None) -> list[Path]:
    """Remove the temporaries of downloads that were killed (``.download-*`` files no live
    process owns) and the folders they leave empty; the files removed."""
    root = (root or cache_dir()) / "sha256"
    removed = []
    for leftover in root.glob("*/*/.download-*"):
        if remove_unowned(leftover):
            removed.append(leftover)
            _remove_empty(leftover.parent)
    return removed


def _remove_empty(folder: Path) -> None:
    for level in (folder, folder.parent, folder.parent.parent):
        try:
            level.rmdir()
        except OSError:
            break


def _temporary(folder: Path) -> tuple[int, Path]:
    """A new ``.download-*`` file in ``folder``, owned by this process (lock.own_file)."""
    while True:
        folder.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=folder, prefix=".download-")
        own_file(fd)
        if os.fstat(fd).st_nlink:
            return fd, Path(name)
        os.close(fd)  # another process removed it before it was locked (it looked unowned)


def _copy(chunks: Iterator[bytes], out: BinaryIO, digest: "hashlib._Hash", limit: int, advance: Callable[[int], object],
          what: str, where: str) -> None:
    """Copy ``chunks`` to ``out``, refusing past ``limit`` bytes."""
    total = 0
    for chunk in chunks:
        total += len(chunk)
        if total > limit:
            raise _too_large(what, limit, where)
        fault_point("download")
        digest.update(chunk)
        out.write(chunk)
        advance(len(chunk))


def _too_large(what: str, limit: int, where: str) -> IntegrityError:
    path, _, line = where.partition(":")
    return IntegrityError(
        f"{what} is larger than {limit} bytes: refused before it fills the cache",
        path=path, line=int(line) if line.isdigit() else None,
        hint="GQUEUE_MAX_DOWNLOAD sets the limit when the index does not give the file's size",
    )


def fetch(url: str, sha256: str, filename: str, *, where: str, meter: MeterFactory = null_meter,
          size: int | None = None) -> Path:
    """The cached file for ``sha256``, downloading ``url`` first if needed.

    ``where`` names the file and line that promised the hash, for the error message;
    ``meter`` is told the bytes as they come; ``size``: the size the index gives, the most
    bytes taken (else ``max_download()``). Before a download, the temporaries of killed ones are removed.
    """
    target = cache_dir() / "sha256" / sha256[:2] / sha256 / filename
    if target.is_file():
        if sha256_file(target) == sha256:
            return target
        target.unlink()  # a corrupted cache entry is refetched
    remove_leftovers()  # only on the way to a download: a cached file needs no scan of the cache
    limit = size if size is not None else max_download()
    fd, tmp = _temporary(target.parent)
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            if url.startswith("file://") or "://" not in url:
                source = Path(unquote(url[len("file://") :]) if url.startswith("file://") else url)
                try:
                    handle = source.open("rb")
                except OSError as exc:
                    raise NetworkError(f"cannot read {source}: {exc.strerror}", path=where.split(":")[0]) from None
                with handle:
                    info = os.fstat(handle.fileno())
                    if not stat.S_ISREG(info.st_mode):
                        path, _, line = where.partition(":")
                        raise IntegrityError(f"{source} is not a regular file: nothing to download",
                                             path=path, line=int(line) if line.isdigit() else None)
                    if info.st_size > limit:
                        raise _too_large(str(source), limit, where)
                    bar = meter(f"copying {filename}", info.st_size, "bytes")
                    try:
                        _copy(iter(lambda: handle.read(CHUNK), b""), out, digest, limit, bar.advance, str(source), where)
                    finally:
                        bar.close()
            else:
                try:
                    with urllib.request.urlopen(url, timeout=120) as response:
                        length = getattr(response, "length", None)
                        if isinstance(length, int) and length > limit:
                            raise _too_large(url, limit, where)
                        bar = meter(f"downloading {filename}", length, "bytes")
                        try:
                            _copy(iter(lambda: response.read(CHUNK), b""), out, digest, limit, bar.advance, url, where)
                        finally:
                            bar.close()
                except (urllib.error.URLError, OSError) as exc:
                    raise NetworkError(f"cannot download {url}: {exc}") from None
        if digest.hexdigest() != sha256:
            path, _, line = where.partition(":")
            raise IntegrityError(
                f"sha256 mismatch for {filename}: expected {sha256}, got {digest.hexdigest()}",
                path=path, line=int(line) if line.isdigit() else None,
            )
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
        if not target.exists():  # a failed download leaves no empty folders behind
            _remove_empty(target.parent)
    return target


def clear(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
