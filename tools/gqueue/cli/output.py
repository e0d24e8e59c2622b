"""Output conventions: results on stdout, progress on stderr, one JSON document with --json."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click

from ..progress import Meter, NullMeter
from . import style

SCHEMA_PREFIX = "gqueue"
REDRAW = 0.1  # seconds between two drawings of a meter


class CliReporter:
    """Progress on stderr only when it is a terminal; notes always on stderr."""

    def __init__(self, quiet: bool = False, color: str = "auto") -> None:
        self.quiet = quiet
        self.tty = sys.stderr.isatty()
        self.color = color
        self.notes: list[str] = []
        self._open = False  # a progress line is on the terminal

    @property
    def live(self) -> bool:
        return self.tty and not self.quiet

    def progress(self, message: str) -> None:
        if self.live and (message or self._open):
            click.echo(f"\r\x1b[K{message[:100]}", err=True, nl=False)
            self._open = bool(message)

    def meter(self, label: str, total: int | None, unit: str) -> Meter:
        if not self.live:
            return NullMeter()
        self.progress("")
        if total is None:
            return _Count(self, label, unit)
        return _Bar(label, total, unit, style.enabled(self.color, sys.stderr))

    def done(self) -> None:
        """Clear the progress line, if one is shown (before a message, and at the end)."""
        if self._open:
            click.echo("\r\x1b[K", err=True, nl=False)
            self._open = False

    def note(self, message: str) -> None:
        self.notes.append(message)
        if not self.quiet:
            self.done()
            err_echo(f"note: {message}", self.color)


def err_echo(line: str, color: str) -> None:
    """One line on stderr, its error/warning/hint/note prefix coloured where colour is on."""
    on = style.enabled(color, sys.stderr)
    click.echo(style.message(line) if on else line, err=True, color=on)


def out_echo(text: str, color: str, command: str = "") -> None:
    """A command's result text on stdout, its status words coloured where colour is on (not in
    what is the user's own text: a diff, a header, a list of patches)."""
    on = style.enabled(color, sys.stdout) and command not in style.CONTENT
    click.echo(style.statuses(text) if on else text, color=on)


def human_size(count: int) -> str:
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{count} B"


class _Bar:
    """A known amount of work: click's progress bar (with sizes for bytes), redrawn at most ten times a second."""

    def __init__(self, label: str, total: int, unit: str, color: bool) -> None:
        self.total, self.unit, self.done, self.pending, self.last = total, unit, 0, 0, 0.0
        self.bar = click.progressbar(
            length=max(total, 1), label=label, file=sys.stderr, show_pos=unit != "bytes", show_eta=True,
            item_show_func=self._item, color=color, width=24,
        )
        self.bar.__enter__()

    def _item(self, item: object) -> str | None:
        if self.unit != "bytes":
            return None
        return f"{human_size(self.done)} / {human_size(self.total)}"

    def advance(self, amount: int = 1) -> None:
        self.done += amount
        self.pending += amount
        now = time.monotonic()
        if now - self.last >= REDRAW or self.done >= self.total:
            self.bar.update(self.pending, self.done)
            self.pending, self.last = 0, now

    def close(self) -> None:
        if self.pending:
            self.bar.update(self.pending, self.done)
        self.bar.__exit__(None, None, None)


class _Count:
    """An amount of work not known ahead: a running count on the progress line."""

    def __init__(self, reporter: CliReporter, label: str, unit: str) -> None:
        self.reporter, self.label, self.unit, self.done, self.last = reporter, label, unit, 0, 0.0

    def _text(self) -> str:
        amount = human_size(self.done) if self.unit == "bytes" else f"{self.done} {self.unit}"
        return f"{self.label}: {amount}"

    def advance(self, amount: int = 1) -> None:
        self.done += amount
        now = time.monotonic()
        if now - self.last >= REDRAW:
            self.reporter.progress(self._text())
            self.last = now

    def close(self) -> None:
        if self.done:
            click.echo(f"\r\x1b[K{self._text()}", err=True)
            self.reporter._open = False


def emit_json(command: str, *, ok: bool, result: Any = None, error: dict[str, Any] | None = None,
              notes: list[str] | None = None) -> None:
    doc = {"schema": f"{SCHEMA_PREFIX}.{command}/1", "ok": ok, "result": result, "error": error, "notes": notes or []}
    click.echo(json.dumps(doc, indent=2, sort_keys=False, default=str))
