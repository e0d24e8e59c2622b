"""Finishing or undoing an interrupted operation, and ``gqueue repair``."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field

from ..errors import StateError
from ..vcs.git import BRANCH
from .transaction import recover_queue_edit, save_local_changes
from .workspace import Workspace, trailer_value


def _worktree_matches(ws: Workspace, commit: str, paths: list[str]) -> bool:
    entries = ws.repo.tree_entries(commit)
    for path in paths:
        disk = ws.repo.path / path
        entry = entries.get(path)
        if entry is None:
            if disk.exists():
                return False
            continue
        if not disk.is_file() or disk.read_bytes() != ws.repo.blob(entry.sha):
            return False
    return True


_TEMPORARY = re.compile(r"^\..+\.[A-Za-z0-9_]{8}\.tmp$")  # what fsutil.atomic_write names its temporaries


def _sweep_temporaries(ws: Workspace) -> list[str]:
    """Remove the temporary files of atomic writes that a killed process never renamed."""
    removed = []
    for folder in (ws.store.root, ws.store.queue_dir, ws.state_dir):
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            if _TEMPORARY.match(name) and (folder / name).is_file():
                (folder / name).unlink(missing_ok=True)
                removed.append(ws.store.rel(folder / name))
    return [f"removed {len(removed)} temporary file(s) of an interrupted write: {', '.join(removed)}"] if removed else []


def _restore_checkout(ws: Workspace) -> list[str]:
    """A checkout killed after it moved the branch but before it wrote the files: write them."""
    if not ws.repo.exists() or (ws.repo.git_dir / "index").exists():
        return []
    head = ws.repo.head()
    if head is None or any(name != ".git" for name in os.listdir(ws.repo.path)):
        return []
    ws.repo.checkout_fresh(head)
    return ["finished an interrupted checkout (wrote the files of the pinned release)"]


def recover(ws: Workspace, *, repairing: bool = False) -> list[str]:
    """Look at the journal left by an interrupted command and finish or undo it."""
    early = _sweep_temporaries(ws) + recover_queue_edit(ws) + _restore_checkout(ws)
    for action in early:
        ws.reporter.note(action)
    journal = ws.read_journal()
    if journal is None:
        return early
    actions: list[str] = []
    if not ws.repo.exists() or journal.get("op") == "unreadable":
        ws.clear_journal()
        return [*early, "dropped an unreadable journal"]
    op, old, new = journal.get("op"), journal.get("old"), journal.get("new")
    head = ws.repo.head()
    if op == "refresh":
        path = ws.store.patch_path(journal["patch"])
        on_disk = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None
        if head == old and on_disk == journal.get("sha256"):
            ws.repo.update_ref(BRANCH, new, old)
            head = new
        if head == new:
            ws.repo.reset_index(new)
            actions.append(f"finished an interrupted refresh of {journal['patch']}")
        else:
            ws.repo.reset_index(head) if head else None
            actions.append(f"undid an interrupted refresh of {journal['patch']}; your changes are still in work/")
        ws.clear_journal()
    else:
        if head == new:
            actions.append(f"finished an interrupted {op}")
        elif head == old:
            index_tree = ws.repo.run("write-tree", check=False).decode().strip()
            dirty = ws.repo.dirty_paths()
            if index_tree == ws.repo.tree_of(new) or _worktree_matches(ws, new, dirty):
                ws.repo.checkout_fresh(new)
                ws.repo.update_ref(BRANCH, new, old)
                actions.append(f"finished an interrupted {op}")
            elif not dirty:
                actions.append(f"undid an interrupted {op} (nothing had changed yet)")
            elif repairing:
                save_local_changes(ws, "repair")
                ws.repo.checkout_fresh(old)
                actions.append(f"undid an interrupted {op}; unexpected changes were saved under .gqueue/saved/")
            else:
                raise StateError(
                    f"an interrupted {op} left the work tree half-way and it has changes gqueue did not make",
                    path="work", hint="run 'gqueue repair' (it saves those changes first)",
                )
        else:
            actions.append(f"dropped the journal of an interrupted {op}: HEAD moved since")
        ws.clear_journal()
    for action in actions:
        ws.reporter.note(action)
    return [*early, *actions]


@dataclass
class RepairResult:
    actions: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {"actions": self.actions}


def repair(ws: Workspace) -> RepairResult:
    result = RepairResult(recover(ws, repairing=True))
    ws.require_work()
    base = ws.base_commit()
    if not ws.on_branch():
        head = ws.repo.head() or base
        ws.repo.update_ref(BRANCH, head)
        ws.repo.set_head(BRANCH)
        result.actions.append("put HEAD back on the gqueue branch")
    head = ws.repo.head()
    if head is None:
        ws.repo.update_ref(BRANCH, base)
        ws.repo.checkout_fresh(base)
        result.actions.append("reset the work tree to the pinned release")
        head = base
    if not ws.repo.is_ancestor(base, head):
        save_local_changes(ws, "repair")
        ws.repo.update_ref(BRANCH, base)
        ws.repo.checkout_fresh(base)
        result.actions.append("HEAD was not on the pinned release: reset to it (changes saved under .gqueue/saved/)")
        head = base
    chain = ws.repo.first_parent_chain(head, base)
    last_good = base
    foreign = []
    for sha, message in chain:
        if trailer_value(message) is None:
            foreign.append(sha)
        elif not foreign:
            last_good = sha
    if foreign:
        ws.repo.update_ref(BRANCH, last_good, head)
        ws.repo.reset_index(last_good)
        result.actions.append(
            f"{len(chain) - [s for s, _ in chain].index(foreign[0])} commit(s) made by hand on top of the stack "
            "were undone; their changes are in work/ as unrefreshed edits"
        )
    if ws.needs_refresh_path.exists():
        name = ws.needs_refresh_path.read_text().strip()
        if name not in ws.stack().names:
            os.unlink(ws.needs_refresh_path)
            result.actions.append(f"cleared a stale refresh-needed mark for {name}")
    if not result.actions:
        result.actions.append("nothing to repair: the stack is consistent")
    return result
