"""``gqueue undo`` / ``redo``: the queue and the stack as they were before (or after) a command.

Every command that changes the queue (push, pop, goto, refresh, new, delete, rename, move,
fold, header --edit, import) is recorded in a bounded log under ``.gqueue/undo/``: for each
file it changed (``series``, ``queue/*``, ``.gqueue/needs-refresh``) the content before and
after, kept in a content-addressed store (``objects/SHA256``), and the stack's HEAD commit and
top patch before and after. Nothing the user wrote can be lost to an undo: the old texts are
in the store, a file changed by hand since the command is refused (``--force`` copies it to
``.gqueue/saved/`` first), and so are unrefreshed changes in work/.

To see which files a command changed without reading every patch twice, ``index.json`` keeps
each tracked file's stat data (size, mtime, ctime, inode) with its sha256, as git's index does;
atomic writes give a file a new inode, so a rewrite is never mistaken for the old text.

An undo or redo journals its target first (``.gqueue/undo-journal.json``); a killed one is
finished by the next command (``recover``), which writes the target state again.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import StateError, UsageError
from ..fsutil import atomic_write, atomic_write_many
from ..model.journal import UndoJob
from ..vcs.git import BRANCH
from .transaction import Files, move, save_local_changes, trash
from .workspace import Workspace, trailer_value

UNDO_DIR = "undo"
DEPTH = 50  # operations kept; older ones (and the texts only they refer to) are dropped
NEEDS_REFRESH = ".gqueue/needs-refresh"
# a refresh moves only HEAD and the index: its changes were in work/ before it, and are again after an undo
MIXED = frozenset({"refresh"})

def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Mark:
    """What ``begin`` saw: the command, every tracked file's sha256 and HEAD."""

    op: str
    files: dict[str, str]
    head: str | None
    store: "_Store" = field(repr=False, compare=False)


@dataclass
class Log:
    entries: list[dict[str, Any]] = field(default_factory=list)
    pos: int = 0  # entries[:pos] are in effect; entries[pos:] can be redone

    def to_json(self) -> dict[str, Any]:
        return {"version": 1, "entries": self.entries, "pos": self.pos}


