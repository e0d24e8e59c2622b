"""What the queue and the stack hold: status, pin, series, applied, unapplied, top, next, prev,
diff and files. Each asks one question of ops/queries.py and renders the answer."""

from __future__ import annotations

from typing import Any

import click

from ..errors import ExitCode
from ..ops import queries
from ..ops.queries import PinsResult, StackNames, StatusResult
from ..ops.workspace import Workspace
from .boundary import boundary
from .completion import PATCH

Result = tuple[Any, str, int]


@click.command()
@boundary("status", lock=False)
def status(ws: Workspace) -> Result:
    """Where the stack stands: pin, applied patches, unrefreshed changes."""
    result = queries.status(ws)
    return result.to_json(), status_text(result), ExitCode.OK


@click.command()
@click.option("--record", is_flag=True, help="Fill in missing sdist sha256s of vendor-pin.txt from the index.")
@click.option("--wheel", is_flag=True, help="With --record: also each index pin's binary wheel sha256 and file name.")
@boundary("pin")
def pin(ws: Workspace, record: bool, wheel: bool) -> Result:
    """Show the pins of vendor-pin.txt; --record fills in their hashes from the index."""
    if record:
        from ..ops import pins as pins_op  # the download stack loads only here

        result = pins_op.record(ws, wheel=wheel)
    else:
        result = queries.pins(ws)
    return result.to_json(), pins_text(result), ExitCode.OK


@click.command()
@boundary("top", lock=False)
def top(ws: Workspace) -> Result:
    """The top applied patch."""
    name = queries.top(ws)
    return {"top": name}, name, ExitCode.OK


@click.command(name="next")
@boundary("next", lock=False)
def next_(ws: Workspace) -> Result:
    """The patch the next push would apply."""
    name = queries.next_patch(ws)
    return {"next": name}, name, ExitCode.OK


@click.command()
@boundary("prev", lock=False)
def prev(ws: Workspace) -> Result:
    """The patch below the top."""
    name = queries.prev(ws)
    return {"prev": name}, name, ExitCode.OK


@click.command()
@click.option("-v", "verbose", is_flag=True, help="Mark applied (+) and top (=) patches.")
@boundary("series", lock=False)
def series(ws: Workspace, verbose: bool) -> Result:
    """Every patch of the series, in order."""
    result = queries.stack_names(ws)
    return result.to_json(), series_text(result, verbose=verbose), ExitCode.OK


@click.command()
@boundary("applied", lock=False)
def applied(ws: Workspace) -> Result:
    """The applied patches, bottom first."""
    names = list(queries.stack_names(ws).applied)
    return {"applied": names}, "\n".join(names), ExitCode.OK


@click.command()
@boundary("unapplied", lock=False)
def unapplied(ws: Workspace) -> Result:
    """The patches not applied yet."""
    rest = list(queries.stack_names(ws).unapplied)
    return {"unapplied": rest}, "\n".join(rest), ExitCode.OK


@click.command()
@click.argument("name", required=False, type=PATCH)
@boundary("diff", lock=False)
def diff(ws: Workspace, name: str | None) -> Result:
    """The top patch's diff including unrefreshed changes; or NAME's diff as stored."""
    result = queries.diff(ws, name)
    return result.to_json(), result.diff.rstrip("\n"), ExitCode.OK


@click.command()
@click.argument("name", required=False, type=PATCH)
@boundary("files", lock=False)
def files(ws: Workspace, name: str | None) -> Result:
    """The files a patch (default: the top) changes."""
    result = queries.files(ws, name)
    return result.to_json(), "\n".join(result.files), ExitCode.OK


def pins_text(result: PinsResult) -> str:
    """pin: a line per pin (label, source, then its commit or its sdist hash, and its wheel hash)."""
    return "\n".join(f"{p.label:<10} {p.source:<24} "
                     + (f"commit {str(p.commit)[:12]} ({p.project} {p.version})" if p.commit
                        else f"sdist {str(p.sdist_sha256)[:12]}")
                     + (f" wheel {str(p.wheel_sha256)[:12]}" if p.wheel_sha256 else "") for p in result.pins)


def series_text(names: StackNames, *, verbose: bool) -> str:
    """series: a name a line; ``verbose`` marks the applied (+) and the top (=)."""
    lines = []
    for i, name in enumerate(names.series):
        mark = ("=" if i == len(names.applied) - 1 else "+") if i < len(names.applied) else " "
        lines.append(f"{mark} {name}" if verbose else name)
    return "\n".join(lines)


def status_text(result: StatusResult) -> str:
    lines = [f"pin: {result.pin}", f"series: {result.series} patch(es)"]
    if not result.checked_out:
        lines.append("no work tree: run 'gqueue checkout'")
        return "\n".join(lines)
    if result.interrupted_rebase:
        lines.append(f"a rebase to {result.pin} was interrupted: 'gqueue rebase --continue' goes on, "
                     "'gqueue rebase --abort' undoes it")
        return "\n".join(lines)
    lines.append(f"applied: {result.applied}" + (f", top {result.top}" if result.top else ""))
    if result.dirty:
        lines.append(f"unrefreshed changes: {len(result.dirty)} file(s)")
    if result.forced_push is not None:
        forced = result.forced_push
        lines.append(f"{forced.patch} was pushed with --force and needs a refresh; its failed hunks are in "
                     f"{len(forced.rejects)} .rej file(s):")
        lines += [f"  work/{path}" for path in forced.rejects]
        lines.append("make those changes in work/, then 'gqueue refresh' (it removes the .rej files); "
                     "or 'gqueue pop -f' to drop the partial push")
    if result.pending:
        lines.append("an interrupted operation is pending: the next command finishes it, or run 'gqueue repair'")
    if result.rebasing:
        lines.append(f"a rebase to {result.pin} is in progress: 'gqueue rebase --continue | --skip | --retire | --abort'")
    return "\n".join(lines)
