"""The transactions of the commands that change more than one thing: a move of the stack, an edit
of several queue files; each journaled through ``Workspace.journaled`` (model/journal.py), so
that a crash is finished or undone by the next command (ops/recovery.py)."""

from __future__ import annotations

import errno
import hashlib
import os
import time
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Iterator

from ..fsutil import atomic_delete, atomic_write, fault_point
from ..model.journal import QueueEdit, StackMove
from ..model.series import Series
from ..vcs.git import BRANCH
from .workspace import Workspace


class Files(Enum):
    """How a move of the stack treats the work tree's files."""

    CHECKED = "checked"  # local edits stay; a file the move must change that has one stops it (git's checkout)
    CLEAN = "clean"  # the caller found the tree clean in this command (under the lock): files written directly
    RESET = "reset"  # the whole tree is reset to the new commit: local edits go (pop --force)
    OVERWRITE = "overwrite"  # the files the two commits differ in are overwritten, other edits stay (a bisect step)


def move(ws: Workspace, old: str, new: str, *, op: str, files: Files = Files.CHECKED,
         changes: dict[str, tuple[str, bytes] | None] | None = None, old_modes: dict[str, str] | None = None) -> None:
    """Move HEAD, index and files from ``old`` to ``new`` as ``files`` says; journaled (a move
    that discards local edits is journaled as forced).

    ``changes``/``old_modes`` (``Files.CLEAN``): what the caller already knows of the files.
    """
    if old == new:
        return
    with ws.journaled(StackMove(op, old, new, force=files in (Files.RESET, Files.OVERWRITE))):
        if files is Files.OVERWRITE:
            ws.repo.switch_tree_forced(old, new)
        elif files is Files.RESET:
            ws.repo.checkout_fresh(new)
        elif files is Files.CLEAN:
            ws.repo.move_clean(old, new, changes, old_modes)
        else:
            ws.repo.switch_tree(old, new)
        ws.repo.update_ref(BRANCH, new, old)


def save_local_changes(ws: Workspace, reason: str) -> Path | None:
    """Write the work tree's unrefreshed changes to .gqueue/saved/ before they are discarded."""
    tree = ws.repo.snapshot_tree()
    head = ws.repo.head()
    if head is None or tree == ws.repo.tree_of(head):
        return None
    diff = ws.repo.diff_tree_to_tree(head, tree, binary=True)  # binary files too, restorable
    digest = hashlib.sha256(diff).hexdigest()[:12]
    path = ws.state_dir / "saved" / f"{time.strftime('%Y%m%d-%H%M%S')}-{reason}-{digest}.diff"
    atomic_write(path, diff)
    ws.reporter.note(f"local changes saved to {ws.store.rel(path)} (apply with: git -C work apply {Path('..') / ws.store.rel(path)})")
    return path


# Edits of several queue files (series + queue/NAME) ------------------------------------------------
#
# One file is replaced atomically; several are not. An operation that creates or deletes patch
# files and rewrites the series records what it means to do first (model.journal.QueueEdit); the
# series write is the commit point. Files it creates are written before the series, files it
# deletes go after. If it dies, recovery (recovery.recover_queue_edit) looks at the series: still
# the old one -> the created files are moved to .gqueue/deleted/ (rolled back); already the new
# one -> the files to delete are moved there (rolled forward). Nothing is ever unlinked, so no
# patch text can be lost.


@contextmanager
def queue_edit(ws: Workspace, op: str, before: Series, after: Series, *,
               create: tuple[str, ...] = (), delete: tuple[str, ...] = ()) -> Iterator[None]:
    """Journal a multi-file edit of the queue (``ws.journaled``); see above."""
    with ws.journaled(QueueEdit.between(op, before.text(), after.text(), create=create, delete=delete)):
        yield


def trash(ws: Workspace, name: str) -> Path:
    """Move queue/NAME to .gqueue/deleted/ (kept, never unlinked); the one way a patch file goes.

    Each copy keeps a name of its own: a file of the same name trashed in the same second (delete,
    new, delete) goes beside the first, not over it."""
    source = ws.store.patch_path(name)
    folder = ws.state_dir / "deleted"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target, n = folder / f"{stamp}-{name}", 2
    while target.exists():
        target, n = folder / f"{stamp}.{n}-{name}", n + 1
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(source, target)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        atomic_write(target, source.read_bytes())  # .gqueue/ on another file system: copy, then remove
        atomic_delete(source)
    fault_point("write")
    return target
