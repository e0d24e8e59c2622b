"""The series file: quilt's format (``name [-pN] [# comment]``) with Mercurial-MQ guards.

Lines are kept as written; edits replace, insert or delete whole lines only, so a rewrite
changes nothing but what it must.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ..errors import FormatError

_GUARD = re.compile(r"#([+-])([^\s#]+)")
_PARKED = re.compile(r"^#\s*parked:\s*(\S+)(?:\s.*)?$")
_NAME_OK = re.compile(r"^[A-Za-z0-9_.+@-][A-Za-z0-9_.+@/-]*$")


@dataclass(frozen=True)
class SeriesEntry:
    name: str
    line: int  # 1-based
    strip: int = 1
    guards: tuple[str, ...] = ()  # "+name" / "-name"
    comment: str = ""

    def selected(self, active: set[str]) -> bool:
        """MQ semantics: a negative guard that is active excludes; positive guards need one active."""
        positives = [g[1:] for g in self.guards if g[0] == "+"]
        negatives = [g[1:] for g in self.guards if g[0] == "-"]
        if any(n in active for n in negatives):
            return False
        return not positives or any(p in active for p in positives)


@dataclass(frozen=True)
class Series:
    lines: tuple[str, ...]  # each with its line ending
    entries: tuple[SeriesEntry, ...]
    parked: tuple[str, ...] = ()
    path: str = "series"

    @property
    def names(self) -> list[str]:
        return [e.name for e in self.entries]

    def index(self, name: str) -> int:
        for i, entry in enumerate(self.entries):
            if entry.name == name:
                return i
        raise KeyError(name)

    def __contains__(self, name: object) -> bool:
        return any(e.name == name for e in self.entries)

    def strip_of(self, name: str) -> int:
        """The -pN of NAME's entry; 1 for a patch file outside the series."""
        return self.entries[self.index(name)].strip if name in self else 1

    def text(self) -> str:
        return "".join(self.lines)

    def insert(self, position: int, name: str) -> "Series":
        """A new series with ``name`` as entry number ``position`` (0-based)."""
        return self.insert_many(position, [name])

    def insert_many(self, position: int, names: list[str]) -> "Series":
        """A new series with ``names`` (in order) starting at entry number ``position``."""
        return self.insert_lines(position, [name + "\n" for name in names])

    def insert_lines(self, position: int, new: list[str]) -> "Series":
        """A new series with the lines ``new`` (entries, comments, blank lines, each ending in a
        newline) at entry number ``position``; an entry whose name the series has is refused."""
        for entry in parse_series("".join(new), path=self.path).entries:
            if entry.name in self:
                raise FormatError(f"'{entry.name}' is already in the series", path=self.path)
        lines = list(self.lines)
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        if position < len(self.entries):
            at = self.entries[position].line - 1
        elif self.entries:
            at = self.entries[-1].line
        else:
            at = len(lines)
        lines[at:at] = new
        return parse_series("".join(lines), path=self.path)

    def lines_between(self) -> tuple[list[tuple[str, ...]], tuple[str, ...]]:
        """The comment and blank lines before each entry (since the entry before it), and those
        after the last: what a series carries besides its entries (``# parked:`` lines left out:
        they name files of this queue)."""
        before: list[tuple[str, ...]] = []
        start = 0
        for entry in self.entries:
            before.append(self._carried(start, entry.line - 1))
            start = entry.line
        return before, self._carried(start, len(self.lines))

    def exported_text(self) -> str:
        """The series for a quilt folder elsewhere: every line, comments and guards with them,
        but ``# parked:`` ones (their files stay in this queue)."""
        return "".join(self._carried(0, len(self.lines)))

    def tail_of(self, entry: SeriesEntry) -> str:
        """What follows the first ``#`` of the entry's line, as written (its comment and guards)."""
        return self.lines[entry.line - 1].rstrip("\r\n").partition("#")[2]

    def _carried(self, start: int, end: int) -> tuple[str, ...]:
        return tuple(line if line.endswith("\n") else line + "\n" for line in self.lines[start:end]
                     if not _PARKED.match(line.strip()))

    def remove(self, name: str) -> "Series":
        entry = self.entries[self.index(name)]
        lines = list(self.lines)
        del lines[entry.line - 1]
        return parse_series("".join(lines), path=self.path)

    def move(self, name: str, *, before: str | None = None, after: str | None = None) -> "Series":
        """A new series with ``name``'s line (its -pN, guards and comment with it) right above
        ``before``'s line or right below ``after``'s; other lines stay as they are."""
        if (before is None) == (after is None) or name in (before, after):
            raise ValueError("move needs one other entry, before or after")
        source = self.entries[self.index(name)].line - 1
        anchor = self.entries[self.index(before or after or "")].line
        target = anchor - 1 if before is not None else anchor
        lines = list(self.lines)
        if not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        lines.insert(target, lines[source])
        del lines[source + (target <= source)]
        return parse_series("".join(lines), path=self.path)

    def rename(self, old: str, new: str) -> "Series":
        if new in self:
            raise FormatError(f"'{new}' is already in the series", path=self.path)
        entry = self.entries[self.index(old)]
        lines = list(self.lines)
        line = lines[entry.line - 1]
        start = line.index(old)
        lines[entry.line - 1] = line[:start] + new + line[start + len(old) :]
        return parse_series("".join(lines), path=self.path)

    def selected(self, active: set[str]) -> list[SeriesEntry]:
        return [e for e in self.entries if e.selected(active)]