class _Store:
    """The undo folder: the log, the stat index and the content-addressed texts."""

    def __init__(self, ws: Workspace) -> None:
        self.ws = ws
        self.dir = ws.state_dir / UNDO_DIR
        self.objects = self.dir / "objects"
        self._index: dict[str, list[Any]] | None = None
        self._index_changed = False

    # the log -----------------------------------------------------------------
    def read_log(self) -> Log:
        try:
            doc = json.loads((self.dir / "log.json").read_text(encoding="utf-8"))
            entries = list(doc["entries"])
            return Log(entries, min(max(int(doc["pos"]), 0), len(entries)))
        except FileNotFoundError:
            return Log()
        except (ValueError, KeyError, TypeError):
            self.ws.reporter.note(f"the undo log {self.ws.store.rel(self.dir / 'log.json')} was unreadable; started a new one")
            return Log()

    def write_log(self, log: Log) -> None:
        atomic_write(self.dir / "log.json", json.dumps(log.to_json(), sort_keys=True).encode())

    def save_with_log(self, log: Log) -> None:
        """``save_index`` and then ``write_log``, each file written as atomic_write writes it, their
        syncs together (fsutil.atomic_write_many): one wait on the disk after a command, not two."""
        files = [(self.dir / "log.json", json.dumps(log.to_json(), sort_keys=True).encode())]
        if self._index_changed:
            files.insert(0, (self.dir / "index.json", json.dumps(self.index(), sort_keys=True).encode()))
        atomic_write_many(files)
        self._index_changed = False

    # texts -------------------------------------------------------------------
    def keep(self, data: bytes) -> str:
        sha = _sha(data)
        if not (self.objects / sha).is_file():
            atomic_write(self.objects / sha, data)
        return sha

    def text(self, sha: str) -> bytes:
        try:
            data = (self.objects / sha).read_bytes()
        except FileNotFoundError:
            raise StateError(f"the undo log's copy {sha[:12]} is missing", path=self.ws.store.rel(self.objects),
                             hint="the log cannot be used: remove .gqueue/undo/ to start a new one") from None
        if _sha(data) != sha:
            raise StateError(f"the undo log's copy {sha[:12]} is damaged", path=self.ws.store.rel(self.objects / sha),
                             hint="the log cannot be used: remove .gqueue/undo/ to start a new one")
        return data

    def collect(self, log: Log) -> None:
        """Remove the texts no entry and no current file refers to."""
        wanted = {sha for entry in log.entries for side in ("before", "after")
                  for sha in entry[side]["files"].values() if sha}
        wanted |= {row[-1] for row in self.index().values()}
        for path in self.objects.glob("*"):
            if path.name not in wanted and not path.name.startswith("."):
                path.unlink(missing_ok=True)

    # the tracked files -------------------------------------------------------
    def index(self) -> dict[str, list[Any]]:
        if self._index is None:
            try:
                self._index = dict(json.loads((self.dir / "index.json").read_text(encoding="utf-8")))
            except (FileNotFoundError, ValueError, TypeError):
                self._index = {}
        return self._index

    def save_index(self) -> None:
        if self._index_changed:
            atomic_write(self.dir / "index.json", json.dumps(self.index(), sort_keys=True).encode())
            self._index_changed = False

    def tracked(self, *, sync: bool = True) -> dict[str, str]:
        """sha256 of every tracked file now, hashing only those whose stat data changed; the
        texts the store lacks are copied into it.

        ``sync=False`` (after a command): the copies are not synced, since they are of files
        the command itself wrote, synced (a push after an import of 300 mails would otherwise
        sync 300 copies as well). With ``sync`` (before a command, which may replace the
        files) a copy that a power cut took is made again, synced: the file's stat data still
        match the index, so it is the text the copy was made of."""
        root = str(self.ws.store.root)
        found: list[tuple[str, os.stat_result]] = []
        for rel in ("series", NEEDS_REFRESH):
            try:
                st = os.stat(os.path.join(root, rel))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                found.append((rel, st))
        self._scan(os.path.join(root, "queue"), "queue", found)
        index = self.index()
        out: dict[str, str] = {}
        new: dict[str, bytes] = {}  # texts not yet in the store, written together
        for rel, st in found:
            key = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
            row = index.get(rel)
            if row is not None and row[:4] == key and (not sync or _has_copy(self.objects / row[4], st.st_size)):
                out[rel] = row[4]
                continue
            with open(os.path.join(root, rel), "rb") as handle:
                data = handle.read()
            sha = _sha(data)
            if sha not in new and not (self.objects / sha).is_file():
                new[sha] = data
            index[rel] = [*key, sha]
            self._index_changed = True
            out[rel] = sha
        atomic_write_many(((self.objects / sha, data) for sha, data in new.items()), sync=sync)
        for gone in set(index) - set(out):
            del index[gone]
            self._index_changed = True
        return out

    def _scan(self, folder: str, rel: str, found: list[tuple[str, os.stat_result]]) -> None:
        """The regular files under queue/ (hidden ones, such as atomic writes' temporaries, left out)."""
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if entry.is_dir(follow_symlinks=False):
                self._scan(entry.path, f"{rel}/{entry.name}", found)
            elif entry.is_file():
                found.append((f"{rel}/{entry.name}", entry.stat()))


def _has_copy(path: Path, size: int) -> bool:
    """The store holds a copy of that size (a copy not synced may have been lost, or left short)."""
    try:
        return os.stat(path).st_size == size
    except OSError:
        return False


def _head(ws: Workspace) -> str | None:
    """HEAD of work/, read from the ref files where they are plain (a git process otherwise)."""
    if not ws.repo.exists():
        return None
    git_dir = ws.repo.git_dir
    try:
        text = (git_dir / "HEAD").read_text().strip()
        if text.startswith("ref: "):
            text = (git_dir / text[5:]).read_text().strip()
    except (OSError, UnicodeDecodeError):
        text = ""
    if len(text) == 40 and all(c in "0123456789abcdef" for c in text):
        return text
    return ws.repo.head()  # a packed ref, an unborn branch, a damaged file: git decides


def _tops(ws: Workspace, *heads: str | None) -> dict[str | None, str | None]:
    """The top patch (the Gqueue-Patch trailer) of each commit, from one git process."""
    tops: dict[str | None, str | None] = {None: None}
    wanted = sorted({h for h in heads if h})
    if wanted:
        for sha, message in ws.repo.messages(wanted).items():
            tops[sha] = trailer_value(message)
    return tops


def begin(ws: Workspace, op: str) -> Mark | None:
    """Before a recorded command runs (under the lock, after recovery). None, with a warning,
    when the state cannot be read: the command runs all the same, unrecorded."""
    store = _Store(ws)
    try:
        files = store.tracked()
        store.save_index()
    except OSError as exc:
        ws.reporter.note(f"the undo log cannot record this command: {exc}")
        return None
    return Mark(op, files, _head(ws), store)


