"""Finishing or undoing an interrupted operation, and ``gqueue repair``."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import time
from dataclasses import dataclass, field

from ..errors import StateError
from ..model.journal import QueueEdit, R, Record, Reorder, StackMove, UndoJob, Unreadable
from ..vcs.git import BRANCH, GitError
from .stackops import pop, push, push_empty
from .transaction import save_local_changes, trash
from .workspace import Workspace, trailer_value


def _refuse_newer(ws: Workspace, kind: type[Record], found: Unreadable) -> None:
    """A journal of a later format is the later gqueue's to finish: dropping it would leave its
    step half-done for good."""
    if found.newer:
        where = ws.store.rel(ws.record_path(kind))
        raise StateError(f"an interrupted command left a journal this gqueue cannot read: {found.reason}",
                         path=where, ref="journal-format",
                         hint=f"finish it with the gqueue that wrote it (any of its commands does), "
                              f"or remove {where} to give it up")


def _take(ws: Workspace, kind: type[R], what: str) -> R | str | None:
    """The record of ``kind`` a killed command left (None: there is none). An unreadable one is
    dropped, after ``_refuse_newer``, and what is said of it is returned instead."""
    entry = ws.read_record(kind)
    if isinstance(entry, Unreadable):
        _refuse_newer(ws, kind, entry)
        ws.clear_record(kind)
        return f"dropped an unreadable {what} ({entry.reason})"
    return entry


def recover_queue_edit(ws: Workspace) -> list[str]:
    """Finish or undo a multi-file queue edit that a killed process left half-done."""
    entry = _take(ws, QueueEdit, "queue-edit journal")
    if not isinstance(entry, QueueEdit):
        return [entry] if entry else []
    op = entry.op
    series = ws.store.series_path.read_bytes() if ws.store.series_path.exists() else b""
    listed = set(ws.store.read_series().names) if series else set()
    actions: list[str] = []
    way = entry.way(series)
    if way == "forward":
        gone = [n for n in entry.delete if n not in listed and ws.store.patch_path(n).exists()]
        for name in gone:
            trash(ws, name)
        actions.append(f"finished an interrupted {op}" + (f" (moved {', '.join(gone)} to .gqueue/deleted/)" if gone else ""))
        if op == "new" and ws.read_journal() is None and ws.repo.exists():  # a pending move finishes it otherwise
            actions += finish_new(ws, list(entry.create))
    elif way == "back":
        made = [n for n in entry.create if n not in listed and ws.store.patch_path(n).exists()]
        for name in made:
            trash(ws, name)
        actions.append(f"undid an interrupted {op}" + (f" (moved {', '.join(made)} to .gqueue/deleted/)" if made else ""))
    else:
        actions.append(f"dropped the journal of an interrupted {op}: the series changed since")
    ws.clear_record(QueueEdit)
    return actions


def recover_reorder(ws: Workspace) -> list[str]:
    """A move killed between its steps: bring the stack to the end its series is at.

    Runs after the stack's own journal was dealt with, so the stack is whole (at one of the
    stops of pop and push); the series says which way: the new one -> push on to the new stack,
    the old one -> push the popped patches back."""
    entry = _take(ws, Reorder, "journal of an interrupted move")
    if not isinstance(entry, Reorder):
        return [entry] if entry else []
    path = ws.store.series_path
    found = entry.wanted(path.read_bytes() if path.is_file() else None)
    if found is None:
        ws.clear_record(Reorder)
        return [f"dropped the journal of an interrupted move of {entry.name}: the series changed since"]
    way, wanted = found
    current = ws.stack().names
    same = next((i for i, (a, b) in enumerate(zip(current, wanted)) if a != b), min(len(current), len(wanted)))
    if len(current) > same:
        pop(ws, count=len(current) - same)
    if len(wanted) > same:
        push(ws, target=wanted[-1], count=None)
    ws.clear_record(Reorder)
    return [f"{'finished' if way == 'forward' else 'undid'} an interrupted move of {entry.name}"]


def finish_new(ws: Workspace, names: list[str]) -> list[str]:
    """A new killed after it wrote the series, before the stack moved onto the patch: apply it,
    so that the next refresh goes into the new patch and not into the one below."""
    series = ws.store.read_series()
    stack = ws.stack()
    done = []
    for name in names:
        if name in series and name not in stack.names and series.index(name) == len(stack.applied) \
                and ws.store.patch_path(name).exists():
            push_empty(ws, stack, ws.store.read_patch(name))
            done.append(f"applied {name}, the new top")
    return done


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


# what fsutil.atomic_write (and rebase's batched patch writer) name their temporaries
_TEMPORARY = re.compile(r"^\..+\.([A-Za-z0-9_]{8}|rebase)\.tmp$")


def _sweep_temporaries(ws: Workspace) -> list[str]:
    """Remove the temporary files of atomic writes that a killed process never renamed."""
    removed = []
    for folder in (ws.store.root, ws.store.queue_dir, ws.state_dir, ws.store.root / "dist",
                   ws.state_dir / "undo", ws.state_dir / "undo" / "objects"):
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            if _TEMPORARY.match(name) and (folder / name).is_file():
                (folder / name).unlink(missing_ok=True)
                removed.append(ws.store.rel(folder / name))
    return [f"removed {len(removed)} temporary file(s) of an interrupted write: {', '.join(removed)}"] if removed else []


GIT_LOCK_GRACE = 2.0  # seconds a git process that outlived its gqueue gets to finish


def _clear_git_locks(ws: Workspace) -> list[str]:
    """Lock files of git processes killed with gqueue: git refuses to work until they go.

    We hold the queue lock, so no other gqueue runs; a git child that outlived a killed gqueue
    finishes within moments, so a lock still there after a grace period is stale.
    """
    if not ws.repo.git_dir.is_dir():  # a half-made repository too: 'git init' cannot finish it while locked
        return []
    # git's own (index.lock, HEAD.lock, config.lock, packed-refs.lock) and those of every ref: a
    # fast-import killed while it wrote the pin's tag leaves refs/tags/.../NAME.lock
    locks = [p for p in ws.repo.git_dir.glob("*.lock") if p.is_file()]
    locks += [p for p in (ws.repo.git_dir / "refs").glob("**/*.lock") if p.is_file()]
    deadline = time.monotonic() + GIT_LOCK_GRACE
    while any(p.exists() for p in locks) and time.monotonic() < deadline:
        time.sleep(0.05)
    stale = [p for p in locks if p.exists()]
    for path in stale:
        path.unlink(missing_ok=True)
    if not stale:
        return []
    names = ", ".join(str(p.relative_to(ws.repo.path)) for p in stale)
    return [f"removed stale git lock file(s) left by a killed git process: {names}"]


def _restore_checkout(ws: Workspace) -> list[str]:
    """A checkout killed after it moved the branch but before it wrote the files: write them."""
    if not ws.repo.exists() or (ws.repo.git_dir / "index").exists():
        return []
    head = ws.repo.head()
    if head is None or any(name != ".git" for name in os.listdir(ws.repo.path)):
        return []
    ws.repo.checkout_fresh(head)
    return ["finished an interrupted checkout (wrote the files of the pinned release)"]


def _drop_rebase_leftovers(ws: Workspace) -> list[str]:
    """A rebase killed before it wrote its state (it had saved the originals only, nothing else
    changed), or after it removed it (done or aborted, the rest not yet cleared): no rebase is in
    progress, so what is left of one goes, and nobody is told to --continue or --abort it."""
    folder = ws.state_dir / "rebase"
    if ws.rebasing() or not (folder.exists() or (ws.state_dir / "rebase-pin").exists()):
        return []
    (ws.state_dir / "rebase-pin").unlink(missing_ok=True)
    shutil.rmtree(folder, ignore_errors=True)
    return ["removed what was left of a rebase killed as it began or ended (no rebase is in progress)"]


def _switch(ws: Workspace, old: str, new: str) -> bool:
    """Redo the move with git's own check: it refuses when it would overwrite a local change."""
    try:
        ws.repo.switch_tree(old, new)
    except GitError:
        return False
    return True


