"""Drift: the status vocabulary of ``gqueue check``, its reports, and the pure arithmetic behind
them (closest match of a hunk's context, enclosing functions, semantic drift).

No git and no files here: everything works on lists of byte lines.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Sequence

from .status import Status

SCHEMA = "gqueue.check/1"

# check's statuses, by the names the drift code uses (members of the one Status enum)
CLEAN, OFFSET, FUZZ, MERGED3, WHITESPACE = Status.CLEAN, Status.OFFSET, Status.FUZZ, Status.MERGED3, Status.WHITESPACE
CONFLICT, UPSTREAM, PARTIAL_UPSTREAM = Status.CONFLICT, Status.UPSTREAM, Status.PARTIAL_UPSTREAM
FILE_MISSING, RENAMED, BLOCKED = Status.FILE_MISSING, Status.RENAMED, Status.BLOCKED
NOT_CARRIED = Status.NOT_CARRIED  # a patch's status on a pin none of its files admits: passes, says why

STATUSES = (CLEAN, OFFSET, WHITESPACE, MERGED3, UPSTREAM, PARTIAL_UPSTREAM, FUZZ, RENAMED, FILE_MISSING, CONFLICT, BLOCKED,
            NOT_CARRIED)
# How bad a hunk status is; a patch takes its worst hunk's (upstream is special, see patch_status).
_RANK = {CLEAN: 0, OFFSET: 1, WHITESPACE: 2, MERGED3: 3, UPSTREAM: 4, FUZZ: 5, RENAMED: 6, FILE_MISSING: 7, CONFLICT: 8,
         BLOCKED: 9}
DEFAULT_ACCEPT = frozenset({CLEAN, OFFSET, WHITESPACE, MERGED3, UPSTREAM})
# Hunk statuses whose change is in the tree after the hunk is processed.
LANDED = frozenset({CLEAN, OFFSET, WHITESPACE, MERGED3, UPSTREAM, FUZZ})


def parse_accept(text: str) -> frozenset[str]:
    """``clean,offset,+fuzz`` style: a plain list replaces the default, ``+x``/``-x`` edit it."""
    words = [w.strip() for w in text.split(",") if w.strip()]
    relative = all(w[0] in "+-" for w in words)
    accept = set(DEFAULT_ACCEPT) if relative else set()
    for word in words:
        name = word[1:] if word[0] in "+-" else word
        if name not in STATUSES:
            raise ValueError(f"unknown status '{name}' (one of: {', '.join(STATUSES)})")
        if word[0] == "-":
            accept.discard(Status(name))
        else:
            accept.add(Status(name))
    return frozenset(accept)


def patch_status(hunk_statuses: Sequence[str]) -> str:
    """The patch's status from its hunks': the worst one; all upstream is ``upstream``; some
    upstream with the rest landing exactly or by merge is ``partial-upstream``."""
    if not hunk_statuses:
        return CLEAN
    if all(s == UPSTREAM for s in hunk_statuses):
        return UPSTREAM
    others = [s for s in hunk_statuses if s != UPSTREAM]
    worst = max(others, key=lambda s: _RANK[Status(s)])
    if len(others) < len(hunk_statuses) and _RANK[Status(worst)] <= _RANK[MERGED3]:
        return PARTIAL_UPSTREAM
    return worst


# --- reports -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Match:
    """Where a hunk's expected text was found (or came closest): file, 1-based line, similarity."""

    file: str
    line: int
    similarity: float

    def to_json(self) -> dict[str, object]:
        return {"file": self.file, "line": self.line, "similarity": round(self.similarity, 3)}