def record(ws: Workspace, mark: Mark) -> bool:
    """After the command: append what it changed to the log (a new operation ends what could be redone)."""
    store = mark.store
    after = store.tracked(sync=False)
    head = _head(ws)
    changed = sorted(p for p in set(mark.files) | set(after) if mark.files.get(p) != after.get(p))
    if not changed and head == mark.head:
        store.save_index()
        return False
    tops = _tops(ws, mark.head, head)
    entry = {
        "op": mark.op,
        "time": int(time.time()),
        "before": {"files": {p: mark.files.get(p) for p in changed}, "head": mark.head, "top": tops.get(mark.head)},
        "after": {"files": {p: after.get(p) for p in changed}, "head": head, "top": tops.get(head)},
    }
    log = store.read_log()
    kept = [*log.entries[: log.pos], entry]
    dropped = len(log.entries) + 1 - len(kept[-DEPTH:])  # what could be redone, and the oldest past DEPTH
    log.entries = kept[-DEPTH:]
    log.pos = len(log.entries)
    store.save_with_log(log)
    if dropped:
        store.collect(log)
    return True


# undo and redo ----------------------------------------------------------------------------------

@dataclass
class Step:
    op: str
    top_before: str | None  # the top patch before this step (the state left behind)
    top_after: str | None
    files: list[str]
    note: str = ""

    def to_json(self) -> dict[str, object]:
        return {"op": self.op, "top_before": self.top_before, "top_after": self.top_after, "files": self.files,
                "note": self.note}


@dataclass
class UndoResult:
    action: str  # "undo" or "redo"
    steps: list[Step]
    can_undo: int
    can_redo: int

    def to_json(self) -> dict[str, object]:
        return {"action": self.action, "steps": [s.to_json() for s in self.steps],
                "can_undo": self.can_undo, "can_redo": self.can_redo}


def history(ws: Workspace) -> Log:
    return _Store(ws).read_log()


def undo(ws: Workspace, *, count: int = 1, force: bool = False) -> UndoResult:
    return _walk(ws, "undo", count, force)


def redo(ws: Workspace, *, count: int = 1, force: bool = False) -> UndoResult:
    return _walk(ws, "redo", count, force)


def _walk(ws: Workspace, action: str, count: int, force: bool) -> UndoResult:
    store = _Store(ws)
    log = store.read_log()
    left = log.pos if action == "undo" else len(log.entries) - log.pos
    if left == 0:
        what = "nothing to undo: no recorded operation" if action == "undo" else "nothing to redo"
        hint = ("the log records push, pop, goto, refresh, new, delete, rename, move, fold, header --edit and import"
                if action == "undo" else "redo follows an undo; a command run after the undo ends what could be redone")
        raise StateError(what, hint=hint)
    if count > left:
        raise UsageError(f"only {left} operation(s) to {action}, not {count}")
    if (ws.state_dir / "rebase").exists():
        raise StateError(f"a rebase is in progress; refusing to {action}",
                         hint="finish it ('gqueue rebase --continue', '--skip' or '--retire') or undo it ('gqueue rebase --abort')")
    steps = []
    for _ in range(count):
        index = log.pos - 1 if action == "undo" else log.pos
        entry = log.entries[index]
        steps.append(_step(ws, store, entry, action, force, index if action == "undo" else index + 1))
        log = store.read_log()
    return UndoResult(action, steps, log.pos, len(log.entries) - log.pos)


