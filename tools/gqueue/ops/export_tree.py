"""``gqueue export-tree --pin LABEL DEST``: a pin's pristine tree with its resolved series applied,
written as a plain folder; work/ (files, index, HEAD, stack) is not touched.

The pin is imported into work/.git if it is not there yet (as ``check`` does), each series
entry is resolved for the pin's release (the file that serves it, or not carried) and applied
in memory; only when every carried patch applies is anything written: the pin's files with a
throw-away index, then the patched files over them, into a temporary folder beside DEST that
is renamed to DEST at the end. So DEST is either absent or complete.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UsageError
from ..model.pin import Pin
from ..model.status import Status
from ..model.variants import Resolution
from .drift import ensure_repo, pin_commit, resolve_pin
from ..model.patch import PatchFile
from .engine import TreeView, apply_patch, touched_paths
from .stackops import NotCarried, PushResult
from .workspace import Workspace


@dataclass
class ExportResult:
    pin: Pin
    dest: str
    report: PushResult = field(default_factory=PushResult)
    files: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.report.failed is None

    def to_json(self) -> dict[str, object]:
        return {"pin": self.pin.describe(), "label": self.pin.label, "version": self.pin.version, "dest": self.dest,
                "written": self.ok, "files": self.files, "seconds": round(self.seconds, 3), **self.report.to_json()}


def export_tree(ws: Workspace, spec: str, dest: Path, *, fuzz: int = 0) -> ExportResult:
    start = time.monotonic()
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise UsageError(f"{dest} already exists and is not an empty folder; refusing to write into it",
                         hint="name a new folder (nothing is ever written over)")
    pin = resolve_pin(ws, spec)
    ensure_repo(ws)
    base = pin_commit(ws, pin)
    result = ExportResult(pin, str(dest))
    view = _apply_series(ws, pin, base, result.report, fuzz)
    if result.report.failed is None:
        result.files = _write(ws, base, view, dest)
    result.seconds = time.monotonic() - start
    return result


def _apply_series(ws: Workspace, pin: Pin, base: str, report: PushResult, fuzz: int) -> TreeView:
    series = ws.store.read_series()
    resolved: list[tuple[int, Resolution, PatchFile | None]] = []
    for entry in series.entries:
        found, patch = ws.resolve(entry.name, line=entry.line, pin=pin)
        resolved.append((entry.strip, found, patch))
    view = TreeView(ws.repo, base)
    view.prefetch(touched_paths(p for _s, _f, p in resolved if p is not None))
    for strip, found, patch in resolved:
        if patch is None:
            report.not_carried.append(NotCarried(found.name, found.reason, len(report.pushed)))
            continue
        ws.reporter.progress(f"{pin.describe()}: applying {found.name}")
        outcome = apply_patch(view, patch, strip=strip, max_fuzz=fuzz)
        if not outcome.ok and not (fuzz and outcome.status == Status.FUZZ):
            report.failed = outcome
            break
        report.pushed.append(outcome)
    return view


def _write(ws: Workspace, base: str, view: TreeView, dest: Path) -> int:
    """The pin's files and the patched ones into a fresh folder renamed to ``dest``; the file count."""
    dest = dest.absolute()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    try:
        ws.repo.export_files(base, tmp)
        for path, change in sorted(view.overlay.items()):
            target = tmp / path
            if change is None:
                target.unlink(missing_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.unlink(missing_ok=True)
            target.write_bytes(change[1])
            os.chmod(target, 0o755 if change[0] == "100755" else 0o644)
        count = sum(len(files) for _root, _dirs, files in os.walk(tmp))
        if dest.is_dir():
            dest.rmdir()  # empty (checked before): the rename takes its place
        os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return count
