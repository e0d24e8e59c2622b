"""Profiles and patch plans: which patches a deployment carries, under which policy.

A profile (``profiles/NAME.yaml``) selects series guards, may list the patch ids it wants,
disables some, declares its deployment (what ``candidate_when`` predicates are checked
against) and may override a patch's attribution. A policy then drops patches by role:

- ``compat`` keeps every selected, enabled patch;
- ``safe`` drops patches whose role is ``no_op``;
- ``minimal`` also drops ``suspected_regression`` and ``unknown`` (no role declared).

Pure: no files, no git. ``ops/plan.py`` reads the queue and the profile.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import FormatError
from .policies import POLICIES
from .safeyaml import load_mapping
from .series import SeriesEntry

DROPPED_ROLES: dict[str, tuple[str, ...]] = {
    "compat": (),
    "safe": ("no_op",),
    "minimal": ("no_op", "suspected_regression", "unknown"),
}
# candidate_when predicates: NAME_gte / NAME_lte / NAME_eq compare numbers, the others test membership.
CANDIDATE_KEYS = (
    "max_num_seqs_gte", "max_num_seqs_lte", "max_model_len_gte", "max_model_len_lte",
    "n_gpus_eq", "n_gpus_gte", "n_gpus_lte", "sm_gte", "sm_lte",
    "tool_call_parser", "reasoning_parser", "kv_cache_dtype", "quantization", "model_arch", "is_hybrid",
)
PROFILE_KEYS = ("name", "description", "guards", "patches", "disable", "deployment", "attribution", "policy")
ATTRIBUTION_KEYS = ("role", "note", "bench_evidence", "candidate_when")


@dataclass(frozen=True)
class Profile:
    name: str
    path: str | None = None  # None: a bare guard name, as with 'hg qselect NAME'
    description: str = ""
    guards: tuple[str, ...] = ()
    patches: tuple[str, ...] | None = None
    disable: tuple[str, ...] = ()
    deployment: dict[str, Any] = field(default_factory=dict)
    attribution: dict[str, dict[str, Any]] = field(default_factory=dict)
    policy: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name, "path": self.path, "guards": list(self.guards),
            "patches": list(self.patches) if self.patches is not None else None,
            "disable": list(self.disable), "deployment": self.deployment, "policy": self.policy,
        }


def guard_profile(name: str) -> Profile:
    """A profile that only selects the series guard ``name`` (comma-separated for several)."""
    return Profile(name=name, guards=tuple(g for g in name.split(",") if g))


def _str_list(raw: dict[str, Any], key: str, where: str, lines: dict[str, int]) -> tuple[str, ...]:
    value = raw.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in value):
        raise FormatError(f"'{key}' must be a list of names", path=where, line=lines.get(key))
    return tuple(str(v) for v in value)


def parse_profile(text: str, *, name: str, path: str) -> Profile:
    raw, lines = load_mapping(text, path=path, what="profile")
    for key in raw:
        if key not in PROFILE_KEYS:
            raise FormatError(f"unknown profile key '{key}' (known: {', '.join(PROFILE_KEYS)})", path=path, line=lines.get(key))
    policy = raw.get("policy")
    if policy is not None and policy not in POLICIES:
        raise FormatError(f"policy '{policy}' is not one of: {', '.join(POLICIES)}", path=path, line=lines.get("policy"))
    deployment = raw.get("deployment") or {}
    if not isinstance(deployment, dict):
        raise FormatError("'deployment' must be a mapping", path=path, line=lines.get("deployment"))
    attribution = raw.get("attribution") or {}
    if not isinstance(attribution, dict) or not all(isinstance(v, dict) for v in attribution.values()):
        raise FormatError("'attribution' must map patch ids to mappings", path=path, line=lines.get("attribution"))
    for pid, entry in attribution.items():
        for key in entry:
            if key not in ATTRIBUTION_KEYS:
                raise FormatError(f"unknown attribution key '{key}' for {pid}", path=path, line=lines.get("attribution"))
    patches = _str_list(raw, "patches", path, lines) if raw.get("patches") is not None else None
    return Profile(
        name=str(raw.get("name") or name), path=path, description=str(raw.get("description") or ""),
        guards=_str_list(raw, "guards", path, lines), patches=patches, disable=_str_list(raw, "disable", path, lines),
        deployment=dict(deployment), attribution={str(k): dict(v) for k, v in attribution.items()}, policy=policy,
    )


@dataclass(frozen=True)
class Candidate:
    """One series entry with what the plan needs from its header."""

    entry: SeriesEntry
    id: str
    title: str = ""
    role: str | None = None
    candidate_when: dict[str, Any] = field(default_factory=dict)
    requires: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    env_flag: str | None = None
    default_on: bool = False


@dataclass(frozen=True)
class PlanItem:
    name: str
    id: str
    role: str
    reason: str = ""
    env_flag: str | None = None

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {"name": self.name, "id": self.id, "role": self.role}
        if self.reason:
            data["reason"] = self.reason
        if self.env_flag:
            data["env_flag"] = self.env_flag
        return data


@dataclass(frozen=True)
class Plan:
    profile: str
    policy: str
    included: tuple[PlanItem, ...]
    excluded: tuple[PlanItem, ...]
    warnings: tuple[str, ...]
    errors: tuple[str, ...]
    env: dict[str, str]

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_json(self) -> dict[str, object]:
        return {
            "profile": self.profile, "policy": self.policy,
            "included": [i.to_json() for i in self.included], "excluded": [i.to_json() for i in self.excluded],
            "warnings": list(self.warnings), "errors": list(self.errors), "env": self.env,
        }


def _guard_reason(entry: SeriesEntry, active: set[str]) -> str:
    negatives = [g[1:] for g in entry.guards if g[0] == "-" and g[1:] in active]
    if negatives:
        return f"guarded out by -{negatives[0]}"
    positives = [g[1:] for g in entry.guards if g[0] == "+"]
    return "needs guard " + " or ".join(f"+{p}" for p in positives)


def attribution(candidate: Candidate, profile: Profile) -> tuple[str, dict[str, Any]]:
    """(role, candidate_when): the profile's entry replaces the header's as a whole."""
    override = profile.attribution.get(candidate.id)
    if override is not None:
        return str(override.get("role") or "unknown"), dict(override.get("candidate_when") or {})
    return candidate.role or "unknown", dict(candidate.candidate_when)


def _exclusion(candidate: Candidate, role: str, profile: Profile, policy: str) -> str | None:
    active = set(profile.guards)
    if not candidate.entry.selected(active):
        return _guard_reason(candidate.entry, active)
    if profile.patches is not None and candidate.id not in profile.patches and candidate.entry.name not in profile.patches:
        return f"not among profile {profile.name}'s patches"
    if candidate.id in profile.disable or candidate.entry.name in profile.disable:
        return f"disabled by profile {profile.name}"
    if role in DROPPED_ROLES[policy]:
        return f"policy {policy} drops role {role}"
    return None


def check_predicates(when: dict[str, Any], deployment: dict[str, Any]) -> list[str]:
    """Advisory messages for each predicate the deployment does not meet (or cannot be checked)."""
    out = []
    for key, expected in when.items():
        if key not in CANDIDATE_KEYS:
            out.append(f"unknown candidate_when predicate '{key}'")
            continue
        stem, _, op = key.rpartition("_")
        if op in ("gte", "lte", "eq") and stem:
            if stem not in deployment:
                out.append(f"{key}: {expected} cannot be checked: the profile declares no deployment.{stem}")
            elif not _compare(deployment[stem], op, expected):
                out.append(f"{key}: {expected} but deployment.{stem} is {deployment[stem]}")
            continue
        if key not in deployment:
            out.append(f"{key}: {expected} cannot be checked: the profile declares no deployment.{key}")
            continue
        allowed = expected if isinstance(expected, list) else [expected]
        if deployment[key] not in allowed:
            out.append(f"{key}: {allowed} but deployment.{key} is {deployment[key]}")
    return out


def _compare(actual: Any, op: str, expected: Any) -> bool:
    try:
        a, e = float(actual), float(expected)
    except (TypeError, ValueError):
        return False
    return {"gte": a >= e, "lte": a <= e, "eq": a == e}[op]


def resolve(candidates: list[Candidate], profile: Profile, policy: str | None = None) -> Plan:
    """The plan: included and excluded patches in series order, warnings, and errors."""
    policy = policy or profile.policy or "compat"
    if policy not in POLICIES:
        raise FormatError(f"policy '{policy}' is not one of: {', '.join(POLICIES)}")
    included: list[PlanItem] = []
    excluded: list[PlanItem] = []
    warnings: list[str] = []
    reasons: dict[str, str] = {}
    kept: dict[str, Candidate] = {}
    for candidate in candidates:
        role, when = attribution(candidate, profile)
        reason = _exclusion(candidate, role, profile, policy)
        if reason is not None:
            excluded.append(PlanItem(candidate.entry.name, candidate.id, role, reason, candidate.env_flag))
            reasons[candidate.id] = reason
            continue
        included.append(PlanItem(candidate.entry.name, candidate.id, role, "", candidate.env_flag))
        kept[candidate.id] = candidate
        warnings.extend(f"{candidate.id}: candidate_when {m}" for m in check_predicates(when, profile.deployment))
    errors = _dependency_errors(kept, reasons, candidates)
    warnings.extend(_conflict_warnings(kept))
    warnings.extend(_unknown_references(profile, candidates))
    env = {c.env_flag: "1" for c in kept.values() if c.env_flag and not c.default_on}
    return Plan(profile.name, policy, tuple(included), tuple(excluded), tuple(warnings), tuple(errors), env)


def _dependency_errors(kept: dict[str, Candidate], reasons: dict[str, str], candidates: list[Candidate]) -> list[str]:
    known = {c.id for c in candidates}
    errors = []
    for candidate in kept.values():
        for need in candidate.requires:
            if need in reasons:
                errors.append(f"{candidate.id} requires {need}, which this plan excludes ({reasons[need]})")
            elif need not in known:
                errors.append(f"{candidate.id} requires {need}, which is not in the series")
    return errors


def _conflict_warnings(kept: dict[str, Candidate]) -> list[str]:
    out = []
    for candidate in kept.values():
        for other in candidate.conflicts:
            if other in kept and (candidate.id < other or candidate.id not in kept[other].conflicts):
                out.append(f"{candidate.id} conflicts with {other}, and the plan includes both")
    return out


def _unknown_references(profile: Profile, candidates: list[Candidate]) -> list[str]:
    known = {c.id for c in candidates} | {c.entry.name for c in candidates}
    out: list[str] = []
    for key, names in (("patches", profile.patches or ()), ("disable", profile.disable),
                       ("attribution", tuple(profile.attribution))):
        out.extend(f"profile {key} names {n}, which is not in the series" for n in names if n not in known)
    return out
