"""A download cache keyed by sha256: a file is fetched once and verified on every use."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import platformdirs

from ..errors import IntegrityError, NetworkError
from ..progress import MeterFactory, null_meter

CHUNK = 1 << 20


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


def fetch(url: str, sha256: str, filename: str, *, where: str, meter: MeterFactory = null_meter) -> Path:
    """The cached file for ``sha256``, downloading ``url`` first if needed.

    ``where`` names the file and line that promised the hash, for the error message;
    ``meter`` is told the bytes as they come.
    """
    target = cache_dir() / "sha256" / sha256[:2] / sha256 / filename
    if target.is_file():
        if sha256_file(target) == sha256:
            return target
        target.unlink()  # a corrupted cache entry is refetched
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=".download-")
    tmp = Path(tmp_name)
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            if url.startswith("file://") or "://" not in url:
                source = Path(url[len("file://") :] if url.startswith("file://") else url)
                try:
                    handle = source.open("rb")
                except OSError as exc:
                    raise NetworkError(f"cannot read {source}: {exc.strerror}", path=where.split(":")[0]) from None
                with handle:
                    bar = meter(f"copying {filename}", os.fstat(handle.fileno()).st_size, "bytes")
                    try:
                        for chunk in iter(lambda: handle.read(CHUNK), b""):
                            digest.update(chunk)
                            out.write(chunk)
                            bar.advance(len(chunk))
                    finally:
                        bar.close()
            else:
                try:
                    with urllib.request.urlopen(url, timeout=120) as response:
                        bar = meter(f"downloading {filename}", getattr(response, "length", None), "bytes")
                        try:
                            for chunk in iter(lambda: response.read(CHUNK), b""):
                                digest.update(chunk)
                                out.write(chunk)
                                bar.advance(len(chunk))
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
            for folder in (target.parent, target.parent.parent, target.parent.parent.parent):
                try:
                    folder.rmdir()
                except OSError:
                    break
    return target


def clear(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