def entry_line(name: str, strip: int = 1, tail: str = "") -> str:
    """A series line for ``name``: ``-pN`` where the strip is not 1, then ``#`` and ``tail``
    (a comment, guards), as ``Series.tail_of`` gives it."""
    return name + (f" -p{strip}" if strip != 1 else "") + (f" #{tail}" if tail.strip() else "") + "\n"


def split_lines(text: str) -> list[str]:
    """Lines ending in ``\n`` (the last one may lack it), as editors and ``sed -n Np`` count them.

    ``str.splitlines`` also breaks at form feeds, vertical tabs, U+0085, U+2028 and more,
    which would shift every line number after one of them.
    """
    lines = [line + "\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    return lines if lines[-1] else lines[:-1]


def parse_series(text: str, *, path: str = "series") -> Series:
    lines = tuple(split_lines(text))
    entries: list[SeriesEntry] = []
    parked: list[str] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r\n")
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            match = _PARKED.match(stripped)
            if match:
                parked.append(match.group(1))
            continue
        body, _, comment = line.partition("#")
        guards = tuple(sign + name for sign, name in _GUARD.findall("#" + comment)) if comment else ()
        words = body.split()
        name = words[0]
        # one spelling a file (no empty or '.' part), and no hidden part (queue/'s own temporary files)
        if not _NAME_OK.match(name) or any(part == "" or part.startswith(".") for part in name.split("/")):
            raise FormatError(f"invalid patch name '{name}'", path=path, line=number)
        strip = None
        for word in words[1:]:
            if re.fullmatch(r"-p[0-9]+", word):
                if strip is not None:
                    raise FormatError(f"'{word}' after another -p option", path=path, line=number)
                strip = int(word[2:])
            elif word == "-R":
                raise FormatError("reversed patches (-R) are not supported", path=path, line=number)
            else:
                raise FormatError(f"unexpected '{word}' after the patch name", path=path, line=number)
        if name in seen:
            raise FormatError(
                f"'{name}' is named twice in the series (first on line {seen[name]})", path=path, line=number
            )
        seen[name] = number
        entries.append(SeriesEntry(name, number, 1 if strip is None else strip, guards, comment.strip()))
    return Series(lines, tuple(entries), tuple(parked), path)


def with_path(series: Series, path: str) -> Series:
    return replace(series, path=path)
