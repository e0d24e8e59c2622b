"""push, pop, goto, refresh: the stack's moves."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import Callable

from ..errors import FormatError, StateError, UnsafePatchError, UsageError, one_line
from ..fsutil import atomic_write
from ..model.journal import StackMove
from ..model.meta import author_problem
from ..model.patch import PatchFile, format_patch, with_body
from ..model.series import Series, SeriesEntry
from ..vcs.git import BRANCH, TRAILER, CommitSpec
from ..model.diff import FileDiff, parse_diff
from ..model.status import EXACT, Status
from ..model.variants import Resolution
from .engine import REGULAR_MODES, FileResult, PatchResult, TreeView, apply_patch, file_diffs, touched_paths
from .transaction import Files, move, save_local_changes
from .workspace import DIFF_TRAILER, Stack, Workspace

PENDING = "refs/gqueue/pending"
NOT_CARRIED_TRAILER = "Gqueue-Not-Carried"
DEFAULT_AUTHOR = "gqueue <gqueue@localhost>"


def diff_digest(patch: PatchFile) -> str:
    """Names the diff text a commit was built from (refresh's check for hand edits)."""
    return hashlib.sha256(patch.body).hexdigest()[:20]


def commit_message(patch: PatchFile, *, whole: bool = True) -> str:
    """The commit's message; ``whole``: the commit holds the entire diff (not a forced partial push)."""
    title = patch.meta.title or patch.name
    digest = f"{DIFF_TRAILER}: {diff_digest(patch)}\n" if whole else ""
    return f"{title}\n\nGqueue-Id: {patch.meta.id}\n{digest}{TRAILER}: {patch.name}\n"


def commit_author(patch: PatchFile) -> str:
    author = patch.meta.get("author")
    if isinstance(author, str) and author_problem(author) is None:
        return author
    return DEFAULT_AUTHOR


def not_carried_message(found: Resolution, pin: str) -> str:
    """The message of the empty commit that keeps a patch's place in the stack on a pin where it
    is not carried (the stack stays one commit per series entry, so pop, goto and bisect count
    as before)."""
    return (f"{found.name}: not carried on {pin}\n\n{one_line(found.reason)}\n\n"
            f"Gqueue-Id: {found.patch_id}\n{NOT_CARRIED_TRAILER}: {one_line(found.reason)}\n{TRAILER}: {found.name}\n")


@dataclass(frozen=True)
class NotCarried:
    """A series entry push passed over: no file of it admits the pin."""

    name: str
    reason: str
    after: int  # how many patches were applied before it in this push (for the report's order)

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "status": str(Status.NOT_CARRIED), "reason": self.reason}


@dataclass
class PushResult:
    pushed: list[PatchResult] = field(default_factory=list)
    failed: PatchResult | None = None
    forced: bool = False
    top: str | None = None
    refreshed: list[str] = field(default_factory=list)  # push --refresh: patch files rewritten
    not_carried: list[NotCarried] = field(default_factory=list)  # entries passed over (n/a on the pin)

    def to_json(self) -> dict[str, object]:
        return {
            "pushed": [r.to_json() for r in self.pushed],
            "not_carried": [n.to_json() for n in self.not_carried],
            "failed": self.failed.to_json() if self.failed else None,
            "forced": self.forced,
            "top": self.top,
            "refreshed": self.refreshed,
        }


@dataclass
class MoveResult:
    popped: list[str]
    top: str | None
    saved: str | None = None

    def to_json(self) -> dict[str, object]:
        return {"popped": self.popped, "top": self.top, "saved": self.saved}


def require_clean(ws: Workspace, action: str, status: Callable[[], list[str]] | None = None) -> None:
    """Refuse when work/ has changes not refreshed; ``status``: a started ``dirty_paths_later``."""
    dirty = [p for p in (status or ws.repo.dirty_paths)() if not p.endswith((".rej", ".orig"))]
    if dirty:
        shown = ", ".join(dirty[:3]) + (f" and {len(dirty) - 3} more" if len(dirty) > 3 else "")
        # only pop's --force saves them and goes on; the other commands' --force means something else
        aside = "add --force" if action == "pop" else "'gqueue pop --force' sets them aside"
        raise StateError(
            f"the work tree has changes not yet refreshed ({shown}); refusing to {action}",
            path="work", hint=f"run 'gqueue refresh' to keep them, or {aside} (they are saved under .gqueue/saved/)",
        )


