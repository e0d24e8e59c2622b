"""Operations on the queue itself: init, new, delete, rename, fold, header."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import ConflictError, FormatError, StateError, UsageError
from ..fsutil import atomic_write
from ..model.ids import file_name_id, name_fits_id, stem
from ..model.patch import HEADER_END, HEADER_START, PatchFile, format_patch, new_patch, parse_patch, with_fields
from ..model.pin import format_pin_line, parse_pins, pin_from_spec
from ..model.series import Series
from ..model.variants import VARIANTS
from ..store import PIN, QUEUE, SERIES, Store
from ..vcs.worktree import write_edits
from .engine import TreeView, apply_patch, touched_paths
from .stackops import (first_failure_in_order, pop, push, push_empty, refresh, require_clean, require_refreshed,
                       require_top_unedited)
from .transaction import queue_edit, trash
from .workspace import Stack, Workspace

SERIES_HEADER = "# gqueue series: one patch a line, applied top to bottom (quilt format).\n"
PIN_HEADER = "# The upstream release this queue is maintained against: LABEL SOURCE [sdist=sha256:...] [wheel=sha256:...]\n"
GITIGNORE = "/work\n/.gqueue/\n/dist/\n"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+@-]*$")


@dataclass(frozen=True)
class InitResult:
    root: str
    pin: str

    def to_json(self) -> dict[str, object]:
        return {"root": self.root, "pin": self.pin}


def init(directory: Path, pin_spec: str, *, record: bool = True) -> InitResult:
    directory.mkdir(parents=True, exist_ok=True)
    for name in (SERIES, PIN):
        if (directory / name).exists():
            raise StateError(f"{name} already exists: this is a queue already", path=name)
    pin = pin_from_spec("pin", pin_spec, line=1)
    if record:
        from ..upstream.resolve import record_hashes  # the download stack loads only here

        pin = record_hashes(pin)
    (directory / QUEUE).mkdir(exist_ok=True)
    atomic_write(directory / PIN, (PIN_HEADER + format_pin_line(pin)).encode())
    parse_pins((directory / PIN).read_text(), path=PIN)
    atomic_write(directory / SERIES, SERIES_HEADER.encode())
    if not (directory / ".gitignore").exists():
        atomic_write(directory / ".gitignore", GITIGNORE.encode())
    return InitResult(str(directory), pin.describe())


def check_name(name: str, *, folders: bool = False) -> None:
    """Refuse a patch name of other characters than letters, digits, '.', '_', '-', '+', '@';
    ``folders``: a quilt series' ``FOLDER/NAME`` too (every part so spelled; ``variants/`` is
    the variants' folder)."""
    parts = name.split("/") if folders else [name]
    if any(not _NAME.match(part) or part.endswith(".") for part in parts) or (len(parts) > 1 and parts[0] == VARIANTS):
        allowed = "letters, digits, '.', '_', '-', '+', '@'" + (", in folders other than variants/" if folders else "")
        raise UsageError(f"'{name}' is not a valid patch name ({allowed})")


def title_from_name(name: str) -> str:
    parts = stem(name).split("-", 1)
    return (parts[1] if len(parts) > 1 else parts[0]).replace("-", " ").replace("_", " ")


@dataclass(frozen=True)
class NameResult:
    name: str
    action: str
    detail: str = ""

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "action": self.action, "detail": self.detail}


def new(ws: Workspace, name: str, *, patch_id: str | None = None, title: str | None = None) -> NameResult:
    check_name(name)
    series = ws.store.read_series()
    stack = ws.stack()
    require_refreshed(ws)  # a patch on top of a forced push would take its refresh (and its .rej files)
    if name in series or ws.store.patch_path(name).exists():
        raise UsageError(f"a patch named '{name}' already exists")
    patch_id = patch_id or file_name_id(name)
    require_unused_ids(ws, series, {name: patch_id})
    fields = {
        "id": patch_id,
        "title": title or title_from_name(name),
        "description": "",
        "lifecycle": "experimental",
        "tier": "community",
        "default_on": False,
        "env_flag": None,
        "requires": [],
        "conflicts": [],
    }
    patch = new_patch(name, fields, b"")
    position = len(stack.applied)
    after = series.insert(position, name)
    with queue_edit(ws, "new", series, after, create=(name,)):  # until the stack is on it: see recovery.finish_new
        ws.store.write_patch(patch)
        ws.store.write_series(after)
        push_empty(ws, stack, patch)
    return NameResult(name, "created", f"after {stack.top.name}" if stack.top else "at the bottom")


