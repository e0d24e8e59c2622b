"""import and export: patches from and to quilt, Debian and git."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import FormatError, UsageError
from ..fsutil import atomic_write
from ..model.diff import as_p1
from ..model.foreign import read_foreign
from ..model.patch import PatchFile, new_patch, parse_patch
from ..model.series import parse_series
from .engine import checked_diffs
from .queueops import check_name, id_from_name, require_unused_ids, title_from_name
from .transaction import queue_edit
from .workspace import Workspace

_NUMBERED = re.compile(r"^\d{4}-")


@dataclass
class ImportResult:
    imported: list[dict[str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {"imported": self.imported}


def _to_gqueue(name: str, data: bytes, source: str) -> tuple[PatchFile, str]:
    foreign = read_foreign(data)
    if foreign.kind == "gqueue":
        return parse_patch(data, name=name, path=source), "gqueue"
    stem = _NUMBERED.sub("", name[: -len(".patch")] if name.endswith(".patch") else name)
    fields = {"id": id_from_name(stem) if re.match(r"^[A-Z]+\d", stem) else stem,
              "title": title_from_name(stem)}
    fields.update(foreign.fields)
    fields.setdefault("lifecycle", "experimental")
    return new_patch(name, fields, foreign.body), foreign.kind


def import_patches(ws: Workspace, files: list[Path], *, series_file: Path | None = None) -> ImportResult:
    entries: list[tuple[str, Path, int]] = []
    if series_file is not None:
        try:
            text = series_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot read {series_file}: {exc.strerror}") from None
        foreign_series = parse_series(text, path=str(series_file))
        for entry in foreign_series.entries:
            entries.append((entry.name, series_file.parent / entry.name, entry.strip))
    for path in files:
        entries.append((path.name, path, 1))
    if not entries:
        raise UsageError("nothing to import: give patch files or --series")
    series = ws.store.read_series()
    position = len(ws.stack().applied) if ws.repo.exists() else len(series.entries)
    prepared: list[tuple[PatchFile, int, str]] = []
    seen: dict[str, Path] = {}
    for name, path, strip in entries:
        check_name(name)
        if name in series or ws.store.patch_path(name).exists():
            raise UsageError(f"a patch named '{name}' is already in the queue")
        if name in seen:
            raise UsageError(f"'{name}' would be imported twice ({seen[name]} and {path}); nothing was imported")
        seen[name] = path
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror}") from None
        patch, kind = _to_gqueue(name, data, str(path))
        _check_diff(patch, data, path, strip)
        prepared.append((patch, strip, kind))
    require_unused_ids(ws, series, {patch.name: patch.meta.id for patch, _strip, _kind in prepared})
    result = ImportResult()
    before = series
    series = series.insert_many(position, [patch.name for patch, _strip, _kind in prepared])
    for patch, strip, _kind in prepared:
        if strip != 1:
            series = _with_strip(series, patch.name, strip)
    with queue_edit(ws, "import", before, series, create=tuple(p.name for p, _s, _k in prepared)):
        for patch, _strip, kind in prepared:
            ws.store.write_patch(patch)
            result.imported.append({"name": patch.name, "id": patch.meta.id, "from": kind})
        ws.store.write_series(series)
    return result


def _check_diff(patch: PatchFile, data: bytes, source: Path, strip: int) -> None:
    """Refuse a file whose diff push would refuse, naming the imported file and its line."""
    body = patch.body
    first = data[: len(data) - len(body)].count(b"\n") + 1 if body and data.endswith(body) else 1
    checked_diffs(body, where=str(source), first_line=first, strip=strip)


def _with_strip(series, name: str, strip: int):  # noqa: ANN001, ANN202
    entry = series.entries[series.index(name)]
    lines = list(series.lines)
    lines[entry.line - 1] = f"{name} -p{strip}\n"
    return parse_series("".join(lines), path=series.path)


@dataclass
class ExportResult:
    target: str
    patches: list[str]
    kind: str

    def to_json(self) -> dict[str, object]:
        return {"target": self.target, "patches": self.patches, "kind": self.kind}


def export_quilt(ws: Workspace, directory: Path) -> ExportResult:
    series, patches = ws.store.read_all()
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / "series").exists() and (directory / "series").resolve() == ws.store.series_path.resolve():
        raise UsageError("export target is the queue itself")
    for patch in patches:
        atomic_write(directory / patch.name, patch.header + patch.body)
    atomic_write(directory / "series", "".join(f"{e.name}{'' if e.strip == 1 else f' -p{e.strip}'}\n" for e in series.entries).encode())
    return ExportResult(str(directory), [p.name for p in patches], "quilt")


def mail_for(patch: PatchFile, number: int, total: int, strip: int = 1) -> bytes:
    """One mail of ``git format-patch``'s shape; the diff's names for -p1 whatever -p``strip`` its
    series entry gives (git am applies -p1)."""
    meta = patch.meta
    author = meta.get("author")
    if not (isinstance(author, str) and "<" in author):
        author = "gqueue <gqueue@localhost>"
    description = str(meta.get("description") or "").strip()
    trailers = [f"Gqueue-Id: {meta.id}", f"Gqueue-Patch: {patch.name}"]
    pr = meta.upstream.pr
    if pr:
        trailers.append(f"Upstream-PR: {pr}")
    subject = f"[PATCH {number}/{total}] {meta.title}" if total > 1 else f"[PATCH] {meta.title}"
    head = (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        f"From: {author}\nDate: Thu, 1 Jan 1970 00:00:00 +0000\nSubject: {subject}\n\n"
    )
    message = (description + "\n\n" if description else "") + "\n".join(trailers) + "\n---\n"
    body = as_p1(patch.body, strip, path=f"queue/{patch.name}")
    body = body if body.endswith(b"\n") else body + b"\n"
    for line in body.splitlines():
        if line.startswith(b"From "):
            raise FormatError(f"queue/{patch.name} has a line starting with 'From ' that an mbox cannot carry", path=f"queue/{patch.name}")
    return (head + message).encode("utf-8") + body + b"-- \ngqueue\n\n"


def export_mbox(ws: Workspace, target: Path) -> ExportResult:
    series, patches = ws.store.read_all()
    data = b"".join(mail_for(p, i, len(patches), e.strip) for i, (e, p) in enumerate(zip(series.entries, patches), start=1))
    atomic_write(target, data)
    return ExportResult(str(target), [p.name for p in patches], "mbox")
