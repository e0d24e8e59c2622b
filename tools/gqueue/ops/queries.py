"""The questions that change nothing: where the stack stands, the pins, a patch's diff and files.

Each takes a Workspace and returns a small result (``to_json`` gives the command's JSON
document); the CLI renders the text.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import GqueueError, StateError
from ..model.patch import PatchFile
from ..model.pin import Pin, PinFile
from .engine import file_diffs
from .naming import patch_name
from .workspace import Workspace

# --- the series and the stack ---------------------------------------------------------------


@dataclass(frozen=True)
class StackNames:
    """The series' names, in order, and the applied ones (bottom first)."""

    series: tuple[str, ...]
    applied: tuple[str, ...]

    @property
    def unapplied(self) -> tuple[str, ...]:
        return self.series[len(self.applied):]

    def to_json(self) -> dict[str, object]:
        return {"series": list(self.series), "applied": list(self.applied)}


def stack_names(ws: Workspace) -> StackNames:
    names = ws.store.read_series().names
    applied = ws.stack().names if ws.repo.exists() else []
    return StackNames(tuple(names), tuple(applied))


def top(ws: Workspace) -> str:
    """The top applied patch."""
    applied = stack_names(ws).applied
    if not applied:
        raise StateError("no patch is applied")
    return applied[-1]


def next_patch(ws: Workspace) -> str:
    """The patch the next push would apply."""
    names = stack_names(ws)
    if not names.unapplied:
        raise StateError("the whole series is applied")
    return names.unapplied[0]


def prev(ws: Workspace) -> str:
    """The patch below the top."""
    applied = stack_names(ws).applied
    if len(applied) < 2:
        raise StateError("no patch below the top")
    return applied[-2]


# --- one patch ------------------------------------------------------------------------------


def on_pin(ws: Workspace, name: str) -> PatchFile:
    """NAME's file that serves the pin (a variant, where one does), else queue/NAME."""
    if name in ws.store.read_series():
        patch = ws.resolve(name)[1]
        if patch is not None:
            return patch
    return ws.store.read_patch(name)


def named_or_top(ws: Workspace, query: str | None) -> str:
    """The patch ``query`` names (any file of queue/ too), or the top patch where it is None."""
    if query is not None:
        return patch_name(ws.store, query, stored=True)
    top_patch = ws.stack().top
    if top_patch is None:
        raise StateError("no patch is applied")
    return top_patch.name


@dataclass(frozen=True)
class DiffResult:
    name: str
    diff: str
    file: str | None = None  # queue/FILE the diff was read from; None: the top patch with its work-tree changes

    def to_json(self) -> dict[str, object]:
        if self.file is None:
            return {"name": self.name, "diff": self.diff}
        return {"name": self.name, "file": self.file, "diff": self.diff}


def diff(ws: Workspace, query: str | None) -> DiffResult:
    """The top patch's diff with the work tree's unrefreshed changes; or NAME's diff as stored."""
    stack = ws.stack()
    name = patch_name(ws.store, query, stored=True) if query is not None else None
    if name is None or (stack.top and name == stack.top.name):
        if stack.top is None:
            raise StateError("no patch is applied")
        parent = stack.commit_below(len(stack.applied) - 1)
        text = ws.repo.diff_tree_to_tree(parent, ws.repo.snapshot_tree()).decode("utf-8", "replace")
        return DiffResult(stack.top.name, text)
    patch = on_pin(ws, name)
    return DiffResult(name, patch.body.decode("utf-8", "replace"), f"queue/{patch.stored_as}")


@dataclass(frozen=True)
class FilesResult:
    name: str
    files: tuple[str, ...]

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "files": list(self.files)}


def files(ws: Workspace, query: str | None) -> FilesResult:
    """The files a patch (default: the top) changes, in the -pN its series entry gives (a
    rename's source too, which it removes)."""
    name = named_or_top(ws, query)
    strip = ws.store.read_series().strip_of(name)
    paths = (p for fd in file_diffs(on_pin(ws, name), strip) for p in ((fd.source, fd.path) if fd.rename else (fd.path,)))
    return FilesResult(name, tuple(dict.fromkeys(paths)))


# --- the pins -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PinsResult:
    pins: tuple[Pin, ...]

    def to_json(self) -> dict[str, object]:
        return {"pins": [{"label": p.label, "source": p.source, "kind": p.kind, "project": p.project,
                          "version": p.version, "identity": p.identity, "sdist_sha256": p.sdist_sha256,
                          "wheel_sha256": p.wheel_sha256, "commit": p.commit} for p in self.pins]}


def pins(ws: Workspace) -> PinsResult:
    """The pins of vendor-pin.txt."""
    return pins_result(ws.store.read_pins())


def pins_result(read: PinFile) -> PinsResult:
    return PinsResult(tuple(read.pins))


# --- status ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ForcedPush:
    """A patch pushed with --force that waits for its refresh, and the .rej files it left."""

    patch: str
    rejects: tuple[str, ...]


@dataclass(frozen=True)
class StatusResult:
    pin: str  # described
    series: int
    checked_out: bool
    rebasing: bool = False
    interrupted_rebase: bool = False  # killed mid-rebase: the stack is between the two pins
    applied: int | None = None
    top: str | None = None
    dirty: tuple[str, ...] = ()
    forced_push: ForcedPush | None = None
    pending: bool = False  # a journal waits for the next command

    def to_json(self) -> dict[str, object]:
        doc: dict[str, object] = {"pin": self.pin, "series": self.series, "checked_out": self.checked_out}
        if not self.checked_out:
            return doc
        if self.interrupted_rebase:
            doc.update({"applied": None, "rebase_in_progress": True})
            return doc
        doc.update({"applied": self.applied, "top": self.top, "dirty": list(self.dirty)})
        if self.forced_push is not None:
            doc["forced_push"] = {"patch": self.forced_push.patch, "rejects": list(self.forced_push.rejects)}
        doc["rebase_in_progress"] = self.rebasing
        return doc


def _stack_readable(ws: Workspace) -> bool:
    try:
        ws.stack()
    except GqueueError:
        return False
    return True


def status(ws: Workspace) -> StatusResult:
    """Where the stack stands: pin, applied patches, unrefreshed changes, what is pending."""
    pin = ws.pin().describe()
    count = len(ws.store.read_series().names)
    if not ws.repo.exists():
        return StatusResult(pin, count, False)
    rebasing = ws.rebasing()
    if rebasing and not _stack_readable(ws):
        return StatusResult(pin, count, True, rebasing=True, interrupted_rebase=True)
    stack = ws.stack()
    dirty = ws.repo.dirty_paths()
    forced = None
    if ws.needs_refresh_path.exists():
        forced = ForcedPush(ws.needs_refresh_path.read_text().strip(), tuple(sorted(p for p in dirty if p.endswith(".rej"))))
    return StatusResult(pin, count, True, rebasing=rebasing, applied=len(stack.applied),
                        top=stack.top.name if stack.top else None, dirty=tuple(dirty), forced_push=forced,
                        pending=bool(ws.read_journal()))
