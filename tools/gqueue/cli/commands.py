"""The commands. Each one parses options, calls one operation and renders its result.

Modules that push, pop and refresh do not need (queueops, recovery, reorder, plan, queries) are
imported inside the commands that use them, so those start without them; the commands that
only show the queue and the stack are in cmd_show.py.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import click

from ..errors import ExitCode, FormatError, GqueueError, UsageError
from ..ops import naming, stackops
from ..ops.workspace import Workspace
from . import options
from .boundary import Context, boundary
from .completion import PATCH
from .render import push_report

Result = tuple[Any, str, int]


@click.command()
@click.option("--pin", "pin_spec", required=True, help="vllm==X.Y.Z or an archive URL with #sha256=...")
@click.option("--no-record", is_flag=True, help="Do not ask the index for the sdist's sha256.")
@boundary("init", needs_queue=False)
def init(ctx: Context, pin_spec: str, no_record: bool) -> Result:
    """Start a queue in the current (or -C) directory."""
    from ..ops import queueops

    result = queueops.init(ctx.directory, pin_spec, record=not no_record)
    return result.to_json(), f"initialised a queue on {result.pin} in {result.root}", ExitCode.OK


@click.command()
@boundary("checkout")
def checkout(ws: Workspace) -> Result:
    """Fetch the pinned sdist (verified, cached) and make the work tree at work/."""
    from ..ops import checkout as checkout_op  # the download stack loads only here

    result = checkout_op.checkout(ws)
    verb = "created" if result.created else "already there"
    return result.to_json(), f"work/ on {result.pin}: {result.files} files, base {result.base[:12]} ({verb}, {result.seconds:.1f}s)", ExitCode.OK


def _count(all_: bool, count: int | None) -> int | None:
    return None if all_ else (count or 1)


def _target(ws: Workspace, target: str | None, all_: bool, count: int | None) -> tuple[str | None, int | None]:
    """push's and pop's TARGET resolved (a name, an id, a unique prefix), or, as in quilt, a
    number of patches; returns (target, count)."""
    if target is None:
        return None, _count(all_, count)
    resolved = naming.push_target(ws.store, target)
    if not isinstance(resolved, int):
        return resolved, None
    if all_ or count is not None:
        raise UsageError(f"'{target}' and {'--all' if all_ else '-n'} both say how many; give one")
    return None, resolved


def _name(ws: Workspace, query: str, *, stored: bool = False) -> str:
    """A patch named on the command line: file name, name without .patch, id or unique prefix."""
    return naming.patch_name(ws.store, query, stored=stored)


@click.command()
@click.argument("target", required=False, type=PATCH)
@options.all_("Push the whole series.")
@options.count("Push this many patches.")
@options.force("Apply what applies; leave .rej files; a refresh is then required.")
@click.option("--fuzz", type=click.IntRange(0, 3), default=0, help="Accept hunks that need up to N lines of fuzz.")
@click.option("--refresh", "refresh_moved", is_flag=True,
              help="Rewrite each patch whose hunks landed at an offset (or with fuzz) to where they landed.")
@options.profile("Push only the patches this profile selects (see 'gqueue plan').")
@options.policy()
@boundary("push")
def push(ws: Workspace, target: str | None, all_: bool, count: int | None, force: bool, fuzz: int,
         refresh_moved: bool, profile: str | None, policy: str | None) -> Result:
    """Apply the next patch(es) of the series, one commit each."""
    selected = None
    if profile or policy:
        from ..ops import plan

        selected = plan.filtered_series(ws.store, profile, policy)
    target, how_many = _target(ws, target, all_, count)
    if refresh_moved:
        if force:
            raise UsageError("--refresh and --force do not go together (a forced push leaves rejects to resolve)")
        result = stackops.push_refreshing(ws, count=how_many, target=target, fuzz=fuzz, series=selected)
    else:
        result = stackops.push(ws, count=how_many, target=target, force=force, fuzz=fuzz, series=selected)
    code = ExitCode.CONFLICT if result.failed is not None else ExitCode.OK
    return result.to_json(), push_report(result), code


@click.command()
@click.argument("target", required=False, type=PATCH)
@options.all_("Pop every applied patch.")
@options.count("Pop this many patches.")
@options.force("Discard unrefreshed changes (saved under .gqueue/saved/ first).")
@boundary("pop")
def pop(ws: Workspace, target: str | None, all_: bool, count: int | None, force: bool) -> Result:
    """Unapply patches; with TARGET, pop until TARGET is the top."""
    target, how_many = _target(ws, target, all_, count)
    result = stackops.pop(ws, count=how_many, target=target, force=force)
    if not result.popped:
        return result.to_json(), "nothing to pop: no patch is applied", ExitCode.OK
    text = f"popped {len(result.popped)} patch(es); " + (f"now at {result.top}" if result.top else "no patch applied")
    return result.to_json(), text, ExitCode.OK


@click.command()
@click.argument("name", type=PATCH)
@options.force()
@boundary("goto")
def goto(ws: Workspace, name: str, force: bool) -> Result:
    """Push or pop until NAME is the top patch."""
    name = _name(ws, name)
    result = stackops.goto(ws, name, force=force)
    if isinstance(result, stackops.PushResult):
        return result.to_json(), push_report(result), ExitCode.CONFLICT if result.failed else ExitCode.OK
    return result.to_json(), f"now at {name}", ExitCode.OK  # type: ignore[attr-defined]


@click.command()
@options.force("Overwrite a patch file edited by hand since it was pushed.")
@boundary("refresh")
def refresh(ws: Workspace, force: bool) -> Result:
    """Write the work tree's changes into the top patch (its header is kept)."""
    result = stackops.refresh(ws, force=force)
    text = f"refreshed {result.name} ({len(result.files)} file(s))" if result.changed else f"{result.name} unchanged"
    if result.moved:
        shown = ", ".join(result.moved[:5]) + (f" and {len(result.moved) - 5} more" if len(result.moved) > 5 else "")
        text += (f"\n{len(result.moved)} patch(es) above it now land elsewhere in its files ({shown}): "
                 "'gqueue push --all --refresh' rewrites those that land at an offset")
    return result.to_json(), text, ExitCode.OK


