"""The workspace: the queue on disk, the work tree's repository, the lock and the journal.

What is applied is read from git: the first-parent chain from the pin's tag to HEAD, one
commit per patch, each carrying a ``Gqueue-Patch: NAME`` trailer.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ..errors import StateError
from ..fsutil import atomic_write, require_writable
from ..lock import QueueLock
from ..model.journal import R, Record, StackMove, Unreadable, parse_record
from ..model.patch import PatchFile
from ..model.pin import Pin
from ..model.variants import Resolution
from ..store import STATE, Store
from ..vcs.git import BRANCH, TRAILER, WorkRepo
from .reporter import Reporter, SilentReporter

STATE_DIR = STATE
DIFF_TRAILER = "Gqueue-Diff"


@dataclass(frozen=True)
class Applied:
    name: str
    commit: str
    tree: str
    diff_digest: str | None = None  # the Gqueue-Diff trailer: which patch text built the commit


@dataclass(frozen=True)
class Stack:
    base: str
    head: str
    applied: tuple[Applied, ...]

    @property
    def names(self) -> list[str]:
        return [a.name for a in self.applied]

    @property
    def top(self) -> Applied | None:
        return self.applied[-1] if self.applied else None

    def commit_below(self, index: int) -> str:
        """The commit under applied patch number ``index`` (0-based)."""
        return self.applied[index - 1].commit if index > 0 else self.base


BASE_REFS = "refs/gqueue/base"


def base_ref(pin: Pin) -> str:
    """Where the pin's imported tree is found: keyed on what verified it (``Pin.identity``, the
    archive's sha256 or the upstream commit id), so that a pin whose URL or hash changed is
    fetched and verified again instead of reusing a tree of the same project and version. A pin
    with nothing recorded to verify it by has only its tag."""
    identity = pin.identity
    if identity is None:
        return f"refs/tags/{pin.tag_name}"
    kind, _, value = identity.partition(":")
    return f"{BASE_REFS}/{kind}/{value}"


def trailer_value(message: str, key: str = TRAILER) -> str | None:
    for line in reversed(message.strip().splitlines()):
        if line.startswith(key + ": "):
            return line[len(key) + 2 :].strip()
    return None


class Journaled:
    """The handle of a journaled step (``Workspace.journaled``)."""

    def __init__(self, path: Path) -> None:
        self._path = path

    def cancel(self) -> None:
        """The step did not happen after all (the block put everything back): no journal."""
        _remove(self._path)


def _remove(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class Workspace:
    def __init__(self, store: Store, reporter: Reporter | None = None) -> None:
        self.store = store
        self.reporter = reporter or SilentReporter()
        self.repo = WorkRepo(store.work_dir)
        self._lock: QueueLock | None = None

    @property
    def state_dir(self) -> Path:
        return self.store.root / STATE_DIR

    # locking ----------------------------------------------------------------
    def lock(self) -> QueueLock:
        lock = QueueLock(self.state_dir / "lock")
        lock.acquire()
        if lock.stale:
            self.reporter.note(f"cleared a stale lock left by pid {lock.stale.get('pid')} ({lock.stale.get('command')})")
        self._lock = lock
        if self.repo.exists():  # under the lock no fast-import of gqueue's is running (lock.held_fds)
            left = self.repo.remove_leftover_packs()
            if left:
                self.reporter.note(f"removed {len(left)} temporary pack file(s) of a killed git fast-import "
                                   f"from work/.git/objects/pack ({', '.join(left[:3])})")
        return lock

    def require_writable(self, *, queue: bool, work: bool) -> None:
        """Before anything changes: the folders the command writes can be written (an OSError
        the CLI boundary reports as a file-system error, instead of one met half-way)."""
        paths = [self.state_dir]
        if queue:
            paths += [self.store.root, self.store.queue_dir]
        if work:
            paths += [self.repo.path, self.repo.git_dir]
        for path in paths:
            require_writable(path)

    def close(self) -> None:
        self.store.headers.save()
        self.repo.close()
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    # journal ------------------------------------------------------------------
    @property
    def journal_path(self) -> Path:
        return self.record_path(StackMove)

    def record_path(self, kind: type[Record]) -> Path:
        return self.state_dir / kind.FILE

    @contextmanager
    def journaled(self, entry: Record) -> Iterator[Journaled]:
        """The one transaction block: every step that changes more than one thing (a move of
        the stack, an edit of several queue files, a reorder) runs inside it. The record
        (model/journal.py) is written before the block and removed when it ends; an exception
        or a kill leaves it, so the next command finishes or undoes the step; ``cancel()``
        removes it early, for a step the block undid itself. Blocks of different records nest."""
        path = self.record_path(type(entry))
        atomic_write(path, entry.to_bytes())
        yield Journaled(path)
        _remove(path)

    def read_record(self, kind: type[R]) -> R | Unreadable | None:
        """The record of that kind a killed command left, None where there is none."""
        try:
            return parse_record(kind, self.record_path(kind).read_bytes())
        except FileNotFoundError:
            return None

    def clear_record(self, kind: type[Record]) -> None:
        _remove(self.record_path(kind))

    def read_journal(self) -> StackMove | Unreadable | None:
        return self.read_record(StackMove)

    def clear_journal(self) -> None:
        self.clear_record(StackMove)

    @property
    def needs_refresh_path(self) -> Path:
        return self.state_dir / "needs-refresh"

    # the stack ----------------------------------------------------------------
    def pin(self) -> Pin:
        """The pin the stack is built on: vendor-pin.txt's, or the new one while a rebase runs."""
        override = self.state_dir / "rebase-pin"
        if override.is_file():
            from ..model.pin import parse_pins

            return parse_pins(override.read_text(encoding="utf-8"), path=".gqueue/rebase-pin").main
        return self.store.read_pins().main

    def resolve(self, name: str, *, line: int | None = None,
                pin: Pin | None = None) -> tuple[Resolution, PatchFile | None]:
        """The file series entry ``name`` uses on ``pin`` (default: the stack's), read; None
        where the patch is not carried there (model/variants.py)."""
        if self.rebasing():  # the rebase moves the main files onto the new pin, whatever their ranges say
            patch = self.store.read_patch(name, line=line)
            return Resolution(name, (pin or self.pin()).version, name, patch_id=patch.meta.id), patch
        return self.store.resolve(name, (pin or self.pin()).version, line=line)

    def read_patch(self, name: str, *, line: int | None = None, pin: Pin | None = None) -> PatchFile:
        """The patch entry ``name`` carries on ``pin`` (default: the stack's); refuses one not carried."""
        pin = pin or self.pin()
        found, patch = self.resolve(name, line=line, pin=pin)
        if patch is None:
            raise StateError(f"'{name}' is not carried on {pin.describe()}: {found.reason}", path=f"queue/{name}",
                             ref="not-carried")
        return patch

    def require_work(self) -> None:
        if not self.repo.exists():
            raise StateError("no work tree yet", path="work", hint="run 'gqueue checkout'")

    def base_commit(self, pin: Pin | None = None) -> str:
        pin = pin or self.pin()
        base = self.repo.rev(base_ref(pin))
        if base is None:
            raise StateError(
                f"the work tree has no base for {pin.describe()}"
                + (f" ({pin.identity})" if pin.identity and pin.identity.split(":", 1)[1] not in pin.describe() else ""),
                path="work", hint="run 'gqueue checkout' (the pin changed?)",
            )
        return base

    def rebasing(self) -> bool:
        """A rebase is in progress (started, not yet finished or aborted): its state is written."""
        return (self.state_dir / "rebase" / "state.json").is_file()

    def _repair_hint(self) -> str:
        if self.rebasing():  # the stack is part-way between two pins: only the rebase can go on
            return "a rebase is in progress: 'gqueue rebase --continue' goes on, 'gqueue rebase --abort' undoes it"
        return "run 'gqueue repair'"

    def stack(self) -> Stack:
        self.require_work()
        pin = self.pin()
        both = self.repo.revs(base_ref(pin), "HEAD")  # one process in the usual case
        if both is None:
            base = self.base_commit(pin)
            if self.repo.head() is None:
                raise StateError("the work tree has no HEAD", path="work", hint="run 'gqueue repair'")
            raise StateError("the work tree's HEAD cannot be read", path="work", hint="run 'gqueue repair'")
        base, head = both
        if head == base:
            return Stack(base, head, ())
        chain = self.repo.chain_with_parents(head, base)
        if not chain or chain[0][1] != base:  # the first-parent line from HEAD does not pass the pin
            raise StateError("HEAD of the work tree is not on the pinned release", path="work", hint=self._repair_hint())
        applied = []
        for sha, _parent, tree, message in chain:
            name = trailer_value(message)
            if name is None:
                raise StateError(
                    f"commit {sha[:12]} in the work tree is not a gqueue patch commit", path="work",
                    hint="run 'gqueue repair' to turn it back into work-tree changes",
                )
            applied.append(Applied(name, sha, tree, trailer_value(message, DIFF_TRAILER)))
        return Stack(base, head, tuple(applied))

    def on_branch(self) -> bool:
        head_file = self.repo.git_dir / "HEAD"
        return head_file.read_text().strip() == f"ref: {BRANCH}"