def id_owners(store: Store, series: Series, *, besides: str | None = None) -> dict[str, str]:
    """id -> the first patch of the series with it (``besides``: a patch left out)."""
    owners: dict[str, str] = {}
    for e in series.entries:
        if e.name != besides:
            owners.setdefault(store.read_patch(e.name, line=e.line).meta.id, e.name)
    return owners


def require_unused_ids(ws: Workspace, series: Series, ids: dict[str, str]) -> None:
    """Refuse new patches (name -> id) whose id a patch of the series, or another of them,
    has: every later push of the series would stop at the second one."""
    used = id_owners(ws.store, series)
    for name, patch_id in ids.items():
        first = used.setdefault(patch_id, name)
        if first != name:
            raise UsageError(f"the id '{patch_id}' of {name} is already the id of {first}",
                             hint="each patch needs its own id: give another (new --id; an imported file's header or name)")


def delete(ws: Workspace, name: str, *, keep_file: bool = False) -> NameResult:
    series = ws.store.read_series()
    stack = ws.stack()
    if name not in series:
        raise UsageError(f"'{name}' is not in the series")
    if name in stack.names:
        if stack.top is None or stack.top.name != name:
            raise StateError(f"'{name}' is applied below the top; pop it first", path=SERIES)
        require_clean(ws, "delete the applied top patch")  # its pop would refuse, naming pop
        pop(ws)
    after = series.remove(name)
    with queue_edit(ws, "delete", series, after, delete=() if keep_file else (name,)):
        ws.store.write_series(after)
        if keep_file:
            return NameResult(name, "deleted", f"removed from the series; queue/{name} kept")
        target = trash(ws, name)
    return NameResult(name, "deleted", f"file moved to {ws.store.rel(target)}")


def rename(ws: Workspace, old: str, new_name: str) -> NameResult:
    check_name(new_name)
    series = ws.store.read_series()
    if old not in series:
        raise UsageError(f"'{old}' is not in the series")
    if ws.store.patch_path(new_name).exists():
        raise UsageError(f"queue/{new_name} already exists")
    stack = ws.stack()
    reapply = old in stack.names
    top = stack.top.name if stack.top else None
    if reapply:
        require_clean(ws, "rename an applied patch")
        _renamed_id(ws, series, ws.store.read_patch(old), new_name)  # refused before the stack moves
        _require_reapplies(ws, series, stack, stack.names.index(old))
        pop(ws, count=len(stack.names) - stack.names.index(old))
    patch = _renamed_id(ws, series, ws.store.read_patch(old), new_name)
    after = series.rename(old, new_name)
    with queue_edit(ws, "rename", series, after, create=(new_name,), delete=(old,)):
        atomic_write(ws.store.patch_path(new_name), format_patch(patch))
        ws.store.write_series(after)
        ws.store.delete_patch(old)
    if reapply and top is not None:
        push(ws, target=new_name if top == old else top, count=None)
    return NameResult(new_name, "renamed", f"from {old}")


def _renamed_id(ws: Workspace, series: Series, patch: PatchFile, new_name: str) -> PatchFile:
    """The patch with the id its new file name starts with (lint's file-name-id). Refused
    when another patch of the series has that id, or when something names the old one: a
    patch's requires, conflicts or composes_with, or the patch's own env_flag."""
    old_id = patch.meta.id
    if name_fits_id(new_name, old_id):  # the new name still starts with the id: it stays
        return patch
    new_id = file_name_id(new_name)
    where = f"{QUEUE}/{patch.name}"
    owner = id_owners(ws.store, series, besides=patch.name).get(new_id)
    if owner is not None:
        raise UsageError(f"{new_name} would have the id '{new_id}', which is already the id of {owner}",
                         hint="each patch needs its own id: the file name starts with it")
    for entry in series.entries:
        if entry.name == patch.name:
            continue
        other = ws.store.read_patch(entry.name, line=entry.line)
        for key in ("requires", "conflicts", "composes_with"):
            named = other.meta.get(key)
            if isinstance(named, list) and old_id in [str(n) for n in named]:
                raise UsageError(f"renaming changes the id '{old_id}' to '{new_id}', and {key} of {QUEUE}/{entry.name} names '{old_id}'",
                                 hint=f"change that {key} first (header --edit), or keep a name starting with '{old_id}-'")
    flag = patch.meta.get("env_flag")
    if isinstance(flag, str) and re.search(rf"(^|_){re.escape(old_id.upper())}(_|$)", flag):
        raise UsageError(f"renaming changes the id '{old_id}' to '{new_id}', and the env_flag {flag} is spelled with it",
                         path=where, line=patch.meta.key_lines.get("env_flag"),
                         hint=f"change env_flag first (header --edit), or keep a name starting with '{old_id}-'")
    return with_fields(patch, {"id": new_id})


