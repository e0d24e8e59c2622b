"""The lint rules: pure checks over parsed headers, diffs and the series.

Each rule has an id, a severity and a one-line description (``RULES``); a check returns
``Finding`` values and never raises. ``ops/lint.py`` reads the files and runs them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterator

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from ..errors import FormatError, one_line
from .diff import FileDiff, byte_lines, parse_diff
from .ids import name_fits_id
from .series import Series, SeriesEntry
from .paths import path_problem
from .meta import (
    ALLOW_FLAGS, APPLIES_TO_KEYS, IMPLEMENTATION_STATUSES, LIFECYCLES, RELATIONSHIPS, REQUIRED, ROLES, SCHEMA,
    TIERS, UPSTREAM_KEYS, UPSTREAM_STATES, author_problem,
)
from .profile import CANDIDATE_KEYS
from .variants import Candidate, admits, resolve, retired_problems, split_variant

ERROR = "error"
WARNING = "warning"

RULES: dict[str, tuple[str, str]] = {
    "series-parse": (ERROR, "the series file parses"),
    "pin-parse": (ERROR, "vendor-pin.txt parses and names the pinned release"),
    "header-parse": (ERROR, "the patch has a YAML header between '---' and '...' that parses to a mapping"),
    "header-required": (ERROR, "the header has an id and a title"),
    "header-type": (ERROR, "every known header key has the type the schema gives it"),
    "header-value": (ERROR, "lifecycle, tier, role, upstream state/relationship, status and allow use allowed values"),
    "header-unknown-key": (ERROR, "no unknown key in the header, upstream or applies_to"),
    "header-author": (ERROR, "author is one line 'Name <mail>' (it goes into the commit as it is)"),
    "id-duplicate": (ERROR, "every patch id is used once"),
    "file-name-id": (ERROR, "the file name starts with the patch id and a '-' (or is ID.patch)"),
    "series-missing-file": (ERROR, "every series entry has its file in queue/"),
    "queue-unlisted": (ERROR, "every file in queue/ is in the series or parked ('# parked: NAME'), unless retired or merged upstream"),
    "parked-listed": (WARNING, "a parked patch is not also in the series, and its file exists"),
    "requires-unknown": (ERROR, "requires names ids of patches in the queue"),
    "requires-order": (ERROR, "a required patch comes earlier in the series"),
    "requires-inactive": (ERROR, "a required patch is active: in the series and not retired/merged/deprecated"),
    "conflicts-active": (ERROR, "two conflicting patches are not both active"),
    "applies-to-parse": (ERROR, "applies_to.vllm is a valid version specifier"),
    "applies-to-pin": (ERROR, "every file in queue/ (main and variants) admits a gated pin, and no gated pin has two "
                              "files of one patch that admit it"),
    "variant-id": (ERROR, "a variant (queue/variants/DIR/NAME) has the id of queue/NAME and its NAME is in the series "
                          "or parked"),
    "requires-not-carried": (ERROR, "a patch carried on a gated pin requires only patches carried there"),
    "header-retired": (ERROR, "retired is {in: VERSION, reason: fixed-upstream|obsolete, by, test}, and applies_to "
                              "excludes the release it names"),
    "env-flag-spelling": (ERROR, "env_flag is GENESIS_/SNDR_ + ENABLE_ (DISABLE_ when default_on) + the id"),
    "backport-credit": (ERROR, "a backport credits someone"),
    "backport-pr": (ERROR, "a backport names its upstream PR"),
    "candidate-when-key": (WARNING, "candidate_when uses known predicates"),
    "diff-parse": (ERROR, "the diff body parses"),
    "diff-empty": (WARNING, "the patch changes at least one file"),
    "path-outside-tree": (ERROR, "no file outside the tree, absolute, inside .git, or named as git refuses (.GIT, GIT~1, NUL)"),
    "file-mode": (ERROR, "only regular files (modes 100644, 100755)"),
    "binary-file": (ERROR, "no binary file, unless allow: [binary]"),
    "crlf": (ERROR, "no CRLF line ending added to an LF file, unless allow: [crlf]"),
    "trailing-whitespace": (ERROR, "no added line ends in spaces or tabs, unless allow: [trailing-whitespace]"),
    "profile-parse": (ERROR, "every profiles/*.yaml parses and uses known keys and values"),
    "profile-plan": (ERROR, "every profile resolves under every policy without dropping a required patch"),
    "profile-reference": (WARNING, "a profile names only patches of the series"),
}

INACTIVE_LIFECYCLES = ("retired", "merged_upstream", "deprecated")
BACKPORTS = ("backport", "partial-backport")
_VALUES: dict[str, tuple[str, ...]] = {
    "lifecycle": LIFECYCLES, "tier": TIERS, "implementation_status": IMPLEMENTATION_STATUSES, "role": ROLES,
}
_REGULAR = ("100644", "100755")
_HUNK = re.compile(rb"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    rule: str
    message: str
    severity: str = ""

    def __post_init__(self) -> None:
        if not self.severity:
            object.__setattr__(self, "severity", RULES[self.rule][0])

    def render(self) -> str:
        return one_line(f"{self.path}:{self.line}: {self.severity}[{self.rule}]: {self.message}")

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "line": self.line, "rule": self.rule, "severity": self.severity, "message": self.message}


@dataclass(frozen=True)
class HeaderView:
    """What the rules see of one patch file (the header may be empty when it did not parse)."""

    name: str
    path: str
    raw: dict[str, Any]
    key_lines: dict[str, int] = field(default_factory=dict)
    body: bytes = b""
    body_line: int = 1
    parsed: bool = True

    @property
    def id(self) -> str:
        value = self.raw.get("id")
        return str(value) if value not in (None, "") else ""

    def line(self, key: str) -> int:
        return self.key_lines.get(key, 1)

    def strings(self, key: str) -> list[str]:
        value = self.raw.get(key)
        return [str(v) for v in value] if isinstance(value, list) else []

    @property
    def allow(self) -> set[str]:
        return set(self.strings("allow"))

    @property
    def lifecycle(self) -> str:
        return str(self.raw.get("lifecycle") or "experimental")


def _f(view: HeaderView, key: str, rule: str, message: str) -> Finding:
    return Finding(view.path, view.line(key), rule, message)


# --- header schema ------------------------------------------------------------------


def check_schema(view: HeaderView) -> list[Finding]:
    out: list[Finding] = []
    for key in REQUIRED:
        if view.raw.get(key) in (None, ""):
            out.append(Finding(view.path, 1, "header-required", f"header lacks required key '{key}'"))
    for key, value in view.raw.items():
        expected = SCHEMA.get(key)
        if expected is None:
            out.append(_f(view, key, "header-unknown-key", f"unknown header key '{key}'"))
        elif not isinstance(value, expected) or (bool not in expected and isinstance(value, bool)):
            names = " or ".join("null" if t is type(None) else t.__name__ for t in expected)
            out.append(_f(view, key, "header-type", f"'{key}' must be {names}, not {type(value).__name__}"))
        elif key in _VALUES and value not in _VALUES[key]:
            out.append(_f(view, key, "header-value", f"{key} '{value}' is not one of: {', '.join(_VALUES[key])}"))
        elif key == "author" and author_problem(str(value)) is not None:
            out.append(_f(view, key, "header-author", f"'author' {author_problem(str(value))}"))
    out.extend(_check_lists(view))
    out.extend(_check_upstream(view))
    out.extend(_check_applies_keys(view))
    return out


def _check_lists(view: HeaderView) -> list[Finding]:
    out = []
    for key in ("requires", "conflicts", "composes_with", "allow"):
        value = view.raw.get(key)
        if isinstance(value, list) and not all(isinstance(v, str) for v in value):
            out.append(_f(view, key, "header-type", f"'{key}' must be a list of strings"))
    for flag in view.strings("allow"):
        if flag not in ALLOW_FLAGS:
            out.append(_f(view, "allow", "header-value", f"allow '{flag}' is not one of: {', '.join(ALLOW_FLAGS)}"))
    return out


def _check_upstream(view: HeaderView) -> list[Finding]:
    up = view.raw.get("upstream")
    if not isinstance(up, dict):
        return []
    out = []
    for key, value in up.items():
        if key not in UPSTREAM_KEYS:
            out.append(_f(view, "upstream", "header-unknown-key", f"unknown key 'upstream.{key}'"))
    checks = (("state", UPSTREAM_STATES), ("relationship", RELATIONSHIPS))
    for key, allowed in checks:
        value = up.get(key)
        if value is not None and value not in allowed:
            out.append(_f(view, "upstream", "header-value", f"upstream.{key} '{value}' is not one of: {', '.join(allowed)}"))
    pr = up.get("pr")
    if pr is not None and (isinstance(pr, bool) or not isinstance(pr, (int, str))):
        out.append(_f(view, "upstream", "header-type", f"upstream.pr must be an integer or a string, not {type(pr).__name__}"))
    return out


def _check_applies_keys(view: HeaderView) -> list[Finding]:
    applies = view.raw.get("applies_to")
    if not isinstance(applies, dict):
        return []
    return [
        _f(view, "applies_to", "header-unknown-key", f"unknown key 'applies_to.{key}'")
        for key in applies if key not in APPLIES_TO_KEYS
    ]


# --- per-patch semantics ----------------------------------------------------------------


def vllm_spec(raw: dict[str, Any]) -> str | None:
    applies = raw.get("applies_to")
    if isinstance(applies, str):
        return applies
    if isinstance(applies, dict) and applies.get("vllm") is not None:
        return str(applies["vllm"])
    return None


def check_applies_to(view: HeaderView, pin_version: str | None) -> list[Finding]:
    """applies_to.vllm parses (and, given ``pin_version``, admits it; the queue-wide form is check_pins)."""
    spec = vllm_spec(view.raw)
    if spec is None:
        return []
    try:
        specifier = SpecifierSet(spec)
    except InvalidSpecifier:
        return [_f(view, "applies_to", "applies-to-parse", f"applies_to.vllm '{spec}' is not a version specifier")]
    if pin_version is None:
        return []
    try:
        version = Version(pin_version)
    except InvalidVersion:
        return []
    if not specifier.contains(version, prereleases=True):
        return [_f(view, "applies_to", "applies-to-pin", f"applies_to.vllm '{spec}' does not admit the pinned {pin_version}")]
    return []


def check_retired(view: HeaderView) -> list[Finding]:
    """The retired field's shape, and that applies_to no longer admits the release it was retired in."""
    retired = view.raw.get("retired")
    if retired is None:
        return []
    out = [_f(view, "retired", "header-retired", message) for _key, message in retired_problems(retired)]
    if not out and isinstance(retired, dict):
        spec, release = vllm_spec(view.raw), str(retired["in"])
        if admits(spec, release):
            out.append(_f(view, "applies_to" if spec else "retired", "header-retired",
                          f"retired in {release}, but applies_to.vllm '{spec or '(any release)'}' admits {release}: "
                          f"bound it below (such as '<{release}')"))
    return out


