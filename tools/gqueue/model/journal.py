"""The journals of gqueue's transactions: what a command is about to do, written before it starts.

Four records, one file each under ``.gqueue/``:

- ``StackMove`` (``journal.json``): one move of HEAD, index and files (push, pop, goto,
  checkout, refresh, bisect, rebase --abort, undo);
- ``QueueEdit`` (``queue-edit.json``): an edit of several queue files (``series`` and
  ``queue/NAME``) whose commit point is the write of the series (new, delete, rename, fold,
  import);
- ``Reorder`` (``move.json``): a move of a patch in the series across applied ones: pop,
  series, push;
- ``UndoJob`` (``undo-journal.json``): an undo or redo of one step of the undo log: the queue
  files written back, the stack moved.

A command writes the record before the step and removes it once the step is done
(``Workspace.journaled``); one killed in between leaves it, and the next command
(ops/recovery.py) finishes or undoes the step from what the record says. The records nest: a
queue edit or a reorder moves the stack inside its block, with a ``StackMove`` of its own.

The JSON is the format on disk, and it is versioned: each record carries ``"version":
FORMAT``. A record without the key is one gqueue wrote before the key existed (the same keys
otherwise), read as format 1. A record of a later format than ``FORMAT`` is ``Unreadable``
with ``newer`` set: the gqueue that wrote it is the one that can finish it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeVar, Union

FORMAT = 1


@dataclass(frozen=True)
class Unreadable:
    """A journal that is there but says nothing usable (cut short, edited, another format)."""

    reason: str
    newer: bool = False  # written by a gqueue of a later format: not to be dropped


def _dump(doc: dict[str, Any]) -> bytes:
    return json.dumps({**doc, "version": FORMAT}, sort_keys=True).encode()


def _names(value: object) -> tuple[str, ...] | None:
    """A list of patch names, or None when ``value`` is not one."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return None


def series_digest(data: bytes) -> str:
    """What a journal records of the series: the sha256 of its bytes on disk."""
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class StackMove:
    FILE: ClassVar[str] = "journal.json"

    op: str  # the command that moves: push, pop, goto, checkout, refresh, rebase-abort, ...
    old: str | None  # HEAD before (None: there was no HEAD)
    new: str  # HEAD after
    force: bool = False  # the move discards work-tree changes by design (pop --force, bisect)
    patch: str | None = None  # a refresh: the patch file it rewrites ...
    sha256: str | None = None  # ... and the digest of the bytes it writes there

    def to_bytes(self) -> bytes:
        doc: dict[str, Any] = {"op": self.op, "old": self.old, "new": self.new}
        if self.force:
            doc["force"] = True
        if self.patch is not None:
            doc.update(patch=self.patch, sha256=self.sha256)
        return _dump(doc)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> StackMove | Unreadable:
        op, old, new = doc.get("op"), doc.get("old"), doc.get("new")
        patch, sha256 = doc.get("patch"), doc.get("sha256")
        if not isinstance(op, str) or not isinstance(new, str) or not isinstance(old, (str, type(None))):
            return Unreadable("no op, old and new commit")
        if op == "refresh" and not (isinstance(patch, str) and isinstance(sha256, str)):
            return Unreadable("a refresh without its patch and digest")
        return cls(op, old, new, bool(doc.get("force")), patch if isinstance(patch, str) else None,
                   sha256 if isinstance(sha256, str) else None)


Way = Literal["forward", "back"]


@dataclass(frozen=True)
class QueueEdit:
    """Files created before the series is written, files deleted after it: the series on disk
    says how far the edit got. The new one: forward (the files to delete go); still the old
    one: back (the files created go); neither: the series changed since, nothing to do."""

    FILE: ClassVar[str] = "queue-edit.json"

    op: str  # new, delete, rename, fold, import
    series_before: str  # series_digest of the series before ...
    series_after: str  # ... and after the edit
    create: tuple[str, ...] = ()  # queue/ files the edit makes
    delete: tuple[str, ...] = ()  # queue/ files it removes (moved to .gqueue/deleted/, never unlinked)

    @classmethod
    def between(cls, op: str, before: str, after: str, *, create: tuple[str, ...] = (),
                delete: tuple[str, ...] = ()) -> QueueEdit:
        """The edit from series text ``before`` to ``after``."""
        return cls(op, series_digest(before.encode("utf-8")), series_digest(after.encode("utf-8")),
                   tuple(create), tuple(delete))

    def way(self, series: bytes) -> Way | None:
        """Which way recovery takes the edit, given the series' bytes on disk now."""
        digest = series_digest(series)
        if digest == self.series_after:
            return "forward"
        if digest == self.series_before:
            return "back"
        return None

    def to_bytes(self) -> bytes:
        return _dump({"op": self.op, "series_before": self.series_before, "series_after": self.series_after,
                      "create": list(self.create), "delete": list(self.delete)})

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> QueueEdit | Unreadable:
        op = doc.get("op", "edit")
        before, after = doc.get("series_before"), doc.get("series_after")
        create, delete = _names(doc.get("create", [])), _names(doc.get("delete", []))
        if not isinstance(op, str) or not isinstance(before, str) or not isinstance(after, str):
            return Unreadable("no op and series digests")
        if create is None or delete is None:
            return Unreadable("the files created and deleted are not lists of names")
        return cls(op, before, after, create, delete)


