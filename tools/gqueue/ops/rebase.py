"""``gqueue rebase``: move the whole stack to a new pin.

The new sdist is imported next to the old one (one object store, so three-way merges see both
preimages); every patch is re-applied in memory by the drift engine; those that land become
commits (one fast-import stream) and are refreshed from them (one ``git diff-tree --stdin``);
patches fully upstream leave the series with their header saying so. At the first patch that
needs a hand the work tree gets its conflict markers and the rebase stops; ``--continue``,
``--skip``, ``--retire`` and ``--abort`` take it from there. vendor-pin.txt changes only at the end.

During a rebase ``.gqueue/rebase-pin`` names the new pin, so the stack (and ``gqueue refresh``)
is read against the new base, and ``.gqueue/rebase/`` keeps what ``--abort`` restores.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import GqueueError, StateError, UsageError
from ..fsutil import atomic_write, atomic_write_many, fault_point
from ..model import drift as d
from ..model.journal import StackMove
from ..model.patch import PatchFile, format_patch, parse_patch, with_body, with_fields
from ..model.pin import Pin, format_pin_line, parse_pins
from ..model.series import parse_series
from ..model.variants import (RETIRE_REASONS, Resolution, bounded_below, from_release, retired_field, retired_text,
                              same_change, variant_file, widened, with_vllm_range)
from ..vcs.git import BRANCH, CommitSpec
from .drift import pin_commit, read_patch_quick, resolve_pin, touched_paths
from .drift_engine import PatchRun, SeriesRun
from .engine import file_diffs
from .stackops import (DEFAULT_AUTHOR, PENDING, check_stack_matches, commit_author, commit_message, not_carried_message,
                       require_clean, require_refreshed)
from .transaction import Files, move, save_local_changes
from .workspace import Workspace

STATE = "rebase"
OVERRIDE = "rebase-pin"
MARKERS = (b"<<<<<<< ", b">>>>>>> ")


@dataclass
class RebaseResult:
    old_pin: str
    new_pin: str
    tally: d.Tally
    stopped: str | None = None
    report: d.PatchReport | None = None
    conflict_files: list[str] = field(default_factory=list)
    done: bool = False
    aborted: bool = False

    def to_json(self) -> dict[str, object]:
        return {
            "from": self.old_pin, "to": self.new_pin, "done": self.done, "aborted": self.aborted,
            "summary": self.tally.to_json(), "stopped": self.stopped,
            "stopped_report": self.report.to_json() if self.report else None,
            "conflict_files": self.conflict_files,
        }

    def render(self) -> str:
        if self.aborted:
            return f"rebase aborted: back on {self.old_pin} with the series, queue and work tree as they were"
        t = self.tally
        lines = [
            f"rebase {self.old_pin} -> {self.new_pin}: "
            + ("done" if self.done else f"stopped at {self.stopped}"),
            f"  moved cleanly:    {len(t.moved)}", f"  merged:           {len(t.merged)}"
            + (f"  ({', '.join(t.merged)})" if t.merged else ""),
            f"  retired upstream: {len(t.retired)}" + (f"  ({', '.join(t.retired)})" if t.retired else ""),
            f"  needed a hand:    {len(t.by_hand)}" + (f"  ({', '.join(t.by_hand)})" if t.by_hand else ""),
        ]
        if t.skipped:
            lines.append(f"  skipped (parked): {len(t.skipped)}  ({', '.join(t.skipped)})")
        if t.variants:
            lines.append(f"  old diff kept as a variant: {len(t.variants)}  ({', '.join(t.variants)})")
        if t.not_carried:
            lines.append(f"  not carried on the old pin (left as they are): {len(t.not_carried)}  ({', '.join(t.not_carried)})")
        if self.stopped and self.report is not None:
            lines.append("")
            lines.append(f"{self.stopped}: {self.report.status}")
            landed = d.LANDED - {d.FUZZ}
            for h in self.report.hunks:
                if h.status in landed or (h.status == d.RENAMED and h.applies_there in landed):
                    continue  # in the stopped patch's commit already: nothing for the hand there
                status = h.status
                if h.status == d.RENAMED:
                    status = f"renamed to {h.renamed_to}, {h.applies_there} there"
                where = f" (closest match line {h.closest.line})" if h.closest else ""
                if h.relocation:
                    where += f"; now in {h.relocation.file}:{h.relocation.line}?"
                lines.append(f"  {h.file} hunk #{h.hunk}: {status}{where}")
            if self.conflict_files:
                lines.append("conflicts left in work/: " + ", ".join(self.conflict_files))
            lines.append("fix them in work/, run 'gqueue refresh', then 'gqueue rebase --continue'")
            lines.append("(or 'gqueue rebase --skip' to park this patch, 'gqueue rebase --retire' if the new pin"
                         " already fixes what it fixed, 'gqueue rebase --abort' to go back)")
        return "\n".join(lines)


# --- state ------------------------------------------------------------------------------------


def _state_dir(ws: Workspace) -> Path:
    return ws.state_dir / STATE


def _state_file(ws: Workspace) -> Path:
    return _state_dir(ws) / "state.json"


def in_progress(ws: Workspace) -> bool:
    return _state_file(ws).is_file()


def _load(ws: Workspace) -> dict[str, Any]:
    try:
        state: dict[str, Any] = json.loads(_state_file(ws).read_text())
        return state
    except FileNotFoundError:
        raise StateError("no rebase in progress", hint="start one with 'gqueue rebase --pin SPEC'") from None


def _save(ws: Workspace, state: dict[str, Any]) -> None:
    atomic_write(_state_file(ws), json.dumps(state, indent=1, sort_keys=True).encode())


def _tally(state: dict[str, Any]) -> d.Tally:
    return d.Tally(**{k: list(v) for k, v in state["tally"].items()})


# --- start / continue / skip / abort ----------------------------------------------------------


def start(ws: Workspace, spec: str, *, keep_old: str | None = None) -> RebaseResult:
    """``keep_old``: a label under which the old pin stays in vendor-pin.txt when the rebase
    completes (its line as it was, hashes included), so the queue is still checked on it."""
    if in_progress(ws):
        raise StateError("a rebase is already in progress", hint="'gqueue rebase --continue', '--skip', '--retire' or '--abort'")
    ws.require_work()
    old_pin = ws.pin()
    new_pin = _with_wheel(ws, resolve_pin(ws, spec))
    if (new_pin.project, new_pin.version) == (old_pin.project, old_pin.version) and new_pin.url == old_pin.url:
        raise UsageError(f"the stack is already on {old_pin.describe()}")
    series = ws.store.read_series()
    stack = ws.stack()
    check_stack_matches(stack, series)
    require_refreshed(ws)
    require_clean(ws, "rebase")
    new_base = pin_commit(ws, new_pin)
    _require_readable(ws, series.names)
    _require_main_files(ws, series.names, old_pin, keep_old)
    main_line = format_pin_line(Pin("pin", new_pin.source, new_pin.project, new_pin.version, new_pin.url, new_pin.options))
    keep_line = _keep_line(ws, old_pin, new_pin, keep_old) if keep_old is not None else ""
    _save_originals(ws, series.names)
    state = {
        "from": old_pin.describe(), "to": new_pin.describe(), "pin_line": main_line, "label": new_pin.label,
        "old_base": ws.base_commit(old_pin), "new_base": new_base, "old_head": stack.head,
        "todo": series.names, "done": [], "stopped": None, "written": [],
        "tally": d.Tally().to_json(), "keep_line": keep_line,
        "variants": keep_old is not None, "old_version": old_pin.version, "new_version": new_pin.version,
        "new_files": [],
    }
    _save(ws, state)
    atomic_write(ws.state_dir / OVERRIDE, main_line.encode())
    return _proceed(ws, state, head=new_base)


def _with_wheel(ws: Workspace, pin: Pin) -> Pin:
    """An index pin with its binary wheel's sha256 and file name where the index has one (the new
    pin line keeps them, as the old one had them: ``build`` needs them)."""
    if pin.kind != "index" or "wheel" in pin.options:
        return pin
    from ..upstream.resolve import record_hashes  # the download stack loads only here

    try:
        return record_hashes(pin, wheel=True)
    except GqueueError as exc:
        ws.reporter.note(f"{pin.describe()}: no wheel hash recorded ({exc.message}); 'gqueue pin --record --wheel' adds it later")
        return pin


def _require_main_files(ws: Workspace, names: list[str], old_pin: Pin, keep_old: str | None) -> None:
    """The rebase moves queue/NAME (with --keep-old it keeps the old diff as the old release's
    variant): refused, nothing changed, where a variant serves the release the stack is on (the
    main pin was set to a release of the variants, a rollback): moving queue/NAME from there
    would carry the diff of another release."""
    for name in names:
        found, _patch = ws.store.resolve(name, old_pin.version)
        if found.variant:
            raise UsageError(f"{found.file} serves {old_pin.describe()}, not queue/{name}: a rebase moves the "
                             "main files" + (" (and keeps their old diffs as variants)" if keep_old else ""),
                             path=f"queue/{found.file}",
                             hint=f"make it the main file first ('gqueue variant {name} queue/{found.file}'), "
                                  "or rebase from the pin queue/NAME serves")


def _keep_line(ws: Workspace, old_pin: Pin, new_pin: Pin, label: str) -> str:
    """The old pin's vendor-pin.txt line under ``label``; refused (nothing changed) when the
    label is not one a pin line may have, is ``pin``, or is another line's that stays."""
    if label == "pin":
        raise UsageError("--keep-old pin: 'pin' names the new release; give the old one another label (such as rollback)")
    try:  # the label rule of vendor-pin.txt itself
        parse_pins(f"pin {old_pin.source}\n{label} {old_pin.source}\n", path="--keep-old")
    except GqueueError:
        raise UsageError(f"--keep-old {label!r}: not a pin label (lower-case letters, digits, '-' and '_')") from None
    for pin in ws.store.read_pins().pins:
        dropped = (pin.project, pin.version, pin.url) == (new_pin.project, new_pin.version, new_pin.url)
        if pin.label == label and not dropped:
            raise UsageError(f"--keep-old {label}: vendor-pin.txt line {pin.line} already has that label",
                             hint="give another label, or remove that line first")
    return format_pin_line(Pin(label, old_pin.source, old_pin.project, old_pin.version, old_pin.url, old_pin.options))