def require_refreshed(ws: Workspace) -> None:
    if ws.needs_refresh_path.exists():
        name = ws.needs_refresh_path.read_text().strip()
        raise StateError(
            f"'{name}' was pushed with --force and needs a refresh first", path=f"queue/{name}",
            hint="fix the conflicts in work/, then run 'gqueue refresh'",
        )


def first_failure_in_order(ws: Workspace, base: str,
                           entries: list[SeriesEntry]) -> tuple[SeriesEntry, PatchResult, FileResult] | None:
    """The first of ``entries`` that does not apply when they are applied in order, in memory, on
    commit ``base``: the entry, what it did and its first failing file; None when they all apply."""
    view = TreeView(ws.repo, base)
    pin = ws.pin()
    resolved = [(e, ws.resolve(e.name, line=e.line, pin=pin)[1]) for e in entries]
    carried = [(e, p) for e, p in resolved if p is not None]
    view.prefetch(touched_paths([p for _e, p in carried]))
    for entry, patch in carried:
        outcome = apply_patch(view, patch, strip=entry.strip)
        failure = outcome.first_failure()
        if failure is not None:
            return entry, outcome, failure[0]
    return None


def check_stack_matches(stack: Stack, series: Series) -> None:
    for i, applied in enumerate(stack.applied):
        if i >= len(series.entries) or series.entries[i].name != applied.name:
            raise StateError(
                f"applied patch #{i + 1} '{applied.name}' is not entry #{i + 1} of the series",
                path="series", hint="restore the series order, or pop back below it with 'gqueue pop --force'",
            )


def push(ws: Workspace, *, count: int | None = 1, target: str | None = None, force: bool = False, fuzz: int = 0,
         series: Series | None = None, refresh_moved: bool = False, known_clean: bool = False) -> PushResult:
    """Apply patches of ``series`` (default: the series file; a profile passes its selection).

    ``refresh_moved``: a patch whose hunks landed elsewhere is rewritten to what its commit
    changes (the file first, then the stack moves; see ``push_refreshing``). ``known_clean``:
    the caller found work/ clean in this command, under the lock, and moved it only through
    gqueue since (move: its own pop), so no second git status is run."""
    series = series if series is not None else ws.store.read_series()
    stack = ws.stack()
    check_stack_matches(stack, series)
    require_refreshed(ws)
    if count is None and target is None and len(stack.applied) >= len(series.entries):
        return PushResult(top=stack.top.name if stack.top else None)  # --all: nothing to do (git rebase, StGit)
    status = (lambda: []) if known_clean else ws.repo.dirty_paths_later()  # git status runs while the patches are read
    try:
        pending, loaded, view = _prepare_push(ws, stack, series, count, target)
    finally:
        require_clean(ws, "push", status)  # waits for it; a dirty tree is the error to report first
    result = PushResult()
    specs: list[CommitSpec] = []
    patches: list[PatchFile | None] = []  # None: an entry not carried on the pin (an empty commit)
    outcomes: list[PatchResult | None] = []
    names: list[str] = []
    pin = ws.pin().describe()
    for entry in pending:
        patch = loaded[entry.name]
        if isinstance(patch, Resolution):
            result.not_carried.append(NotCarried(entry.name, patch.reason, len(result.pushed)))
            specs.append(CommitSpec(not_carried_message(patch, pin), {}, DEFAULT_AUTHOR))
            patches.append(None)
            outcomes.append(None)
            names.append(entry.name)
            continue
        ws.reporter.progress(f"applying {entry.name}")
        outcome = apply_patch(view, patch, strip=entry.strip, max_fuzz=fuzz)
        if not outcome.ok and not (fuzz and outcome.status == Status.FUZZ):
            result.failed = outcome
            if force:
                _force_apply(ws, view, patch, entry.strip, outcome, specs, result)
            break
        result.pushed.append(outcome)
        specs.append(CommitSpec(commit_message(patch), outcome.changes, commit_author(patch)))
        patches.append(patch)
        outcomes.append(outcome)
        names.append(entry.name)
    if specs:
        commits = ws.repo.write_commits(stack.head, specs, PENDING)
        if refresh_moved:
            commits = _rewrite_moved(ws, stack.head, commits, specs, patches, outcomes, result,
                                     [e.strip for e in pending])
        final: dict[str, tuple[str, bytes] | None] = {}
        for spec in specs:
            final.update(spec.changes)
        old_modes = {p: view.entries[p].mode for p in final if p in view.entries}
        move(ws, stack.head, commits[-1], op="push", files=Files.CLEAN, changes=final, old_modes=old_modes)
        ws.repo.delete_ref(PENDING)
        forced_at = result.failed.name if result.forced and result.failed is not None else None
        result.top = (forced_at or names[-1]) if names or forced_at else None
    if result.forced:
        _write_rejects(ws, result.failed)
        atomic_write(ws.needs_refresh_path, (result.failed.name + "\n").encode())  # type: ignore[union-attr]
    return result


