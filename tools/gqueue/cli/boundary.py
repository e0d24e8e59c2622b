"""The error boundary every command goes through: --json, the workspace and its lock, the
undo log, and the one place errors become messages and exit codes.

The command modules (commands.py, cmd_*.py) build on this one; main.py, the group, on them.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any, Callable

import click

from ..errors import ExitCode, FilesystemError, GqueueError
from ..ops.workspace import Workspace
from ..store import Store
from .output import CliReporter, emit_json, err_echo, out_echo

# the commands the undo log records (ops/undo.py; kept here so others start without importing it)
UNDOABLE = frozenset({"push", "pop", "goto", "refresh", "new", "delete", "rename", "move", "fold",
                      "header", "import", "variant"})


# the commands that write queue files (series, queue/, vendor-pin.txt) as one step of several;
# every locked command but pin, header and build may move the stack or write in work/
QUEUE_WRITERS = frozenset({"refresh", "new", "delete", "rename", "move", "fold", "import", "rebase", "undo", "redo",
                           "variant"})
WORK_READERS = frozenset({"pin", "header", "build", "variant"})


class Context:
    def __init__(self, directory: Path, quiet: bool, color: str = "auto") -> None:
        self.directory = directory
        self.color = color
        self.reporter = CliReporter(quiet, color)
        self.json = False
        self.command = ""

    def store(self) -> Store:
        return Store.find(self.directory)

    def workspace(self, *, lock: bool = True) -> Workspace:
        ws = Workspace(self.store(), self.reporter)
        if lock:
            from ..ops.recovery import recover

            try:
                ws.lock()
                # a read-only queue or work tree is said before anything changes (recovery included)
                ws.require_writable(queue=self.command in QUEUE_WRITERS, work=self.command not in WORK_READERS)
                recover(ws, repairing=self.command == "repair")
            except BaseException:
                ws.close()  # the boundary never sees this workspace: let its lock go here
                raise
        return ws


def boundary(name: str, *, lock: bool = True, needs_queue: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Wrap a command: --json, workspace and lock, and the one place errors become messages.

    The wrapped function returns (result, human_text, exit_code).
    """

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        @click.option("--json", "as_json", is_flag=True, help="Print one versioned JSON document.")
        @click.pass_obj  # type: ignore[arg-type]  # functools.wraps hides the signature from click's stubs
        @functools.wraps(func)
        def wrapper(ctx: Context, as_json: bool, **kwargs: Any) -> None:
            ctx.json = as_json
            ctx.command = name
            ws = None
            mark = None
            try:
                if needs_queue:
                    ws = ctx.workspace(lock=lock)
                    kwargs["ws"] = ws
                    if lock and name in UNDOABLE:
                        from ..ops import undo

                        mark = undo.begin(ws, name)
                else:
                    kwargs["ctx"] = ctx
                result, text, code = func(**kwargs)
            except GqueueError as exc:
                _fail(ctx, name, exc.to_json(), f"error[{exc.ref}]: {exc.one_line()}", exc.code, exc.hint)
            except click.exceptions.Exit:
                raise
            except KeyboardInterrupt:
                _fail(ctx, name, {"ref": "interrupted", "message": "interrupted"}, "error[interrupted]: interrupted", ExitCode.ERROR, None)
            except Exception as exc:  # noqa: BLE001 - the boundary for bugs
                refused = FilesystemError.from_os_error(exc, ws.store.root if ws is not None else _root(ctx))
                if refused is not None:  # the file system's doing (read-only, permissions, full disk)
                    _fail(ctx, name, refused.to_json(), f"error[{refused.ref}]: {refused.one_line()}",
                          refused.code, refused.hint)
                import traceback

                detail = traceback.format_exc()
                _fail(ctx, name, {"ref": "bug", "message": f"{type(exc).__name__}: {exc}", "traceback": detail},
                      f"error[bug]: internal error: {type(exc).__name__}: {exc}", ExitCode.BUG,
                      "this is a bug in gqueue; please report it with the command you ran")
            finally:
                ctx.reporter.done()
                if mark is not None and ws is not None:
                    _record(ws, mark)
                if ws is not None:
                    ws.close()
            if ctx.json:
                emit_json(name, ok=code == 0, result=result, notes=ctx.reporter.notes)
            elif text:
                out_echo(text, ctx.color, name)
            sys.exit(int(code))

        return wrapper

    return decorate


def _record(ws: Workspace, mark: Any) -> None:
    """Put what the command changed in the undo log; a failure to do so is said, not fatal."""
    from ..ops import undo

    try:
        undo.record(ws, mark)
    except (OSError, GqueueError) as exc:
        click.echo(f"warning: the undo log was not updated: {exc}", err=True)


def _root(ctx: Context) -> Path | None:
    try:
        return ctx.store().root
    except GqueueError:
        return None


def _fail(ctx: Context, name: str, error: dict[str, Any], line: str, code: int, hint: str | None) -> None:
    if ctx.json:
        emit_json(name, ok=False, error=error, notes=ctx.reporter.notes)
    else:
        ctx.reporter.done()  # a progress line is cleared before the error is written
        err_echo(line, ctx.color)
        if hint:
            err_echo(f"hint: {hint}", ctx.color)
    sys.exit(int(code))
