"""The stack journal, ``.gqueue/journal.json``: one record of a move of HEAD, index and files.

A command writes it before it moves the stack and removes it once the move is done; one killed
in between leaves it, and the next command (ops/recovery.py) finishes or undoes the move from
what it says. The JSON is the format on disk: a journal written by one version of gqueue is read
by the next.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StackMove:
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
        return json.dumps(doc, sort_keys=True).encode()


@dataclass(frozen=True)
class Unreadable:
    """A journal that is there but says nothing usable (cut short, edited, another format)."""

    reason: str


def parse_journal(data: bytes) -> StackMove | Unreadable:
    try:
        doc = json.loads(data)
    except ValueError:
        return Unreadable("not JSON")
    if not isinstance(doc, dict):
        return Unreadable("not a JSON object")
    op, old, new = doc.get("op"), doc.get("old"), doc.get("new")
    patch, sha256 = doc.get("patch"), doc.get("sha256")
    if not isinstance(op, str) or not isinstance(new, str) or not isinstance(old, (str, type(None))):
        return Unreadable("no op, old and new commit")
    if op == "refresh" and not (isinstance(patch, str) and isinstance(sha256, str)):
        return Unreadable("a refresh without its patch and digest")
    return StackMove(op, old, new, bool(doc.get("force")), patch if isinstance(patch, str) else None,
                     sha256 if isinstance(sha256, str) else None)
