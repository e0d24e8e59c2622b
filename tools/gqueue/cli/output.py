"""Output conventions: results on stdout, progress on stderr, one JSON document with --json."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

SCHEMA_PREFIX = "gqueue"


class CliReporter:
    """Progress on stderr only when it is a terminal; notes always on stderr."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.tty = sys.stderr.isatty()
        self.notes: list[str] = []

    def progress(self, message: str) -> None:
        if self.tty and not self.quiet:
            click.echo(f"\r\x1b[K{message[:100]}", err=True, nl=False)

    def done(self) -> None:
        if self.tty and not self.quiet:
            click.echo("\r\x1b[K", err=True, nl=False)

    def note(self, message: str) -> None:
        self.notes.append(message)
        if not self.quiet:
            click.echo(f"note: {message}", err=True)


def emit_json(command: str, *, ok: bool, result: Any = None, error: dict[str, Any] | None = None,
              notes: list[str] | None = None) -> None:
    doc = {"schema": f"{SCHEMA_PREFIX}.{command}/1", "ok": ok, "result": result, "error": error, "notes": notes or []}
    click.echo(json.dumps(doc, indent=2, sort_keys=False, default=str))
