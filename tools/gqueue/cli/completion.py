"""Shell completion of patch names: the series' names, then the ids of their headers.

click completes commands and options itself (``_GQUEUE_COMPLETE=bash_source gqueue``, see
docs/cli.md); an argument or option of type ``PATCH`` also completes the patches of the queue
that ``-C DIR`` (or the current folder) finds. Anything that cannot be read completes nothing:
completion never prints an error into the user's shell.
"""

from __future__ import annotations

from pathlib import Path

import click
from click.shell_completion import CompletionItem

from ..errors import GqueueError
from ..store import Store


class PatchName(click.ParamType):  # type: ignore[type-arg]  # generic in click's stubs only
    """A patch named on the command line; the value is passed on as typed (the command resolves it)."""

    name = "patch"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> object:
        return value

    def shell_complete(self, ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
        return [CompletionItem(value, help=help_) for value, help_ in candidates(_directory(ctx), incomplete)]


PATCH = PatchName()


def _directory(ctx: click.Context) -> Path:
    directory = ctx.find_root().params.get("directory")
    return Path(directory) if directory else Path(".")


def candidates(directory: Path, incomplete: str) -> list[tuple[str, str | None]]:
    """(value, help) for the series names starting with ``incomplete``, then (once something is
    typed: an empty word lists the names only) the ids that do."""
    try:
        store = Store.find(directory)
        series = store.read_series()
    except (GqueueError, OSError):
        return []
    out: list[tuple[str, str | None]] = [(n, None) for n in series.names if n.startswith(incomplete)]
    if not incomplete:
        return out
    names = set(series.names)
    seen: set[str] = set()
    for entry in series.entries:
        try:
            patch_id = str(store.read_patch(entry.name, line=entry.line).meta.id or "")
        except (GqueueError, OSError):
            continue
        if patch_id and patch_id.startswith(incomplete) and patch_id not in names and patch_id not in seen:
            seen.add(patch_id)
            out.append((patch_id, entry.name))
    try:
        store.headers.save()
    except OSError:
        pass
    return out