def expected_flag_prefixes(patch_id: str, default_on: bool) -> tuple[str, ...]:
    verb = "DISABLE" if default_on else "ENABLE"
    suffix = re.sub(r"[^A-Z0-9]", "_", patch_id.upper())
    return tuple(f"{p}_{verb}_{suffix}" for p in ("GENESIS", "SNDR"))


def check_env_flag(view: HeaderView) -> list[Finding]:
    flag = view.raw.get("env_flag")
    if not isinstance(flag, str) or not flag or not view.id:
        return []
    default_on = view.raw.get("default_on") is True
    prefixes = expected_flag_prefixes(view.id, default_on)
    if not re.fullmatch(r"[A-Z][A-Z0-9_]*", flag):
        return [_f(view, "env_flag", "env-flag-spelling", f"env_flag '{flag}' must be upper case letters, digits and '_'")]
    if any(flag == p or flag.startswith(p + "_") for p in prefixes):
        return []
    state = "default-on, so DISABLE" if default_on else "default-off, so ENABLE"
    return [_f(view, "env_flag", "env-flag-spelling",
               f"env_flag '{flag}' should start with {prefixes[0]} or {prefixes[1]} ({state})")]


def check_backport(view: HeaderView) -> list[Finding]:
    up = view.raw.get("upstream")
    if not isinstance(up, dict) or up.get("relationship") not in BACKPORTS:
        return []
    out = []
    credit = view.raw.get("credit")
    names = credit if isinstance(credit, list) else [credit]
    if not any(isinstance(n, str) and n.strip() for n in names):
        out.append(_f(view, "credit" if "credit" in view.raw else "upstream", "backport-credit",
                      "a backport must credit its upstream author (credit: NAME)"))
    if up.get("pr") in (None, "", 0):
        out.append(_f(view, "upstream", "backport-pr", "a backport must name its upstream PR (upstream.pr)"))
    return out


