"""Human-readable renderings of operation results."""

from __future__ import annotations

from ..errors import one_line
from ..model.status import EXACT, Status
from ..ops.engine import PatchResult
from ..ops.stackops import NotCarried, PushResult


def hunk_summary(result: PatchResult) -> str:
    parts = []
    for f in result.files:
        if not f.hunks:
            parts.append(f"{f.path} [{f.status}]")
            continue
        marks = []
        for h in f.hunks:
            if h.status == Status.CLEAN:
                marks.append("ok")
            elif h.status == Status.OFFSET:
                marks.append(f"{h.offset:+d}")
            else:
                marks.append(h.status.upper())
        parts.append(f"{f.path} ({', '.join(marks)})")
    return "; ".join(parts)


def failing_hunks(result: PatchResult) -> list[str]:
    """Every hunk (or whole file) of ``result`` that did not apply, one 'file: where' each."""
    out = []
    for f in result.files:
        if f.status in EXACT:
            continue
        bad = [h for h in f.hunks if h.status not in EXACT]
        if not bad:
            out.append(f"{f.path} [{f.status}]")
        for h in bad:
            what = f"needs fuzz {h.fuzz}" if h.status == Status.FUZZ else h.status
            out.append(f"{f.path}: hunk #{h.index + 1} of {len(f.hunks)}, expected near line {h.line} [{what}]")
    return out


def ways_forward(result: PatchResult, *, forced: bool) -> list[str]:
    """What the user can do next after ``result`` failed to push (or was pushed with --force)."""
    name = result.name
    if forced:
        return ["  next: the hunks that failed are in work/ as FILE.rej; make those changes in work/,",
                "        then 'gqueue refresh' (or 'gqueue pop -f' to drop the partial push)"]
    lines = ["  ways forward:",
             "    gqueue push -f           apply what applies, leave .rej files in work/; edit, then 'gqueue refresh'",
             f"    edit queue/{name}   fix the hunks by hand, then push again"]
    if any(h.status == Status.FUZZ for f in result.files for h in f.hunks):
        lines.append("    gqueue push --fuzz N     accept hunks that need up to N lines of fuzz")
    lines.append("    gqueue check --pin SPEC  the drift of every hunk against a pin (what changed upstream)")
    return lines


def push_report(result: PushResult, *, advice: bool = True) -> str:
    if not result.pushed and result.failed is None and not result.not_carried:
        return "nothing to push: the whole series is applied" + (f" (top {result.top})" if result.top else "")
    lines = []
    skipped = list(result.not_carried)
    for i, r in enumerate(result.pushed):
        while skipped and skipped[0].after <= i:
            lines.append(_not_carried_line(skipped.pop(0)))
        hunks = sum(len(f.hunks) for f in r.files)
        offset = sum(1 for f in r.files for h in f.hunks if h.status == Status.OFFSET)
        tag = "applied" if not offset else f"applied ({offset} hunk(s) at an offset)"
        lines.append(f"{tag:<34} {r.name}  [{len(r.files)} file(s), {hunks} hunk(s)]")
        if offset:
            lines.append(f"    {hunk_summary(r)}")
    lines += [_not_carried_line(n) for n in skipped]
    if result.failed is not None:
        verb = "FORCED (rejects left)" if result.forced else "FAILED"
        failing = failing_hunks(result.failed)
        lines.append(f"{verb:<34} {result.failed.name}" + (f": {len(failing)} hunk(s) do not apply" if failing else ""))
        lines += [f"    {where}" for where in failing]
        lines += ways_forward(result.failed, forced=result.forced) if advice else []
    for name in result.refreshed:
        lines.append(f"{'refreshed':<34} {name}  (rewritten to where its hunks landed)")
    if result.top:
        lines.append(f"now at {result.top}")
    return "\n".join(lines)


def _not_carried_line(skipped: NotCarried) -> str:
    return f"{'n/a (not carried on this pin)':<34} {skipped.name}  ({one_line(skipped.reason)})"