@click.command()
@click.argument("name")
@click.option("--id", "patch_id", help="The patch id (default: the name up to its first '-').")
@click.option("--title", help="The title (default: from the name).")
@boundary("new")
def new(ws: Workspace, name: str, patch_id: str | None, title: str | None) -> Result:
    """Start an empty patch right after the current top and make it the top."""
    from ..ops import queueops

    result = queueops.new(ws, name, patch_id=patch_id, title=title)
    return result.to_json(), f"created {name} ({result.detail}); edit work/ and run 'gqueue refresh'", ExitCode.OK


@click.command()
@click.argument("name", required=False, type=PATCH)
@click.option("--edit", is_flag=True, help="Edit the header in $EDITOR (the diff is untouched).")
@boundary("header")
def header(ws: Workspace, name: str | None, edit: bool) -> Result:
    """Show (or --edit) a patch's YAML header."""
    from ..ops import queries, queueops

    name = queries.named_or_top(ws, name)
    patch = queries.on_pin(ws, name)
    text = queueops.header_text(patch)
    if edit:
        edited = _edit_text(text, ws)
        if edited != text:
            try:
                patch = queueops.replace_header(ws.store, patch, edited)
            except GqueueError as exc:  # nothing the user wrote is lost
                kept = f"your edit is kept in {ws.store.rel(_saved_edit(ws))}"
                exc.hint = f"{exc.hint}; {kept}" if exc.hint else kept
                raise
            text = queueops.header_text(patch)
    return {"name": name, "file": f"queue/{patch.stored_as}", "header": patch.meta.raw}, text.rstrip("\n"), ExitCode.OK


def _saved_edit(ws: Workspace) -> Path:
    """Where header --edit keeps what the editor left (a refused edit is not lost)."""
    return ws.state_dir / "saved" / "last-header-edit.yaml"