@dataclass(frozen=True)
class Retirement:
    """Why ``--retire`` retires the stopped patch: the reason, the upstream change, the test."""

    reason: str = "fixed-upstream"
    by: str | None = None
    test: str | None = None


def resume(ws: Workspace, *, skip: bool = False, retire: bool = False,
           why: Retirement | None = None) -> RebaseResult:
    """Go on at the stopped patch: carried as refreshed (default), parked (``skip``) or retired
    (``retire``: the new pin does what it did, in its own way, or the code is gone, so no hunk
    of it is wanted there; ``why`` says which, and by what upstream change)."""
    why = why or Retirement()
    if why.reason not in RETIRE_REASONS:
        raise UsageError(f"--reason {why.reason}: one of {', '.join(RETIRE_REASONS)}")
    state = _load(ws)
    stopped = state.get("stopped")
    if stopped is None:
        if skip or retire:
            raise StateError(f"the rebase is not stopped at a patch: there is none to {'retire' if retire else 'skip'}",
                             hint="'gqueue rebase --continue' goes on, 'gqueue rebase --abort' undoes it")
        return _restart(ws, state)
    stack = ws.stack()
    if stack.top is None or stack.top.name != stopped:
        raise StateError(f"the top patch should be {stopped}, the one the rebase stopped at",
                         hint="push or pop back to it, or 'gqueue rebase --abort'")
    _require_readable(ws, [n for n in state["todo"] if n not in state["done"] and n != stopped])
    tally = _tally(state)
    if skip or retire:
        op = "rebase-retire" if retire else "rebase-skip"
        _remove_written(ws, state)
        save_local_changes(ws, op)  # a resolution begun in work/ is dropped with the patch
        below = stack.commit_below(len(stack.applied) - 1)
        move(ws, stack.head, below, op=op, files=Files.RESET)
        ws.needs_refresh_path.unlink(missing_ok=True)
        if retire and state.get("variants"):  # it stays in the series for the old pin, not carried on the new
            head = _retire_kept(ws, state, ws.store.read_patch(stopped), why, below)
            tally.retired.append(stopped)
        elif retire:  # the patch file keeps its diff (what it did on the old pin); the header says where it went
            _retire(ws, ws.store.read_patch(stopped), state["to"], why, state.get("new_version"))
            tally.retired.append(stopped)
        elif state.get("variants"):  # not carried on the new pin yet; the old pin still carries it
            head = _skip_kept(ws, state, ws.store.read_patch(stopped), below)
            tally.skipped.append(stopped)
        else:
            _park(ws, stopped, state["to"])
            tally.skipped.append(stopped)
        if not state.get("variants"):
            head = below
    else:
        if ws.needs_refresh_path.exists():
            raise StateError(f"{stopped} has not been refreshed since the rebase stopped",
                             path=f"queue/{stopped}", hint="fix work/, then 'gqueue refresh', then 'gqueue rebase --continue'")
        body = ws.store.read_patch(stopped).body
        if any(line[1:].startswith(MARKERS) for line in body.splitlines() if line.startswith(b"+")):
            raise StateError(f"queue/{stopped} still contains conflict markers", path=f"queue/{stopped}",
                             hint="resolve them in work/ and run 'gqueue refresh' again")
        _remove_written(ws, state)  # only once the patch is settled: until then they guide the fix
        require_clean(ws, "continue the rebase")
        tally.by_hand.append(stopped)
        if state.get("variants"):
            original = _originals(ws).get(f"queue/{stopped}")
            if original is not None:
                before = parse_patch(original, name=stopped, path=f"queue/{stopped}")
                strip = ws.store.read_series().entries[ws.store.read_series().index(stopped)].strip
                _write_patches(ws, _keep_old_diff(ws, state, before, ws.store.read_patch(stopped), strip, tally))
        head = stack.head
    state["done"].append(stopped)
    state["stopped"] = None
    state["tally"] = tally.to_json()
    _save(ws, state)
    return _proceed(ws, state, head=head)


