"""Commands of this area register themselves on the gqueue group when imported.

Drift: ``gqueue check`` (the series against pins, per hunk) and ``gqueue rebase`` (move the
stack to a new pin). Renderers for the human table, JUnit XML and GitHub annotations live here.
"""

from __future__ import annotations

import json
import os
import sys
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from ..errors import ExitCode, UsageError
from ..fsutil import atomic_write
from ..model import drift as d
from ..ops import drift as drift_op
from ..ops import rebase as rebase_op
from ..ops.workspace import Workspace
from . import options
from .boundary import Context, boundary

Result = tuple[Any, str, int]


# --- check ------------------------------------------------------------------------------------


@click.command()
@click.option("--pin", "pins", multiple=True, metavar="SPEC",
              help="A pin to check: a label, version or source in vendor-pin.txt, or vllm==X.Y.Z / an archive "
                   "URL#sha256=... (repeatable; default: every pin in vendor-pin.txt).")
@click.option("--junit", "junit", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write a JUnit XML report (a test case per patch and pin).")
@click.option("--github", is_flag=True, help="Also print GitHub Actions annotations (on stderr with --json).")
@click.option("--accept", default=None, metavar="LIST",
              help="Statuses that pass: a list ('clean,offset') or edits of the default ('+fuzz,-merged3'). "
                   "Default: clean,offset,whitespace,merged3,upstream.")
@click.option("--fuzz", "max_fuzz", type=click.IntRange(0, 3), default=2, show_default=True,
              help="How much fuzz to try when reporting what patch would do.")
@options.profile("Check only the patches this profile selects.")
@options.policy()
@click.option("--no-lint", is_flag=True, help="Skip 'gqueue lint' (run first by default; its errors fail the check).")
@boundary("check")
def check(ws: Workspace, pins: tuple[str, ...], junit: Path | None, github: bool, accept: str | None,
          max_fuzz: int, profile: str | None, policy: str | None, no_lint: bool) -> Result:
    """Apply the whole series to each pin in memory and classify every hunk."""
    try:
        accepted = d.parse_accept(accept) if accept is not None else d.DEFAULT_ACCEPT
    except ValueError as exc:
        raise UsageError(f"--accept: {exc}") from None
    gated = drift_op.gate(ws, pins, accept=accepted, max_fuzz=max_fuzz, profile=profile, policy=policy,
                          run_lint=not no_lint)
    report, lint_errors = gated.report, gated.lint_errors
    code = ExitCode.OK if gated.ok else ExitCode.CONFLICT
    if junit is not None:
        atomic_write(junit, render_junit(report, lint_errors))
    ctx: Context = click.get_current_context().obj
    if github:
        click.echo("\n".join(render_github(report, ws.store.queue_dir)), err=ctx.json)
    if ctx.json:
        doc = report.to_json()
        doc.update({"ok": code == ExitCode.OK, "error": None, "notes": ctx.reporter.notes})
        click.echo(json.dumps(doc, indent=2))
        ctx.reporter.done()
        ws.close()
        sys.exit(int(code))
    return report.to_json(), render_table(report, len(lint_errors)), code


def _hunk_note(h: d.HunkReport) -> str:
    if h.status == d.OFFSET:
        return f"at line {h.line} ({h.offset:+d})"
    if h.status in (d.FUZZ, d.WHITESPACE):
        return h.detail
    if h.status == d.MERGED3:
        return f"three-way merge lands it at line {h.line}"
    if h.status == d.UPSTREAM:
        return "already on the new pin"
    if h.status == d.RENAMED:
        return f"file moved to {h.renamed_to}; there it is {h.applies_there}"
    if h.status == d.BLOCKED:
        return f"blocked by {h.blocked_by}"
    parts = [h.detail] if h.detail else []
    if h.status == d.CONFLICT:
        parts.append(f"expected near line {h.line}")
    if h.closest is not None:
        parts.append(f"closest match line {h.closest.line} ({h.closest.similarity:.0%})")
    if h.relocation is not None:
        parts.append(f"now in {h.relocation.file}:{h.relocation.line}? ({h.relocation.similarity:.0%})")
    return "; ".join(parts)


def _patch_note(p: d.PatchReport) -> str:
    if p.status == d.NOT_CARRIED:
        return f"not carried on this pin: {p.detail}"
    if p.file:
        return f"{p.file}: " + (_patch_note(replace(p, file="")) or "the variant for this pin")
    if p.status == d.PARTIAL_UPSTREAM:
        return "upstream: " + ", ".join(p.upstream_hunks)
    if p.blocked_by and p.status == d.BLOCKED:
        return f"blocked by {p.blocked_by}"
    bad = [h for h in p.hunks if h.status not in (d.CLEAN, d.OFFSET)]
    if bad:
        return ", ".join(f"{h.file}#{h.hunk} {h.status}" for h in bad[:3]) + (" ..." if len(bad) > 3 else "")
    if p.drift:
        return "semantic drift"
    return ""


def verdict_line(report: d.CheckReport, lint_errors: int = 0) -> str:
    """The table's first line: the whole check's verdict (the last line says it again)."""
    failing = [pin.short for pin in report.pins if not pin.ok]
    reasons = ([f"patches not acceptable on {', '.join(failing)}"] if failing else []) \
        + ([f"lint found {lint_errors} error(s)"] if lint_errors else [])
    if reasons:
        return "check: FAILING -- " + "; ".join(reasons)
    return f"check: ok -- every patch is acceptable on {len(report.pins)} pin(s)"


def render_table(report: d.CheckReport, lint_errors: int = 0) -> str:
    lines: list[str] = [verdict_line(report, lint_errors), ""]
    for pin in report.pins:
        counts = ", ".join(f"{n} {s}" for s, n in pin.counts().items())
        verdict = "all acceptable" if pin.ok else "FAILING"
        label = f" ({pin.label})" if pin.label else ""
        lines.append(f"{pin.short}{label}: {len(pin.patches)} patch(es): {counts or 'none'} -- {verdict}")
        width = max([len(p.name) for p in pin.patches] + [10])
        for p in pin.patches:
            mark = " " if p.acceptable else "!"
            drift = " ~" if p.drift else "  "
            lines.append(f" {mark}{p.status:<17}{drift} {p.name:<{width}}  {_patch_note(p)}".rstrip())
        detail = [p for p in pin.patches if not p.acceptable or p.drift or p.status not in (d.CLEAN,)]
        shown = False
        for p in detail:
            notes = [(h, _hunk_note(h)) for h in p.hunks if h.status != d.CLEAN or h.drift]
            if not notes and not (p.blocked_by and p.status == d.BLOCKED):
                continue
            if not shown:
                lines.append("")
                shown = True
            lines.append(f"  {p.name}: {p.status}" + (f" (blocked by {p.blocked_by})" if p.status == d.BLOCKED and p.blocked_by else ""))
            for h, note in notes:
                lines.append(f"    {h.file} hunk #{h.hunk} [{p.patch_file}:{h.patch_line}]: {h.status}" + (f": {note}" if note else ""))
                for text in h.drift:
                    lines.append(f"      drift: {text}")
        lines.append("")
    if not report.ok:
        lines.append("FAILING: some patches are not acceptable ("
                     + ", ".join(sorted(report.accept, key=d.STATUSES.index)) + " pass)")
    if lint_errors:
        lines.append(f"FAILING: lint found {lint_errors} error(s) (the lint notes name them; --no-lint skips lint)"
                     + ("; every patch applies acceptably" if report.ok else ""))
    elif report.ok:
        lines.append("ok: every patch is acceptable")
    return "\n".join(lines)


def render_junit(report: d.CheckReport, lint_errors: list[str] | tuple[str, ...] = ()) -> bytes:
    """A suite per pin (a test case per patch) and, when lint found errors, a failing suite for them."""
    suites = ET.Element("testsuites", name="gqueue check")
    if lint_errors:
        suite = ET.SubElement(suites, "testsuite", name="gqueue lint", tests="1", failures="1", errors="0",
                              skipped="0", time="0.000")
        case = ET.SubElement(suite, "testcase", classname="gqueue.lint", name="lint")
        failure = ET.SubElement(case, "failure", type="lint", message=f"{len(lint_errors)} lint error(s)")
        failure.text = "\n".join(lint_errors)
    for pin in report.pins:
        failures = sum(1 for p in pin.patches if not p.acceptable)
        skipped = sum(1 for p in pin.patches if p.status == d.NOT_CARRIED)
        suite = ET.SubElement(suites, "testsuite", name=f"gqueue check {pin.short}", tests=str(len(pin.patches)),
                              failures=str(failures), errors="0", skipped=str(skipped), time=f"{pin.seconds:.3f}")
        for p in pin.patches:
            case = ET.SubElement(suite, "testcase", classname=f"gqueue.check.{pin.short}", name=p.name,
                                 file=p.patch_file)
            body = "\n".join(f"{h.file} hunk #{h.hunk} ({p.patch_file}:{h.patch_line}): {h.status}: {_hunk_note(h)}"
                             for h in p.hunks if h.status != d.CLEAN)
            if p.status == d.NOT_CARRIED:
                ET.SubElement(case, "skipped", message=f"not carried on {pin.short}: {p.detail}")
            elif not p.acceptable:
                failure = ET.SubElement(case, "failure", type=p.status, message=f"{p.status}: {_patch_note(p)}".strip(": "))
                failure.text = body
            elif p.drift or body:
                out = ET.SubElement(case, "system-out")
                out.text = "\n".join([body, *(f"semantic drift: {x}" for x in p.drift)]).strip()
    ET.indent(suites)
    xml: bytes = ET.tostring(suites, encoding="utf-8")
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + xml + b"\n"


def _esc_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _esc_prop(text: str) -> str:
    return _esc_data(text).replace(":", "%3A").replace(",", "%2C")


def render_github(report: d.CheckReport, queue_dir: Path) -> list[str]:
    """Workflow commands: an error per hunk that does not pass, a warning per semantic drift."""
    base = Path(os.environ.get("GITHUB_WORKSPACE") or Path.cwd()).resolve()
    queue_dir = queue_dir.resolve()
    rel = queue_dir.relative_to(base).as_posix() if queue_dir.is_relative_to(base) else queue_dir.name
    out: list[str] = []
    for pin in report.pins:
        for p in pin.patches:
            path = f"{rel}/{p.file or p.name}".removeprefix("./")
            flagged = False
            for h in p.hunks:
                if not p.acceptable and h.status not in report.accept:
                    flagged = True
                    title = f"gqueue check {pin.short}: {h.status}"
                    out.append(f"::error file={_esc_prop(path)},line={h.patch_line},title={_esc_prop(title)}::"
                               + _esc_data(f"{h.file} hunk #{h.hunk}: {_hunk_note(h)}"))
                for text in h.drift:
                    title = f"gqueue check {pin.short}: semantic drift"
                    out.append(f"::warning file={_esc_prop(path)},line={h.patch_line},title={_esc_prop(title)}::"
                               + _esc_data(f"{h.file} hunk #{h.hunk}: {text}"))
            if not p.acceptable and not flagged:
                title = f"gqueue check {pin.short}: {p.status}"
                out.append(f"::error file={_esc_prop(path)},line=1,title={_esc_prop(title)}::" + _esc_data(_patch_note(p) or p.status))
    return out


# --- rebase -----------------------------------------------------------------------------------


@click.command()
@click.option("--pin", "pin_spec", metavar="SPEC", help="The pin to move to (label, version or source).")
@click.option("--continue", "continue_", is_flag=True, help="Go on after fixing and refreshing the stopped patch.")
@click.option("--skip", is_flag=True, help="Leave the stopped patch behind (parked in the series) and go on.")
@click.option("--retire", is_flag=True, help="The new pin already fixes what the stopped patch fixed: retire it "
                                             "(merged upstream in the series and its header) and go on.")
@click.option("--abort", is_flag=True, help="Put back the old pin, series, queue and work tree exactly.")
@click.option("--keep-old", "keep_old", metavar="LABEL",
              help="With --pin: when the rebase completes, keep the old pin in vendor-pin.txt under LABEL "
                   "(such as rollback), so check goes on checking the queue there; a patch whose diff changes "
                   "keeps its old diff as queue/variants/<old release>/NAME.")
@click.option("--reason", type=click.Choice(["fixed-upstream", "obsolete"]), default=None,
              help="With --retire: why (the header's retired.reason; default fixed-upstream).")
@click.option("--upstream", "upstream", metavar="REF",
              help="With --retire: the upstream change that made the patch unneeded (vllm#NNNN or a commit).")
@click.option("--test", "test", metavar="NODEID",
              help="With --retire: the test that shows the new release behaves right without the patch.")
@boundary("rebase")
def rebase(ws: Workspace, pin_spec: str | None, continue_: bool, skip: bool, retire: bool, abort: bool,
           keep_old: str | None, reason: str | None, upstream: str | None, test: str | None) -> Result:
    """Move the stack to a new pin with three-way merges, refreshing every patch that lands."""
    chosen = [name for name, on in (("--pin", pin_spec is not None), ("--continue", continue_),
                                    ("--skip", skip), ("--retire", retire), ("--abort", abort)) if on]
    if len(chosen) != 1:
        raise UsageError("give exactly one of --pin SPEC, --continue, --skip, --retire, --abort")
    if keep_old is not None and pin_spec is None:
        raise UsageError("--keep-old goes with --pin (it is decided when the rebase starts)")
    given = [o for o, v in (("--reason", reason), ("--upstream", upstream), ("--test", test)) if v is not None]
    if given and not retire:
        raise UsageError(f"{', '.join(given)} go(es) with --retire")
    if abort:
        result = rebase_op.abort(ws)
    elif continue_:
        result = rebase_op.resume(ws)
    elif skip:
        result = rebase_op.resume(ws, skip=True)
    elif retire:
        why = rebase_op.Retirement(reason or "fixed-upstream", upstream, test) if given else None
        result = rebase_op.resume(ws, retire=True, why=why)
    else:
        assert pin_spec is not None
        result = rebase_op.start(ws, pin_spec, keep_old=keep_old)
    code = ExitCode.CONFLICT if result.stopped is not None else ExitCode.OK
    return result.to_json(), result.render(), code


# --- export-tree ------------------------------------------------------------------------------


@click.command(name="export-tree")
@click.option("--pin", "pin_spec", metavar="SPEC", default="pin", show_default=True,
              help="The pin whose tree to write: a label, version or source in vendor-pin.txt, or a new source.")
@click.option("--fuzz", type=click.IntRange(0, 3), default=0, help="Accept hunks that need up to N lines of fuzz.")
@click.argument("dest", type=click.Path(file_okay=False, path_type=Path))
@boundary("export-tree")
def export_tree(ws: Workspace, pin_spec: str, fuzz: int, dest: Path) -> Result:
    """Write the pin's tree with its resolved series applied to DEST (a new folder); work/ is untouched."""
    from ..ops import export_tree as export_op
    from .render import push_report

    result = export_op.export_tree(ws, pin_spec, dest, fuzz=fuzz)
    lines = [push_report(result.report, advice=False)] if result.report.pushed or result.report.not_carried or result.report.failed else []
    if result.ok:
        lines.append(f"wrote {result.pin.describe()} with {len(result.report.pushed)} patch(es) to {dest} "
                     f"({result.files} files, {result.seconds:.2f}s)")
    else:
        lines.append(f"nothing written: {result.report.failed.name} does not apply on {result.pin.describe()}")  # type: ignore[union-attr]
    return result.to_json(), "\n".join(lines), ExitCode.OK if result.ok else ExitCode.CONFLICT


# --- variant ----------------------------------------------------------------------------------


@click.command()
@click.argument("name")
@click.argument("source", metavar="FILE", type=click.Path(dir_okay=False, path_type=Path))
@boundary("variant")
def variant(ws: Workspace, name: str, source: Path) -> Result:
    """FILE is NAME's patch for the main pin; the file serving the other pins is kept as their variant."""
    from ..ops import variants as variants_op

    result = variants_op.adopt(ws, name, source)
    return result.to_json(), result.render(), ExitCode.OK