def check_candidate_when(view: HeaderView) -> list[Finding]:
    when = view.raw.get("candidate_when")
    if not isinstance(when, dict):
        return []
    return [
        _f(view, "candidate_when", "candidate-when-key", f"unknown candidate_when predicate '{key}'")
        for key in when if key not in CANDIDATE_KEYS
    ]


# --- the diff -------------------------------------------------------------------------


def unsafe_path(path: str, mode: str | None = None) -> str | None:
    """Why ``path`` may not be written by a patch, or None (push's rule: model/paths.py)."""
    return path_problem(path, mode)


def check_diff(view: HeaderView, strip: int = 1) -> list[Finding]:
    try:
        diffs = parse_diff(view.body, path=view.path, first_line=view.body_line, strip=strip)
    except FormatError as exc:
        return [Finding(view.path, exc.line or view.body_line, "diff-parse", exc.message)]
    if not diffs:
        return [Finding(view.path, view.body_line, "diff-empty", "the patch changes no file")]
    out: list[Finding] = []
    allow = view.allow
    for fd in diffs:
        out.extend(_check_file(view, fd, allow))
    if not {"crlf", "trailing-whitespace"} <= allow:
        out.extend(_check_added_lines(view, allow))
    return out


def _check_file(view: HeaderView, fd: FileDiff, allow: set[str]) -> list[Finding]:
    out = []
    for p, mode in {(p, m) for p, m in ((fd.old_path, fd.old_mode), (fd.new_path, fd.new_mode)) if p is not None}:
        reason = unsafe_path(p, mode)
        if reason:
            out.append(Finding(view.path, fd.line, "path-outside-tree", f"the patch touches '{p}', {reason}"))
    for mode in (fd.old_mode, fd.new_mode):
        if mode is not None and mode not in _REGULAR:
            out.append(Finding(view.path, fd.line, "file-mode", f"'{fd.path}' gets mode {mode}; only regular files"))
            break
    if fd.binary and "binary" not in allow:
        out.append(Finding(view.path, fd.line, "binary-file", f"binary change to '{fd.path}'"))
    return out