def _restart(ws: Workspace, state: dict[str, Any]) -> RebaseResult:
    """Go on with a rebase that was killed while it ran (not stopped at a patch).

    What it had finished is what the stack holds on the new base: those patches are done (their
    files were written before the stack moved onto them). A partial commit on top (a stop that was
    being left for a hand) is taken off again, and every patch not done gets its file back as it
    was before the rebase, so that the loop runs it again from the same text."""
    ws.require_work()
    if not (ws.state_dir / OVERRIDE).is_file():  # killed before the new pin was named
        atomic_write(ws.state_dir / OVERRIDE, state["pin_line"].encode())
    head = ws.repo.head()
    done = list(state["done"])
    on_new = head is not None and ws.repo.is_ancestor(state["new_base"], head)
    if on_new:
        stack = ws.stack()
        if stack.top is not None and stack.top.diff_digest is None:  # a stop left half-way
            save_local_changes(ws, "rebase-restart")
            _remove_written(ws, state)
            ws.needs_refresh_path.unlink(missing_ok=True)
            below = stack.commit_below(len(stack.applied) - 1)
            move(ws, stack.head, below, op="rebase", files=Files.RESET)
            stack = ws.stack()
        landed = [n for n in stack.names if n not in done]
        done += landed
        start_at = stack.head
    else:
        landed, start_at = [], state["new_base"]
    originals = _originals(ws)
    listed = set(ws.store.read_series().names)
    tally = _tally(state)
    tally.moved.extend(landed)  # on the new base when it was killed (moved or merged: not recorded)
    for name in state["todo"]:
        if name in done:
            continue
        if name not in listed:  # retired: its file was written before the series line went
            tally.retired.append(name)
            done.append(name)
            continue
        saved = originals.get(f"queue/{name}")
        path = ws.store.patch_path(name)
        if saved is not None and (not path.is_file() or path.read_bytes() != saved):
            atomic_write(path, saved)
    state["done"] = done
    state["tally"] = tally.to_json()
    _save(ws, state)
    ws.reporter.note(f"going on with the interrupted rebase to {state['to']} ({len(done)} patch(es) done)")
    return _proceed(ws, state, head=start_at)


