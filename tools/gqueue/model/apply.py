"""Applying a file's hunks to its old content, in memory, with per-hunk outcomes.

Like GNU patch: each hunk is looked for at its line (shifted by the offsets of the hunks
before it), then ever further away (but a hunk with less context after its change than
before only at the end of the file, one with less before only at its start); with
``max_fuzz`` > 0 it may drop up to that many context lines at each end. Unlike patch, fuzz
is never taken silently: the outcome says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from .diff import FileDiff, Hunk, byte_lines
from .status import EXACT, Status


@dataclass(frozen=True)
class HunkOutcome:
    index: int
    status: Status  # clean, offset, fuzz or failed
    offset: int = 0
    fuzz: int = 0
    line: int = 0  # 1-based line in the old file where it landed (or was expected)

    def to_json(self) -> dict[str, object]:
        return {"hunk": self.index + 1, "status": self.status, "offset": self.offset, "fuzz": self.fuzz, "line": self.line}


@dataclass(frozen=True)
class FileOutcome:
    path: str
    hunks: tuple[HunkOutcome, ...]
    new: bytes | None  # None: file deleted, or not applicable when ok is False

    @property
    def ok(self) -> bool:
        return all(h.status in EXACT for h in self.hunks)


def split_lines(data: bytes) -> list[bytes]:
    return byte_lines(data)


def _matches(lines: list[bytes], pos: int, want: list[bytes]) -> bool:
    if pos < 0 or pos + len(want) > len(lines):
        return False
    return lines[pos : pos + len(want)] == want


def _positions(lines: list[bytes], want: list[bytes], expected: int, floor: int) -> Iterator[int]:
    """Every position >= floor where ``want`` matches, nearest to ``expected`` first (at an equal
    distance, the one after it first), as patch looks for a hunk."""
    if not want:
        yield max(min(expected, len(lines)), floor)
        return
    limit = max(len(lines) - len(want), 0)
    expected = min(max(expected, floor), limit)
    for delta in range(0, len(lines) + 1):
        before, after = expected - delta, expected + delta
        if after <= limit and _matches(lines, after, want):
            yield after
        if delta and before >= floor and _matches(lines, before, want):
            yield before
        if before < floor and after > limit:
            return


def _find(lines: list[bytes], want: list[bytes], expected: int, floor: int) -> int | None:
    """Nearest position >= floor where ``want`` matches, searching outward from ``expected``."""
    return next(_positions(lines, want, expected, floor), None)


def _anchor(hunk: Hunk) -> str | None:
    """Where a hunk with less context on one side must match, as patch and git apply have it:
    less after its change than before (it ends at the end of the file): "end"; less before: "start"."""
    tags = [tag for tag, _ in hunk.lines]
    lead = next((i for i, tag in enumerate(tags) if tag != b" "), len(tags))
    trail = next((i for i, tag in enumerate(reversed(tags)) if tag != b" "), len(tags))
    if lead > trail:
        return "end"
    if trail > lead:
        return "start"
    return None


def _find_anchored(lines: list[bytes], want: list[bytes], expected: int, floor: int, anchor: str | None) -> int | None:
    """:func:`_find`, but only at the end (or start) of the file for an anchored hunk."""
    if anchor is None:
        return _find(lines, want, expected, floor)
    at = len(lines) - len(want) if anchor == "end" else 0
    return at if at >= floor and _matches(lines, at, want) else None


def _trim(hunk: Hunk, fuzz: int) -> tuple[list[tuple[bytes, bytes]], int, int]:
    """Drop up to ``fuzz`` leading and trailing context lines; return body and how many went."""
    body = list(hunk.lines)
    head = 0
    while head < fuzz and body and body[0][0] == b" ":
        body.pop(0)
        head += 1
    tail = 0
    while tail < fuzz and body and body[-1][0] == b" ":
        body.pop()
        tail += 1
    return body, head, tail


def apply_hunks(old: bytes, diff: FileDiff, *, max_fuzz: int = 0, partial: bool = False) -> FileOutcome:
    """Apply every hunk; with ``partial`` the failed ones are skipped and the rest kept."""
    lines = split_lines(old)
    outcomes: list[HunkOutcome] = []
    out: list[bytes] = []
    cursor = 0  # lines[:cursor] are done
    shift = 0  # offset carried from earlier hunks
    failed = False
    for index, hunk in enumerate(diff.hunks):
        old_lines = hunk.old_lines()
        expected = (hunk.old_start - 1 if hunk.old_len else hunk.old_start) + shift
        pos = _find_anchored(lines, old_lines, expected, cursor, _anchor(hunk))
        used_fuzz = 0
        body = list(hunk.lines)
        head = 0
        if pos is None:
            for fuzz in range(1, max_fuzz + 1):
                body, head, _tail = _trim(hunk, fuzz)
                want = [t for tag, t in body if tag in (b" ", b"-")]
                if not want:
                    break
                pos = _find(lines, want, expected + head, cursor)
                if pos is not None:
                    used_fuzz = fuzz
                    break
        if pos is None:
            failed = True
            outcomes.append(HunkOutcome(index, Status.FAILED, 0, 0, max(expected, 0) + 1))
            continue
        offset = pos - head - (expected - shift)  # against the line the hunk header names
        status = Status.FUZZ if used_fuzz else (Status.OFFSET if offset else Status.CLEAN)
        outcomes.append(HunkOutcome(index, status, offset, used_fuzz, pos + 1))
        out.extend(lines[cursor:pos])
        consumed = sum(1 for tag, _ in body if tag in (b" ", b"-"))
        out.extend(t for tag, t in body if tag in (b" ", b"+"))
        cursor = pos + consumed
        shift = offset
    if failed and not partial:
        return FileOutcome(diff.path, tuple(outcomes), None)
    out.extend(lines[cursor:])
    return FileOutcome(diff.path, tuple(outcomes), b"".join(out))


# --- whitespace-insensitive matching ----------------------------------------------------------

_BLANKS = b" \t\r\n\f\v"


@dataclass(frozen=True)
class Reindent:
    """How the new pin's copy of a hunk's region differs in indentation from the hunk's."""

    remove: bytes = b""  # whitespace taken off the start of each line
    add: bytes = b""  # ... and put in its place

    def apply(self, line: bytes) -> bytes | None:
        """The line re-indented the same way; None where its indentation does not allow it."""
        if not line.strip(_BLANKS):
            return line
        if not line.startswith(self.remove):
            return None
        return self.add + line[len(self.remove):]

    def describe(self) -> str:
        if not self.remove and not self.add:
            return "same indentation"
        if not self.remove or not self.add:
            step = self.add or self.remove
            unit = {b" ": "space", b"\t": "tab"}.get(bytes(set(step)))
            if unit is not None:
                plural = "s" if len(step) > 1 else ""
                return f"re-indented {len(step)} {unit}{plural} {'deeper' if self.add else 'shallower'}"
        return f"indentation {self.remove!r} at the start of each line replaced by {self.add!r}"


