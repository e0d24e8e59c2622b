"""Applying patches to a tree held in memory: the heart of push, check and rebase."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Iterable

from ..errors import FormatError, UnsafePatchError
from ..model.apply import HunkOutcome, apply_hunks
from ..model.diff import FileDiff, parse_diff
from ..model.patch import PatchFile
from ..model.paths import path_problem
from ..model.status import EXACT, PUSH_ORDER, Status
from ..vcs.git import Entry, WorkRepo

REGULAR_MODES = ("100644", "100755")


class TreeView:
    """A commit's files, read lazily, with an overlay of changes on top."""

    def __init__(self, repo: WorkRepo, commit: str) -> None:
        self.repo = repo
        self.entries: dict[str, Entry] = repo.tree_entries(commit)
        self.overlay: dict[str, tuple[str, bytes] | None] = {}
        self.blobs: dict[str, bytes] = {}
        self._sorted: list[str] | None = None  # the commit's paths in order, made when first needed

    def prefetch(self, paths: Iterable[str]) -> None:
        """Read the blobs of ``paths`` in one batch (instead of one request per file later)."""
        shas = {self.entries[p].sha for p in paths if p in self.entries and p not in self.overlay}
        self.blobs.update(self.repo.blobs(shas - self.blobs.keys()))

    def get(self, path: str) -> tuple[str, bytes] | None:
        if path in self.overlay:
            return self.overlay[path]
        entry = self.entries.get(path)
        if entry is None:
            return None
        data = self.blobs.get(entry.sha)
        if data is None:
            data = self.repo.blob(entry.sha)
        return entry.mode, data

    def mode(self, path: str) -> str | None:
        if path in self.overlay:
            change = self.overlay[path]
            return None if change is None else change[0]
        entry = self.entries.get(path)
        return entry.mode if entry else None

    def set(self, path: str, value: tuple[str, bytes] | None) -> None:
        self.overlay[path] = value

    def files_under(self, folder: str, pending: dict[str, tuple[str, bytes] | None]) -> int:
        """How many files there are under ``folder`` (``pending``: changes made on top, not yet set)."""
        if self._sorted is None:
            self._sorted = sorted(self.entries)
        start = folder + "/"
        names = set()
        at = bisect_left(self._sorted, start)
        while at < len(self._sorted) and self._sorted[at].startswith(start):
            names.add(self._sorted[at])
            at += 1
        names.update(p for p in (*self.overlay, *pending) if p.startswith(start))
        return sum(1 for p in names if (pending[p] if p in pending else self.mode(p)) is not None)

    def symlink_on_path(self, path: str) -> str | None:
        parts = path.split("/")
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            if self.mode(prefix) == "120000":
                return prefix
        return None


@dataclass(frozen=True)
class FileResult:
    path: str
    status: Status  # clean | offset | fuzz | failed | file-missing | file-exists
    hunks: tuple[HunkOutcome, ...] = ()
    line: int = 0  # line of the file header in the patch file

    def to_json(self) -> dict[str, object]:
        return {"file": self.path, "status": self.status, "hunks": [h.to_json() for h in self.hunks]}


@dataclass
class PatchResult:
    name: str
    patch_id: str
    files: list[FileResult] = field(default_factory=list)
    changes: dict[str, tuple[str, bytes] | None] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(f.status in EXACT for f in self.files)

    @property
    def status(self) -> Status:
        return max((f.status for f in self.files), key=PUSH_ORDER.index, default=Status.CLEAN)

    def first_failure(self) -> tuple[FileResult, HunkOutcome | None] | None:
        for f in self.files:
            if f.status not in EXACT:
                bad = next((h for h in f.hunks if h.status not in EXACT), None)
                return f, bad
        return None

    def failure_text(self) -> str:
        """Where it first failed: 'path hunk #N (expected near line L)' or 'path [status]'; '' if it did not."""
        failure = self.first_failure()
        if failure is None:
            return ""
        f, h = failure
        return f"{f.path}" + (f" hunk #{h.index + 1} (expected near line {h.line})" if h else f" [{f.status}]")

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "id": self.patch_id, "status": self.status, "files": [f.to_json() for f in self.files]}


def check_path(path: str, *, where: str, line: int, mode: str | None = None) -> None:
    """Refuse a name the patch may not write (model/paths.py: out of the tree, or one git refuses)."""
    problem = path_problem(path, mode)
    if problem is not None:
        raise UnsafePatchError(f"patch touches '{path}', {problem}", path=where, line=line)


def file_diffs(patch: PatchFile, strip: int = 1) -> list[FileDiff]:
    return checked_diffs(patch.body, where=f"queue/{patch.name}", first_line=patch.body_offset_line, strip=strip)