def _require_readable(ws: Workspace, names: list[str]) -> None:
    """Parse the patches still to move before any state changes: a malformed one is reported
    while the stack is as it was (a start not begun, a stop still stopped)."""
    entries = {e.name: e for e in ws.store.read_series().entries}
    touched_paths([(entries[n], read_patch_quick(ws, entries[n])) for n in names if n in entries])


def _save_originals(ws: Workspace, names: list[str]) -> None:
    """What --abort puts back, in one file: series, vendor-pin.txt and every patch of the series."""
    files = {"series": ws.store.series_path, "vendor-pin.txt": ws.store.pin_path}
    files.update({f"queue/{n}": ws.store.patch_path(n) for n in names if ws.store.patch_path(n).is_file()})
    doc = {rel: base64.b64encode(path.read_bytes()).decode() for rel, path in files.items()}
    atomic_write(_state_dir(ws) / "originals.json", json.dumps(doc).encode())


def _originals(ws: Workspace) -> dict[str, bytes]:
    doc = json.loads((_state_dir(ws) / "originals.json").read_text())
    return {rel: base64.b64decode(data) for rel, data in doc.items()}


def abort(ws: Workspace) -> RebaseResult:
    state = _load(ws)
    _remove_written(ws, state)
    save_local_changes(ws, "rebase-abort")  # a resolution begun in work/
    originals = _originals(ws)
    _copy_replaced(ws, originals)
    for rel in state.get("new_files", []):  # variants the rebase wrote: made from the originals it puts back
        (ws.store.root / rel).unlink(missing_ok=True)
    with ws.journaled(StackMove("rebase-abort", ws.repo.head(), state["old_head"])):
        ws.repo.checkout_fresh(state["old_head"])
        ws.repo.update_ref(BRANCH, state["old_head"])
    # each file as atomic_write puts it, their syncs together (a rebase of 300 patches rewrote
    # most of their files: synced one after the other, the put-back took seconds)
    atomic_write_many((ws.store.root / rel, data) for rel, data in originals.items()
                      if not (ws.store.root / rel).is_file() or (ws.store.root / rel).read_bytes() != data)
    ws.needs_refresh_path.unlink(missing_ok=True)
    _finish_state(ws)
    return RebaseResult(state["from"], state["to"], _tally(state), aborted=True)


