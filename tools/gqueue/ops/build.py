"""build: the wheel users install on their GPU hosts.

Overlay mode (the default) starts from the pinned upstream binary wheel, replaces the
package files the applied patches change, adds the kernels package and a manifest, and
writes ``dist/<project>-<version>+gq.<digest>-<tags>.whl``. Source mode builds the patched
tree with ``pip wheel`` (needs the CUDA toolchain) and then adds the same kernels and manifest.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..errors import GqueueError, IntegrityError, UsageError
from ..model.patch import PatchFile, format_patch
from ..model.pin import Pin
from ..model.registry import render_registry
from ..upstream import cache
from ..upstream.resolve import wheel_path
from .selection import COMPILED, OTHER, SHIPPED, Selection, from_series, from_stack, kind_of
from .wheel import Overlay, OverlayStats, WheelName, write_overlay
from .workspace import Workspace

MODES = ("overlay", "source")
KERNELS = "kernels"
RUNTIME_PACKAGE = "vllm_genesis"
MANIFEST = f"{RUNTIME_PACKAGE}/gqueue_manifest.json"
REGISTRY = f"{RUNTIME_PACKAGE}/registry.json"
MANIFEST_SCHEMA = "gqueue.manifest/1"
LABEL_PREFIX = "gq."
LABEL_HEX = 12
SKIP_DIRS = ("__pycache__",)
SKIP_DIR_SUFFIXES = (".egg-info", ".dist-info")
SKIP_SUFFIXES = (".pyc", ".pyo")

Runner = Callable[[list[str], Path], None]


class NeedsSourceBuild(GqueueError):
    """A patch changes compiled sources, which an overlay wheel cannot carry."""

    ref = "needs-source-build"


class SourceBuildError(GqueueError):
    ref = "source-build"


@dataclass(frozen=True)
class BuildResult:
    wheel: str
    filename: str
    version: str
    label: str
    sha256: str
    size: int
    mode: str
    profile: str | None
    patches: list[str]
    replaced: list[str]
    added: list[str]
    removed: list[str]
    copied: int
    not_shipped: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, object]:
        return {
            "wheel": self.wheel, "filename": self.filename, "version": self.version, "label": self.label,
            "sha256": self.sha256, "size": self.size, "mode": self.mode, "profile": self.profile,
            "patches": self.patches, "replaced": self.replaced, "added": self.added, "removed": self.removed,
            "copied": self.copied, "not_shipped": self.not_shipped, "seconds": round(self.seconds, 3),
        }


def package_of(pin: Pin) -> str:
    return pin.project.replace("-", "_")


# inputs -----------------------------------------------------------------------------
def upstream_wheel(pin: Pin, local: Path | None = None) -> Path:
    """The pinned upstream wheel: ``local`` if given (checked against the pin), else the cache/index."""
    if local is None:
        return wheel_path(pin)
    expected = pin.wheel_sha256
    if expected is None:
        raise UsageError(f"no wheel=sha256:... recorded for {pin.describe()}", path="vendor-pin.txt", line=pin.line,
                         hint="'gqueue pin add --wheel' records it from the index")
    if not local.is_file():
        raise UsageError(f"no such wheel: {local}")
    actual = cache.sha256_file(local)
    if actual != expected:
        raise IntegrityError(f"sha256 mismatch for {local.name}: vendor-pin.txt says {expected}, the file is {actual}",
                             path="vendor-pin.txt", line=pin.line)
    return local


def kernel_files(root: Path) -> dict[str, tuple[bytes, bool]]:
    """Every file of the packages under kernels/: wheel path -> (content, executable)."""
    base = root / KERNELS
    found: dict[str, tuple[bytes, bool]] = {}
    if not base.is_dir():
        return found
    for package in sorted(p for p in base.iterdir() if p.is_dir() and not _skipped_dir(p.name)):
        for dirpath, dirnames, filenames in os.walk(package):
            dirnames[:] = sorted(d for d in dirnames if not _skipped_dir(d))
            for d in dirnames:
                if (Path(dirpath) / d).is_symlink():  # os.walk does not follow it: its files would be missing
                    raise UsageError(f"{(Path(dirpath) / d).relative_to(root).as_posix()}: a symbolic link to a folder "
                                     "in the kernels package; the wheel would not carry its files",
                                     hint="put the folder itself there")
            for name in sorted(filenames):
                if name.startswith(".") or name.endswith(SKIP_SUFFIXES):
                    continue
                path = Path(dirpath) / name
                rel = path.relative_to(base).as_posix()
                found[rel] = (path.read_bytes(), bool(path.stat().st_mode & 0o100))
    return found


def _skipped_dir(name: str) -> bool:
    """Folders under kernels/ that are not part of a package: caches, metadata of a local install, hidden ones."""
    return name in SKIP_DIRS or name.startswith(".") or name.endswith(SKIP_DIR_SUFFIXES)


def profile_patches(ws: Workspace, profile: str) -> list[str]:
    """The series entries a profile selects (with the profile's own policy)."""
    from .plan import select_patches

    return [entry.name for entry in select_patches(ws.store, profile)]


# checks -----------------------------------------------------------------------------
def refuse_compiled(selection: Selection, package: str) -> None:
    compiled = selection.by_kind(package, COMPILED)
    if not compiled:
        return
    by_patch: dict[str, list[str]] = {}
    for path in compiled:
        for name in selection.touched.get(path, ()):
            by_patch.setdefault(name, []).append(path)
    order = [n for n in selection.names if n in by_patch]
    listed = "; ".join(f"{n} ({', '.join(by_patch[n])})" for n in order)
    raise NeedsSourceBuild(
        f"an overlay wheel cannot carry changes to compiled sources: {listed}",
        path=f"queue/{order[0]}" if order else None,
        hint="build with '--mode source' (needs the CUDA toolchain), or take the patch out of the build",
    )


# digests and manifest ---------------------------------------------------------------
def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def digests(pin: Pin, selection: Selection, package: str, kernels: dict[str, tuple[bytes, bool]], mode: str) -> dict[str, str]:
    series = _sha("\n".join(selection.names).encode())
    patches = _sha(b"".join(f"{p.name}\0{_sha(format_patch(p))}\n".encode() for p in selection.patches))
    files = _sha(b"".join(
        f"{path}\0{'-' if value is None else value[0] + ' ' + _sha(value[1])}\n".encode()
        for path, value in sorted(selection.changes.items()) if kind_of(path, package) == SHIPPED
    ))
    kernel = _sha(b"".join(f"{path}\0{_sha(data)}\0{int(x)}\n".encode() for path, (data, x) in sorted(kernels.items())))
    parts = {"pin": f"{pin.describe()} {pin.wheel_sha256 or ''}", "mode": mode,
             "series": series, "patches": patches, "files": files, "kernels": kernel}
    queue = _sha(json.dumps(parts, sort_keys=True).encode())
    return {"queue": queue, "series": series, "patches": patches, "files": files, "kernels": kernel}


def local_version(version: str, label: str) -> str:
    return f"{version}.{label}" if "+" in version else f"{version}+{label}"


def manifest(pin: Pin, selection: Selection, version: str, mode: str, profile: str | None,
             digest: dict[str, str], files: dict[str, list[str]]) -> bytes:
    doc = {
        "schema": MANIFEST_SCHEMA,
        "project": pin.project,
        "version": version,
        "upstream_version": pin.version,
        "mode": mode,
        "profile": profile,
        "pin": {"source": pin.describe() if pin.url is None else pin.source.split("#", 1)[0].rsplit("/", 1)[-1],
                "sdist_sha256": pin.sdist_sha256, "wheel_sha256": pin.wheel_sha256,
                "wheel_file": pin.options.get("wheel-file")},
        "patches": [_patch_entry(p, selection.files_of(p.name)) for p in selection.patches],
        "files": files,
        "digests": digest,
    }
    return (json.dumps(doc, indent=2, sort_keys=False) + "\n").encode("utf-8")


def _patch_entry(patch: PatchFile, files: list[str]) -> dict[str, object]:
    meta = patch.meta
    return {"name": patch.name, "id": meta.id, "title": meta.title, "lifecycle": meta.lifecycle,
            "env_flag": meta.env_flag, "default_on": meta.default_on, "files": files}


# the build --------------------------------------------------------------------------
def build(ws: Workspace, *, mode: str = "overlay", profile: str | None = None, out_dir: Path | None = None,
          wheel: Path | None = None, runner: Runner | None = None, pin_spec: str | None = None) -> BuildResult:
    """``pin_spec``: build for another pin of vendor-pin.txt (its tree and wheel, its resolved series
    applied in memory; work/ is untouched) instead of the stack in work/."""
    if mode not in MODES:
        raise UsageError(f"unknown build mode '{mode}' (overlay or source)")
    start = time.monotonic()
    if pin_spec is not None:
        from .drift import pin_commit, resolve_pin

        pin = resolve_pin(ws, pin_spec)
        names = profile_patches(ws, profile) if profile is not None else ws.store.read_series().names
        selection = from_series(ws, names, pin=pin, base=pin_commit(ws, pin))
    else:
        pin = ws.pin()
        selection = _select(ws, profile)
    package = package_of(pin)
    if mode == "overlay":
        refuse_compiled(selection, package)
    not_shipped = selection.by_kind(package, OTHER)
    if not_shipped:
        ws.reporter.note(f"{len(not_shipped)} changed file(s) outside {package}/ are not in a wheel: "
                         + ", ".join(not_shipped[:5]) + (" ..." if len(not_shipped) > 5 else ""))

    kernels = kernel_files(ws.store.root)
    kernels[REGISTRY] = (render_registry(selection.patches).encode("utf-8"), False)
    digest = digests(pin, selection, package, kernels, mode)
    label = LABEL_PREFIX + digest["queue"][:LABEL_HEX]
    version = local_version(pin.version, label)
    shipped = {p: v for p, v in selection.changes.items() if kind_of(p, package) == SHIPPED} if mode == "overlay" else {}
    files: dict[str, bytes | None] = {p: (None if v is None else v[1]) for p, v in shipped.items()}
    executable = {p for p, v in shipped.items() if v is not None and v[0] == "100755"}
    executable |= {p for p, (_, x) in kernels.items() if x}
    target = out_dir if out_dir is not None else ws.store.root / "dist"

    if mode == "source":
        files.update({p: data for p, (data, _) in kernels.items()})
        listing = {"patched": sorted(selection.changes), "kernels": sorted(kernels)}
        files[MANIFEST] = manifest(pin, selection, version, mode, profile, digest, listing)
        stats = _source_build(ws, selection, target, Overlay(version, files, frozenset(executable)), runner)
    else:
        upstream = upstream_wheel(pin, wheel)
        ws.reporter.progress(f"composing {WheelName.parse(upstream.name).with_version(version).filename}")
        listing = _listing(upstream, files, kernels)
        files.update({p: data for p, (data, _) in kernels.items()})
        files[MANIFEST] = manifest(pin, selection, version, mode, profile, digest, listing)
        _check_upstream_base(ws, selection.base, upstream, shipped)
        stats = write_overlay(upstream, target, Overlay(version, files, frozenset(executable)))
    return BuildResult(
        ws.store.rel(target / stats.filename), stats.filename, version, label, stats.sha256, stats.size, mode,
        profile, selection.names, stats.replaced, stats.added, stats.removed, stats.copied, not_shipped,
        time.monotonic() - start,
    )


def _select(ws: Workspace, profile: str | None) -> Selection:
    if profile is None:
        selection = from_stack(ws)
        dirty = [p for p in ws.repo.dirty_paths() if not p.endswith((".rej", ".orig"))]
        if dirty:
            ws.reporter.note(f"{len(dirty)} unrefreshed change(s) in work/ are not in the build (run 'gqueue refresh')")
    else:
        selection = from_series(ws, profile_patches(ws, profile))
    if not selection.patches:
        ws.reporter.note("no patch is applied: the wheel is upstream's plus the kernels")
    return selection


def _listing(upstream: Path, files: dict[str, bytes | None], kernels: dict[str, tuple[bytes, bool]]) -> dict[str, list[str]]:
    """The manifest's account of the package files the patches change."""
    with zipfile.ZipFile(upstream) as zf:
        present = set(zf.namelist())
    return {
        "replaced": sorted(p for p, v in files.items() if v is not None and p in present),
        "added": sorted(p for p, v in files.items() if v is not None and p not in present),
        "removed": sorted(p for p, v in files.items() if v is None),
        "kernels": sorted(kernels),
    }


def _check_upstream_base(ws: Workspace, base: str, upstream: Path, shipped: dict[str, tuple[str, bytes] | None]) -> None:
    """Note any patched file whose upstream-wheel copy differs from the sdist's (a generated file?)."""
    if not shipped:
        return
    entries = ws.repo.tree_entries(base)
    with zipfile.ZipFile(upstream) as zf:
        present = set(zf.namelist())
        for path in sorted(shipped):
            entry = entries.get(path)
            if entry is None:
                continue
            if path not in present:
                ws.reporter.note(f"{path} is in the sdist but not in the upstream wheel; the build adds it")
            elif zf.read(path) != ws.repo.blob(entry.sha):
                ws.reporter.note(f"{path} in the upstream wheel differs from the sdist; the build ships the patched sdist file")


# source mode ------------------------------------------------------------------------
def pip_wheel(argv: list[str], cwd: Path) -> None:
    proc = subprocess.run(argv, cwd=cwd)
    if proc.returncode != 0:
        raise SourceBuildError(f"pip wheel failed with exit code {proc.returncode}",
                               hint="a source build needs the CUDA toolchain vLLM's build expects (nvcc, CMake)")


def export_tree(ws: Workspace, selection: Selection, target: Path) -> int:
    """Write the pin's tree with the selection's changes applied into ``target``."""
    entries = ws.repo.tree_entries(selection.base)
    count = 0
    for path in sorted(set(entries) | set(selection.changes)):
        if path in selection.changes:
            value = selection.changes[path]
            if value is None:
                continue
            mode, data = value
        else:
            mode, data = entries[path].mode, ws.repo.blob(entries[path].sha)
        dest = target / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        if mode == "120000":
            os.symlink(data.decode("utf-8", "surrogateescape"), dest)
        else:
            dest.write_bytes(data)
            if mode == "100755":
                dest.chmod(0o755)
        count += 1
    return count


def _source_build(ws: Workspace, selection: Selection, target: Path, overlay: Overlay, runner: Runner | None) -> OverlayStats:
    with tempfile.TemporaryDirectory(prefix="gqueue-source-") as tmp:
        tree, wheels = Path(tmp) / "src", Path(tmp) / "wheels"
        files = export_tree(ws, selection, tree)
        ws.reporter.note(f"building the patched tree ({files} files) with pip wheel; this needs the CUDA toolchain")
        wheels.mkdir()
        (runner or pip_wheel)([sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(wheels), str(tree)], tree)
        built = sorted(wheels.glob("*.whl"))
        if len(built) != 1:
            raise SourceBuildError(f"pip wheel made {len(built)} wheels, not one")
        return write_overlay(built[0], target, overlay)
