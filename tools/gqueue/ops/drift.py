"""``gqueue check``: the whole series against each pin, per hunk, without touching work/.

Both the base pin and each target pin are imported into work/.git (tags only: no branch, index
or file of the work tree moves), then :class:`SeriesRun` applies the series in memory.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from ..errors import UsageError
from ..model import drift as d
from ..model.patch import PatchFile
from ..model.pin import Pin, pin_from_spec
from ..model.series import SeriesEntry
from ..model.variants import Resolution
from ..upstream.resolve import record_hashes
from .checkout import import_pin, set_up_info
from .drift_engine import SeriesRun
from .engine import file_diffs
from .lint import lint
from .plan import select_patches
from .workspace import Workspace, base_ref


def resolve_pin(ws: Workspace, spec: str) -> Pin:
    """A pin named in vendor-pin.txt (by label, source or version), or a new source."""
    pins = ws.store.read_pins()
    found = pins.find(spec)
    if found is not None:
        return found
    try:
        pin = pin_from_spec("cli", spec)
    except Exception as exc:  # noqa: BLE001 - a FormatError about the option, shown as usage
        raise UsageError(f"--pin {spec}: {getattr(exc, 'message', exc)}") from None
    if pin.url is None:
        ws.reporter.progress(f"looking up {pin.describe()} on the index")
        pin = record_hashes(pin)
    return pin


def ensure_repo(ws: Workspace) -> None:
    """work/.git must exist to hold the pins; creating it checks nothing out."""
    if ws.repo.exists():
        return
    ws.repo.init()
    set_up_info(ws.repo.git_dir)


def pin_commit(ws: Workspace, pin: Pin) -> str:
    """The pin's imported root commit, importing (fetch, verify) it first if needed."""
    return ws.repo.rev(base_ref(pin)) or import_pin(ws, pin)[0]  # keyed on what verified it


def read_patch_quick(ws: Workspace, entry: SeriesEntry) -> PatchFile:
    """A patch for check/rebase, read as push reads it (the header cache keeps this cheap): a
    bare libyaml load took duplicate keys, aliases and wrongly typed values that push refuses."""
    return ws.store.read_patch(entry.name, line=entry.line)


def load_series(ws: Workspace) -> list[tuple[SeriesEntry, PatchFile]]:
    series = ws.store.read_series()
    patches = [(e, read_patch_quick(ws, e)) for e in series.entries]
    ws.store.headers.save()
    return patches


def touched_paths(patches: list[tuple[SeriesEntry, PatchFile]]) -> set[str]:
    return {p for e, patch in patches for fd in file_diffs(patch, e.strip) for p in (fd.old_path, fd.new_path) if p}


Resolved = list[tuple[SeriesEntry, Resolution, "PatchFile | None"]]


def resolve_series(ws: Workspace, entries: list[SeriesEntry], pin: Pin) -> Resolved:
    """Each entry with the file that serves ``pin`` (read), or None where it is not carried there."""
    out: Resolved = []
    for entry in entries:
        found, patch = ws.resolve(entry.name, line=entry.line, pin=pin)
        out.append((entry, found, patch))
    ws.store.headers.save()
    return out


def check(ws: Workspace, specs: tuple[str, ...] = (), *, accept: frozenset[str] = d.DEFAULT_ACCEPT,
          max_fuzz: int = 2, only: set[str] | None = None) -> d.CheckReport:
    """Classify the series (or the entries named in ``only``, e.g. a profile's) on each pin.

    A pin of vendor-pin.txt gets the files that serve its release (model/variants.py: a
    variant, or n/a); a pin named only on the command line (a release the queue may move to)
    gets what the main pin carries, to show how the queue as it is drifts there. The old side
    of the three-way merges is the main pin where the pin's stack is the main pin's files, and
    the pin itself where it differs (a variant was written for that pin's tree)."""
    pins = ws.store.read_pins()
    base_pin = pins.main
    targets = [resolve_pin(ws, s) for s in specs] if specs else list(pins.pins)
    ensure_repo(ws)
    base_commit = pin_commit(ws, base_pin)
    entries = [e for e in ws.store.read_series().entries if only is None or e.name in only]
    main = resolve_series(ws, entries, base_pin)
    gated = {(p.label, p.line) for p in pins.pins}
    reports = []
    for pin in targets:
        commit = pin_commit(ws, pin)
        resolved = resolve_series(ws, entries, pin) if (pin.label, pin.line) in gated else main
        same = [r.file for _e, r, _p in resolved] == [r.file for _e, r, _p in main]
        old_pin, old_commit = (base_pin, base_commit) if same else (pin, commit)
        reports.append(check_pin(ws, old_pin, old_commit, pin, commit, resolved, accept=accept, max_fuzz=max_fuzz))
    return d.CheckReport(tuple(reports), accept)


@dataclass(frozen=True)
class GateResult:
    """check's verdict: the drift report and the errors lint found first (rendered lines)."""

    report: d.CheckReport
    lint_errors: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.report.ok and not self.lint_errors


def gate(ws: Workspace, specs: tuple[str, ...] = (), *, accept: frozenset[str] = d.DEFAULT_ACCEPT,
         max_fuzz: int = 2, profile: str | None = None, policy: str | None = None,
         run_lint: bool = True) -> GateResult:
    """``gqueue check``: lint (each finding a note; its errors fail the gate), then the drift
    of the patches a profile selects (default: the whole series) on each pin."""
    lint_errors: list[str] = []
    if run_lint:
        findings = lint(ws.store)
        lint_errors = [f.render() for f in findings.findings if f.severity == "error"]
        for finding in findings.findings:
            ws.reporter.note(f"lint: {finding.render()}")
    only = {e.name for e in select_patches(ws.store, profile, policy)} if profile or policy else None
    return GateResult(check(ws, specs, accept=accept, max_fuzz=max_fuzz, only=only), tuple(lint_errors))


def check_pin(ws: Workspace, base_pin: Pin, base_commit: str, pin: Pin, commit: str,
              resolved: Resolved, *, accept: frozenset[str], max_fuzz: int) -> d.PinReport:
    start = time.monotonic()
    run = SeriesRun(ws.repo, base_commit, commit, accept=accept, max_fuzz=max_fuzz)
    run.prefetch(touched_paths([(e, p) for e, _r, p in resolved if p is not None]))
    results = []
    for entry, found, patch in resolved:
        if patch is None:
            results.append(d.PatchReport(entry.name, found.patch_id, d.NOT_CARRIED, (), True, detail=found.reason))
            continue
        ws.reporter.progress(f"{pin.describe()}: {entry.name}")
        report = run.run(patch, entry.strip).report
        results.append(replace(report, file=patch.file) if patch.file else report)
    label = None if pin.label == "cli" else pin.label
    return d.PinReport(pin.describe(), label, pin.version, base_pin.describe(), tuple(results),
                       seconds=time.monotonic() - start, project=pin.project)