def _step(ws: Workspace, store: _Store, entry: dict[str, Any], action: str, force: bool, pos: int) -> Step:
    expect, target = (entry["after"], entry["before"]) if action == "undo" else (entry["before"], entry["after"])
    op = entry["op"]
    mixed = op in MIXED
    now = store.tracked()
    edited = [p for p in sorted(expect["files"]) if now.get(p) != expect["files"][p] and p != NEEDS_REFRESH]
    head = _head(ws)
    notes = []
    if edited and not force:
        shown = ", ".join(edited[:3]) + (f" and {len(edited) - 3} more" if len(edited) > 3 else "")
        raise StateError(f"{shown} changed since 'gqueue {op}'; refusing to {action} (it would overwrite that)",
                         path=edited[0], hint=f"'gqueue {action} --force' saves the files under .gqueue/saved/ first")
    if head != expect["head"] and not force:
        raise StateError(f"the stack moved since 'gqueue {op}' (by a command undo does not record); refusing to {action}",
                         path="work", hint=f"'gqueue {action} --force' puts the stack back all the same")
    dirty = [p for p in ws.repo.dirty_paths() if not p.endswith((".rej", ".orig"))] if head and not mixed else []
    if dirty and not force:
        shown = ", ".join(dirty[:3]) + (f" and {len(dirty) - 3} more" if len(dirty) > 3 else "")
        raise StateError(f"the work tree has changes not yet refreshed ({shown}); refusing to {action}",
                         path="work", hint=f"run 'gqueue refresh' to keep them, or '{action} --force' "
                                           "(they are saved under .gqueue/saved/ first)")
    for rel in edited:
        saved = _save_copy(ws, rel, action)
        notes.append(f"{rel} as it was is saved in {saved}")
    if dirty:
        save_local_changes(ws, action)
    job = UndoJob(action, op, dict(target["files"]), target["head"], target["top"], mixed, pos, bool(dirty))
    with ws.journaled(job):  # a kill inside leaves it: the next command carries it out again (recover)
        note = _carry_out(ws, store, job)
    if note:
        notes.append(note)
    if mixed and action == "undo" and target["head"] != expect["head"]:
        notes.append("its changes are in work/ again as unrefreshed edits")
    return Step(op, expect["top"], target["top"], sorted(target["files"]), "; ".join(notes))


def _save_copy(ws: Workspace, rel: str, action: str) -> str:
    source = ws.store.root / rel
    if not source.is_file():
        return "(absent)"
    target = ws.state_dir / "saved" / f"{time.strftime('%Y%m%d-%H%M%S')}-{action}-{Path(rel).name}"
    atomic_write(target, source.read_bytes())
    return ws.store.rel(target)


def _carry_out(ws: Workspace, store: _Store, job: UndoJob, recovering: bool = False) -> str:
    """Write the target files and move the stack to the target head; safe to run again."""
    for rel, sha in sorted(job.files.items()):
        path = ws.store.root / rel
        if sha is None:
            if not path.exists():
                continue
            if rel.startswith("queue/"):
                trash(ws, rel[len("queue/"):])  # moved aside, never unlinked
            else:
                path.unlink()
        else:
            data = store.text(sha)
            if not path.is_file() or path.read_bytes() != data:
                atomic_write(path, data)
    note = _move_stack(ws, job, recovering)
    if job.files.get(NEEDS_REFRESH, "") is None and ws.repo.exists():
        from .stackops import _remove_rejects  # an undone forced push: its .rej files go with it, as with pop

        _remove_rejects(ws)
    log = store.read_log()
    log.pos = min(job.pos, len(log.entries))
    store.tracked()
    store.save_with_log(log)
    return note


def _move_stack(ws: Workspace, job: UndoJob, recovering: bool) -> str:
    target = job.head
    if target is None or not ws.repo.exists():
        return ""
    head = ws.repo.head()
    if head == target:
        return ""
    base = ws.base_commit()
    if ws.repo.rev(target) == target and ws.repo.is_ancestor(base, target):
        if job.mixed:
            ws.repo.update_ref(BRANCH, target, head)
            ws.repo.reset_index(target)
        else:
            # clean: the undo found the tree clean under the lock (in recovery git's own check decides)
            move(ws, head or base, target, op=job.action,
                 files=Files.RESET if job.force else Files.CHECKED if recovering else Files.CLEAN)
            if job.force:
                ws.repo.remove_untracked()
        return ""
    # the recorded commit is gone (a new checkout) or on another pin: re-apply by name
    from .stackops import pop, push

    if ws.stack().applied:
        pop(ws, count=None, force=job.force)
    if job.top is None:
        return "the recorded commits were gone: popped every patch"
    result = push(ws, target=job.top, count=None)
    if result.failed is not None:
        return f"the recorded commits were gone: re-applied up to {result.failed.name}, which does not apply"
    return f"the recorded commits were gone: re-applied the series up to {job.top}"


def finish(ws: Workspace, job: UndoJob) -> list[str]:
    """Finish an undo or redo that a killed process left half-done (after the stack's own
    journal): its target written again."""
    if job.force and ws.repo.exists() and ws.repo.dirty_paths():
        save_local_changes(ws, "recover")
    _carry_out(ws, _Store(ws), job, recovering=True)
    ws.clear_record(UndoJob)
    return [f"finished an interrupted {job.action} of {job.op}"]
