"""gqueue bisect pins: the first release in a range where a patch stops applying (or CMD fails).

The releases come from the package index; each tested release's sdist is fetched (verified
against the index's sha256, cached) and imported into work/.git as ``gqueue/pin/vllm-X``,
only for the releases the binary search visits. The series is applied in memory on that
tree up to the named patch (the whole series without --patch); with --patch, earlier patches
that no longer apply are left out and named, so the answer is about the named patch itself. With a command, the tree
with those patches is written to a temporary folder and the command runs there: exit 0
good, 125 skip, 1-127 bad; a release where the patches do not apply is skipped.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from packaging.version import InvalidVersion, Version

from ..errors import StateError, UsageError
from ..model.bisect import BAD, GOOD, SKIP, Search, verdict_of
from ..model.pin import Pin
from ..model.series import SeriesEntry
from ..upstream import index
from ..vcs.git import CommitSpec
from .bisect import Runner, subprocess_runner
from .checkout import import_pin
from .engine import TreeView, apply_patch
from .naming import patch_name
from .stackops import commit_author, commit_message
from .workspace import Workspace

SCRATCH = "refs/gqueue/bisect-pins"


@dataclass(frozen=True)
class PinStep:
    version: str
    verdict: str
    detail: str

    def to_json(self) -> dict[str, object]:
        return {"version": self.version, "verdict": self.verdict, "detail": self.detail}


@dataclass
class PinBisectResult:
    versions: list[str]
    patch: str | None
    steps: list[PinStep] = field(default_factory=list)
    first_bad: str | None = None
    last_good: str | None = None
    candidates: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {
            "range": [self.versions[0], self.versions[-1]], "releases": len(self.versions), "patch": self.patch,
            "first_bad": self.first_bad, "last_good": self.last_good, "candidates": self.candidates,
            "steps": [s.to_json() for s in self.steps], "fetched": len(self.steps),
        }


def releases(project: str, lo: str, hi: str, *, pre: bool = False) -> tuple[list[str], dict[str, str]]:
    """Versions in [lo, hi] that have an sdist on the index, oldest first, and their sdist sha256."""
    try:
        low, high = Version(lo), Version(hi)
    except InvalidVersion as exc:
        raise UsageError(f"not a version: {exc}") from None
    if low >= high:
        raise UsageError(f"--from {lo} must be older than --to {hi}")
    versions, files = index.list_files(project)
    found: dict[Version, tuple[str, str]] = {}
    for raw in versions:
        try:
            version = Version(raw)
        except InvalidVersion:
            continue
        if not low <= version <= high or (version.is_prerelease and not pre):
            continue
        names = {f"{project}-{raw}.tar.gz", f"{project.replace('-', '_')}-{raw}.tar.gz"}
        sdist = next((f for f in files if f.filename in names and f.sha256), None)
        if sdist is not None:
            found[version] = (raw, sdist.sha256)
    ordered = [found[v] for v in sorted(found)]
    if len(ordered) < 2:
        raise StateError(f"the index has fewer than two {project} sdists between {lo} and {hi}")
    return [raw for raw, _ in ordered], dict(ordered)


class _Tester:
    def __init__(self, ws: Workspace, entries: list[SeriesEntry], shas: dict[str, str], argv: Sequence[str],
                 runner: Runner, *, lenient: bool) -> None:
        self.ws, self.entries, self.shas, self.argv, self.runner = ws, entries, shas, argv, runner
        self.lenient = lenient  # patches before the named one may fail (they are left out)
        self.project = ws.pin().project
        self.steps: list[PinStep] = []
        self.left_out: list[str] = []

    def apply(self, version: str) -> tuple[str, str | None]:
        """(commit, None) with the entries applied, or (base, why not) when one does not apply."""
        pin = Pin("bisect", f"{self.project}=={version}", self.project, version, None,
                  {"sdist": f"sha256:{self.shas[version]}"}, 0)
        self.ws.reporter.progress(f"fetching and importing {self.project} {version}")
        base, _files = import_pin(self.ws, pin)
        view = TreeView(self.ws.repo, base)
        specs = []
        self.left_out = []
        for number, entry in enumerate(self.entries, start=1):
            patch = self.ws.store.read_patch(entry.name, line=entry.line)
            outcome = apply_patch(view, patch, strip=entry.strip)
            if not outcome.ok:
                if self.lenient and number < len(self.entries):
                    self.left_out.append(entry.name)
                    continue
                failure = outcome.first_failure()
                where = f": {failure[0].path} [{failure[0].status}]" if failure else ""
                return base, f"{entry.name} does not apply{where}" + self._without()
            specs.append(CommitSpec(commit_message(patch), outcome.changes, commit_author(patch)))
        if not self.argv:
            return base, None
        commits = self.ws.repo.write_commits(base, specs, SCRATCH) if specs else [base]
        return commits[-1], None

    def _without(self) -> str:
        return f" (left out, not applying: {', '.join(self.left_out)})" if self.left_out else ""

    def __call__(self, version: str) -> str:
        commit, failed = self.apply(version)
        if failed is not None:
            verdict = SKIP if self.argv else BAD
            self.steps.append(PinStep(version, verdict, failed))
            self.ws.reporter.note(f"{version}: {verdict} ({failed})")
            return verdict
        if not self.argv:
            self.steps.append(PinStep(version, GOOD, "applies" + self._without()))
            self.ws.reporter.note(f"{version}: good (applies{self._without()})")
            return GOOD
        with tempfile.TemporaryDirectory(prefix=f"gqueue-{version}-") as tmp:
            self.ws.repo.export_files(commit, Path(tmp))  # a throw-away index: work/ is untouched
            env = dict(os.environ, GQUEUE_BISECT_VERSION=version)
            code = self.runner(self.argv, Path(tmp), env)
        judged = verdict_of(code)
        if judged is None:
            raise StateError(f"the command exited {code} on {version}: bisect aborted")
        self.steps.append(PinStep(version, judged, f"exit {code}"))
        self.ws.reporter.note(f"{version}: {judged} (exit {code})")
        return judged


def entries_through(ws: Workspace, patch: str | None) -> list[SeriesEntry]:
    series = ws.store.read_series()
    if patch is None:
        return list(series.entries)
    name = patch_name(ws.store, patch, series=series)  # a name, its stem, the id or a unique prefix
    return list(series.entries[: series.index(name) + 1])


def run(ws: Workspace, *, lo: str, hi: str, patch: str | None, argv: Sequence[str] = (), pre: bool = False,
        runner: Runner = subprocess_runner) -> PinBisectResult:
    if patch is None and not argv:
        raise UsageError("give --patch NAME, a command after '--', or both")
    ws.require_work()
    entries = entries_through(ws, patch)
    versions, shas = releases(ws.pin().project, lo, hi, pre=pre)
    result = PinBisectResult(versions, entries[-1].name if patch else None)
    tester = _Tester(ws, entries, shas, argv, runner, lenient=patch is not None)
    try:
        last = tester(versions[-1])
        if last == GOOD:
            result.last_good = versions[-1]
            return result
        if last == SKIP:
            raise StateError(f"cannot test the newest release of the range, {versions[-1]}: {tester.steps[-1].detail}")
        if tester(versions[0]) != GOOD:
            raise StateError(f"the oldest release of the range, {versions[0]}, is not good: {tester.steps[-1].detail}",
                             hint="give an older --from")
        search = Search(0, len(versions) - 1)
        while (position := search.next_probe()) is not None:
            search = search.record(position, tester(versions[position]))
    finally:
        result.steps = tester.steps
        if ws.repo.rev(SCRATCH) is not None:
            ws.repo.delete_ref(SCRATCH)
    result.candidates = [versions[p] for p in search.candidates]
    result.first_bad = result.candidates[0] if len(result.candidates) == 1 else None
    result.last_good = versions[search.good]
    return result