@dataclass(frozen=True)
class HunkReport:
    file: str
    hunk: int  # 1-based, within its file
    status: str
    patch_line: int  # line of the '@@' in the patch file (0: a file-level entry)
    old_start: int = 0
    line: int = 0  # where it landed (or, for a conflict, was expected) on the new pin
    offset: int = 0
    fuzz: int = 0
    expected: tuple[str, ...] = ()  # a conflict's expected text (context and removed lines)
    closest: Match | None = None
    relocation: Match | None = None
    renamed_to: str | None = None
    applies_there: str | None = None  # for renamed: the status at the new place
    blocked_by: str | None = None
    drift: tuple[str, ...] = ()
    detail: str = ""

    def to_json(self) -> dict[str, object]:
        doc: dict[str, object] = {
            "file": self.file, "hunk": self.hunk, "status": self.status, "patch_line": self.patch_line,
            "old_start": self.old_start, "line": self.line,
        }
        if self.status == OFFSET or self.offset:
            doc["offset"] = self.offset
        if self.status == FUZZ:
            doc["fuzz"] = self.fuzz
        if self.expected:
            doc["expected"] = list(self.expected)
        if self.closest is not None:
            doc["closest"] = self.closest.to_json()
        if self.relocation is not None:
            doc["relocation"] = self.relocation.to_json()
        if self.renamed_to is not None:
            doc["renamed_to"] = self.renamed_to
            doc["applies_there"] = self.applies_there
        if self.blocked_by is not None:
            doc["blocked_by"] = self.blocked_by
        if self.drift:
            doc["drift"] = list(self.drift)
        if self.detail:
            doc["detail"] = self.detail
        return doc


@dataclass(frozen=True)
class PatchReport:
    name: str
    id: str
    status: str
    hunks: tuple[HunkReport, ...]
    acceptable: bool
    blocked_by: str | None = None
    detail: str = ""
    file: str = ""  # the file under queue/ checked, when not ``name`` (a variant)

    @property
    def patch_file(self) -> str:
        return f"queue/{self.file or self.name}"

    @property
    def upstream_hunks(self) -> list[str]:
        return [f"{h.file}#{h.hunk}" for h in self.hunks if h.status == UPSTREAM]

    @property
    def drift(self) -> list[str]:
        return [f"{h.file}#{h.hunk}: {d}" for h in self.hunks for d in h.drift]

    def to_json(self) -> dict[str, object]:
        doc: dict[str, object] = {
            "name": self.name, "id": self.id, "status": self.status, "acceptable": self.acceptable,
            "patch_file": self.patch_file, "hunks": [h.to_json() for h in self.hunks],
        }
        if self.status == PARTIAL_UPSTREAM:
            doc["upstream_hunks"] = self.upstream_hunks
        if self.blocked_by is not None:
            doc["blocked_by"] = self.blocked_by
        if self.detail:
            doc["detail"] = self.detail
        doc["semantic_drift"] = bool(self.drift)
        return doc


@dataclass(frozen=True)
class PinReport:
    pin: str
    label: str | None
    version: str
    base: str  # the pin the series is maintained on (the old side of three-way merges)
    patches: tuple[PatchReport, ...]
    seconds: float = 0.0
    project: str = "vllm"

    @property
    def short(self) -> str:
        return f"{self.project}=={self.version}"

    @property
    def ok(self) -> bool:
        return all(p.acceptable for p in self.patches)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.patches:
            out[p.status] = out.get(p.status, 0) + 1
        return {s: out[s] for s in STATUSES if s in out}

    def to_json(self) -> dict[str, object]:
        return {
            "pin": self.pin, "label": self.label, "project": self.project, "version": self.version,
            "base": self.base, "ok": self.ok,
            "counts": self.counts(), "patches": [p.to_json() for p in self.patches],
        }


@dataclass(frozen=True)
class CheckReport:
    pins: tuple[PinReport, ...]
    accept: frozenset[str] = DEFAULT_ACCEPT

    @property
    def ok(self) -> bool:
        return all(p.ok for p in self.pins)

    def to_json(self) -> dict[str, object]:
        return {
            "schema": SCHEMA, "ok": self.ok, "accept": sorted(self.accept, key=STATUSES.index),
            "pins": [p.to_json() for p in self.pins],
        }


