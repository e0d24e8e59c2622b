"""develop: an editable install of the work tree into a virtual environment.

The environment imports the package from ``work/`` (edits are live) and the kernels from
``kernels/``, through one ``.pth`` file naming a folder of two symbolic links. The upstream
wheel's files that the sdist lacks (compiled extensions, generated and vendored files) are
placed beside the sources and listed in ``work/.git/info/exclude``, so git ignores them. A
``.dist-info`` marks the package as installed (editable) for pip and ``importlib.metadata``.
Everything written is recorded in ``.gqueue/develop.json``; ``--uninstall`` removes it all.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import StateError, UsageError
from ..fsutil import atomic_write
from .build import RUNTIME_PACKAGE, package_of, upstream_wheel
from .wheel import WheelName, find_dist_info, record_hash, set_version
from .workspace import Workspace

STATE = "develop.json"
PTH = "gqueue-develop.pth"
INSTALLER = "gqueue"
LOCAL_LABEL = "gq.develop"
EXCLUDE_BEGIN = "# gqueue develop: files from the upstream wheel (begin)"
EXCLUDE_END = "# gqueue develop (end)"


@dataclass(frozen=True)
class DevelopResult:
    python: str
    package: str
    site_packages: str
    compiled: int
    version: str

    def to_json(self) -> dict[str, object]:
        return {"python": self.python, "package": self.package, "site_packages": self.site_packages,
                "upstream_files": self.compiled, "version": self.version}


@dataclass(frozen=True)
class UninstallResult:
    removed: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {"removed": self.removed}


# the environment ------------------------------------------------------------------
def target_python(python: Path | None) -> Path:
    if python is not None:
        return python
    venv = os.environ.get("VIRTUAL_ENV")
    if venv and (Path(venv) / "bin" / "python").exists():
        return Path(venv) / "bin" / "python"
    return Path(sys.executable)


def environment(python: Path) -> dict[str, Any]:
    script = ("import json, sys, sysconfig; p = sysconfig.get_paths(); print(json.dumps({"
              "'purelib': p['purelib'], 'scripts': p['scripts'], 'venv': sys.prefix != sys.base_prefix}))")
    try:
        proc = subprocess.run([str(python), "-c", script], capture_output=True, text=True, timeout=60)
    except OSError as exc:
        raise UsageError(f"cannot run {python}: {exc.strerror}", hint="pass --python PATH") from None
    if proc.returncode != 0:
        raise UsageError(f"{python} failed: {proc.stderr.strip()[-200:]}")
    info: dict[str, Any] = json.loads(proc.stdout)
    if not info["venv"]:
        raise UsageError(f"{python} is not in a virtual environment; refusing to change its site-packages",
                         hint="activate a venv, or pass --python VENV/bin/python")
    return info


def _foreign_install(purelib: Path, package: str) -> Path | None:
    for dist in purelib.glob(f"{package}-*.dist-info"):
        installer = dist / "INSTALLER"
        if not (installer.is_file() and installer.read_text().strip() == INSTALLER):
            return dist
    return None


# exclude block --------------------------------------------------------------------
def _exclude_path(ws: Workspace) -> Path:
    return ws.repo.git_dir / "info" / "exclude"


def _without_block(text: str) -> str:
    if EXCLUDE_BEGIN not in text:
        return text
    head, _, rest = text.partition(EXCLUDE_BEGIN + "\n")
    _, _, tail = rest.partition(EXCLUDE_END + "\n")
    return head + tail


def _write_exclude(ws: Workspace, paths: list[str]) -> None:
    path = _exclude_path(ws)
    text = _without_block(path.read_text() if path.exists() else "")
    if paths:
        if text and not text.endswith("\n"):
            text += "\n"
        text += EXCLUDE_BEGIN + "\n" + "".join(f"/{p}\n" for p in paths) + EXCLUDE_END + "\n"
    atomic_write(path, text.encode())


# install ----------------------------------------------------------------------------
def develop(ws: Workspace, *, python: Path | None = None, wheel: Path | None = None) -> DevelopResult:
    ws.require_work()
    if _state(ws) is not None:
        uninstall(ws)
    pin = ws.pin()
    package = package_of(pin)
    py = target_python(python)
    env = environment(py)
    purelib = Path(env["purelib"])
    foreign = _foreign_install(purelib, package)
    if foreign is not None:
        raise StateError(f"{py} already has {foreign.name} installed", path=str(foreign),
                         hint=f"'{py} -m pip uninstall {package}' first")
    stack = ws.stack()
    tracked = set(ws.repo.tree_entries(stack.base)) | set(ws.repo.tree_entries(stack.head))
    upstream = upstream_wheel(pin, wheel)
    extracted, created = _plan(upstream, ws.repo.path, package, tracked)
    state: dict[str, Any] = {"python": str(py), "purelib": str(purelib), "files": extracted, "dirs": created,
                             "installed": []}
    _save(ws, state)  # the plan first: an interrupted develop can still be uninstalled
    _write_exclude(ws, extracted)
    ws.reporter.progress(f"placing {len(extracted)} file(s) from {upstream.name}")
    _extract(upstream, ws.repo.path, extracted)

    site = ws.state_dir / "develop" / "site"
    site.mkdir(parents=True, exist_ok=True)
    _link(site / package, ws.repo.path / package)
    kernels = ws.store.root / "kernels" / RUNTIME_PACKAGE
    if kernels.is_dir():
        _link(site / RUNTIME_PACKAGE, kernels)
    state["site"] = str(site)
    version = f"{pin.version}+{LOCAL_LABEL}"
    state["installed"] = _install_metadata(upstream, purelib, Path(env["scripts"]), py, package, version, site, ws)
    _save(ws, state)
    return DevelopResult(str(py), package, str(purelib), len(extracted), version)


def _plan(upstream: Path, work: Path, package: str, tracked: set[str]) -> tuple[list[str], list[str]]:
    """The wheel's package files the sdist lacks, and the folders they need; nothing written yet.

    ``tracked`` holds the pin's files and HEAD's: a file a patch deletes stays deleted.
    """
    files: list[str] = []
    folders: list[str] = []
    with zipfile.ZipFile(upstream) as zf:
        for name in zf.namelist():
            parts = name.split("/")
            if name.endswith("/") or parts[0] != package or name in tracked or ".." in parts or "" in parts:
                continue
            files.append(name)
            for depth in range(1, len(parts)):
                folder = "/".join(parts[:depth])
                if folder not in folders and not (work / folder).exists():
                    folders.append(folder)
    return sorted(files), folders


def _extract(upstream: Path, work: Path, files: list[str]) -> None:
    with zipfile.ZipFile(upstream) as zf:
        for name in files:
            info = zf.getinfo(name)
            dest = work / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, dest.open("wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
            if (info.external_attr >> 16) & 0o100:
                dest.chmod(0o755)


def _link(link: Path, target: Path) -> None:
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target.resolve(), target_is_directory=True)


def _install_metadata(upstream: Path, purelib: Path, scripts: Path, python: Path, package: str,
                      version: str, site: Path, ws: Workspace) -> list[str]:
    """The .pth, a .dist-info marking an editable install, and the console scripts."""
    written: dict[Path, bytes] = {purelib / PTH: f"{site.resolve()}\n".encode()}
    with zipfile.ZipFile(upstream) as zf:
        old = find_dist_info(zf.namelist(), WheelName.parse(upstream.name).distribution)
        dist = purelib / WheelName.parse(upstream.name).with_version(version).dist_info
        written[dist / "METADATA"] = set_version(zf.read(f"{old}/METADATA"), version)
        for extra in ("entry_points.txt", "top_level.txt"):
            if f"{old}/{extra}" in zf.namelist():
                written[dist / extra] = zf.read(f"{old}/{extra}")
    written[dist / "INSTALLER"] = f"{INSTALLER}\n".encode()
    direct = {"url": ws.repo.path.resolve().as_uri(), "dir_info": {"editable": True}}
    written[dist / "direct_url.json"] = json.dumps(direct).encode()
    for name, target in _console_scripts(written.get(dist / "entry_points.txt", b"")):
        module, _, func = target.partition(":")
        written[scripts / name] = (f"#!{python}\nimport sys\nfrom {module} import {func.strip()}\n"
                                   f"if __name__ == '__main__':\n    sys.exit({func.strip()}())\n").encode()
    for path, data in written.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        if path.parent == scripts:
            path.chmod(0o755)
    rows = [f"{os.path.relpath(p, purelib)},{record_hash(d)},{len(d)}\n" for p, d in written.items()]
    record = dist / "RECORD"
    record.write_text("".join(rows) + f"{os.path.relpath(record, purelib)},,\n")
    return sorted([str(p) for p in written] + [str(record)])


def _console_scripts(entry_points: bytes) -> list[tuple[str, str]]:
    import configparser

    parser = configparser.ConfigParser(delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(entry_points.decode("utf-8"))
    if not parser.has_section("console_scripts"):
        return []
    return [(k.strip(), v.strip()) for k, v in parser.items("console_scripts")]


# uninstall --------------------------------------------------------------------------
def _state(ws: Workspace) -> dict[str, Any] | None:
    try:
        state: dict[str, Any] = json.loads((ws.state_dir / STATE).read_text())
    except FileNotFoundError:
        return None
    return state


def _save(ws: Workspace, state: dict[str, Any]) -> None:
    atomic_write(ws.state_dir / STATE, json.dumps(state, indent=2, sort_keys=True).encode())


def uninstall(ws: Workspace) -> UninstallResult:
    state = _state(ws)
    if state is None:
        return UninstallResult([])
    removed: list[str] = []
    for path in map(Path, state.get("installed", [])):
        if path.is_file() or path.is_symlink():
            path.unlink()
            removed.append(str(path))
    for path in map(Path, state.get("installed", [])):
        if path.parent.name.endswith(".dist-info") and path.parent.is_dir() and not any(path.parent.iterdir()):
            path.parent.rmdir()
    work = ws.repo.path
    for rel in state.get("files", []):
        target = work / rel
        if target.is_file() or target.is_symlink():
            target.unlink()
            removed.append(f"work/{rel}")
    for rel in sorted(state.get("dirs", []), key=lambda d: -d.count("/")):
        folder = work / rel
        if folder.is_dir():
            shutil.rmtree(folder / "__pycache__", ignore_errors=True)
            if not any(folder.iterdir()):
                folder.rmdir()
    if ws.repo.exists():
        _write_exclude(ws, [])
    shutil.rmtree(ws.state_dir / "develop", ignore_errors=True)
    (ws.state_dir / STATE).unlink()
    return UninstallResult(removed)
