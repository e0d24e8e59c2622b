"""Applying a file's hunks to its old content, in memory, with per-hunk outcomes.

Like GNU patch: each hunk is looked for at its line (shifted by the offsets of the hunks
before it), then ever further away (but a hunk with less context after its change than
before only at the end of the file, one with less before only at its start); with
``max_fuzz`` > 0 it may drop up to that many context lines at each end. Unlike patch, fuzz
is never taken silently: the outcome says.
"""

from __future__ import annotations

from dataclasses import dataclass

from .diff import FileDiff, Hunk, byte_lines

CLEAN = "clean"
OFFSET = "offset"
FUZZ = "fuzz"
FAILED = "failed"


@dataclass(frozen=True)
class HunkOutcome:
    index: int
    status: str
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
        return all(h.status in (CLEAN, OFFSET) for h in self.hunks)


def split_lines(data: bytes) -> list[bytes]:
    return byte_lines(data)


def _matches(lines: list[bytes], pos: int, want: list[bytes]) -> bool:
    if pos < 0 or pos + len(want) > len(lines):
        return False
    return lines[pos : pos + len(want)] == want


def _find(lines: list[bytes], want: list[bytes], expected: int, floor: int) -> int | None:
    """Nearest position >= floor where ``want`` matches, searching outward from ``expected``."""
    if not want:
        return max(min(expected, len(lines)), floor)
    limit = max(len(lines) - len(want), 0)
    expected = min(max(expected, floor), limit)
    for delta in range(0, len(lines) + 1):
        before, after = expected - delta, expected + delta
        if after <= limit and _matches(lines, after, want):
            return after
        if delta and before >= floor and _matches(lines, before, want):
            return before
        if before < floor and after > limit:
            return None
    return None


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
            outcomes.append(HunkOutcome(index, FAILED, 0, 0, max(expected, 0) + 1))
            continue
        offset = pos - head - (expected - shift)  # against the line the hunk header names
        status = FUZZ if used_fuzz else (OFFSET if offset else CLEAN)
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
