"""Moving the stack atomically, with a journal so a crash is finished or undone next time."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from ..fsutil import atomic_write
from ..vcs.git import BRANCH
from .workspace import Workspace


def move(ws: Workspace, old: str, new: str, *, op: str, force: bool = False) -> None:
    """Move HEAD, index and files from ``old`` to ``new``; journaled."""
    if old == new:
        return
    ws.write_journal({"op": op, "old": old, "new": new})
    if force:
        ws.repo.checkout_fresh(new)
    else:
        ws.repo.switch_tree(old, new)
    ws.repo.update_ref(BRANCH, new, old)
    ws.clear_journal()


def save_local_changes(ws: Workspace, reason: str) -> Path | None:
    """Write the work tree's unrefreshed changes to .gqueue/saved/ before they are discarded."""
    tree = ws.repo.snapshot_tree()
    head = ws.repo.head()
    if head is None or tree == ws.repo.tree_of(head):
        return None
    diff = ws.repo.diff_tree_to_tree(head, tree)
    digest = hashlib.sha256(diff).hexdigest()[:12]
    path = ws.state_dir / "saved" / f"{time.strftime('%Y%m%d-%H%M%S')}-{reason}-{digest}.diff"
    atomic_write(path, diff)
    ws.reporter.note(f"local changes saved to {ws.store.rel(path)} (apply with: git -C work apply {Path('..') / ws.store.rel(path)})")
    return path
