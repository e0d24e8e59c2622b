"""Human-readable renderings of operation results."""

from __future__ import annotations

from ..ops.engine import PatchResult
from ..ops.stackops import PushResult


def hunk_summary(result: PatchResult) -> str:
    parts = []
    for f in result.files:
        if not f.hunks:
            parts.append(f"{f.path} [{f.status}]")
            continue
        marks = []
        for h in f.hunks:
            if h.status == "clean":
                marks.append("ok")
            elif h.status == "offset":
                marks.append(f"{h.offset:+d}")
            else:
                marks.append(h.status.upper())
        parts.append(f"{f.path} ({', '.join(marks)})")
    return "; ".join(parts)


def push_report(result: PushResult) -> str:
    lines = []
    for r in result.pushed:
        hunks = sum(len(f.hunks) for f in r.files)
        offset = sum(1 for f in r.files for h in f.hunks if h.status == "offset")
        tag = "applied" if not offset else f"applied ({offset} hunk(s) at an offset)"
        lines.append(f"{tag:<34} {r.name}  [{len(r.files)} file(s), {hunks} hunk(s)]")
        if offset:
            lines.append(f"    {hunk_summary(r)}")
    if result.failed is not None:
        text = result.failed.failure_text()
        where = f": {text}" if text else ""
        verb = "FORCED (rejects left)" if result.forced else "FAILED"
        lines.append(f"{verb:<34} {result.failed.name}{where}")
    for name in result.refreshed:
        lines.append(f"{'refreshed':<34} {name}  (rewritten to where its hunks landed)")
    if result.top:
        lines.append(f"now at {result.top}")
    return "\n".join(lines)
