"""The drift engine: runs a series over two trees at once, the base pin it was written for
(``old``) and a target pin (``new``), and classifies every hunk on the target.

Each patch is applied on top of the ones before it on both sides, in memory. A hunk is tried,
in order: exactly (clean / offset), reversed (upstream), as a three-way merge against the old
pin's preimage (merged3), with leading and trailing whitespace ignored (whitespace), with
reduced context (fuzz); what is left is a conflict, or blocked
when it needs lines that an earlier, failed patch would have added.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..model import drift as d
from ..model.apply import FileOutcome, apply_hunks, apply_ignoring_whitespace, split_lines
from ..model.diff import FileDiff, Hunk
from ..model.patch import PatchFile
from ..vcs.git import WorkRepo
from .engine import TreeView, file_diffs, refuse_kind_clash

Change = tuple[str, bytes] | None


@dataclass
class FileMerge:
    """What a rebase needs to leave a file that did not fully land in the work tree."""

    path: str
    ours: bytes  # the new pin's file with the hunks that landed
    base: bytes | None  # the old pin's file before the patch (None: no preimage)
    theirs: bytes | None  # the old pin's file after the patch
    failed: tuple[Hunk, ...]


@dataclass
class PatchRun:
    report: d.PatchReport
    changes: dict[str, Change] = field(default_factory=dict)  # what landed on the new pin
    merges: list[FileMerge] = field(default_factory=list)

    @property
    def landed(self) -> bool:
        """Every hunk is in the new tree as it should be (fuzz needs a look, so it does not count)."""
        good = d.LANDED - {d.FUZZ}
        return self.report.status != d.BLOCKED and all(
            h.status in good or (h.status == d.RENAMED and h.applies_there in good) for h in self.report.hunks
        )


def _single(hunk: Hunk, old_start: int) -> FileDiff:
    return FileDiff("x", "x", (replace(hunk, old_start=max(old_start, 0 if hunk.old_len == 0 else 1)),), 0)


def _apply_one(text: bytes, hunk: Hunk, start: int, fuzz: int = 0) -> FileOutcome:
    return apply_hunks(text, _single(hunk, start), max_fuzz=fuzz)


def _first_difference(a: bytes, b: bytes) -> int:
    la, lb = split_lines(a), split_lines(b)
    for i, (x, y) in enumerate(zip(la, lb)):
        if x != y:
            return i
    return min(len(la), len(lb))


class SeriesRun:
    """One target pin: feed it the series' patches in order with :meth:`run`."""

    def __init__(self, repo: WorkRepo, old_commit: str, new_commit: str, *, accept: frozenset[str],
                 max_fuzz: int = 2, drift: bool = True, land_fuzz: bool = True) -> None:
        """``land_fuzz``: a hunk that applies only with fuzz goes into the new tree (what ``patch``
        would do, for the patches after it: check), or stays out of it (rebase: where it goes is
        for a hand to say, so neither the stopped patch's commit nor the later patches see it)."""
        self.repo = repo
        self.land_fuzz = land_fuzz
        self.same = old_commit == new_commit
        self.with_drift = drift
        self.old = TreeView(repo, old_commit)
        self.new = TreeView(repo, new_commit)
        self.accept = accept
        self.max_fuzz = max_fuzz
        self.missing: dict[str, dict[bytes, str]] = {}  # path -> line a failed patch would add -> patch
        self.failed: dict[str, str] = {}  # id and name of failed patches -> name
        self._renames: dict[str, str | None] = {}
        self._changed: list[str] | None = None
        self._blobs: dict[str, bytes] = {}

    # --- the series ---------------------------------------------------------------------------
    def prefetch(self, paths: set[str]) -> None:
        """Read every file the series touches on both pins in one go (instead of one by one)."""
        views = (self.old, self.new)
        shas = {v.entries[p].sha for v in views for p in paths if p in v.entries and p not in v.overlay}
        data = self.repo.blobs(shas)
        for view in views:
            for path in paths:
                entry = view.entries.get(path)
                if entry is not None and path not in view.overlay:
                    view.overlay[path] = (entry.mode, data[entry.sha])

    def run(self, patch: PatchFile, strip: int = 1) -> PatchRun:
        hunks: list[d.HunkReport] = []
        changes: dict[str, Change] = {}
        old_changes: dict[str, Change] = {}
        merges: list[FileMerge] = []
        for fd in file_diffs(patch, strip):
            if fd.source != fd.path:
                self._moved(patch, fd, hunks, changes, old_changes, merges)
                continue
            old_cur = old_changes[fd.path] if fd.path in old_changes else self.old.get(fd.path)
            new_cur = changes[fd.path] if fd.path in changes else self.new.get(fd.path)
            self._file(patch, fd, old_cur, new_cur, hunks, changes, old_changes, merges)
        blocked_by = self._required_failure(patch)
        statuses = [h.status for h in hunks]
        status = d.BLOCKED if blocked_by else d.patch_status(statuses)
        if not blocked_by:
            blocked_by = next((h.blocked_by for h in hunks if h.blocked_by), None)
        report = d.PatchReport(patch.name, patch.meta.id, status, tuple(hunks), status in self.accept, blocked_by)
        run = PatchRun(report, changes, merges)
        for path, value in old_changes.items():
            self.old.set(path, value)
        for path, value in changes.items():
            self.new.set(path, value)
        if status in (d.CONFLICT, d.FILE_MISSING, d.BLOCKED) or (status == d.RENAMED and not run.landed):
            self.failed[patch.name] = patch.name
            if patch.meta.id:
                self.failed[patch.meta.id] = patch.name
        return run

    def advance_old(self, patch: PatchFile, strip: int = 1) -> None:
        """Apply ``patch`` on the old side only (a rebase resuming after earlier patches)."""
        for fd in file_diffs(patch, strip):
            cur = self.old.get(fd.source)
            after = apply_hunks(cur[1] if cur else b"", fd).new
            if after is not None:
                self.old.set(fd.path, None if fd.is_delete else (fd.new_mode or (cur[0] if cur else "100644"), after))
                if fd.rename:
                    self.old.set(fd.source, None)

    def mark_failed(self, patch: PatchFile, strip: int = 1) -> None:
        """``patch`` is left out on the new side (a rebase skipped it): what needs it is blocked."""
        self.failed[patch.name] = patch.name
        if patch.meta.id:
            self.failed[patch.meta.id] = patch.name
        for fd in file_diffs(patch, strip):
            self._remember_missing(patch, fd.source, fd.hunks)

    def _required_failure(self, patch: PatchFile) -> str | None:
        for need in patch.meta.requires:
            if need in self.failed:
                return self.failed[need]
        return None

    # --- one file -----------------------------------------------------------------------------
    def _file(self, patch: PatchFile, fd: FileDiff, old_cur: Change, new_cur: Change, hunks: list[d.HunkReport],
              changes: dict[str, Change], old_changes: dict[str, Change], merges: list[FileMerge]) -> None:
        path = fd.path
        if old_cur is not None or fd.is_new:
            old_text = old_cur[1] if old_cur else b""
            old_after = apply_hunks(old_text, fd).new
            if old_after is not None:
                old_changes[path] = None if fd.is_delete else (fd.new_mode or (old_cur[0] if old_cur else "100644"), old_after)
        if fd.is_new:
            refuse_kind_clash(self.new, changes, fd, f"queue/{patch.name}")  # as push refuses it
            self._new_file(fd, new_cur, hunks, changes)
            return
        if new_cur is None:
            if fd.is_delete:
                hunks.extend(self._hunk(fd, i, h, d.UPSTREAM, detail="already deleted") for i, h in enumerate(fd.hunks))
                return
            self._missing_file(patch, fd, old_cur, hunks, changes, merges)
            return
        mode, text = new_cur
        reports, result, merge = self._hunks(patch, fd, path, old_cur[1] if old_cur else None, text)
        hunks.extend(reports)
        if result is not None and result != text:
            changes[path] = None if fd.is_delete and not result.strip() else (fd.new_mode or mode, result)
        if merge is not None:
            merges.append(merge)

    def _moved(self, patch: PatchFile, fd: FileDiff, hunks: list[d.HunkReport], changes: dict[str, Change],
               old_changes: dict[str, Change], merges: list[FileMerge]) -> None:
        """A rename or copy: its hunks change the source file's text (and are reported under the
        source's name), which then goes to the new name. Where the source is not on the new pin,
        or the new name is taken there, one file-level report says so; where a hunk does not
        land, the source keeps the merge and nothing moves."""
        src, dst = fd.source, fd.path
        how = "renamed" if fd.rename else "copied"
        in_place = replace(fd, new_path=src, rename=False, copy=False)
        old_cur = old_changes[src] if src in old_changes else self.old.get(src)
        if old_cur is not None:
            old_after = apply_hunks(old_cur[1], in_place).new
            if old_after is not None:
                old_changes[dst] = (fd.new_mode or old_cur[0], old_after)
                if fd.rename:
                    old_changes[src] = None
        new_cur = changes[src] if src in changes else self.new.get(src)
        taken = changes[dst] if dst in changes else self.new.get(dst)
        if new_cur is None or taken is not None:
            detail = (f"the file it is {how} from is not on the new pin" if new_cur is None
                      else f"the new pin already has {dst}, the file it is {how} to")
            hunks.append(d.HunkReport(src, 0, d.FILE_MISSING if new_cur is None else d.CONFLICT, fd.line, detail=detail))
            if new_cur is None:
                self._remember_missing(patch, src, fd.hunks)
            return
        refuse_kind_clash(self.new, changes, fd, f"queue/{patch.name}")  # as push refuses it
        mode, text = new_cur
        reports, result, merge = self._hunks(patch, in_place, src, old_cur[1] if old_cur else None, text)
        note = f"{how} to {dst}"
        hunks.extend(replace(r, detail=f"{r.detail}; {note}" if r.detail else note) for r in reports)
        if merge is not None:
            merges.append(merge)
            if result is not None and result != text:
                changes[src] = (mode, result)
            return
        changes[dst] = (fd.new_mode or mode, result if result is not None else text)
        if fd.rename:
            changes[src] = None

    def _new_file(self, fd: FileDiff, new_cur: Change, hunks: list[d.HunkReport], changes: dict[str, Change]) -> None:
        content = apply_hunks(b"", fd).new or b""
        if new_cur is None:
            changes[fd.path] = (fd.new_mode or "100644", content)
            hunks.extend(self._hunk(fd, i, h, d.CLEAN, line=1) for i, h in enumerate(fd.hunks))
        elif new_cur[1] == content:
            hunks.extend(self._hunk(fd, i, h, d.UPSTREAM, line=1) for i, h in enumerate(fd.hunks))
        else:
            detail = "the patch creates this file but the new pin already has a different one"
            hunks.extend(self._hunk(fd, i, h, d.CONFLICT, line=1, detail=detail) for i, h in enumerate(fd.hunks))

    def _missing_file(self, patch: PatchFile, fd: FileDiff, old_cur: Change, hunks: list[d.HunkReport],
                      changes: dict[str, Change], merges: list[FileMerge]) -> None:
        target = self.find_rename(fd.path)
        if target is None:
            for i, h in enumerate(fd.hunks):
                reloc = self.relocate(fd.path, h.old_lines())
                hunks.append(self._hunk(fd, i, h, d.FILE_MISSING, relocation=reloc, expected=_text(h.old_lines()),
                                        detail="the file is not on the new pin"))
            self._remember_missing(patch, fd.path, fd.hunks)
            return
        there = self.new.get(target)
        assert there is not None
        reports, result, merge = self._hunks(patch, fd, target, old_cur[1] if old_cur else None, there[1])
        for r in reports:
            hunks.append(replace(r, file=fd.path, status=d.RENAMED, renamed_to=target, applies_there=r.status))
        if result is not None and result != there[1]:
            changes[target] = (there[0], result)
        if merge is not None:
            merges.append(merge)

    # --- the hunks of one file ------------------------------------------------------------------
    def _hunks(self, patch: PatchFile, fd: FileDiff, path: str, old_text: bytes | None,
               text: bytes) -> tuple[list[d.HunkReport], bytes | None, FileMerge | None]:
        """Reports, the file after what landed, and (if something did not) what a merge needs."""
        fast = apply_hunks(text, fd)
        if fast.new is not None:
            olds = apply_hunks(old_text, fd) if old_text is not None and not self.same and self.with_drift else None
            reports = []
            for i, (h, o) in enumerate(zip(fd.hunks, fast.hunks)):
                drift: list[str] = []
                if olds is not None and olds.new is not None and old_text != text and self.with_drift:
                    drift = self._drift(path, old_text or b"", olds.hunks[i].line - 1, text, o.line - 1, h)
                reports.append(self._hunk(fd, i, h, o.status, line=o.line, offset=o.offset, drift=drift))
            return reports, fast.new, None
        return self._slow(patch, fd, path, old_text, text)

    def _slow(self, patch: PatchFile, fd: FileDiff, path: str, old_text: bytes | None,
              text: bytes) -> tuple[list[d.HunkReport], bytes | None, FileMerge | None]:
        reports: list[d.HunkReport] = []
        old_cur, new_cur = old_text, text
        old_delta = new_delta = 0
        failed: list[Hunk] = []
        for i, h in enumerate(fd.hunks):
            growth = h.new_len - h.old_len
            base_before = old_cur
            theirs: bytes | None = None
            old_at = -1
            if old_cur is not None:
                o = _apply_one(old_cur, h, h.old_start + old_delta)
                if o.new is not None:
                    theirs, old_at = o.new, o.hunks[0].line - 1
                    old_cur, old_delta = o.new, old_delta + growth
            start = h.old_start + new_delta
            exact = _apply_one(new_cur, h, start)
            if exact.new is not None:
                out = exact.hunks[0]
                drift = self._drift_opt(path, base_before, old_at, new_cur, out.line - 1, h)
                reports.append(self._hunk(fd, i, h, out.status, line=out.line, offset=out.offset, drift=drift))
                new_cur, new_delta = exact.new, new_delta + growth
                continue
            back = apply_hunks(new_cur, FileDiff("x", "x", (replace(h.reversed(), old_start=max(start, 1)),), 0))
            if back.new is not None:
                reports.append(self._hunk(fd, i, h, d.UPSTREAM, line=back.hunks[0].line))
                new_delta += growth
                continue
            if theirs is not None and base_before is not None and not self.same:
                merged, conflicts = self.repo.merge_file(new_cur, base_before, theirs)
                if conflicts == 0 and merged == new_cur:  # the merge adds nothing: the change is there
                    found = d.closest_match(split_lines(new_cur), h.new_lines())
                    reports.append(self._hunk(fd, i, h, d.UPSTREAM, line=found[0] + 1 if found else max(start, 1),
                                              detail="a three-way merge with it changes nothing"))
                    new_delta += growth
                    continue
                if conflicts == 0:
                    line = _first_difference(new_cur, merged) + 1
                    drift = self._drift_opt(path, base_before, old_at, new_cur, line - 1, h)
                    reports.append(self._hunk(fd, i, h, d.MERGED3, line=line, drift=drift))
                    new_cur, new_delta = merged, new_delta + growth
                    continue
            loose = apply_ignoring_whitespace(new_cur, h, start - 1)
            if loose is not None:
                text, line, way = loose
                detail = f"lands with the new pin's whitespace at line {line} ({way.describe()})"
                drift = self._drift_opt(path, base_before, old_at, new_cur, line - 1, h)
                reports.append(self._hunk(fd, i, h, d.WHITESPACE, line=line, offset=line - start,
                                          drift=drift, detail=detail))
                new_cur, new_delta = text, new_delta + growth
                continue
            if self.max_fuzz:
                fuzzy = _apply_one(new_cur, h, start, self.max_fuzz)
                if fuzzy.new is not None:
                    out = fuzzy.hunks[0]
                    detail = f"patch would apply it with fuzz {out.fuzz} at line {out.line}"
                    reports.append(self._hunk(fd, i, h, d.FUZZ, line=out.line, offset=out.offset, fuzz=out.fuzz, detail=detail))
                    if self.land_fuzz:
                        new_cur, new_delta = fuzzy.new, new_delta + growth
                    failed.append(h)
                    continue
            reports.append(self._conflict(patch, fd, i, h, path, new_cur, start))
            failed.append(h)
        if any(r.status == d.CONFLICT or r.status == d.BLOCKED for r in reports):
            self._remember_missing(patch, path, [h for h, r in zip(fd.hunks, reports) if r.status in (d.CONFLICT, d.BLOCKED)])
        merge = None
        if failed:
            theirs_all = apply_hunks(old_text, fd).new if old_text is not None else None
            merge = FileMerge(path, new_cur, old_text if theirs_all is not None else None, theirs_all, tuple(failed))
        return reports, new_cur, merge

    def _conflict(self, patch: PatchFile, fd: FileDiff, i: int, h: Hunk, path: str, text: bytes, start: int) -> d.HunkReport:
        want = h.old_lines()
        missing = self.missing.get(path, {})
        lines = split_lines(text)
        present = {_key(x) for x in lines} if missing else set()
        for line in want:
            owner = missing.get(_key(line))
            if owner is not None and owner != patch.name and _key(line) not in present:
                return self._hunk(fd, i, h, d.BLOCKED, line=max(start, 1), blocked_by=owner, expected=_text(want),
                                  detail=f"needs lines that {owner} adds")
        found = d.closest_match(lines, want)
        closest = d.Match(path, found[0] + 1, found[1]) if found else None
        relocation = None
        if closest is None or closest.similarity < 0.9:
            relocation = self.relocate(path, want)
            if relocation is not None and closest is not None and relocation.similarity <= closest.similarity:
                relocation = None
        return self._hunk(fd, i, h, d.CONFLICT, line=max(start, 1), expected=_text(want), closest=closest,
                          relocation=relocation)

    def _remember_missing(self, patch: PatchFile, path: str, hunks: tuple[Hunk, ...] | list[Hunk]) -> None:
        bucket = self.missing.setdefault(path, {})
        for h in hunks:
            for tag, line in h.lines:
                if tag == b"+" and len(line.strip()) >= 8:
                    bucket.setdefault(_key(line), patch.name)

    def _drift_opt(self, path: str, old: bytes | None, old_at: int, new: bytes, new_at: int, h: Hunk) -> list[str]:
        if old is None or old_at < 0 or self.same or old == new or not self.with_drift:
            return []
        return self._drift(path, old, old_at, new, new_at, h)

    def _drift(self, path: str, old: bytes, old_at: int, new: bytes, new_at: int, h: Hunk) -> list[str]:
        focus = 0
        while focus < len(h.lines) and h.lines[focus][0] == b" ":
            focus += 1
        return d.semantic_drift(split_lines(old), old_at, split_lines(new), new_at, h.old_len, focus=focus,
                                python=path.endswith((".py", ".pyi")))

    @staticmethod
    def _hunk(fd: FileDiff, i: int, h: Hunk, status: str, **kw: object) -> d.HunkReport:
        drift = kw.pop("drift", ())
        expected = kw.pop("expected", ())
        return d.HunkReport(fd.path, i + 1, status, h.line, h.old_start, drift=tuple(drift),  # type: ignore[arg-type]
                            expected=tuple(expected), **kw)  # type: ignore[arg-type]

    # --- searching the new pin ----------------------------------------------------------------
    def changed_paths(self) -> list[str]:
        """Files of the new pin that differ from (or are not on) the old pin."""
        if self._changed is None:
            self._changed = sorted(p for p, e in self.new.entries.items()
                                   if self.old.entries.get(p) is None or self.old.entries[p].sha != e.sha)
        return self._changed

    def _content(self, path: str) -> bytes:
        if path not in self._blobs:
            got = self.new.get(path)
            self._blobs[path] = got[1] if got else b""
        return self._blobs[path]

    def _load(self, paths: list[str]) -> None:
        """Upstream contents of many new-pin files at once (for searching them)."""
        shas = {p: self.new.entries[p].sha for p in paths if p in self.new.entries}
        data = self.repo.blobs(shas.values())
        for path, sha in shas.items():
            self._blobs[path] = data[sha]

    def relocate(self, path: str, want: list[bytes]) -> d.Match | None:
        """Another file of the new pin where the hunk's expected text now lives: one of the same
        kind (suffix) under the same top folder (code moves within vllm/; a test or benchmark that
        quotes the old code is not where it went)."""
        probes = d.distinctive_lines(want)
        if not probes:
            return None
        suffix = path.rsplit(".", 1)[-1] if "." in path else ""
        top = path.split("/", 1)[0] + "/" if "/" in path else ""
        pool = [p for p in self.changed_paths() if p != path and p.startswith(top)
                and (not suffix or p.endswith("." + suffix))]
        self._load([p for p in pool if p not in self._blobs])
        best: d.Match | None = None
        for other in pool:
            data = self._content(other)
            if not any(p in data for p in probes):
                continue
            found = d.closest_match(split_lines(data), want)
            if found and (best is None or found[1] > best.similarity):
                best = d.Match(other, found[0] + 1, found[1])
        return best if best is not None and best.similarity >= 0.6 else None

    def find_rename(self, path: str) -> str | None:
        """Where a file of the old pin went on the new one, matched by content."""
        if path in self._renames:
            return self._renames[path]
        target = None
        entry = self.old.entries.get(path)
        if entry is not None:
            added = [p for p in self.new.entries if p not in self.old.entries]
            same_sha = [p for p in added if self.new.entries[p].sha == entry.sha]
            if same_sha:
                target = same_sha[0]
            else:
                target = self._best_match(self.repo.blob(entry.sha), path, added)
                if target is not None:  # mutual: no other vanished file is more like the candidate
                    removed = [p for p in self.old.entries if p not in self.new.entries]
                    back = self._best_match(self._content(target), target, removed, old_side=True)
                    if back != path:
                        target = None
        self._renames[path] = target
        return target

    def _best_match(self, data: bytes, path: str, candidates: list[str], *, old_side: bool = False,
                    threshold: float = 0.6) -> str | None:
        name = path.rsplit("/", 1)[-1]
        suffix = name.rsplit(".", 1)[-1] if "." in name else ""
        pool = [p for p in candidates if not suffix or p.endswith("." + suffix)]
        pool.sort(key=lambda p: (p.rsplit("/", 1)[-1] != name, p))
        pool = pool[:400]
        if old_side:
            blobs = self.repo.blobs(self.old.entries[p].sha for p in pool)
            contents = {p: blobs[self.old.entries[p].sha] for p in pool}
        else:
            self._load([p for p in pool if p not in self._blobs])
            contents = {p: self._content(p) for p in pool}
        best, found = threshold, None
        for candidate in pool:
            score = d.similarity(data, contents[candidate])
            if score > best or (found is None and score == best):
                best, found = score, candidate
        return found


def _key(line: bytes) -> bytes:
    return b" ".join(line.split())


def _text(lines: list[bytes]) -> list[str]:
    return [x.decode("utf-8", "replace").rstrip("\r\n") for x in lines]
