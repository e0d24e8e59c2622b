"""undo and redo: the queue and the stack as they were before (after) the last recorded command."""

from __future__ import annotations

import click

from ..errors import ExitCode
from ..ops import undo as undo_op
from ..ops.workspace import Workspace
from . import options
from .boundary import boundary


def _text(result: undo_op.UndoResult) -> str:
    verb = "undid" if result.action == "undo" else "redid"
    lines = []
    for step in result.steps:
        where = f"now at {step.top_after}" if step.top_after else "no patch applied"
        moved = f" (was {step.top_before})" if step.top_before != step.top_after else ""
        files = f"; restored {', '.join(step.files)}" if step.files else ""
        lines.append(f"{verb} {step.op}: {where}{moved}{files}" + (f"\n  {step.note}" if step.note else ""))
    lines.append(f"({result.can_undo} more to undo, {result.can_redo} to redo)")
    return "\n".join(lines)


_FORCE = "Go on over unrefreshed changes, or files changed since; they are saved under .gqueue/saved/ first."


@click.command()
@options.count("Undo this many operations.", default=1)
@options.force(_FORCE)
@boundary("undo")
def undo(ws: Workspace, count: int, force: bool) -> tuple[object, str, int]:
    """Put the queue and the stack back as they were before the last recorded operation."""
    result = undo_op.undo(ws, count=count, force=force)
    return result.to_json(), _text(result), ExitCode.OK


@click.command()
@options.count("Redo this many operations.", default=1)
@options.force(_FORCE)
@boundary("redo")
def redo(ws: Workspace, count: int, force: bool) -> tuple[object, str, int]:
    """Do again what the last undo took back."""
    result = undo_op.redo(ws, count=count, force=force)
    return result.to_json(), _text(result), ExitCode.OK