def _edit_text(text: str, ws: Workspace) -> str:
    editor = os.environ.get("GQUEUE_EDITOR") or os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False, encoding="utf-8") as handle:
        handle.write(text)
        path = Path(handle.name)
    try:
        if subprocess.call(f'{editor} "{path}"', shell=True) != 0:
            raise UsageError("the editor failed; the header is unchanged")
        raw = path.read_bytes()
        try:
            edited = raw.decode("utf-8").replace("\r\n", "\n")
        except UnicodeDecodeError as exc:
            raise FormatError("the edited header is not valid UTF-8; the header is unchanged",
                              path=".gqueue/saved/last-header-edit.yaml", line=raw[: exc.start].count(b"\n") + 1) from None
    finally:
        saved = _saved_edit(ws)
        saved.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            saved.write_bytes(path.read_bytes())
            path.unlink()
    return edited


@click.command()
@click.argument("name", type=PATCH)
@click.option("--keep", is_flag=True, help="Keep the file in queue/ (only the series entry goes).")
@boundary("delete")
def delete(ws: Workspace, name: str, keep: bool) -> Result:
    """Remove a patch from the series (the file goes to .gqueue/deleted/ unless --keep)."""
    from ..ops import queueops

    name = _name(ws, name)
    result = queueops.delete(ws, name, keep_file=keep)
    return result.to_json(), f"{name}: {result.detail}", ExitCode.OK


@click.command()
@click.argument("old", type=PATCH)
@click.argument("new_name", metavar="NEW")
@boundary("rename")
def rename(ws: Workspace, old: str, new_name: str) -> Result:
    """Rename a patch (file, series entry and, if applied, its commit)."""
    from ..ops import queueops

    old = _name(ws, old)
    result = queueops.rename(ws, old, new_name)
    return result.to_json(), f"renamed {old} to {new_name}", ExitCode.OK


@click.command()
@click.argument("name", type=PATCH)
@click.option("--before", "before", metavar="OTHER", type=PATCH, help="Put NAME right above OTHER in the series.")
@click.option("--after", "after", metavar="OTHER", type=PATCH, help="Put NAME right below OTHER.")
@click.option("--first", is_flag=True, help="Put NAME first in the series.")
@click.option("--last", is_flag=True, help="Put NAME last in the series.")
@boundary("move")
def move(ws: Workspace, name: str, before: str | None, after: str | None, first: bool, last: bool) -> Result:
    """Move NAME to another place in the series; applied patches are re-applied in the new order.

    A patch moved below an applied one is applied, one moved above an unapplied one is not; the
    others keep their state. Whether every patch to re-apply applies in the new order is
    checked before anything changes (a conflict exits 3 and changes nothing)."""
    from ..ops import reorder

    if sum((before is not None, after is not None, first, last)) != 1:
        raise UsageError("say where: one of --before OTHER, --after OTHER, --first, --last")
    name = _name(ws, name)
    before = _name(ws, before) if before is not None else None
    after = _name(ws, after) if after is not None else None
    result = reorder.move_patch(ws, name, before=before, after=after, first=first, last=last)
    if not result.changed:
        return result.to_json(), f"{name} is already there", ExitCode.OK
    lines = [f"moved {name}: now entry #{result.order.index(name) + 1} of {len(result.order)}"]
    if result.popped or result.pushed:
        lines.append(f"re-applied: popped {len(result.popped)}, pushed {len(result.pushed)}"
                     + (f"; now at {result.pushed[-1]}" if result.pushed else ""))
    return result.to_json(), "\n".join(lines), ExitCode.OK


@click.command()
@click.argument("name", type=PATCH)
@boundary("fold")
def fold(ws: Workspace, name: str) -> Result:
    """Fold the unapplied patch NAME into the top patch."""
    from ..ops import queueops

    name = _name(ws, name)
    result = queueops.fold(ws, name)
    return result.to_json(), f"folded {name} {result.detail}", ExitCode.OK


@click.command()
@boundary("repair")
def repair(ws: Workspace) -> Result:
    """Bring the stack back to a consistent state and say what was done."""
    from ..ops import recovery

    result = recovery.repair(ws)
    return result.to_json(), "\n".join(result.actions), ExitCode.OK