def push_refreshing(ws: Workspace, *, count: int | None = 1, target: str | None = None, fuzz: int = 0,
                    series: Series | None = None) -> PushResult:
    """push --refresh: push one patch at a time; a patch whose hunks landed at an offset (or,
    with ``fuzz``, needed fuzz) is rewritten to what it changes where it landed, as a refresh
    would (header kept), so that it applies cleanly from then on. Per patch the file is
    written before the stack moves: a killed run leaves either the old stack (and at most that
    one file rewritten, which still applies) or the new one, and running it again continues."""
    series = series if series is not None else ws.store.read_series()
    stack = ws.stack()
    if count is None and target is None and len(stack.applied) >= len(series.entries):
        return push(ws, count=None, series=series)  # --all with nothing left: push's own answer
    names = [e.name for e in _select_pending(stack, series, count, target)]
    total = PushResult()
    for _ in names:
        step = push(ws, count=1, fuzz=fuzz, series=series, refresh_moved=True)
        total.not_carried += [NotCarried(n.name, n.reason, len(total.pushed)) for n in step.not_carried]
        total.pushed += step.pushed
        total.refreshed += step.refreshed
        total.top = step.top or total.top
        if step.failed is not None:
            total.failed = step.failed
            break
    return total


def _rewrite_moved(ws: Workspace, base: str, commits: list[str], specs: list[CommitSpec],
                   patches: list[PatchFile | None], outcomes: list[PatchResult | None],
                   result: PushResult, strips: list[int]) -> list[str]:
    """The patches whose hunks moved rewritten (their files written now) to their commits'
    diffs, and the commits written again with those diffs' digests (the same trees)."""
    changed = False
    for i, (old, outcome) in enumerate(zip(patches, outcomes)):
        if old is None or outcome is None or outcome.status == Status.CLEAN:
            continue
        patch = with_body(old, ws.repo.diff(commits[i - 1] if i else base, commits[i], strip=strips[i]))
        if format_patch(patch) == format_patch(old):
            continue
        specs[i] = CommitSpec(commit_message(patch), specs[i].changes, specs[i].author)
        ws.store.write_patch(patch)
        result.refreshed.append(patch.name)
        changed = True
    return ws.repo.write_commits(base, specs, PENDING) if changed else commits


def _select_pending(stack: Stack, series: Series, count: int | None, target: str | None) -> list[SeriesEntry]:
    """The series entries a push of ``count`` patches (or up to ``target``) applies."""
    pending = list(series.entries[len(stack.applied) :])
    if target is not None:
        names = [e.name for e in pending]
        if target not in names:
            if target in stack.names:
                raise UsageError(f"'{target}' is already applied")
            raise UsageError(f"'{target}' is not in the series")
        pending = pending[: names.index(target) + 1]
    elif count is not None:
        pending = pending[:count]
    if not pending:
        raise StateError("the whole series is already applied" if series.entries else "the series is empty")
    return pending


def _prepare_push(ws: Workspace, stack: Stack, series: Series, count: int | None,
                  target: str | None) -> tuple[list[SeriesEntry], dict[str, PatchFile | Resolution], TreeView]:
    """The entries to push, their patches (read once, each the file that serves the pin, or the
    resolution that says why none does) and a view of the tree with their files read."""
    pending = _select_pending(stack, series, count, target)
    loaded = _require_unique_ids(ws, series, len(stack.applied) + len(pending))
    view = TreeView(ws.repo, stack.head)
    view.prefetch(touched_paths(p for e in pending if isinstance(p := loaded[e.name], PatchFile)))
    return pending, loaded, view