def _copy_replaced(ws: Workspace, originals: dict[str, bytes]) -> None:
    """Copy the queue's files that --abort is about to put back (the rebase's rewrites, and any
    edit made by hand while it was stopped) under .gqueue/saved/ first."""
    current = {rel: (ws.store.root / rel).read_bytes() for rel in originals if (ws.store.root / rel).is_file()}
    replaced = {rel: data for rel, data in current.items() if data != originals[rel]}
    if not replaced:
        return
    folder = ws.state_dir / "saved" / f"{time.strftime('%Y%m%d-%H%M%S')}-rebase-abort"
    atomic_write_many((folder / rel, data) for rel, data in replaced.items())  # synced, before any is put back
    ws.reporter.note(f"the files --abort puts back were copied, as they were, to {ws.store.rel(folder)}/")


def _finish_state(ws: Workspace) -> None:
    """Drop the rebase's state: the pin override, then the in-progress mark, then the rest.

    In that order a kill part-way leaves either a rebase that ``--abort`` (or ``--continue``)
    still finds whole, originals included, or none at all: ``rmtree`` alone removes files in
    directory order and could leave ``state.json`` without the ``originals.json`` it needs.
    """
    (ws.state_dir / OVERRIDE).unlink(missing_ok=True)
    fault_point("write")
    _state_file(ws).unlink(missing_ok=True)
    fault_point("write")
    shutil.rmtree(_state_dir(ws), ignore_errors=True)


def _remove_written(ws: Workspace, state: dict[str, Any]) -> None:
    for rel in state.get("written", []):
        (ws.repo.path / rel).unlink(missing_ok=True)
    state["written"] = []


# --- the loop ---------------------------------------------------------------------------------


