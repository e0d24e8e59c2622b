"""Which file of queue/ a series entry uses on a given release: variants of one patch per pin.

A series entry NAME may have several files, each a whole patch with its own header:
``queue/NAME`` (the main file, usually for the main pin) and ``queue/variants/<dir>/NAME``
(typically ``<dir>`` is the release the variant was written for). Each file's
``applies_to.vllm`` says which releases it serves. On release V the entry uses the one file
whose range admits V; if none does, the patch is not carried on V ("n/a"), and the main
file's ``retired:`` field (or the ranges) say why. Two files admitting V is an error.

Pure: the caller reads the files and passes what their headers say.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from ..errors import FormatError

VARIANTS = "variants"  # the folder under queue/ that holds the variants
RETIRE_REASONS = ("fixed-upstream", "obsolete")
RETIRED_KEYS = ("in", "reason", "by", "test")


@dataclass(frozen=True)
class Candidate:
    """One file of an entry: its path under queue/, its applies_to.vllm, its retired field."""

    file: str
    spec: str | None
    retired: Any = None
    spec_line: int | None = None


@dataclass(frozen=True)
class Resolution:
    """What entry ``name`` uses on ``version``: ``file`` (a path under queue/), or None with ``reason``."""

    name: str
    version: str
    file: str | None
    reason: str = ""
    patch_id: str = ""  # the id its files carry (filled in by the reader)

    @property
    def carried(self) -> bool:
        return self.file is not None

    @property
    def variant(self) -> bool:
        return self.file is not None and self.file != self.name


def variant_file(folder: str, name: str) -> str:
    """The path under queue/ of entry ``name``'s variant in ``folder`` (e.g. a release)."""
    return f"{VARIANTS}/{folder}/{name}"


def split_variant(file: str) -> tuple[str | None, str]:
    """``variants/0.24.0/NAME`` -> ('0.24.0', 'NAME'); a main file -> (None, file)."""
    parts = file.split("/", 2)
    if len(parts) == 3 and parts[0] == VARIANTS:
        return parts[1], parts[2]
    return None, file