def _require_unique_ids(ws: Workspace, series: Series, upto: int) -> dict[str, PatchFile | Resolution]:
    """Two patches of the stack must not share an id (commits, reports and requires name patches by it).

    Returns the patches it read, by name, so the caller reads each file once; an entry not
    carried on the pin is there as its resolution.
    """
    seen: dict[str, str] = {}
    loaded: dict[str, PatchFile | Resolution] = {}
    pin = ws.pin()
    for entry in series.entries[:upto]:
        found, read = ws.resolve(entry.name, line=entry.line, pin=pin)
        if read is None:
            loaded[entry.name] = found
            continue
        patch = loaded[entry.name] = read
        first = seen.setdefault(patch.meta.id, entry.name)
        if first != entry.name:
            raise FormatError(
                f"patch id '{patch.meta.id}' is used by both {first} and {entry.name}",
                path=f"queue/{entry.name}", line=patch.meta.line_of("id"), hint="give each patch its own id",
            )
    return loaded


def _force_apply(ws: Workspace, view: TreeView, patch: PatchFile, strip: int, outcome: PatchResult,
                 specs: list[CommitSpec], result: PushResult) -> None:
    """quilt push -f: commit what applies; failed hunks go to .rej files for the user."""
    from ..model.apply import apply_hunks
    from .engine import file_diffs

    changes: dict[str, tuple[str, bytes] | None] = {}
    for fd in file_diffs(patch, strip):
        current = view.get(fd.path)
        if current is None:
            continue
        partial = apply_hunks(current[1], fd, partial=True)
        if partial.new is not None:
            changes[fd.path] = (current[0], partial.new)
    specs.append(CommitSpec(commit_message(patch, whole=False), changes, commit_author(patch)))
    result.forced = True


def _write_rejects(ws: Workspace, outcome: PatchResult | None) -> None:
    if outcome is None:
        return
    patch = ws.read_patch(outcome.name)
    from .engine import file_diffs

    diffs = {fd.path: fd for fd in file_diffs(patch)}
    for f in outcome.files:
        failed = [h for h in f.hunks if h.status not in EXACT]
        fd = diffs.get(f.path)
        if not failed or fd is None:
            continue
        text = [f"--- a/{f.path}\n+++ b/{f.path}\n".encode()]
        for h in failed:
            hunk = fd.hunks[h.index]
            text.append(f"@@ -{hunk.old_start},{hunk.old_len} +{hunk.new_start},{hunk.new_len} @@\n".encode())
            text.extend(tag + line for tag, line in hunk.lines)
        target = ws.repo.path / (f.path + ".rej")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"".join(text))


def push_empty(ws: Workspace, stack: Stack, patch: PatchFile) -> None:
    """Put a new (empty) patch's commit on top of the stack (``new``, and recovery of a killed one)."""
    commits = ws.repo.write_commits(stack.head, [CommitSpec(commit_message(patch), {}, commit_author(patch))], PENDING)
    move(ws, stack.head, commits[-1], op="new")
    ws.repo.delete_ref(PENDING)


def pop(ws: Workspace, *, count: int | None = 1, target: str | None = None, force: bool = False,
        known_clean: bool = False) -> MoveResult:
    """``known_clean``: as for ``push`` (the caller's own require_clean stands)."""
    stack = ws.stack()
    if not stack.applied:
        if count is None and target is None:
            return MoveResult([], None)  # --all: nothing to do
        raise StateError("no patch is applied")
    names = stack.names
    if target is not None:
        if target not in names:
            raise UsageError(f"'{target}' is not applied")
        keep = names.index(target) + 1
    else:
        keep = max(len(names) - (count if count is not None else len(names)), 0)
    saved = None
    if force:
        path = save_local_changes(ws, "pop")
        saved = ws.store.rel(path) if path else None
    elif not known_clean:
        require_clean(ws, "pop")
    new = stack.commit_below(keep)
    move(ws, stack.head, new, op="pop", files=Files.RESET if force else Files.CLEAN)
    if saved is not None:  # new files are in the saved diff too: the next push would refuse them
        ws.repo.remove_untracked()
    popped = names[keep:]
    forced_popped = ws.needs_refresh_path.exists() and ws.needs_refresh_path.read_text().strip() in popped
    if forced_popped:
        os.unlink(ws.needs_refresh_path)
    if forced_popped or force:  # its .rej files go with it (a later refresh would record them)
        _remove_rejects(ws)
    return MoveResult(popped, names[keep - 1] if keep else None, saved)