# --- matching arithmetic ----------------------------------------------------------------------


def _norm(line: bytes) -> bytes:
    return b" ".join(line.split())


def closest_match(lines: Sequence[bytes], want: Sequence[bytes], *, top: int = 5) -> tuple[int, float] | None:
    """The 0-based start in ``lines`` of the window most like ``want``, and its similarity (0..1).

    Candidate starts are voted for by exact (whitespace-normalised) line matches; the best few
    are scored by character similarity of the whole window.
    """
    wanted = [_norm(w) for w in want]
    if not lines or not any(wanted):
        return None
    where: dict[bytes, list[int]] = {}
    for i, w in enumerate(wanted):
        if w:
            where.setdefault(w, []).append(i)
    votes: dict[int, int] = {}
    for pos, line in enumerate(lines):
        for i in where.get(_norm(line), ()):
            start = pos - i
            votes[start] = votes.get(start, 0) + 1
    if not votes:
        return None
    size = len(wanted)
    target = b"\n".join(wanted).decode("utf-8", "replace")
    best: tuple[int, float] | None = None
    for start, _n in sorted(votes.items(), key=lambda kv: (-kv[1], kv[0]))[:top]:
        lo = max(start, 0)
        window = b"\n".join(_norm(x) for x in lines[lo : lo + size]).decode("utf-8", "replace")
        score = difflib.SequenceMatcher(None, window, target, autojunk=False).ratio()
        if best is None or score > best[1]:
            best = (lo, score)
    return best


def distinctive_lines(want: Sequence[bytes], count: int = 2) -> list[bytes]:
    """The longest non-trivial lines of a hunk's expected text, for searching other files."""
    stripped = sorted({w.strip() for w in want if len(w.strip()) >= 12}, key=lambda x: (-len(x), x))
    return stripped[:count]


def similarity(a: bytes, b: bytes) -> float:
    """Line-based similarity of two file contents (0..1), for matching renamed files."""
    la, lb = a.splitlines(), b.splitlines()
    if not la and not lb:
        return 1.0
    matcher = difflib.SequenceMatcher(None, la, lb, autojunk=False)
    if matcher.real_quick_ratio() < 0.5 or matcher.quick_ratio() < 0.5:
        return matcher.quick_ratio()
    return matcher.ratio()


# --- semantic drift ---------------------------------------------------------------------------

_SCOPE = re.compile(rb"^(?P<indent>[ \t]*)(?:async[ \t]+def|def|class)[ \t]+(?P<name>\w+)")


def _indent(line: bytes) -> int:
    return len(line) - len(line.lstrip(b" \t"))


def _blank(line: bytes) -> bool:
    return not line.strip() or line.lstrip().startswith(b"#")


@dataclass(frozen=True)
class Scope:
    header: bytes  # the 'def name(' / 'class name' line, stripped
    name: str
    start: int  # 0-based, the def line
    end: int  # exclusive


def enclosing_scope(lines: Sequence[bytes], index: int) -> Scope | None:
    """The innermost Python def/class whose body contains line ``index`` (0-based).

    For a class the end is not computed (``end == -1``): a class is too coarse to compare.
    """
    if not lines:
        return None
    index = min(max(index, 0), len(lines) - 1)
    probe = index
    while probe < len(lines) and _blank(lines[probe]):
        probe += 1
    level = _indent(lines[probe]) if probe < len(lines) else 0
    for i in range(min(index, len(lines) - 1), -1, -1):
        line = lines[i]
        if not _blank(line) and not line.lstrip().startswith((b")", b"]", b"}")):
            indent = _indent(line)
            if i == index or indent < level:
                match = _SCOPE.match(line)
                if match:
                    name = match.group("name").decode("utf-8", "replace")
                    if line.lstrip().startswith(b"class"):
                        return Scope(line.strip(), name, i, -1)
                    return Scope(line.strip(), name, i, scope_end(lines, i))
            level = min(level, indent)
            if level == 0 and i < index:
                return None
    return None