def admits(spec: str | None, version: str) -> bool:
    """Whether ``spec`` (a PEP 440 specifier, None for any release) admits ``version``.

    A specifier or version that does not parse admits it (lint reports the specifier): a
    broken range never hides a patch."""
    if spec is None:
        return True
    try:
        return SpecifierSet(spec).contains(Version(version), prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return True


def retired_text(retired: Any) -> str:
    """A retired field as one phrase: 'retired in 0.34.0 (fixed-upstream by vllm#1; test t.py::x)'."""
    if not isinstance(retired, dict):
        return "retired"
    text = "retired" + (f" in {retired['in']}" if retired.get("in") else "")
    inner = [str(retired["reason"])] if retired.get("reason") else []
    if retired.get("by"):
        inner = [" ".join(inner + [f"by {retired['by']}"])]
    if retired.get("test"):
        inner.append(f"test {retired['test']}")
    return text + (f" ({'; '.join(inner)})" if inner else "")


def resolve(name: str, version: str, candidates: list[Candidate]) -> Resolution:
    """The file entry ``name`` uses on ``version``; ``candidates``: its main file first (if it
    exists), then its variants. Raises FormatError when two files admit ``version``."""
    fitting = [c for c in candidates if admits(c.spec, version)]
    if len(fitting) > 1:
        a, b = fitting[0], fitting[1]
        raise FormatError(
            f"queue/{a.file} and queue/{b.file} both admit {version} (applies_to.vllm '{a.spec or 'any'}' "
            f"and '{b.spec or 'any'}'): a release must have one variant of '{name}'",
            path=f"queue/{b.file}", line=b.spec_line,
            hint="narrow one of the two ranges so that they do not overlap",
        )
    if fitting:
        return Resolution(name, version, fitting[0].file)
    return Resolution(name, version, None, not_carried_reason(version, candidates))


def not_carried_reason(version: str, candidates: list[Candidate]) -> str:
    retired = next((c.retired for c in candidates if c.retired is not None), None)
    if retired is not None:
        return retired_text(retired)
    ranges = ", ".join(f"'{c.spec}'" for c in candidates)
    return f"applies_to {ranges} excludes {version}"


def retired_problems(retired: Any) -> list[tuple[str | None, str]]:
    """What is wrong with a ``retired:`` field: (sub-key or None, message) pairs."""
    if not isinstance(retired, dict):
        return [(None, f"retired must be a mapping ({', '.join(RETIRED_KEYS)}), not {type(retired).__name__}")]
    out: list[tuple[str | None, str]] = []
    for key in retired:
        if key not in RETIRED_KEYS:
            out.append((key, f"unknown key 'retired.{key}' (one of: {', '.join(RETIRED_KEYS)})"))
    for key in ("in", "reason"):
        if key not in retired:
            out.append((key, f"retired lacks '{key}'"))
    if "reason" in retired and retired["reason"] not in RETIRE_REASONS:
        out.append(("reason", f"retired.reason '{retired['reason']}' is not one of: {', '.join(RETIRE_REASONS)}"))
    if "in" in retired:
        try:
            Version(str(retired["in"]))
        except InvalidVersion:
            out.append(("in", f"retired.in '{retired['in']}' is not a version"))
    for key in ("by", "test"):
        if key in retired and not isinstance(retired[key], str):
            out.append((key, f"retired.{key} must be a string"))
    return out


# --- what a rebase that keeps the old pin writes ------------------------------------------------------


def _lower_bounds(spec: str | None) -> list[str]:
    if spec is None:
        return []
    try:
        parsed = SpecifierSet(spec)
    except InvalidSpecifier:
        return []
    return sorted(str(s) for s in parsed if s.operator in (">=", ">"))


def bounded_below(spec: str | None, release: str) -> str:
    """``spec`` cut off below ``release`` (its lower bounds kept): the range of the old pin's
    variant once ``release`` gets a diff of its own, or of a patch retired in ``release``."""
    return ",".join([*_lower_bounds(spec), f"<{release}"])


def widened(spec: str | None, old: str, new: str) -> str | None:
    """A range that admits both ``old`` and ``new`` (``spec``'s lower bounds, else ``>=old``);
    None where ``spec`` admits both already."""
    if admits(spec, old) and admits(spec, new):
        return None
    lows = [b for b in _lower_bounds(spec) if admits(b, old)]
    return ",".join(lows) if lows else f">={old}"


def from_release(release: str) -> str:
    """The range of a main file rewritten for ``release``."""
    return f">={release}"


def with_vllm_range(applies_to: Any, spec: str) -> Any:
    """The ``applies_to`` value with its vllm range set to ``spec`` (other keys kept)."""
    if isinstance(applies_to, dict):
        return {**applies_to, "vllm": spec}
    return {"vllm": spec}


def retired_field(release: str, reason: str, by: str | None = None, test: str | None = None) -> dict[str, str]:
    field = {"in": release, "reason": reason}
    if by:
        field["by"] = by
    if test:
        field["test"] = test
    return field


def same_change(old_body: bytes, new_body: bytes, strip: int = 1) -> bool:
    """Whether two diffs make the same change: the same files, hunk for hunk the same lines; only
    where they land (the ``@@`` numbers) and the preimage blobs (``index`` lines) may differ. One
    such diff applies on either release (at an offset), so one file can serve both."""
    from .diff import parse_diff

    def shape(body: bytes) -> list[tuple[str | None, str | None, list[tuple[tuple[bytes, bytes], ...]]]]:
        return [(fd.old_path, fd.new_path, [h.lines for h in fd.hunks]) for fd in parse_diff(body, strip=strip)]

    try:
        return shape(old_body) == shape(new_body)
    except FormatError:
        return False