def recover(ws: Workspace, *, repairing: bool = False) -> list[str]:
    """Finish or undo what an interrupted command left: its stack move, then its other steps."""
    actions = _recover_stack(ws, repairing=repairing)
    later = recover_reorder(ws)
    for action in later:
        ws.reporter.note(action)
    return [*actions, *later, *_recover_undo(ws)]


def _recover_stack(ws: Workspace, *, repairing: bool = False) -> list[str]:
    """Look at the journal left by an interrupted command and finish or undo it."""
    early = (_sweep_temporaries(ws) + _clear_git_locks(ws) + recover_queue_edit(ws) + _restore_checkout(ws)
             + _drop_rebase_leftovers(ws))
    for action in early:
        ws.reporter.note(action)
    journal = ws.read_journal()
    if journal is None:
        return early
    actions: list[str] = []
    if isinstance(journal, Unreadable):
        _refuse_newer(ws, StackMove, journal)
    if not ws.repo.exists() or isinstance(journal, Unreadable):
        ws.clear_journal()
        return [*early, "dropped an unreadable journal"]
    op, old, new = journal.op, journal.old, journal.new
    head = ws.repo.head()
    if op == "refresh" and journal.patch is not None:
        path = ws.store.patch_path(journal.patch)
        on_disk = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None
        if head == old and on_disk == journal.sha256:
            ws.repo.update_ref(BRANCH, new, old)
            head = new
        if head == new:
            ws.repo.reset_index(new)
            actions.append(f"finished an interrupted refresh of {journal.patch}")
        else:
            ws.repo.reset_index(head) if head else None
            actions.append(f"undid an interrupted refresh of {journal.patch}; your changes are still in work/")
        ws.clear_journal()
    else:
        if head == new:
            actions.append(f"finished an interrupted {op}")
        elif old is None and head is None:
            # a move from no HEAD at all (a rebase aborted where none was left): only forward
            save_local_changes(ws, "recover")
            ws.repo.checkout_fresh(new)
            ws.repo.update_ref(BRANCH, new)
            actions.append(f"finished an interrupted {op}")
        elif old is not None and head == old:
            index_tree = ws.repo.index_tree()
            dirty = ws.repo.dirty_paths()
            if journal.force:
                # a forced move discards work-tree changes by design; keep a copy all the same
                if dirty:
                    save_local_changes(ws, "recover")
                ws.repo.checkout_fresh(new)
                ws.repo.update_ref(BRANCH, new, old)
                actions.append(f"finished an interrupted {op}")
            elif index_tree == ws.repo.tree_of(new):
                # read-tree writes the files before the index: they are in place, and any other
                # change in work/ is the user's own, which a checkout would throw away
                ws.repo.update_ref(BRANCH, new, old)
                actions.append(f"finished an interrupted {op}")
            elif _switch(ws, old, new):
                ws.repo.update_ref(BRANCH, new, old)  # git moved the files and kept the user's other edits
                actions.append(f"finished an interrupted {op}")
            elif _worktree_matches(ws, new, dirty):
                ws.repo.checkout_fresh(new)
                ws.repo.update_ref(BRANCH, new, old)
                actions.append(f"finished an interrupted {op}")
            elif dirty and set(dirty) <= set(ws.repo.changed_paths(old, new)):
                # git was killed while it wrote these files (only paths the move changes): they are
                # half old, half new, or cut short; write them anew, keeping a copy all the same
                save_local_changes(ws, "recover")
                ws.repo.checkout_fresh(new)
                ws.repo.update_ref(BRANCH, new, old)
                actions.append(f"finished an interrupted {op} (rewrote the files git had left half-written)")
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