def _remove_rejects(ws: Workspace) -> None:
    for path in ws.repo.dirty_paths():
        if path.endswith(".rej"):
            (ws.repo.path / path).unlink(missing_ok=True)


def goto(ws: Workspace, name: str, *, force: bool = False) -> object:
    stack = ws.stack()
    if name in stack.names:
        return pop(ws, target=name, force=force)
    return push(ws, target=name, count=None)


@dataclass
class RefreshResult:
    name: str
    changed: bool
    files: list[str]
    above: int = 0  # patches of the series above it
    moved: list[str] = field(default_factory=list)  # those of them whose hunks in its files now land elsewhere

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "changed": self.changed, "files": self.files, "above": self.above,
                "moved": self.moved}


def refresh(ws: Workspace, *, force: bool = False) -> RefreshResult:
    stack = ws.stack()
    top = stack.top
    if top is None:
        raise StateError("no patch is applied: nothing to refresh", hint="'gqueue new NAME' starts a patch")
    patch = ws.read_patch(top.name)  # the file that serves the pin: a variant is written back to itself
    parent = stack.commit_below(len(stack.applied) - 1)
    forced_push = ws.needs_refresh_path.exists()
    series = ws.store.read_series()
    strip = series.strip_of(top.name)
    if not force and not forced_push:
        _require_unedited(ws, stack, patch, strip)
    if forced_push:
        _remove_rejects(ws)
    tree = ws.repo.stage_all()
    moves = any(fd.source != fd.path for fd in file_diffs(patch, strip))  # a patch that renames keeps renaming
    body = ws.repo.diff_tree_to_tree(parent, tree, strip=strip, moves=moves)  # in the -pN the series gives it
    files = sorted({fd.path for fd in _require_pushable(body, strip)})  # mode-only changes too
    new_patch = with_body(patch, body)
    unchanged = format_patch(new_patch) == format_patch(patch) and tree == top.tree and top.diff_digest == diff_digest(patch)
    if unchanged:
        return RefreshResult(top.name, False, files)
    new_commit = ws.repo.commit_tree(tree, parent, commit_message(new_patch), commit_author(new_patch))
    digest = hashlib.sha256(format_patch(new_patch)).hexdigest()
    with ws.journaled(StackMove("refresh", top.commit, new_commit, patch=top.name, sha256=digest)) as move_:
        try:
            ws.store.write_patch(new_patch)
        except OSError:  # refused (a full disk, a read-only queue/): the refresh did not happen, say nothing later
            ws.repo.reset_index(top.commit)
            move_.cancel()
            raise
        ws.repo.update_ref(BRANCH, new_commit, top.commit)  # the index already holds its tree
    if forced_push:
        os.unlink(ws.needs_refresh_path)
    rest = series.entries[len(stack.applied) :]
    return RefreshResult(top.name, True, files, len(rest), moved_above(ws, rest, top.commit, new_commit, set(files)))


def moved_above(ws: Workspace, entries: tuple[SeriesEntry, ...], old: str, new: str, files: set[str]) -> list[str]:
    """Which of ``entries`` (the patches above a refreshed one, in order) touch ``files`` and
    land somewhere else (another line, or not at all) on ``new`` than on ``old``: those a
    'push --refresh' would rewrite. Patches that touch none of ``files`` cannot have moved."""
    relevant: list[tuple[SeriesEntry, PatchFile]] = []
    pin = ws.pin()
    for entry in entries:
        try:
            patch = ws.resolve(entry.name, line=entry.line, pin=pin)[1]
            if patch is not None and any(fd.path in files for fd in file_diffs(patch, entry.strip)):
                relevant.append((entry, patch))
        except (FormatError, UnsafePatchError):
            continue  # push reports what is wrong with it
    if not relevant:
        return []
    views = TreeView(ws.repo, old), TreeView(ws.repo, new)
    for view in views:
        view.prefetch(files)
    moved = []
    for entry, patch in relevant:
        try:
            before, after = (apply_patch(view, patch, strip=entry.strip) for view in views)
        except UnsafePatchError:
            continue
        if _landing(before) != _landing(after):
            moved.append(entry.name)
    return moved


