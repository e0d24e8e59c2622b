"""import and export commands."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import ExitCode, UsageError
from ..ops import interop
from ..ops.workspace import Workspace
from .boundary import boundary


@click.command(name="import")
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--series", "series_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Import every patch of a quilt series file, in its order.")
@click.option("--name", "name", metavar="NAME", help="The file name in queue/ (one patch only).")
@click.option("--id", "patch_id", metavar="ID", help="The patch id; the file name is made to start with it (one patch only).")
@boundary("import")
def import_(ws: Workspace, files: tuple[Path, ...], series_file: Path | None, name: str | None,
            patch_id: str | None) -> tuple[object, str, int]:
    """Import quilt patches, DEP-3 patches, git format-patch mails or an mbox of them after the top patch."""
    result = interop.import_patches(ws, list(files), series_file=series_file, name=name, patch_id=patch_id)
    text = "\n".join(f"imported {r['name']} (id {r['id']}, from {r['from']})" for r in result.imported)
    return result.to_json(), text, ExitCode.OK


@click.command()
@click.option("--quilt", "quilt_dir", type=click.Path(file_okay=False, path_type=Path), help="Write a quilt series here.")
@click.option("--mbox", "mbox", type=click.Path(dir_okay=False, path_type=Path), help="Write an mbox that 'git am' takes.")
@boundary("export", lock=False)
def export(ws: Workspace, quilt_dir: Path | None, mbox: Path | None) -> tuple[object, str, int]:
    """Export the series as a quilt patches folder or an mbox."""
    if (quilt_dir is None) == (mbox is None):
        raise UsageError("give exactly one of --quilt DIR or --mbox FILE")
    result = interop.export_quilt(ws, quilt_dir) if quilt_dir else interop.export_mbox(ws, mbox)  # type: ignore[arg-type]
    return result.to_json(), f"wrote {len(result.patches)} patch(es) to {result.target} ({result.kind})", ExitCode.OK