def _indent(line: bytes) -> bytes:
    return line[: len(line) - len(line.lstrip(b" \t"))]


def _reindent(ours: bytes, theirs: bytes) -> Reindent:
    """The least change at the start of the line that turns our indentation into theirs."""
    a, b = _indent(ours), _indent(theirs)
    same = 0
    while same < min(len(a), len(b)) and a[len(a) - 1 - same] == b[len(b) - 1 - same]:
        same += 1
    return Reindent(remove=a[: len(a) - same], add=b[: len(b) - same])


def apply_ignoring_whitespace(old: bytes, hunk: Hunk, expected: int) -> tuple[bytes, int, Reindent] | None:
    """Apply one hunk whose context and removed lines match the text only with their leading and
    trailing whitespace ignored (as after a re-indent or a formatter's run).

    The matched lines keep the text's whitespace; the hunk's added lines are re-indented the way
    the matched lines were. That has to be one way for every non-blank matched line (a region
    re-indented as a whole), else the added lines' place would be a guess and None is returned,
    as it is where the hunk matches exactly (that is no whitespace case) or nowhere. ``expected``
    is the 0-based line it is looked for at first; the places are tried in :func:`apply_hunks`'
    order (a hunk with context on one side only matches only at that end of the file). Returns
    the new text, the 1-based line and the re-indent.
    """
    lines = split_lines(old)
    want = hunk.old_lines()
    keys = [w.strip(_BLANKS) for w in want]
    if not any(keys):
        return None
    stripped = [line.strip(_BLANKS) for line in lines]
    anchor = _anchor(hunk)
    if anchor is not None:
        at = len(lines) - len(want) if anchor == "end" else 0
        candidates: Iterator[int] = iter([at] if at >= 0 and _matches(stripped, at, keys) else [])
    else:
        candidates = _positions(stripped, keys, expected, 0)
    plain = any(t.strip(_BLANKS) for tag, t in hunk.lines if tag == b"+")
    for pos in candidates:
        if lines[pos : pos + len(want)] == want:
            continue
        ways = {_reindent(w, lines[pos + i]) for i, w in enumerate(want) if w.strip(_BLANKS)}
        if len(ways) != 1:
            if plain:
                continue
            ways = {Reindent()}
        way = ways.pop()
        body: list[bytes] = []
        i = pos
        for tag, text in hunk.lines:
            if tag == b" ":
                body.append(lines[i])
                i += 1
            elif tag == b"-":
                i += 1
            else:
                moved = way.apply(text)
                if moved is None:
                    break
                body.append(moved)
        else:
            return b"".join(lines[:pos] + body + lines[i:]), pos + 1, way
    return None
