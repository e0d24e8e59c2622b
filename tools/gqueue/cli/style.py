"""Colour on a terminal: statuses on stdout, errors, warnings and hints on stderr.

The renderers write plain text; colour is laid over it here, at output time, and only where
it is wanted: ``--color=always``, or ``auto`` (the default) on a terminal without
``NO_COLOR`` (https://no-color.org: set and not empty) and not ``TERM=dumb``. Text that goes
to a file, a pipe or a ``--json`` document is never coloured.
"""

from __future__ import annotations

import os
import re
from typing import IO

import click

CHOICES = ("auto", "always", "never")

GOOD = {"applied", "ok", "ok:", "clean", "refreshed", "created", "popped", "initialised", "imported", "exported",
        "upstream"}
WARN = {"offset", "fuzz", "whitespace", "merged3", "partial-upstream", "forced", "warning", "warning:", "renamed",
        "nothing", "skipped"}
BAD = {"failed", "failing", "conflict", "error", "error:", "missing", "rejected", "dirty"}

_LEADING = re.compile(r"^()([A-Za-z][\w:-]*)")
# commands whose stdout is the user's own text (a diff, a header, patch names): never coloured
CONTENT = frozenset({"diff", "header", "export", "files", "series", "applied", "unapplied", "top", "next",
                     "prev", "docs", "catalogue"})
_PREFIX = re.compile(r"^(error\[[^\]]*\]:|error:|warning(?:\[[^\]]*\])?:|hint:|note:)")
_PREFIX_STYLE = {"error": {"fg": "red", "bold": True}, "warning": {"fg": "yellow", "bold": True},
                 "hint": {"fg": "cyan"}, "note": {"fg": "yellow"}}


def enabled(choice: str, stream: IO[str]) -> bool:
    """Whether text written to ``stream`` is coloured under ``--color=choice``."""
    if choice == "always":
        return True
    if choice == "never" or os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _word_style(word: str) -> tuple[str, bool] | None:
    """The colour and boldness of a status word, or None for a word left plain."""
    key = word.lower()
    if key in GOOD:
        return "green", False
    if key in WARN:
        return "yellow", False
    if key in BAD:
        return "red", True
    return None


def statuses(text: str) -> str:
    """``text`` with the status word that opens a line (applied, FAILED, offset...) coloured."""
    out = []
    for line in text.split("\n"):
        match = _LEADING.match(line)
        style = _word_style(match.group(2)) if match else None
        if match and style:
            indent, word = match.groups()
            colour, bold = style
            line = indent + click.style(word, fg=colour, bold=bold or None) + line[match.end():]
        out.append(line)
    return "\n".join(out)


def message(line: str) -> str:
    """A stderr line with its 'error[...]:', 'warning:', 'hint:' or 'note:' prefix coloured."""
    match = _PREFIX.match(line)
    if not match:
        return line
    kind = match.group(1).split("[", 1)[0].rstrip(":")
    return click.style(match.group(1), **_PREFIX_STYLE[kind]) + line[match.end():]  # type: ignore[arg-type]