@dataclass(frozen=True)
class Reorder:
    """``move``: the stack popped, the series rewritten, the stack pushed in the new order. The
    series on disk says which end recovery brings the stack to."""

    FILE: ClassVar[str] = "move.json"

    name: str  # the patch that moves
    series_before: str  # series_digest of the series before and after
    series_after: str
    stack_before: tuple[str, ...]  # the applied patches before and after
    stack_after: tuple[str, ...]

    @classmethod
    def between(cls, name: str, before: str, after: str, stack_before: list[str],
                stack_after: list[str]) -> Reorder:
        return cls(name, series_digest(before.encode("utf-8")), series_digest(after.encode("utf-8")),
                   tuple(stack_before), tuple(stack_after))

    def wanted(self, series: bytes | None) -> tuple[Way, tuple[str, ...]] | None:
        """Which way and the stack to reach, given the series' bytes on disk (None: no series)."""
        digest = None if series is None else series_digest(series)
        if digest == self.series_after:
            return "forward", self.stack_after
        if digest == self.series_before:
            return "back", self.stack_before
        return None

    def to_bytes(self) -> bytes:
        return _dump({"name": self.name, "series_before": self.series_before, "series_after": self.series_after,
                      "stack_before": list(self.stack_before), "stack_after": list(self.stack_after)})

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Reorder | Unreadable:
        name = doc.get("name", "a patch")
        before, after = doc.get("series_before"), doc.get("series_after")
        stack_before, stack_after = _names(doc.get("stack_before", [])), _names(doc.get("stack_after", []))
        if not isinstance(name, str) or not isinstance(before, str) or not isinstance(after, str):
            return Unreadable("no patch name and series digests")
        if stack_before is None or stack_after is None:
            return Unreadable("the stacks are not lists of names")
        return cls(name, before, after, stack_before, stack_after)


@dataclass(frozen=True)
class UndoJob:
    """``undo``/``redo``: one step of the undo log carried out: the queue files written to the
    recorded contents, the stack moved to the recorded head. Recovery does it again."""

    FILE: ClassVar[str] = "undo-journal.json"

    action: str  # "undo" or "redo"
    op: str  # the command whose step is undone or redone
    files: dict[str, str | None]  # queue file -> the undo store's digest of its target contents (None: absent)
    head: str | None  # the stack's target HEAD (None: no work tree then)
    top: str | None  # the top patch there, to re-apply by name when the commit is gone
    mixed: bool  # a command that left its changes unrefreshed in work/ (only HEAD and index move)
    pos: int  # the undo log's position after the step
    force: bool = False  # the work tree's changes are discarded (saved first)

    def to_bytes(self) -> bytes:
        return _dump({"action": self.action, "op": self.op, "files": dict(self.files), "head": self.head,
                      "top": self.top, "mixed": self.mixed, "pos": self.pos, "force": self.force})

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> UndoJob | Unreadable:
        action, op, files, pos = doc.get("action"), doc.get("op"), doc.get("files"), doc.get("pos")
        head, top = doc.get("head"), doc.get("top")
        if action not in ("undo", "redo") or not isinstance(op, str):
            return Unreadable("no action (undo or redo) and operation")
        if not isinstance(files, dict) or not all(
                isinstance(k, str) and isinstance(v, (str, type(None))) for k, v in files.items()):
            return Unreadable("the files are not a map of names to digests")
        if not isinstance(pos, int) or isinstance(pos, bool) or pos < 0:
            return Unreadable("no position in the undo log")
        if not isinstance(head, (str, type(None))) or not isinstance(top, (str, type(None))):
            return Unreadable("the head and top are not commit and patch names")
        return cls(action, op, dict(files), head, top, bool(doc.get("mixed")), pos, bool(doc.get("force")))


Record = Union[StackMove, QueueEdit, Reorder, UndoJob]
R = TypeVar("R", StackMove, QueueEdit, Reorder, UndoJob)


def parse_record(kind: type[R], data: bytes) -> R | Unreadable:
    """The record of type ``kind`` that ``data`` (the bytes of ``kind.FILE``) holds."""
    try:
        doc = json.loads(data)
    except ValueError:
        return Unreadable("not JSON")
    if not isinstance(doc, dict):
        return Unreadable("not a JSON object")
    version = doc.get("version", 1)  # none: written before records carried one, format 1
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        return Unreadable("its format version is not a number")
    if version > FORMAT:
        return Unreadable(f"written in format {version} by a later gqueue (this one reads format {FORMAT})",
                          newer=True)
    return kind.from_json(doc)


def parse_journal(data: bytes) -> StackMove | Unreadable:
    """The stack journal (``journal.json``)."""
    return parse_record(StackMove, data)
