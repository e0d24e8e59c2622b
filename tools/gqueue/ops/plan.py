"""gqueue plan: a profile and a policy applied to the series.

``select_patches`` is what push, check and build call with ``--profile``: the series
entries the plan includes, in series order, or a ``PlanError`` naming a dropped dependency.
"""

from __future__ import annotations

from ..errors import FormatError, GqueueError, UsageError
from ..model.profile import Candidate, Plan, Profile, guard_profile, parse_profile, resolve
from ..model.series import Series, SeriesEntry
from ..store import Store

PROFILES = "profiles"
SUFFIXES = (".yaml", ".yml")


class PlanError(GqueueError):
    """The plan drops a patch that an included patch requires."""

    ref = "plan-dependency"


def profile_names(store: Store) -> list[str]:
    folder = store.root / PROFILES
    if not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.iterdir() if p.suffix in SUFFIXES and p.is_file())


def load_profile(store: Store, name: str) -> Profile:
    """profiles/NAME.yaml, or else the series guard(s) NAME (comma-separated), as 'hg qselect' takes them."""
    if "/" in name or name.startswith("."):
        raise UsageError(f"'{name}' is not a profile name")
    for suffix in SUFFIXES:
        path = store.root / PROFILES / f"{name}{suffix}"
        if path.is_file():
            rel = f"{PROFILES}/{name}{suffix}"
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                raise FormatError("profile is not valid UTF-8", path=rel) from None
            return parse_profile(text, name=name, path=rel)
    guards = {g[1:] for e in store.read_series().entries for g in e.guards}
    wanted = [g for g in name.split(",") if g]
    unknown = [g for g in wanted if g not in guards]
    if unknown:
        known = ", ".join(profile_names(store)) or "none"
        raise UsageError(
            f"no profile '{name}' under {PROFILES}/ and no series guard named {', '.join(unknown)}",
            hint=f"profiles: {known}; guards: {', '.join(sorted(guards)) or 'none'}",
        )
    return guard_profile(name)


def candidates(store: Store, series: Series) -> list[Candidate]:
    out = []
    for entry in series.entries:
        meta = store.read_patch(entry.name, line=entry.line).meta
        role = meta.get("role")
        when = meta.get("candidate_when")
        out.append(Candidate(
            entry=entry, id=meta.id, title=meta.title, role=str(role) if role else None,
            candidate_when=dict(when) if isinstance(when, dict) else {},
            requires=tuple(meta.requires), conflicts=tuple(meta.conflicts),
            env_flag=meta.env_flag, default_on=meta.default_on,
        ))
    return out


def plan(store: Store, profile_name: str | None, policy: str | None = None) -> Plan:
    """The plan for a profile (None: every series entry, no guards) under a policy."""
    series = store.read_series()
    profile = load_profile(store, profile_name) if profile_name else Profile(name="(none)")
    return resolve(candidates(store, series), profile, policy)


def select_patches(store: Store, profile_name: str | None, policy: str | None = None) -> list[SeriesEntry]:
    """The series entries to apply for ``profile_name`` under ``policy``, in series order."""
    result = plan(store, profile_name, policy)
    if result.errors:
        raise PlanError("; ".join(result.errors), path="series",
                        hint="keep the dependency (profile attribution or policy), or drop the patch that needs it")
    keep = {item.name for item in result.included}
    return [e for e in store.read_series().entries if e.name in keep]


def filtered_series(store: Store, profile_name: str | None, policy: str | None = None) -> Series:
    """The series with the entries the plan excludes removed (other lines kept as written)."""
    series = store.read_series()
    keep = {e.name for e in select_patches(store, profile_name, policy)}
    for entry in list(series.entries):
        if entry.name not in keep:
            series = series.remove(entry.name)
    return series


def render(result: Plan, *, explain: bool = True) -> str:
    lines = [f"profile {result.profile}, policy {result.policy}: "
             f"{len(result.included)} included, {len(result.excluded)} excluded"]
    for item in result.included:
        flag = f"  {item.env_flag}=1" if item.env_flag and item.env_flag in result.env else ""
        lines.append(f"  + {item.name:<48} {item.role}{flag}")
    for item in result.excluded:
        lines.append(f"  - {item.name:<48} {item.reason}" if explain else f"  - {item.name}")
    lines += [f"warning: {w}" for w in result.warnings]
    lines += [f"error: {e}" for e in result.errors]
    return "\n".join(lines)