def hunk_lines(body: bytes, first_line: int) -> Iterator[tuple[str, int, bytes, bytes]]:
    """(file, patch-file line, tag, text) for every line inside a hunk; tolerant of junk."""
    path = ""
    old = new = 0
    for number, raw in enumerate(byte_lines(body), start=first_line):
        if old > 0 or new > 0:
            tag = raw[:1]
            if raw.startswith(b"\\"):
                continue
            if raw in (b"\n", b"\r\n"):
                tag, raw = b" ", b" " + raw
            if tag in (b" ", b"-"):
                old -= 1
            if tag in (b" ", b"+"):
                new -= 1
            if tag in (b" ", b"-", b"+"):
                yield path, number, tag, raw[1:]
                continue
            old = new = 0
        if raw.startswith(b"+++ "):
            name = raw[4:].split(b"\t", 1)[0].rstrip(b"\r\n").decode("utf-8", "replace")
            path = name.split("/", 1)[1] if "/" in name else name
        match = _HUNK.match(raw)
        if match:
            old = int(match.group(1)) if match.group(1) is not None else 1
            new = int(match.group(2)) if match.group(2) is not None else 1


_ADDED_LINE_RULES = {"crlf": "CRLF", "trailing-whitespace": "whitespace"}


def _check_added_lines(view: HeaderView, allow: set[str]) -> list[Finding]:
    """CRLF endings and trailing whitespace in added lines: one finding per rule and file, on
    its first such line, with how many there are (a new protocol-data file of CRLF lines is
    one finding, not one a line)."""
    lines = list(hunk_lines(view.body, view.body_line))
    crlf_files = {p for p, _n, tag, text in lines if tag != b"+" and text.endswith(b"\r\n")}
    found: dict[tuple[str, str], list[int]] = {}  # (rule, file) -> patch-file lines, in order
    for path, number, tag, text in lines:
        if tag != b"+":
            continue
        if "crlf" not in allow and text.endswith(b"\r\n") and path not in crlf_files:
            found.setdefault(("crlf", path), []).append(number)
        content = text.rstrip(b"\r\n")
        if "trailing-whitespace" not in allow and content != content.rstrip(b" \t"):
            found.setdefault(("trailing-whitespace", path), []).append(number)
    out = []
    for (rule, path), numbers in found.items():
        what = _ADDED_LINE_RULES[rule]
        message = (f"added line in '{path}' ends in {what}" if len(numbers) == 1 else
                   f"{len(numbers)} added lines in '{path}' end in {what} (this one first; lines {_ranges(numbers)})")
        out.append(Finding(view.path, numbers[0], rule, message))
    return sorted(out, key=lambda f: f.line)


