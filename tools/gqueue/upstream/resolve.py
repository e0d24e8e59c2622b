"""From a pin to a verified local file: the sdist (work tree) or the binary wheel (build)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ..errors import FormatError, IntegrityError
from ..model.pin import Pin
from . import cache, index


def _where(pin: Pin) -> str:
    return f"vendor-pin.txt:{pin.line}"


def sdist_path(pin: Pin) -> Path:
    sha = pin.sdist_sha256
    if pin.url is not None:
        location = pin.url.split("#", 1)[0]
        filename = location.rstrip("/").rsplit("/", 1)[-1]
        assert sha is not None  # parse_source insists on it
        return cache.fetch(location, sha, filename, where=_where(pin))
    return _from_index(pin, "sdist", sha, f"{pin.project}-{pin.version}.tar.gz", index.find_sdist)


def wheel_path(pin: Pin) -> Path:
    return _from_index(pin, "wheel", pin.wheel_sha256, pin.options.get("wheel-file"), index.find_wheel)


def _from_index(pin: Pin, kind: str, sha: str | None, filename: str | None,
                find: Callable[[str, str], index.IndexFile]) -> Path:
    """The cached file of ``kind`` for ``pin``, else the index's, checked against the recorded sha256."""
    if sha is None:
        raise FormatError(
            f"no {kind}=sha256:... recorded for {pin.describe()}", path="vendor-pin.txt", line=pin.line,
            hint="'gqueue pin --record" + (" --wheel" if kind == "wheel" else "") + "' records it from the index",
        )
    if filename:
        hit = cache.cached(sha, filename)
        if hit is not None and cache.sha256_file(hit) == sha:
            return hit
    found = find(pin.project, pin.version)
    if found.sha256 and found.sha256 != sha:
        raise IntegrityError(
            f"sha256 mismatch for {found.filename}: vendor-pin.txt says {sha}, the index says {found.sha256}",
            path="vendor-pin.txt", line=pin.line,
        )
    return cache.fetch(found.url, sha, found.filename, where=_where(pin))


def record_hashes(pin: Pin, *, wheel: bool = False) -> Pin:
    """The pin with the index's sha256 of its sdist (and wheel) filled in where missing."""
    from dataclasses import replace

    if pin.url is not None:
        return pin
    options = dict(pin.options)
    if "sdist" not in options:
        options["sdist"] = "sha256:" + index.find_sdist(pin.project, pin.version).sha256
    if wheel and "wheel" not in options:
        found = index.find_wheel(pin.project, pin.version)
        options["wheel"] = "sha256:" + found.sha256
        options["wheel-file"] = found.filename
    return replace(pin, options=options)