def _require_reapplies(ws: Workspace, series: Series, stack: Stack, index: int) -> None:
    """Rename pops the applied patches from ``index`` up and pushes them again: refuse before
    anything changes when one of them no longer applies (its file was edited since its push)."""
    failed = first_failure_in_order(ws, stack.commit_below(index), list(series.entries[index : len(stack.applied)]))
    if failed is not None:
        entry, _outcome, f = failed
        raise ConflictError(
            f"{entry.name} no longer applies where it is pushed ({f.path}: {f.status}), "
            "and renaming pops and pushes it again; nothing was changed",
            path=f"{QUEUE}/{entry.name}", line=f.line,
            hint="its file was edited since it was pushed: undo the edit, or pop below it and push it again first",
        )


def fold(ws: Workspace, name: str) -> NameResult:
    """Fold an unapplied patch of the series into the top patch (it leaves the series)."""
    series = ws.store.read_series()
    stack = ws.stack()
    if stack.top is None:
        raise StateError("no patch is applied to fold into")
    if name not in series or name in stack.names:
        raise UsageError(f"'{name}' must be an unapplied patch of the series")
    require_clean(ws, "fold")
    require_top_unedited(ws, stack)  # refresh's own check, before work/ is touched
    entry = series.entries[series.index(name)]
    patch = ws.store.read_patch(name, line=entry.line)
    view = TreeView(ws.repo, stack.head)
    view.prefetch(touched_paths([patch]))
    outcome = apply_patch(view, patch, strip=entry.strip)  # the same checks as push, with the series' -pN
    failure = outcome.first_failure()
    if failure is not None:
        raise ConflictError(f"{name} does not apply on {stack.top.name}: {outcome.failure_text()}; nothing was changed",
                            path=f"{QUEUE}/{name}", line=failure[0].line)
    write_edits(ws.repo.path, outcome.changes)  # the tree is clean under the lock
    # the patch leaves the series before the refresh: a kill in between leaves its changes in
    # work/ as unrefreshed edits (and its file in .gqueue/deleted/), never the patch twice
    after = series.remove(name)
    with queue_edit(ws, "fold", series, after, delete=(name,)):
        ws.store.write_series(after)
        target = trash(ws, name)
    refresh(ws)
    return NameResult(name, "folded", f"into {stack.top.name}; file moved to {ws.store.rel(target)}")


def replace_header(store: Store, patch: PatchFile, header_yaml: str) -> PatchFile:
    text = header_yaml if header_yaml.endswith("\n") else header_yaml + "\n"
    data = HEADER_START + text.encode("utf-8") + HEADER_END
    where = f"{QUEUE}/{patch.stored_as}"  # a variant's header is its own file's
    updated = replace(parse_patch(data + patch.body, name=patch.name, path=where), file=patch.file)
    if updated.header != data:  # a line '...' in the text closed the header early
        raise FormatError("a line '...' ends the header early (what follows would become text of the diff)",
                          path=where, line=updated.header.count(b"\n"))
    if updated.meta.id != patch.meta.id:  # every later push would stop at the duplicate
        owner = id_owners(store, store.read_series(), besides=patch.name).get(updated.meta.id)
        if owner is not None:
            raise FormatError(f"the id '{updated.meta.id}' is already the id of {owner}",
                              path=where, line=updated.meta.line_of("id"))
    _require_lints_as_before(store, patch, updated)
    store.write_patch(updated)
    return updated


def _require_lints_as_before(store: Store, patch: PatchFile, updated: PatchFile) -> None:
    """Refuse a header edit that gives lint an error it did not have (a bad value, a requires
    naming no patch, an id the file name does not start with): lint's own rules, checked now
    instead of at the next lint."""
    from .lint import lint, new_errors

    before = lint(store)
    after = lint(store, instead={patch.stored_as: format_patch(updated)})
    found = new_errors(before, after)
    if found:
        first = found[0]
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise FormatError(f"{first.message} [{first.rule}]{more}; the header is unchanged", path=first.path,
                          line=first.line, ref="header-invalid")


def header_text(patch: PatchFile) -> str:
    if not patch.header:
        raise FormatError("patch has no header", path=f"{QUEUE}/{patch.name}", line=1)
    return patch.header[len(HEADER_START) : -len(HEADER_END)].decode("utf-8")
