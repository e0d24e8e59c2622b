"""The ``gqueue`` command group and its entry point: the top of the package.

The commands are defined in commands.py and the cmd_*.py modules, each wrapped in
boundary.py's ``boundary``, and added to the group here; a cmd_*.py module is imported only
when one of its commands runs, so start-up stays short.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import click

from .. import __version__
from . import commands
from .boundary import Context
from .style import CHOICES as COLOR_CHOICES

# command -> the module that defines it, imported when the command runs
LAZY_COMMANDS = {
    "build": "cmd_build", "develop": "cmd_build",
    "check": "cmd_drift", "rebase": "cmd_drift", "export-tree": "cmd_drift", "variant": "cmd_drift",
    "import": "cmd_interop", "export": "cmd_interop",
    "lint": "cmd_tools", "docs": "cmd_tools", "bisect": "cmd_tools", "plan": "cmd_tools",
    "undo": "cmd_undo", "redo": "cmd_undo",
    "status": "cmd_show", "pin": "cmd_show", "series": "cmd_show", "applied": "cmd_show", "unapplied": "cmd_show",
    "top": "cmd_show", "next": "cmd_show", "prev": "cmd_show", "diff": "cmd_show", "files": "cmd_show",
}


class Group(click.Group):
    """Usage errors exit 2 (click's default); area modules are imported on demand."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(LAZY_COMMANDS))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in LAZY_COMMANDS:
            module = importlib.import_module(f"{__package__}.{LAZY_COMMANDS[name]}")
            for command in commands_of(module):
                self.add_command(command)
        return super().get_command(ctx, name)


def commands_of(module: ModuleType) -> list[click.Command]:
    """The top-level commands a module defines (a group's subcommands stay in their group)."""
    found = [v for v in vars(module).values() if isinstance(v, click.Command)]
    nested = {id(c) for group in found if isinstance(group, click.Group) for c in group.commands.values()}
    return [c for c in found if id(c) not in nested]


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-C", "directory", type=click.Path(file_okay=False, path_type=Path), default=Path("."),
              help="Run as if started in DIR.")
@click.option("-q", "--quiet", is_flag=True, help="No progress or notes on stderr.")
@click.option("--color", "color", type=click.Choice(COLOR_CHOICES), default="auto", show_default=True,
              help="Colour statuses and errors: on a terminal without NO_COLOR (auto), always, or never.")
@click.version_option(__version__, prog_name="gqueue")
@click.pass_context
def cli(click_ctx: click.Context, directory: Path, quiet: bool, color: str) -> None:
    """gqueue: a git-backed patch queue for a pinned vLLM."""
    click_ctx.obj = Context(directory, quiet, color)


for _command in commands_of(commands):
    cli.add_command(_command)


def main() -> None:
    cli(prog_name="gqueue")
