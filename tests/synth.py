"""A tiny synthetic upstream, made by the tests: sdist archives of a fake ``vllm`` and queues on them."""

from __future__ import annotations

import hashlib
import io
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

BASE_FILES: dict[str, str] = {
    "pyproject.toml": "[project]\nname = 'vllm'\n",
    "vllm/__init__.py": "__version__ = '0.1.0'\n",
    "vllm/util.py": "".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(40)),
    "vllm/parser.py": "import json\n\n\ndef parse(text):\n    if text == 'null':\n        return None\n    return json.loads(text)\n",
    "vllm/config.py": "".join(f"OPTION_{i} = {i}\n" for i in range(60)),
    "README.md": "synthetic upstream\n",
}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_sdist(directory: Path, version: str, files: dict[str, str | bytes], *, top: str | None = None) -> Path:
    """A deterministic vllm-VERSION.tar.gz with a single top folder."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"vllm-{version}.tar.gz"
    top = top or f"vllm-{version}"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(files):
            content = files[name]
            data = content.encode() if isinstance(content, str) else content
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            info.mtime = 0
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    path.write_bytes(buf.getvalue())
    return path


@dataclass
class Queue:
    root: Path

    def run(self, *args: str, check: bool = True, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        import os

        full_env = dict(os.environ)
        if env:
            full_env.update(env)
        proc = subprocess.run(
            [sys.executable, "-m", "gqueue", "-C", str(self.root), *args],
            capture_output=True, text=True, env=full_env,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"gqueue {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
        return proc

    @property
    def work(self) -> Path:
        return self.root / "work"

    def write_patch(self, name: str, body: str, *, patch_id: str | None = None, extra: str = "") -> Path:
        pid = patch_id or name.split("-", 1)[0]
        header = f"---\nid: {pid}\ntitle: {name}\n{extra}...\n"
        path = self.root / "queue" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(header + body)
        return path

    def set_series(self, *names: str) -> None:
        (self.root / "series").write_text("".join(n + "\n" for n in names))


def make_queue(tmp: Path, files: dict[str, str | bytes] | None = None, version: str = "0.1.0") -> Queue:
    """A queue pinned to a synthetic sdist (file:// URL with its sha256), not yet checked out."""
    archive = make_sdist(tmp / "upstream", version, files or BASE_FILES)
    root = tmp / "q"
    (root / "queue").mkdir(parents=True)
    (root / "series").write_text("# test series\n")
    (root / "vendor-pin.txt").write_text(f"pin {archive.as_uri()}#sha256={sha256(archive)}\n")
    return Queue(root)


def unified(path: str, old: str, new: str, context: str = "") -> str:
    """A git-style diff for one file made with difflib (old/new are whole file texts)."""
    import difflib

    lines = list(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                      f"a/{path}", f"b/{path}", n=3))
    return f"diff --git a/{path} b/{path}\n" + "".join(lines)


def base_git_repo(repo: Path, *, user: str = "A U Thor", email: str = "author@example.org") -> Callable[..., str]:
    """A git repository at ``repo`` whose one commit ('base') holds BASE_FILES; returns a runner
    of git commands there as ``user`` (their stdout)."""
    repo.mkdir(parents=True)

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), "-c", f"user.name={user}", "-c", f"user.email={email}", *args],
                              check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    for name, text in BASE_FILES.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git("add", "-A")
    git("commit", "-qm", "base")
    return git