def checked_diffs(body: bytes, *, where: str, first_line: int, strip: int = 1) -> list[FileDiff]:
    """The file diffs of a patch body, refusing what gqueue never applies (unsafe paths, binary, links)."""
    diffs = parse_diff(body, path=where, first_line=first_line, strip=strip)
    if not diffs and body.strip():
        raise FormatError(
            "patch has text after its header but no diff in it (truncated?)", path=where, line=first_line,
        )
    for fd in diffs:
        for p, mode in ((fd.old_path, fd.old_mode), (fd.new_path, fd.new_mode)):
            if p is not None:
                check_path(p, where=where, line=fd.line, mode=mode)
        if fd.binary:
            raise UnsafePatchError(f"binary patch for '{fd.path}' is not supported", path=where, line=fd.line)
        for mode in (fd.old_mode, fd.new_mode):
            if mode is not None and mode not in REGULAR_MODES:
                raise UnsafePatchError(f"patch gives '{fd.path}' mode {mode}; only regular files are allowed", path=where, line=fd.line)
    return diffs


def apply_patch(view: TreeView, patch: PatchFile, *, strip: int = 1, max_fuzz: int = 0) -> PatchResult:
    """Apply ``patch`` on ``view``; on success its changes are in the overlay and in the result."""
    where = f"queue/{patch.name}"
    result = PatchResult(patch.name, patch.meta.id)
    pending: dict[str, tuple[str, bytes] | None] = {}
    for fd in file_diffs(patch, strip):
        for path in dict.fromkeys((fd.path, fd.source)):
            link = view.symlink_on_path(path)
            if link is not None:
                raise UnsafePatchError(f"patch writes '{path}' through the symbolic link '{link}'", path=where, line=fd.line)
        current = pending[fd.source] if fd.source in pending else view.get(fd.source)
        if fd.is_new:
            if current is not None:
                result.files.append(FileResult(fd.path, Status.FILE_EXISTS, (), fd.line))
                continue
            refuse_kind_clash(view, pending, fd, where)
            outcome = apply_hunks(b"", fd, max_fuzz=0)
            pending[fd.path] = (fd.new_mode or "100644", outcome.new or b"")
            result.files.append(FileResult(fd.path, Status.CLEAN, outcome.hunks, fd.line))
            continue
        if current is None:
            result.files.append(FileResult(fd.source, Status.FILE_MISSING, (), fd.line))
            continue
        if fd.source != fd.path:  # a rename or copy: its text goes to a file that is not there yet
            if (pending[fd.path] if fd.path in pending else view.get(fd.path)) is not None:
                result.files.append(FileResult(fd.path, Status.FILE_EXISTS, (), fd.line))
                continue
            refuse_kind_clash(view, pending, fd, where)
        mode, data = current
        outcome = apply_hunks(data, fd, max_fuzz=max_fuzz)
        if outcome.new is None:
            result.files.append(FileResult(fd.path, Status.FAILED, outcome.hunks, fd.line))
            continue
        statuses = [h.status for h in outcome.hunks]
        status = max(statuses, key=PUSH_ORDER.index, default=Status.CLEAN)  # clean, offset or fuzz here
        if fd.is_delete:
            if outcome.new.strip():
                result.files.append(FileResult(fd.path, Status.FAILED, outcome.hunks, fd.line))
                continue
            pending[fd.path] = None
        else:
            pending[fd.path] = (fd.new_mode or mode, outcome.new)
            if fd.rename:
                pending[fd.source] = None
        result.files.append(FileResult(fd.path, status, outcome.hunks, fd.line))
    if result.ok or max_fuzz:
        result.changes = pending
        if result.ok:
            for path, value in pending.items():
                view.set(path, value)
    return result


def refuse_kind_clash(view: TreeView, pending: dict[str, tuple[str, bytes] | None], fd: FileDiff, where: str) -> None:
    """A new file may not stand where a folder is, nor under a file: the commit would replace the
    folder (every file in it deleted) or the file with the new one, which a report of '1 file,
    1 hunk' does not show."""
    parts = fd.path.split("/")
    for depth in range(1, len(parts)):
        prefix = "/".join(parts[:depth])
        if (pending[prefix] if prefix in pending else view.mode(prefix)) is not None:
            raise UnsafePatchError(
                f"patch creates '{fd.path}' under '{prefix}', which is a file (it would be deleted)",
                path=where, line=fd.line)
    inside = view.files_under(fd.path, pending)
    if inside:
        raise UnsafePatchError(
            f"patch creates the file '{fd.path}', which is a folder of {inside} file(s) (they would be deleted)",
            path=where, line=fd.line)


def touched_paths(patches: Iterable[PatchFile]) -> set[str]:
    """The paths a set of patches name in their file headers (a cheap scan, for prefetching)."""
    paths: set[str] = set()
    for patch in patches:
        for line in patch.body.splitlines():
            if line.startswith((b"--- a/", b"+++ b/")):
                paths.add(line[6:].split(b"\t", 1)[0].decode("utf-8", "surrogateescape"))
            elif line.startswith((b"rename from ", b"copy from ")):  # a rename's source, which may have no '---' line
                paths.add(line.split(b" ", 2)[2].decode("utf-8", "surrogateescape"))
    return paths