def scope_end(lines: Sequence[bytes], start: int) -> int:
    base = _indent(lines[start])
    end = start + 1
    # the signature may span lines: skip to the line ending with ':'
    while end < len(lines) and not lines[end - 1].rstrip().endswith(b":") and end - start < 30:
        end += 1
    last = end
    for i in range(end, len(lines)):
        line = lines[i]
        if _blank(line):
            continue
        if _indent(line) <= base:
            break
        last = i + 1
    return last


def find_scope(lines: Sequence[bytes], scope: Scope, near: int) -> Scope | None:
    """The same def (by name) in another version of the file, the one nearest line ``near``."""
    text = b"".join(lines)
    pattern = re.compile(rb"^[ \t]*(?:async[ \t]+def|def|class)[ \t]+" + re.escape(scope.name.encode()) + rb"\b", re.M)
    best: int | None = None
    for match in pattern.finditer(text):
        i = text.count(b"\n", 0, match.start())
        if best is None or abs(i - near) < abs(best - near):
            best = i
    if best is None:
        return None
    return Scope(lines[best].strip(), scope.name, best, scope_end(lines, best))


def changed_lines(a: Sequence[bytes], b: Sequence[bytes]) -> tuple[int, int]:
    """(lines removed, lines added) between two line lists."""
    removed = added = 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, list(a), list(b), autojunk=False).get_opcodes():
        if tag != "equal":
            removed += i2 - i1
            added += j2 - j1
    return removed, added


NEAR = 6


def semantic_drift(old: Sequence[bytes], old_at: int, new: Sequence[bytes], new_at: int, size: int,
                   *, focus: int = 0, python: bool = True, near: int = NEAR) -> list[str]:
    """Warnings for a hunk that lands at ``new_at`` in ``new`` and at ``old_at`` in ``old``
    (0-based, covering ``size`` lines of the pre-patch text; its first change ``focus`` lines
    in) when what surrounds it changed."""
    warnings: list[str] = []
    scope = enclosing_scope(old, old_at + focus) if python else None
    if scope is not None and scope.end >= 0:  # a class is too coarse: look at the lines near
        other = find_scope(new, scope, new_at + focus)
        if other is None:
            return [f"'{scope.name}' around this hunk is gone on the new pin"]
        body_old, body_new = old[scope.start : scope.end], new[other.start : other.end]
        if [_norm(x) for x in body_old] != [_norm(x) for x in body_new]:
            removed, added = changed_lines(body_old, body_new)
            warnings.append(f"'{scope.name}' around this hunk changed between the pins (-{removed} +{added} lines)")
        return warnings
    above_old, above_new = old[max(old_at - near, 0) : old_at], new[max(new_at - near, 0) : new_at]
    below_old, below_new = old[old_at + size : old_at + size + near], new[new_at + size : new_at + size + near]
    if list(above_old) != list(above_new) or list(below_old) != list(below_new):
        warnings.append(f"lines within {near} of this hunk changed between the pins")
    return warnings


@dataclass
class Tally:
    """What a rebase did with each patch."""

    moved: list[str] = field(default_factory=list)
    merged: list[str] = field(default_factory=list)
    retired: list[str] = field(default_factory=list)
    by_hand: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    variants: list[str] = field(default_factory=list)  # --keep-old: the old diff kept as a variant
    not_carried: list[str] = field(default_factory=list)  # n/a on the old pin: passed over as they are

    def to_json(self) -> dict[str, list[str]]:
        return {"moved": self.moved, "merged": self.merged, "retired": self.retired,
                "by_hand": self.by_hand, "skipped": self.skipped, "variants": self.variants,
                "not_carried": self.not_carried}
