"""gqueue lint: read the series, queue/ and vendor-pin.txt and run every rule on them.

Reading is lenient (a broken header is a finding, not an exception) so that one run
reports every problem. Needs no work tree and no lock.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import FormatError, GqueueError
from ..model.lint_rules import ERROR, RULES, WARNING, Finding, HeaderView, check_patch, check_queue
from ..model.patch import HEADER_START, check_opening, header_text, split_header, unclosed_header
from ..model.safeyaml import load_mapping
from ..model.series import Series
from ..store import PIN, QUEUE, SERIES, Store


@dataclass(frozen=True)
class LintReport:
    findings: tuple[Finding, ...]
    patches: int

    @property
    def errors(self) -> int:
        return sum(1 for f in self.findings if f.severity == ERROR)

    @property
    def warnings(self) -> int:
        return sum(1 for f in self.findings if f.severity == WARNING)

    def to_json(self) -> dict[str, object]:
        return {
            "patches": self.patches, "errors": self.errors, "warnings": self.warnings,
            "findings": [f.to_json() for f in self.findings],
        }

    def render(self) -> str:
        lines = [f.render() for f in self.findings]
        lines.append(f"{self.patches} patch(es): {self.errors} error(s), {self.warnings} warning(s)")
        return "\n".join(lines)


def queue_files(store: Store) -> list[str]:
    """Every patch file under queue/ (relative names; hidden files and editor leftovers skipped)."""
    root = store.queue_dir
    if not root.is_dir():
        return []
    names = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if not path.is_file() or any(part.startswith(".") for part in rel.split("/")):
            continue
        if rel.endswith(("~", ".orig", ".rej", ".swp")):
            continue
        names.append(rel)
    return names


def read_view(name: str, data: bytes) -> tuple[HeaderView, list[Finding]]:
    """The header view of one patch file, and a finding if its header does not parse."""
    path = f"{QUEUE}/{name}"
    header, body = split_header(data)

    def broken(message: str, line: int) -> tuple[HeaderView, list[Finding]]:
        return HeaderView(name, path, {}, {}, data, 1, parsed=False), [Finding(path, line, "header-parse", message)]

    try:
        check_opening(data, path=path)
    except FormatError as exc:
        return broken(exc.message, 1)
    if not header:
        if data.startswith(HEADER_START):
            error = unclosed_header(data, path=path)
            return broken(error.message, error.line or 1)
        return broken("no gqueue header (a YAML block between '---' and '...')", 1)
    try:
        text = header_text(header, path=path)
    except FormatError as exc:
        return broken(exc.message, exc.line or 1)
    try:
        raw, lines = load_mapping(text, path=path, first_line=2)
    except FormatError as exc:
        return broken(exc.message, exc.line or 1)
    body_line = header.count(b"\n") + 1
    return HeaderView(name, path, raw, lines, body, body_line), []


def _read_series(store: Store, findings: list[Finding]) -> Series | None:
    try:
        return store.read_series()
    except GqueueError as exc:
        findings.append(Finding(exc.path or SERIES, exc.line or 1, "series-parse", exc.message))
        return None


def _gated_pins(store: Store, findings: list[Finding]) -> list[tuple[str, str]] | None:
    """(description, release) of every pin of vendor-pin.txt: each one is gated."""
    try:
        pins = store.read_pins()
        pins.main  # noqa: B018 - a file without a 'pin' line is a finding
    except GqueueError as exc:
        findings.append(Finding(exc.path or PIN, exc.line or 1, "pin-parse", exc.message))
        return None
    return [(p.describe() if p.label == "pin" else f"{p.describe()} ({p.label})", p.version) for p in pins.pins]


def lint(store: Store, *, instead: dict[str, bytes] | None = None) -> LintReport:
    """Every rule over the queue; ``instead``: patch files' contents to lint in place of what
    queue/ holds (an edit checked before it is written)."""
    instead = instead or {}
    findings: list[Finding] = []
    series = _read_series(store, findings)
    pins = _gated_pins(store, findings)
    files = sorted(set(queue_files(store)) | set(instead))  # a file about to be written is linted too
    strips = {e.name: e.strip for e in series.entries} if series else {}
    views: dict[str, HeaderView] = {}
    for name in files:
        data = instead[name] if name in instead else (store.queue_dir / name).read_bytes()
        view, problems = read_view(name, data)
        views[name] = view
        findings.extend(problems)
        findings.extend(check_patch(view, pin_version=None, strip=strips.get(name, 1)))
    if series is not None:
        findings.extend(check_queue(series, views, files, pins))
        findings.extend(check_profiles(store))
    ordered = sorted(findings, key=lambda f: (f.path, f.line, f.rule, f.message))
    return LintReport(tuple(ordered), len(files))


def check_profiles(store: Store) -> list[Finding]:
    """Each profile parses, and resolves under every policy without a dropped dependency."""
    from ..model.policies import POLICIES
    from .plan import PROFILES, load_profile, plan, profile_names

    out: list[Finding] = []
    for name in profile_names(store):
        try:
            profile = load_profile(store, name)
        except GqueueError as exc:
            out.append(Finding(exc.path or f"{PROFILES}/{name}.yaml", exc.line or 1, "profile-parse", exc.message))
            continue
        where = profile.path or f"{PROFILES}/{name}.yaml"
        try:
            plans = {policy: plan(store, name, policy) for policy in POLICIES}
        except GqueueError:
            continue  # a patch of the series does not parse: reported by the header rules
        for policy, result in plans.items():
            out.extend(Finding(where, 1, "profile-plan", f"policy {policy}: {e}") for e in result.errors)
        first = plans["compat"]
        out.extend(Finding(where, 1, "profile-reference", w[len("profile "):]) for w in first.warnings
                   if w.startswith("profile ") and "not in the series" in w)
    return out


def describe_rules() -> list[tuple[str, str, str]]:
    """(rule, severity, description) for --list-rules and the documentation."""
    return [(rule, severity, text) for rule, (severity, text) in RULES.items()]


def new_errors(before: LintReport, after: LintReport) -> list[Finding]:
    """The errors of ``after`` that ``before`` does not have (compared without their lines,
    which an edit shifts)."""
    old: dict[tuple[str, str, str], int] = {}
    for f in before.findings:
        if f.severity == ERROR:
            key = (f.path, f.rule, f.message)
            old[key] = old.get(key, 0) + 1
    out = []
    for f in after.findings:
        if f.severity != ERROR:
            continue
        key = (f.path, f.rule, f.message)
        if old.get(key, 0) > 0:
            old[key] -= 1
        else:
            out.append(f)
    return out