def _ranges(numbers: list[int]) -> str:
    """1-3, 7, 9-10 for [1, 2, 3, 7, 9, 10]."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def check_patch(view: HeaderView, *, pin_version: str | None, strip: int = 1) -> list[Finding]:
    """Every single-file rule for one patch."""
    if not view.parsed:
        return []
    out = check_schema(view)
    out += check_applies_to(view, pin_version)
    out += check_retired(view)
    out += check_env_flag(view)
    out += check_backport(view)
    out += check_candidate_when(view)
    out += check_diff(view, strip)
    return out


# --- the queue as a whole ------------------------------------------------------------------


def _exclusive(a: SeriesEntry, b: SeriesEntry) -> bool:
    """True when no guard selection can select both entries."""
    return any(g[0] == "+" and ("-" + g[1:]) in b.guards for g in a.guards) or any(
        g[0] == "+" and ("-" + g[1:]) in a.guards for g in b.guards
    )


def check_queue(series: Series, views: dict[str, HeaderView], files: list[str],
                pins: list[tuple[str, str]] | None = None) -> list[Finding]:
    """Rules that look at several patches: ids, names, series membership, requires, conflicts,
    and, given the gated ``pins`` (description, release), which file serves each one."""
    out: list[Finding] = []
    out += _check_ids(views)
    out += _check_membership(series, views, files)
    out += _check_relations(series, views)
    out += _check_variants(series, views)
    if pins:
        out += check_pins(series, views, pins)
    return out


def _is_variant(name: str) -> bool:
    return split_variant(name)[0] is not None


def _check_variants(series: Series, views: dict[str, HeaderView]) -> list[Finding]:
    out = []
    listed = set(series.names) | set(series.parked)
    for name, view in views.items():
        folder, entry = split_variant(name)
        if folder is None:
            continue
        if entry not in listed:
            out.append(Finding(view.path, 1, "variant-id",
                               f"variant of '{entry}', which is neither in the series nor parked"))
        main = views.get(entry)
        if main is not None and main.parsed and view.parsed and main.id and view.id != main.id:
            out.append(_f(view, "id", "variant-id",
                          f"id '{view.id}' is not queue/{entry}'s '{main.id}': a variant keeps its patch's id"))
    return out


def _candidates(name: str, views: dict[str, HeaderView], variants: dict[str, list[str]]) -> list[Candidate]:
    files = ([name] if name in views else []) + variants.get(name, [])
    return [Candidate(f, vllm_spec(views[f].raw), views[f].raw.get("retired"), views[f].key_lines.get("applies_to"))
            for f in files if views[f].parsed]


def check_pins(series: Series, views: dict[str, HeaderView], pins: list[tuple[str, str]]) -> list[Finding]:
    """Every file serves a gated pin; each entry has at most one file per gated pin; a patch
    carried on a pin requires only patches carried there."""
    out: list[Finding] = []
    shown = ", ".join(described for described, _v in pins)
    listed = set(series.names)
    for name, view in views.items():
        spec = vllm_spec(view.raw) if view.parsed else None
        if spec is None or any(admits(spec, version) for _d, version in pins):
            continue
        if name not in listed and not _is_variant(name) and view.lifecycle in INACTIVE_LIFECYCLES:
            continue  # out of the series as retired: a record (queue-unlisted keeps it too)
        what = ("delete it (docs/RETIRED.md keeps the record)" if view.raw.get("retired") is not None
                else "delete it or retire the patch")
        out.append(_f(view, "applies_to", "applies-to-pin",
                      f"applies_to.vllm '{spec}' serves no gated pin ({shown}): {what}"))
    variants: dict[str, list[str]] = {}
    for name in sorted(views):
        if _is_variant(name):
            variants.setdefault(split_variant(name)[1], []).append(name)
    for described, version in pins:
        carried: dict[str, str] = {}  # id -> the file that serves the pin
        missing: dict[str, str] = {}  # id -> why the patch is not carried on the pin
        for entry in series.entries:
            candidates = _candidates(entry.name, views, variants)
            if not candidates:
                continue
            try:
                found = resolve(entry.name, version, candidates)
            except FormatError as exc:
                out.append(Finding(exc.path or f"queue/{entry.name}", exc.line or 1, "applies-to-pin", exc.message))
                continue
            pid = views[candidates[0].file].id
            if found.file is None:
                missing[pid] = found.reason
            else:
                carried[pid] = found.file
        for pid, file in carried.items():
            view = views[file]
            for need in view.strings("requires"):
                if need in missing:
                    out.append(_f(view, "requires", "requires-not-carried",
                                  f"requires '{need}', which is not carried on {described}: {missing[need]}"))
    return out


def _check_ids(views: dict[str, HeaderView]) -> list[Finding]:
    out = []
    first: dict[str, str] = {}
    for name, view in views.items():
        if not view.parsed or not view.id:
            continue
        if _is_variant(name):  # shares its patch's id (variant-id checks that it does)
            if not name_fits_id(name, view.id):
                out.append(_f(view, "id", "file-name-id", f"file name '{name}' does not start with the id '{view.id}-'"))
            continue
        if view.id in first:
            out.append(_f(view, "id", "id-duplicate", f"id '{view.id}' is also used by queue/{first[view.id]}"))
        else:
            first[view.id] = name
        if not name_fits_id(name, view.id):
            out.append(_f(view, "id", "file-name-id", f"file name '{name}' does not start with the id '{view.id}-'"))
    return out


def _check_membership(series: Series, views: dict[str, HeaderView], files: list[str]) -> list[Finding]:
    out = []
    present = set(files)
    for entry in series.entries:
        if entry.name not in present:
            out.append(Finding(series.path, entry.line, "series-missing-file", f"'{entry.name}' has no file in queue/"))
    parked = set(series.parked)
    for name in files:
        view = views.get(name)
        retired = view is not None and view.raw.get("lifecycle") in ("merged_upstream", "retired")
        if name not in series and name not in parked and not retired and not _is_variant(name):
            out.append(Finding(f"queue/{name}", 1, "queue-unlisted",
                               f"'{name}' is neither in the series nor parked ('# parked: {name}')"))
    for number, raw in enumerate(series.lines, start=1):
        match = re.match(r"^#\s*parked:\s*(\S+)(?:\s.*)?$", raw.strip())
        if not match:
            continue
        name = match.group(1)
        if name in series:
            out.append(Finding(series.path, number, "parked-listed", f"'{name}' is parked and also in the series"))
        elif name not in present:
            out.append(Finding(series.path, number, "parked-listed", f"parked '{name}' has no file in queue/"))
    return out


def _check_relations(series: Series, views: dict[str, HeaderView]) -> list[Finding]:
    by_id = {v.id: v for n, v in views.items() if v.parsed and v.id and not _is_variant(n)}
    position = {views[e.name].id: i for i, e in enumerate(series.entries) if e.name in views and views[e.name].parsed}
    entries = {views[e.name].id: e for e in series.entries if e.name in views and views[e.name].parsed}
    active = {pid for pid in position if by_id[pid].lifecycle not in INACTIVE_LIFECYCLES}
    out: list[Finding] = []
    for pid, index in position.items():
        view = by_id[pid]
        if pid not in active:
            continue
        for need in view.strings("requires"):
            if need not in by_id:
                out.append(_f(view, "requires", "requires-unknown", f"requires '{need}', which no patch in queue/ has as id"))
            elif need not in position:
                out.append(_f(view, "requires", "requires-inactive", f"requires '{need}', which is not in the series"))
            elif need not in active:
                out.append(_f(view, "requires", "requires-inactive",
                              f"requires '{need}', whose lifecycle is {by_id[need].lifecycle}"))
            elif need == pid:
                out.append(_f(view, "requires", "requires-order", f"requires itself ('{need}')"))
            elif position[need] > index:
                out.append(_f(view, "requires", "requires-order",
                              f"requires '{need}', which comes later in the series (entry {position[need] + 1})"))
        for other in view.strings("conflicts"):
            if other == pid:
                out.append(_f(view, "conflicts", "conflicts-active", f"conflicts with itself ('{pid}'): it could never be applied"))
            elif other in active and not _exclusive(entries[pid], entries[other]):
                if other in by_id and pid in by_id[other].strings("conflicts") and other < pid:
                    continue  # reported once, on the first of the pair
                out.append(_f(view, "conflicts", "conflicts-active", f"conflicts with '{other}', and both are active"))
    return out
