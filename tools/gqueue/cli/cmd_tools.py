"""bisect, lint, docs and plan: the commands of this area register themselves on the gqueue group.

lint's and bisect pins' modules are imported inside those commands: the package index client that
bisect pins needs took 60 ms of every bisect run's start-up."""

from __future__ import annotations

from typing import Any

import click

from ..errors import ExitCode
from ..ops import bisect as bisect_op
from ..ops import catalogue as catalogue_op
from ..ops import plan as plan_op
from ..ops.workspace import Workspace
from . import options
from .boundary import Context, boundary

Result = tuple[Any, str, int]


@click.command()
@click.option("--list-rules", is_flag=True, help="Print every rule with its severity and exit.")
@boundary("lint", needs_queue=False)
def lint(ctx: Context, list_rules: bool) -> Result:
    """Check headers, ids, names, the series and the diffs; exit 3 on errors."""
    from ..ops import lint as lint_op  # its rules (and the profiles' model) load only here

    if list_rules:
        rules = lint_op.describe_rules()
        text = "\n".join(f"{rule:<22} {severity:<8} {desc}" for rule, severity, desc in rules)
        return [{"rule": r, "severity": s, "description": d} for r, s, d in rules], text, ExitCode.OK
    report = lint_op.lint(ctx.store())
    return report.to_json(), report.render(), ExitCode.CONFLICT if report.errors else ExitCode.OK


@click.command()
@click.option("--check", "check_only", is_flag=True, help="Write nothing; exit 3 if a generated file is stale.")
@click.option("--no-registry", is_flag=True, help=f"Leave {catalogue_op.REGISTRY} alone (queues without the runtime).")
@boundary("docs", needs_queue=False)
def docs(ctx: Context, check_only: bool, no_registry: bool) -> Result:
    """Write docs/PATCHES_AUTO.md and the runtime registry from the patch headers."""
    store = ctx.store()
    if check_only:
        result = catalogue_op.check(store, registry=not no_registry)
        if result.changed:
            text = "\n".join(f"{rel}: stale; run 'gqueue docs'" for rel in result.changed)
            return result.to_json(), text, ExitCode.CONFLICT
        return result.to_json(), f"{', '.join(result.files)}: current ({result.patches} patch(es))", ExitCode.OK
    result = catalogue_op.write(store, registry=not no_registry)
    text = "\n".join(f"wrote {rel}" for rel in result.changed) or f"{', '.join(result.files)}: already current"
    return result.to_json(), text, ExitCode.OK


@click.group()
def bisect() -> None:
    """Find the patch (or the release) after which something breaks."""


@bisect.command(name="run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--good", help="A good position: a number (0 = the pinned release), 'base', a patch name or id.")
@click.option("--bad", help="A bad position (default: the whole series).")
@click.option("--trust-ends", is_flag=True,
              help="Test neither end (as git bisect): take the good one as passing, the bad one as failing.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
@boundary("bisect-run")
def bisect_run(ws: Workspace, good: str | None, bad: str | None, trust_ends: bool, command: tuple[str, ...]) -> Result:
    """Run CMD in work/ at positions of the series; name the first patch after which it fails.

    CMD exits 0 for good, 125 to skip, any other code up to 127 for bad (as 'git bisect run').
    """
    result = bisect_op.run(ws, list(command), good=good, bad=bad, trust_ends=trust_ends)
    return result.to_json(), bisect_report(result), ExitCode.OK if result.culprit else ExitCode.ERROR


@bisect.command(name="reset")
@boundary("bisect-reset")
def bisect_reset(ws: Workspace) -> Result:
    """Put the stack back where an interrupted bisect found it."""
    text = bisect_op.reset(ws)
    return {"message": text}, text, ExitCode.OK


def bisect_report(result: bisect_op.BisectResult) -> str:
    lines = [f"{len(result.steps)} test(s) between positions {result.good} and {result.bad}"]
    if result.culprit is not None:
        lines.append(f"first bad patch: {result.culprit.describe()}")
    else:
        lines.append("skipped positions hide the culprit; it is one of:")
        lines += [f"  {c.describe()}" for c in result.candidates]
    lines.append(f"the stack is back as it was: {bisect_op.describe_stack(result.applied)}")
    return "\n".join(lines)


@click.command()
@options.profile("profiles/NAME.yaml, or a series guard name (as 'hg qselect').")
@options.policy("compat keeps all; safe drops no_op; minimal also suspected_regression and unknown. "
                "Default: the profile's policy, else compat.")
@click.option("--list", "list_profiles", is_flag=True, help="List the profiles under profiles/.")
@boundary("plan", needs_queue=False)
def plan(ctx: Context, profile: str | None, policy: str | None, list_profiles: bool) -> Result:
    """Which patches a profile carries under a policy: included, excluded with the reason, warnings."""
    store = ctx.store()
    if list_profiles:
        names = plan_op.profile_names(store)
        return {"profiles": names}, "\n".join(names), ExitCode.OK
    result = plan_op.plan(store, profile, policy)
    return result.to_json(), plan_op.render(result), ExitCode.OK if result.ok else ExitCode.ERROR


@bisect.command(name="pins", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--from", "lo", required=True, help="The oldest release of the range (known good).")
@click.option("--to", "hi", required=True, help="The newest release of the range.")
@click.option("--patch", help="Apply the series up to this patch (name or id); default: the whole series.")
@click.option("--pre", is_flag=True, help="Include pre-releases.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@boundary("bisect-pins")
def bisect_pins(ws: Workspace, lo: str, hi: str, patch: str | None, pre: bool, command: tuple[str, ...]) -> Result:
    """The first release in a range where a patch stops applying, or where CMD fails with it applied."""
    from ..ops import bisect_pins as pins_op  # the package index client (packaging.tags, ...) loads only here

    result = pins_op.run(ws, lo=lo, hi=hi, patch=patch, argv=list(command), pre=pre)
    what = f"{result.patch} applies" if result.patch and not command else "the command passes"
    lines = [f"{len(result.steps)} of {len(result.versions)} release(s) tested ({result.versions[0]} .. "
             f"{result.versions[-1]})"]
    if result.first_bad is None and not result.candidates:
        lines.append(f"{what} on every release up to {result.versions[-1]}")
        return result.to_json(), "\n".join(lines), ExitCode.OK
    if result.first_bad is not None:
        step = next(s for s in result.steps if s.version == result.first_bad)
        lines.append(f"first bad release: {result.first_bad} ({step.detail}); last good: {result.last_good}")
        return result.to_json(), "\n".join(lines), ExitCode.OK
    lines.append(f"skipped releases hide the first bad one; it is one of: {', '.join(result.candidates)}")
    return result.to_json(), "\n".join(lines), ExitCode.ERROR