def _landing(outcome: PatchResult) -> list[tuple[str, str, tuple[tuple[str, int], ...]]]:
    return [(f.path, f.status, tuple((h.status, h.line) for h in f.hunks)) for f in outcome.files]


def require_top_unedited(ws: Workspace, stack: Stack) -> None:
    """Refuse when the top patch's file was edited by hand since it was pushed (refresh would
    overwrite the edit); not after a forced push, whose commit holds only part of the patch."""
    top = stack.top
    if top is None or ws.needs_refresh_path.exists():
        return
    patch = ws.resolve(top.name)[1]
    if patch is not None:  # a patch not carried on the pin has an empty commit and no file to overwrite
        _require_unedited(ws, stack, patch, ws.store.read_series().strip_of(top.name))


def _require_unedited(ws: Workspace, stack: Stack, patch: PatchFile, strip: int) -> None:
    top = stack.applied[-1]
    if top.diff_digest != diff_digest(patch):
        _require_patch_matches_commit(ws, patch, stack.commit_below(len(stack.applied) - 1), top.commit, strip)


def _require_pushable(body: bytes, strip: int = 1) -> list[FileDiff]:
    """The file diffs of ``body``; refuses what push refuses to apply (a binary file, a symbolic
    link, a submodule): the patch would stop pushing, and after a pop the file would be gone from work/."""
    try:
        diffs = parse_diff(body, path="work", first_line=1, strip=strip)
    except FormatError as exc:  # a name git quotes (a '"', '\\' or control character in it)
        lines = body.splitlines()
        shown = lines[exc.line - 1].decode("utf-8", "replace") if exc.line and exc.line <= len(lines) else ""
        raise UnsafePatchError(f"{exc.message} ({shown}); refusing to refresh", path="work",
                               hint="rename that file in work/, then refresh") from None
    for fd in diffs:
        modes = [m for m in (fd.old_mode, fd.new_mode) if m is not None and m not in REGULAR_MODES]
        if fd.binary or modes:
            what = f"has mode {modes[0]} (not a regular file)" if modes else "is a binary file"
            raise UnsafePatchError(
                f"'{fd.path}' {what}, which a patch cannot carry; refusing to refresh",
                path=f"work/{fd.path}", hint="remove it from work/ (or restore it), then refresh",
            )
    return diffs


def _require_patch_matches_commit(ws: Workspace, patch: PatchFile, parent: str, commit: str, strip: int = 1) -> None:
    """Refuse to overwrite a patch file that was edited by hand after it was pushed."""
    if patch.body == ws.repo.diff(parent, commit, strip=strip):
        return  # the file is exactly what the commit holds (the usual case after a refresh)
    view = TreeView(ws.repo, parent)
    view.prefetch(touched_paths([patch]))
    outcome = apply_patch(view, patch, strip=strip)
    expected = ws.repo.tree_entries(commit)
    touched = set(ws.repo.changed_paths(parent, commit))
    if outcome.ok and touched != set(outcome.changes):
        raise StateError(
            f"queue/{patch.stored_as} was edited after it was pushed; refresh would overwrite that edit",
            path=f"queue/{patch.stored_as}", hint="pop and push it again to use the edit, or 'gqueue refresh --force'",
        )
    for path, change in outcome.changes.items():
        entry = expected.get(path)
        if change is None and entry is None:
            continue
        if change is None or entry is None or ws.repo.blobs([entry.sha])[entry.sha] != change[1]:
            raise StateError(
                f"queue/{patch.stored_as} was edited after it was pushed; refresh would overwrite that edit",
                path=f"queue/{patch.stored_as}", hint="pop and push it again to use the edit, or 'gqueue refresh --force'",
            )
    if not outcome.ok:
        raise StateError(
            f"queue/{patch.stored_as} no longer applies below its own commit (edited by hand?)",
            path=f"queue/{patch.stored_as}", hint="'gqueue refresh --force' overwrites it with the work tree",
        )