def _proceed(ws: Workspace, state: dict[str, Any], *, head: str) -> RebaseResult:
    """Re-apply the patches still to do on top of ``head`` (a commit on the new pin)."""
    tally = _tally(state)
    series = ws.store.read_series()
    entries = {e.name: e for e in series.entries}
    originals = _originals(ws)
    todo = [n for n in state["todo"] if n not in state["done"] and n in entries]
    patches = [(entries[n], read_patch_quick(ws, entries[n])) for n in todo]
    run = SeriesRun(ws.repo, state["old_base"], head, accept=d.DEFAULT_ACCEPT, drift=False, land_fuzz=False)
    run.prefetch(touched_paths(patches))
    for name in state["done"]:  # the old side must have every earlier patch, as it was
        saved = originals.get(f"queue/{name}")
        if saved is not None:
            earlier = parse_patch(saved, name=name, path=f"queue/{name}")
            strip = entries[name].strip if name in entries else 1
            run.advance_old(earlier, strip)
            if name in tally.skipped:  # not on the new pin: what requires it is blocked
                run.mark_failed(earlier, strip)
    specs: list[CommitSpec] = []
    landed: list[tuple[int, PatchFile]] = []  # (index in specs, patch)
    strips: list[int] = []
    stop: tuple[PatchFile, PatchRun, int] | None = None
    old_version, keep = state.get("old_version"), bool(state.get("variants"))
    for entry, patch in patches:
        name = entry.name
        ws.reporter.progress(f"rebasing {name}")
        if old_version is not None and not ws.store.resolve(name, old_version, line=entry.line)[0].carried:
            # not carried on the old pin (its empty commit there): nothing to move, it stays as it is
            reason = ws.store.resolve(name, state["new_version"], line=entry.line)[0].reason or "not carried"
            specs.append(_empty_commit(patch, state, reason))
            tally.not_carried.append(name)
            state["done"].append(name)
            continue
        outcome = run.run(patch, entry.strip)
        status = outcome.report.status
        if status == d.UPSTREAM or (outcome.landed and outcome.report.hunks and not outcome.changes):
            # all upstream, at the file's new place too when it was renamed
            if keep:  # still carried on the old pin: it stays in the series, retired on the new one
                kept = _retired_kept(patch, state, Retirement())
                ws.store.write_patch(kept)
                specs.append(_empty_commit(kept, state, retired_text(kept.meta.get("retired"))))
            else:
                _retire(ws, patch, state["to"])
            tally.retired.append(name)
        elif outcome.landed and (outcome.changes or not outcome.report.hunks):  # an empty patch moves as is
            landed.append((len(specs), patch))
            specs.append(CommitSpec(commit_message(patch), outcome.changes, commit_author(patch)))
            strips.append(entry.strip)
            if status in (d.CLEAN, d.OFFSET):
                tally.moved.append(name)
            else:
                tally.merged.append(name)
        else:
            stop = (patch, outcome, entry.strip)
            specs.append(CommitSpec(commit_message(patch, whole=False), outcome.changes, commit_author(patch)))
            break
        state["done"].append(name)
    target = head
    if specs:
        commits = ws.repo.write_commits(head, specs, PENDING)
        parents = [head, *commits[:-1]]
        pairs = [(parents[i], commits[i]) for i, _p in landed]
        bodies = ws.repo.diff_pairs(pairs)
        for strip in set(strips) - {1}:  # -pN entries other than -p1: names with N leading components
            which = [i for i, s in enumerate(strips) if s == strip]
            for i, body in zip(which, ws.repo.diff_pairs([pairs[i] for i in which], strip=strip)):
                bodies[i] = body
        if keep:
            writes = [w for (_i, p), b, strip in zip(landed, bodies, strips)
                      for w in _keep_old_diff(ws, state, p, with_body(p, b), strip, tally)]
        else:
            writes = [with_body(p, b) for (_i, p), b in zip(landed, bodies) if b != p.body]
        _write_patches(ws, writes)
        target = commits[-1]
    current = ws.repo.head()
    if current != target:
        move(ws, current or target, target, op="rebase")
    if specs:
        ws.repo.delete_ref(PENDING)
    state["tally"] = tally.to_json()
    if stop is not None:
        patch, outcome, strip = stop
        files = _leave_conflicts(ws, state, patch, outcome, strip)
        atomic_write(ws.needs_refresh_path, (patch.name + "\n").encode())
        state["stopped"] = patch.name
        _save(ws, state)
        return RebaseResult(state["from"], state["to"], tally, patch.name, outcome.report, files)
    _complete(ws, state)
    return RebaseResult(state["from"], state["to"], tally, done=True)


