"""import and export: patches from and to quilt, Debian and git."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import FormatError, UnsafePatchError, UsageError
from ..fsutil import atomic_write
from ..model.diff import as_p1
from ..model.foreign import is_mbox, read_foreign, split_mbox
from ..model.ids import distinct_ids, file_name_id, name_fits_id
from ..model.patch import PatchFile, new_patch, parse_patch, with_fields
from ..model.series import entry_line, parse_series
from .engine import checked_diffs
from .queueops import check_name, id_owners, title_from_name
from .reporter import Reporter
from .transaction import queue_edit
from .workspace import Workspace

_SLUG_JUNK = re.compile(r"[^A-Za-z0-9._]+")
_NAME_MAX = 64  # git format-patch's longest file name


@dataclass
class ImportResult:
    imported: list[dict[str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {"imported": self.imported}


@dataclass
class _Incoming:
    """One patch to import, before its name and id are settled."""

    name: str  # the name it came with (file name, or made from a mail's subject)
    path: str  # the file it is in
    source: str  # where it came from, for messages: the file, and the mail's line in an mbox
    data: bytes
    first_line: int
    strip: int
    before: tuple[str, ...] = ()  # the series' comment and blank lines above its entry
    tail: str = ""  # its entry's comment and guards (Series.tail_of)
    line: str = ""  # its entry's line as the series has it, kept where the name is


def _rest(name: str) -> str:
    """A patch name without its id part: what follows the first '-' (or the whole name)."""
    return name.split("-", 1)[1] if "-" in name else name


def _with_id_part(name: str, new_id: str, tail: str) -> str:
    """``name`` (a quilt series may give it a folder) with its file name made ``new_id`` + ``tail``."""
    folder, _slash, _base = name.rpartition("/")
    return f"{folder}/{new_id}{tail}" if folder else f"{new_id}{tail}"


def _mail_name(number: int, title: str) -> str:
    """A file name as git format-patch makes one: NNNN-Subject-words.patch."""
    slug = _SLUG_JUNK.sub("-", title).strip("-.")
    slug = slug[: _NAME_MAX - len("0000-.patch")].rstrip("-.") or "patch"
    return f"{number:04d}-{slug}.patch"


def _read_file(path: Path, folder: Path | None) -> bytes:
    """The bytes of a patch file; a link out of the series' ``folder``, or anything but a regular
    file, is refused (a series is a set of files, never a way to read others)."""
    try:
        if folder is not None:
            real, inside = path.resolve(strict=True), folder.resolve(strict=True)
            if not real.is_relative_to(inside):
                raise UnsafePatchError(f"is a link to {real}, outside the series' folder {inside}", path=str(path))
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise FormatError("is not a regular file: not a patch", path=str(path))
        return path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None


def _split(path: Path, data: bytes, strip: int, reporter: Reporter, *, entry: str | None = None) -> list[_Incoming]:
    """One patch per mail of an mbox, named as format-patch names them (a mail with no diff, such
    as a cover letter, skipped with a note), or the file as one patch under its own name: a
    series ``entry``'s name (its folder with it), or a file's own name where it ends in
    ``.patch``."""
    mails = split_mbox(data)
    if len(mails) == 1 and (entry is not None or path.name.endswith(".patch") or not is_mbox(data)):
        return [_Incoming(entry or path.name, str(path), str(path), data, 1, strip)]  # format-patch's own file, or no mail
    out: list[_Incoming] = []
    for line, mail in mails:
        foreign = read_foreign(mail)
        title = str(foreign.fields.get("title", ""))
        if not foreign.body.strip():
            reporter.note(f"{path}:{line}: skipped the mail '{title}': no diff in it")
            continue
        out.append(_Incoming(_mail_name(len(out) + 1, title), str(path), f"{path}:{line}", mail, line, strip))
    if not out:
        raise FormatError("no mail in this mbox has a diff: not a patch series", path=str(path))
    return out


def _to_gqueue(item: _Incoming, reporter: Reporter) -> tuple[PatchFile, str]:
    foreign = read_foreign(item.data)
    where = item.source
    if foreign.kind == "gqueue":
        return parse_patch(item.data, name=item.name, path=where), "gqueue"
    if not foreign.body.strip():
        raise FormatError("has no diff in it: not a patch", path=where)
    for note in foreign.notes:
        reporter.note(f"{where}: {note}")
    fields = {"id": file_name_id(item.name), "title": foreign.fields.get("title") or title_from_name(item.name)}
    fields.update({k: v for k, v in foreign.fields.items() if k != "title"})
    fields.setdefault("lifecycle", "experimental")
    return new_patch(item.name, fields, foreign.body), foreign.kind


def _sources(files: list[Path], series_file: Path | None,
             reporter: Reporter) -> tuple[list[_Incoming], tuple[str, ...]]:
    """The patches to import, in order, and the series' comment and blank lines after its last
    entry (each patch carries those above its entry, and its entry's comment)."""
    items: list[_Incoming] = []
    trailing: tuple[str, ...] = ()
    if series_file is not None:
        text = _read_file(series_file, None)
        try:
            foreign_series = parse_series(text.decode("utf-8"), path=str(series_file))
        except UnicodeDecodeError as exc:
            line = text[: exc.start].count(b"\n") + 1
            raise FormatError("is not UTF-8 text", path=str(series_file), line=line) from None
        folder = series_file.parent
        before, trailing = foreign_series.lines_between()
        for entry, lines in zip(foreign_series.entries, before):
            check_name(entry.name, folders=True)
            path = folder / entry.name
            found = _split(path, _read_file(path, folder), entry.strip, reporter, entry=entry.name)
            raw = foreign_series.lines[entry.line - 1]
            kept = (raw if raw.endswith("\n") else raw + "\n") if found[0].name == entry.name else ""  # not an mbox's mails
            found[0] = replace(found[0], before=lines, tail=foreign_series.tail_of(entry), line=kept)
            items += found
    for path in files:
        items += _split(path, _read_file(path, None), 1, reporter)
    if not items:
        raise UsageError("nothing to import: give patch files or --series")
    return items, trailing


def _settle(item: _Incoming, patch: PatchFile, kind: str, *, name: str | None, patch_id: str | None) -> tuple[PatchFile, bool]:
    """The patch under the name and id it gets: ``--name``/``--id`` when given; else a queue
    patch's own id, or the id its file name gives. The file name starts with the id (lint's
    file-name-id). The flag says whether the id was chosen (and so is never changed)."""
    own = patch.meta.id if kind == "gqueue" else None
    chosen = patch_id or own
    if name is not None and chosen is not None and not name_fits_id(name, chosen):
        raise UsageError(f"--name {name} does not start with the id '{chosen}-' (or is {chosen}.patch)",
                         hint="give a name that starts with the id, or --id that the name starts with")
    new_name = name or item.name
    if chosen is not None and not name_fits_id(new_name, chosen):
        new_name = _with_id_part(item.name, chosen, "-" + _rest(item.name.rpartition("/")[2]))
    check_name(new_name, folders=True)
    new_id = chosen if chosen is not None else file_name_id(new_name)
    if new_id != patch.meta.id or new_name != patch.name:
        patch = with_fields(replace(patch, name=new_name), {"id": new_id})
    return patch, chosen is not None or name is not None


def _unique(patch: PatchFile, owners: dict[str, str], taken: set[str]) -> tuple[PatchFile, str | None]:
    """A patch whose derived id another patch has gets the first free ID_2, ID_3 ... (and the
    file name that starts with it); the second value says whose id it was."""
    owner = owners.get(patch.meta.id)
    if owner is None:
        return patch, None
    old_id, n = patch.meta.id, 2
    tail = patch.name.rpartition("/")[2][len(old_id):]  # the file name starts with the id: '-words.patch' or '.patch'
    while f"{old_id}_{n}" in owners or _with_id_part(patch.name, f"{old_id}_{n}", tail) in taken:
        n += 1
    new_id, new_name = f"{old_id}_{n}", _with_id_part(patch.name, f"{old_id}_{n}", tail)
    return with_fields(replace(patch, name=new_name), {"id": new_id}), owner


def import_patches(ws: Workspace, files: list[Path], *, series_file: Path | None = None,
                   name: str | None = None, patch_id: str | None = None) -> ImportResult:
    items, trailing = _sources(files, series_file, ws.reporter)
    if (name is not None or patch_id is not None) and len(items) != 1:
        raise UsageError(f"--name and --id are for one patch; this import has {len(items)}")
    series = ws.store.read_series()
    position = len(ws.stack().applied) if ws.repo.exists() else len(series.entries)
    owners = id_owners(ws.store, series)
    queue_dir = ws.store.queue_dir
    taken = {e.name for e in series.entries} | {p.relative_to(queue_dir).as_posix() for p in queue_dir.rglob("*")}
    prepared: list[tuple[PatchFile, _Incoming, str]] = []
    seen: dict[str, str] = {}
    result = ImportResult()
    settled = []
    for item in items:
        check_name(item.name, folders=True)
        patch, kind = _to_gqueue(item, ws.reporter)
        settled.append((item, kind, *_settle(item, patch, kind, name=name, patch_id=patch_id)))
    # the patches whose id comes from their file name: one each keeps the name (see distinct_ids)
    free = [patch.name for _item, _kind, patch, chosen in settled if not chosen]
    fitted = distinct_ids(free, others=taken, taken={*owners, *(p.meta.id for _i, _k, p, c in settled if c)})
    for item, kind, patch, chosen in settled:
        if patch.name in seen:
            raise UsageError(f"'{patch.name}' would be imported twice ({seen[patch.name]} and {item.source}); nothing was imported")
        if patch.name in taken:
            raise UsageError(f"a patch named '{patch.name}' is already in the queue")
        if chosen:
            if patch.meta.id in owners:
                raise UsageError(f"the id '{patch.meta.id}' of {patch.name} is already the id of {owners[patch.meta.id]}",
                                 hint="each patch needs its own id: give another (import --id, or a name that starts with it)")
        elif patch.name in fitted:
            if fitted[patch.name] != patch.meta.id:
                why = (f"is the id of {owners[patch.meta.id]}" if patch.meta.id in owners
                       else "begins other patches' names too")
                ws.reporter.note(f"{item.source}: imported with the id {fitted[patch.name]} "
                                 f"(its first word, {patch.meta.id}, {why})")
                patch = with_fields(patch, {"id": fitted[patch.name]})
        else:
            derived = patch.meta.id
            patch, owner = _unique(patch, owners, taken | set(seen))
            if owner is not None:
                ws.reporter.note(f"{item.source}: imported as {patch.name} (id {patch.meta.id}): "
                                 f"its id {derived} is the id of {owner}")
        _check_diff(patch, item, kind)
        seen[patch.name] = item.source
        owners.setdefault(patch.meta.id, patch.name)
        prepared.append((patch, item, kind))
    before = series
    lines = [line for patch, item, _kind in prepared
             for line in (*item.before, item.line if item.line and patch.name == item.name
                          else entry_line(patch.name, item.strip, item.tail))]
    series = series.insert_lines(position, [*lines, *trailing])
    with queue_edit(ws, "import", before, series, create=tuple(p.name for p, _i, _k in prepared)):
        ws.store.write_patches([patch for patch, _item, _kind in prepared])
        for patch, item, kind in prepared:
            result.imported.append({"name": patch.name, "id": patch.meta.id, "from": kind, "source": item.source})
        ws.store.write_series(series)
    return result


def _check_diff(patch: PatchFile, item: _Incoming, kind: str) -> None:
    """Refuse a file whose diff push would refuse, naming the imported file and its line."""
    body, data = patch.body, item.data
    first = item.first_line
    if body and data.endswith(body):
        first += data[: len(data) - len(body)].count(b"\n")
    checked_diffs(body, where=item.path, first_line=first, strip=item.strip)


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
    atomic_write(directory / "series", series.exported_text().encode())
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
