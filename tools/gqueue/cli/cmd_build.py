"""build and develop: the wheel users install, and the editable install contributors use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..errors import ExitCode
from ..ops import build as build_op
from ..ops import develop as develop_op
from ..ops.workspace import Workspace
from . import options
from .boundary import boundary

Result = tuple[Any, str, int]


def _size(size: int) -> str:
    return f"{size / 1e6:.1f} MB" if size >= 1e6 else f"{size / 1e3:.1f} kB"


@click.command()
@click.option("--mode", type=click.Choice(build_op.MODES), default="overlay", show_default=True,
              help="overlay: the upstream wheel with the patched files; source: pip wheel of the patched tree (needs CUDA).")
@options.profile("Build only the patches this profile selects (applied in memory; work/ is untouched).")
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), help="Write the wheel here (default: dist/).")
@click.option("--wheel", "wheel", type=click.Path(dir_okay=False, path_type=Path),
              help="A local copy of the pinned upstream wheel (checked against vendor-pin.txt).")
@click.option("--pin", "pin_spec", metavar="SPEC",
              help="Build for this pin of vendor-pin.txt (a label such as rollback): its wheel, its series applied "
                   "in memory (work/ is untouched).")
@boundary("build")
def build(ws: Workspace, mode: str, profile: str | None, out_dir: Path | None, wheel: Path | None,
          pin_spec: str | None) -> Result:
    """Build the vLLM wheel of the applied patches: dist/vllm-<version>+gq.<digest>-....whl."""
    result = build_op.build(ws, mode=mode, profile=profile, out_dir=out_dir, wheel=wheel, pin_spec=pin_spec)
    lines = [
        f"built {result.wheel} ({_size(result.size)}, {result.seconds:.1f}s)",
        f"version {result.version}: {len(result.patches)} patch(es); "
        f"{len(result.replaced)} file(s) replaced, {len(result.added)} added, {len(result.removed)} removed, "
        f"{result.copied} copied unchanged",
        f"sha256 {result.sha256}",
    ]
    return result.to_json(), "\n".join(lines), ExitCode.OK


@click.command()
@click.option("--uninstall", is_flag=True, help="Remove every trace of a previous 'gqueue develop'.")
@click.option("--python", "python", type=click.Path(dir_okay=False, path_type=Path),
              help="The environment's Python (default: the active virtual environment's).")
@click.option("--wheel", "wheel", type=click.Path(dir_okay=False, path_type=Path),
              help="A local copy of the pinned upstream wheel (checked against vendor-pin.txt).")
@boundary("develop")
def develop(ws: Workspace, uninstall: bool, python: Path | None, wheel: Path | None) -> Result:
    """Make the active venv import vLLM from work/ (edits are live), kernels included."""
    if uninstall:
        removed = develop_op.uninstall(ws)
        text = f"removed the editable install ({len(removed.removed)} path(s))" if removed.removed else "no editable install to remove"
        return removed.to_json(), text, ExitCode.OK
    result = develop_op.develop(ws, python=python, wheel=wheel)
    text = (f"{result.python} now imports {result.package} from work/ and the kernels from kernels/ "
            f"({result.compiled} upstream file(s) placed beside the sources, ignored by git)")
    return result.to_json(), text, ExitCode.OK