def _write_patches(ws: Workspace, patches: list[PatchFile]) -> None:
    """Write refreshed patches, each through a temporary file and a rename.

    Unlike atomic_write there is no fsync per file: the originals are kept (synced) for
    --abort, and 300 fsyncs would cost more than the whole rest of a rebase.
    """
    staged = []
    for patch in patches:
        target = ws.store.patch_path(patch.stored_as)
        target.parent.mkdir(parents=True, exist_ok=True)  # a variant's folder
        tmp = target.with_name(f".{target.name}.rebase.tmp")
        tmp.write_bytes(format_patch(patch))
        staged.append((tmp, target))
    for tmp, target in staged:
        os.replace(tmp, target)


def _complete(ws: Workspace, state: dict[str, Any]) -> None:
    pins = ws.store.read_pins()
    new_main = parse_pins(state["pin_line"]).main
    lines = list(pins.lines)
    for pin in pins.pins:
        if pin.label == "pin":
            lines[pin.line - 1] = state["pin_line"] + state.get("keep_line", "")
        elif (pin.project, pin.version, pin.url) == (new_main.project, new_main.version, new_main.url):
            lines[pin.line - 1] = ""
    atomic_write(ws.store.pin_path, "".join(lines).encode())
    parse_pins(ws.store.pin_path.read_text(), path="vendor-pin.txt")
    _finish_state(ws)


def _series_comment(ws: Workspace, name: str, comment: str) -> None:
    """Comment out ``name``'s entry; what followed the name (-pN, guards, comment) stays on the line."""
    series = ws.store.read_series()
    entry = series.entries[series.index(name)]
    lines = list(series.lines)
    rest = lines[entry.line - 1].rstrip("\r\n").strip()[len(name) :].strip()
    lines[entry.line - 1] = (f"{comment}  {rest}" if rest else comment) + "\n"
    ws.store.write_series(parse_series("".join(lines), path="series"))


def _retire(ws: Workspace, patch: PatchFile, pin: str, why: Retirement | None = None,
            release: str | None = None) -> None:
    """A patch fully upstream leaves the series; its header says where it landed (and, given
    ``why``, in a ``retired`` field, why: the reason, the upstream change, the test)."""
    fields: dict[str, Any] = {"lifecycle": "merged_upstream", "merged_upstream_in": pin}
    if why is not None and release is not None:
        fields["retired"] = retired_field(release, why.reason, why.by, why.test)
        fields["applies_to"] = with_vllm_range(patch.meta.get("applies_to"), bounded_below(patch.meta.vllm_spec, release))
    ws.store.write_patch(with_fields(patch, fields))
    _series_comment(ws, patch.name, f"# merged upstream in {pin}: {patch.name}")


# --- --keep-old: a queue carried on both pins ---------------------------------------------------------


def _empty_commit(patch: PatchFile, state: dict[str, Any], reason: str) -> CommitSpec:
    """The commit that keeps the place of a patch not carried on the new pin (as push makes it)."""
    found = Resolution(patch.name, state["new_version"], None, reason, patch.meta.id)
    return CommitSpec(not_carried_message(found, state["to"]), {}, DEFAULT_AUTHOR)


def _retired_kept(patch: PatchFile, state: dict[str, Any], why: Retirement) -> PatchFile:
    """The patch retired on the new release and kept for the old one: its old diff, its range
    cut off below the new release, and a ``retired`` field saying why."""
    release = state["new_version"]
    return with_fields(patch, {
        "applies_to": with_vllm_range(patch.meta.get("applies_to"), bounded_below(patch.meta.vllm_spec, release)),
        "retired": retired_field(release, why.reason, why.by, why.test),
    })


def _retire_kept(ws: Workspace, state: dict[str, Any], patch: PatchFile, why: Retirement, below: str) -> str:
    """--retire with --keep-old: the patch file as ``_retired_kept`` makes it, and its empty
    commit on ``below`` (the stack keeps one commit per series entry); the new head."""
    kept = _retired_kept(patch, state, why)
    ws.store.write_patch(kept)
    commit = ws.repo.write_commits(below, [_empty_commit(kept, state, retired_text(kept.meta.get("retired")))],
                                   PENDING)[-1]
    move(ws, below, commit, op="rebase")
    ws.repo.delete_ref(PENDING)
    return commit


