"""From a pin to verified local data: the sdist or upstream commit (work tree), the binary wheel (build)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Callable
from urllib.parse import unquote

from ..errors import FormatError, GqueueError, IntegrityError, NetworkError
from ..model.pin import Pin
from ..progress import MeterFactory, null_meter
from . import cache, index
from .archive import Member, check_tree_entry, read_archive

if TYPE_CHECKING:
    from ..vcs.git import MirrorRepo


def _where(pin: Pin) -> str:
    return f"vendor-pin.txt:{pin.line}"


def sdist_path(pin: Pin, *, meter: MeterFactory = null_meter) -> Path:
    sha = pin.sdist_sha256
    if pin.kind == "git":
        raise FormatError(f"{pin.describe()} is a git commit, not an archive", path="vendor-pin.txt", line=pin.line)
    if pin.url is not None:
        location = pin.url.split("#", 1)[0]
        filename = unquote(location.rstrip("/").rsplit("/", 1)[-1])
        assert sha is not None  # parse_source insists on it
        return cache.fetch(location, sha, filename, where=_where(pin), meter=meter)
    return _from_index(pin, "sdist", sha, f"{pin.project}-{pin.version}.tar.gz", index.find_sdist, meter)


def fetch_base(pin: Pin, *, meter: MeterFactory = null_meter, live: bool = False) -> None:
    """Fetch and verify the pin's tree into the cache (the sdist, or the git commit)."""
    if pin.kind == "git":
        _mirror_commit(pin, live=live)
    else:
        sdist_path(pin, meter=meter)


def base_tree(pin: Pin, *, meter: MeterFactory = null_meter, live: bool = False) -> tuple[list[Member], list[str]]:
    """The files of the pinned tree, checked, and the paths left out (a commit's submodules)."""
    if pin.kind != "git":
        return read_archive(sdist_path(pin, meter=meter), meter=meter), []
    mirror = _mirror_commit(pin, live=live)
    assert pin.commit is not None
    files, gitlinks = mirror.tree_files(pin.commit)
    label = f"commit {pin.commit[:12]}"
    return [check_tree_entry(path, mode, data, label) for path, mode, data in files], gitlinks


def mirror_path(git_url: str) -> Path:
    """The cache's bare repository for one upstream URL."""
    return cache.cache_dir() / "git" / (hashlib.sha256(git_url.encode()).hexdigest()[:24] + ".git")


def _mirror_commit(pin: Pin, *, live: bool) -> "MirrorRepo":
    from ..vcs.git import MirrorRepo

    assert pin.git_url is not None and pin.commit is not None
    mirror = MirrorRepo(mirror_path(pin.git_url))
    if mirror.exists() and mirror.has_commit(pin.commit):
        return mirror
    try:
        mirror.fetch_commit(pin.git_url, pin.commit, show_progress=live)
    except GqueueError as exc:
        raise NetworkError(
            f"cannot fetch commit {pin.commit} from {pin.git_url}: {exc.message}", path="vendor-pin.txt",
            line=pin.line, hint="the commit id must be the full id of a commit the repository has",
        ) from None
    if not mirror.has_commit(pin.commit):  # fetch_commit checks this; a second look costs nothing
        raise IntegrityError(f"{pin.git_url} gave no commit {pin.commit}", path="vendor-pin.txt", line=pin.line)
    return mirror


def wheel_path(pin: Pin) -> Path:
    return _from_index(pin, "wheel", pin.wheel_sha256, pin.options.get("wheel-file"), index.find_wheel)


def _from_index(pin: Pin, kind: str, sha: str | None, filename: str | None,
                find: Callable[[str, str], index.IndexFile], meter: MeterFactory = null_meter) -> Path:
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
    size = found.size if isinstance(found.size, int) and not isinstance(found.size, bool) else None
    return cache.fetch(found.url, sha, found.filename, where=_where(pin), meter=meter, size=size)


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
