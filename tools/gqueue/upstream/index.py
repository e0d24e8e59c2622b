"""Finding a release's files on a package index (PEP 691 JSON, the index pip is set up for)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from ..errors import NetworkError, StateError

DEFAULT_INDEX = "https://pypi.org/simple"
ACCEPT = "application/vnd.pypi.simple.v1+json"


@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str
    sha256: str
    size: int | None


def index_url() -> str:
    """PIP_INDEX_URL, else pip's configured global.index-url, else PyPI."""
    env = os.environ.get("GQUEUE_INDEX_URL") or os.environ.get("PIP_INDEX_URL")
    if env:
        return env.rstrip("/")
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "config", "get", "global.index-url"],
            capture_output=True, text=True, timeout=30,
        )
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip().rstrip("/")
    except (OSError, subprocess.TimeoutExpired):
        pass
    return DEFAULT_INDEX


def list_files(project: str) -> tuple[list[str], list[IndexFile]]:
    """(versions, files) the index offers for ``project``."""
    url = f"{index_url()}/{canonicalize_name(project)}/"
    request = urllib.request.Request(url, headers={"Accept": ACCEPT})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            data = json.load(response)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise NetworkError(f"cannot read the package index at {url}: {exc}") from None
    files = [
        IndexFile(f["filename"], f["url"], f.get("hashes", {}).get("sha256", ""), f.get("size"))
        for f in data.get("files", [])
    ]
    return list(data.get("versions", [])), files


def _memo_path(project: str, version: str) -> Path:
    """Where ``find_sdist`` keeps its answer: per project, version and the index named in the
    environment (pip's own configuration is not read for this: asking pip costs half a second)."""
    import hashlib
    from pathlib import Path

    from .cache import cache_dir

    named = os.environ.get("GQUEUE_INDEX_URL") or os.environ.get("PIP_INDEX_URL") or ""
    key = hashlib.sha256(named.rstrip("/").encode()).hexdigest()[:16]
    return Path(cache_dir()) / "index" / key / canonicalize_name(project) / f"{version}.sdist.json"


def _memo_read(project: str, version: str) -> IndexFile | None:
    """The sdist an earlier lookup of this release found (see ``find_sdist``), if recorded."""
    try:
        data = json.loads(_memo_path(project, version).read_text())
        found = IndexFile(str(data["filename"]), str(data["url"]), str(data["sha256"]), data.get("size"))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return found if len(found.sha256) == 64 else None


def _memo_write(project: str, version: str, found: IndexFile) -> None:
    path = _memo_path(project, version)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps({"filename": found.filename, "url": found.url, "sha256": found.sha256,
                                   "size": found.size}))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache only costs the next lookup its index request


def find_sdist(project: str, version: str) -> IndexFile:
    """The release's sdist. An index never replaces a file it published (PyPI refuses a
    second upload of a file name), so the answer is kept in the download cache
    (``index/<project>/<version>.sdist.json``) and the next lookup of this release asks no
    index; whatever is fetched is still checked against this sha256."""
    memo = _memo_read(project, version)
    if memo is not None:
        return memo
    _versions, files = list_files(project)
    wanted = {f"{project}-{version}.tar.gz", f"{canonicalize_name(project).replace('-', '_')}-{version}.tar.gz"}
    for f in files:
        if f.filename in wanted:
            if len(f.sha256) == 64:
                _memo_write(project, version, f)
            return f
    raise StateError(f"the index has no sdist {project}-{version}.tar.gz")


def find_wheel(project: str, version: str, platform: str = "manylinux_2_28_x86_64") -> IndexFile:
    _versions, files = list_files(project)
    prefix = f"{canonicalize_name(project).replace('-', '_')}-{version}-"
    for f in files:
        if f.filename.startswith(prefix) and f.filename.endswith(".whl") and platform in f.filename:
            return f
    raise StateError(f"the index has no {platform} wheel for {project} {version}")