def _skip_kept(ws: Workspace, state: dict[str, Any], patch: PatchFile, below: str) -> str:
    """--skip with --keep-old: the patch stays in the series for the old pin, its range cut off
    below the new release (not carried there until a diff for it is made: 'gqueue variant'),
    and an empty commit keeps its place on ``below``; the new head."""
    release = state["new_version"]
    spec = bounded_below(patch.meta.vllm_spec, release)
    kept = with_fields(patch, {"applies_to": with_vllm_range(patch.meta.get("applies_to"), spec)})
    ws.store.write_patch(kept)
    reason = f"applies_to '{spec}' excludes {release} (skipped in the rebase: no diff for it yet)"
    commit = ws.repo.write_commits(below, [_empty_commit(kept, state, reason)], PENDING)[-1]
    move(ws, below, commit, op="rebase")
    ws.repo.delete_ref(PENDING)
    return commit


def _keep_old_diff(ws: Workspace, state: dict[str, Any], old: PatchFile, new: PatchFile, strip: int,
                   tally: d.Tally) -> list[PatchFile]:
    """The files to write for a patch carried to the new release while the old one stays gated.

    The same change (only line numbers and preimage ids differ): one file, its range widened to
    admit both releases. A changed diff: the new one in queue/NAME for the new release on, the old
    file, as it was, kept as queue/variants/<old release>/NAME with its range cut off below the
    new release."""
    old_release, release = state["old_version"], state["new_version"]
    spec = old.meta.vllm_spec
    if same_change(old.body, new.body, strip):
        wider = widened(spec, old_release, release)
        if wider is None:
            return [new] if new.body != old.body else []
        return [with_fields(new, {"applies_to": with_vllm_range(old.meta.get("applies_to"), wider)})]
    main = with_fields(new, {"applies_to": with_vllm_range(old.meta.get("applies_to"), from_release(release))})
    kept = with_fields(old, {"applies_to": with_vllm_range(old.meta.get("applies_to"), bounded_below(spec, release))})
    rel = variant_file(old_release, old.name)
    if not ws.store.patch_path(rel).exists():
        state.setdefault("new_files", []).append(f"queue/{rel}")
        _save(ws, state)
    tally.variants.append(old.name)
    return [main, replace(kept, file=rel)]


def _park(ws: Workspace, name: str, pin: str) -> None:
    _series_comment(ws, name, f"# parked: {name}")


def _leave_conflicts(ws: Workspace, state: dict[str, Any], patch: PatchFile, outcome: PatchRun,
                     strip: int = 1) -> list[str]:
    """Conflict markers (three-way) or .rej files in work/ for what did not land.

    A renamed file's hunks are left at its new place, by the merge the engine prepared."""
    files: list[str] = []
    merged_paths = set()
    for merge in outcome.merges:
        merged_paths.add(merge.path)
        target = ws.repo.path / merge.path
        if merge.base is not None and merge.theirs is not None:
            text, _n = ws.repo.merge_file(merge.ours, merge.base, merge.theirs,
                                          labels=(state["to"], state["from"], patch.name))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(text)
            files.append(merge.path)
        else:
            files.append(_write_rej(ws, state, merge.path, list(merge.failed)))
    failing = [h for h in outcome.report.hunks if h.status not in d.LANDED and h.renamed_to is None]
    failed_files = {h.file for h in failing}
    for fd in file_diffs(patch, strip):
        if fd.path in failed_files and fd.path not in merged_paths:
            bad = {h.hunk for h in failing if h.file == fd.path}
            files.append(_write_rej(ws, state, fd.path, [h for i, h in enumerate(fd.hunks) if i + 1 in bad]))
    _save(ws, state)
    return files


def _write_rej(ws: Workspace, state: dict[str, Any], path: str, hunks: list[Any]) -> str:
    text = [f"--- a/{path}\n+++ b/{path}\n".encode()]
    for h in hunks:
        text.append(f"@@ -{h.old_start},{h.old_len} +{h.new_start},{h.new_len} @@\n".encode())
        text.extend(tag + line for tag, line in h.lines)
    rel = path + ".rej"
    target = ws.repo.path / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"".join(text))
    state.setdefault("written", []).append(rel)
    return rel