def _recover_undo(ws: Workspace) -> list[str]:
    """An undo or redo killed part-way: written again to its target (after the stack's own journal)."""
    job = _take(ws, UndoJob, "undo journal")
    if job is None:
        return []
    if isinstance(job, str):
        actions = [job]
    else:
        from .undo import finish  # the undo log's module, loaded only when an undo was cut short

        actions = finish(ws, job)
    for action in actions:
        ws.reporter.note(action)
    return actions


@dataclass
class RepairResult:
    actions: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {"actions": self.actions}


def repair(ws: Workspace) -> RepairResult:
    result = RepairResult(recover(ws, repairing=True))
    ws.require_work()
    if (ws.state_dir / "rebase" / "state.json").is_file():
        # the stack is on the new pin part-way: resetting HEAD would throw the rebase away
        result.actions.append("a rebase is in progress: finish it with 'gqueue rebase --continue' "
                              "(or '--skip', '--retire'), or undo it with 'gqueue rebase --abort'")
        return result
    base = ws.base_commit()
    if not ws.on_branch():
        head = ws.repo.head() or base
        ws.repo.update_ref(BRANCH, head)
        ws.repo.set_head(BRANCH)
        result.actions.append("put HEAD back on the gqueue branch")
    now = ws.repo.head()
    if now is None:
        ws.repo.update_ref(BRANCH, base)
        ws.repo.checkout_fresh(base)
        result.actions.append("reset the work tree to the pinned release")
    head = now or base
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
