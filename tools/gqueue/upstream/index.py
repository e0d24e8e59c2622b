"""Finding a release's files on a package index (PEP 691 JSON, the index pip is set up for)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass

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


def find_sdist(project: str, version: str) -> IndexFile:
    _versions, files = list_files(project)
    wanted = {f"{project}-{version}.tar.gz", f"{canonicalize_name(project).replace('-', '_')}-{version}.tar.gz"}
    for f in files:
        if f.filename in wanted:
            return f
    raise StateError(f"the index has no sdist {project}-{version}.tar.gz")


def find_wheel(project: str, version: str, platform: str = "manylinux_2_28_x86_64") -> IndexFile:
    _versions, files = list_files(project)
    prefix = f"{canonicalize_name(project).replace('-', '_')}-{version}-"
    for f in files:
        if f.filename.startswith(prefix) and f.filename.endswith(".whl") and platform in f.filename:
            return f
    raise StateError(f"the index has no {platform} wheel for {project} {version}")
