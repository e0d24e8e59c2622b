"""The metadata header of a patch: schema, typed view, and validation."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import FormatError

LIFECYCLES = (
    "experimental", "stable", "legacy", "research", "coordinator",
    "deprecated", "retired", "merged_upstream",
)
TIERS = ("community", "engine")
UPSTREAM_STATES = ("open", "merged", "closed", "draft", "none")
RELATIONSHIPS = ("backport", "forward-port", "alternative", "partial-backport", "original", "revert", "none")
IMPLEMENTATION_STATUSES = ("full", "partial", "marker_only", "placeholder", "retired")
ROLES = ("load_bearing", "defensive", "optional_perf", "suspected_regression", "no_op", "unknown")
ALLOW_FLAGS = ("crlf", "trailing-whitespace", "binary")

# key -> expected python type(s); nested mappings are checked separately.
SCHEMA: dict[str, tuple[type, ...]] = {
    "id": (str,),
    "title": (str,),
    "description": (str,),
    "family": (str,),
    "lifecycle": (str,),
    "tier": (str,),
    "default_on": (bool,),
    "env_flag": (str, type(None)),
    "upstream": (dict,),
    "credit": (str, list),
    "applies_to": (dict, str),
    "requires": (list,),
    "conflicts": (list,),
    "composes_with": (list,),
    "implementation_status": (str,),
    "notes": (str,),
    "role": (str,),
    "candidate_when": (dict,),
    "allow": (list,),
    "author": (str,),
    "origin": (str,),
    "bug": (str, list),
    "forwarded": (str,),
    "applied_upstream": (str,),
    "last_update": (str,),
    "merged_upstream_in": (str,),
    "retired": (dict,),
    "headers": (dict,),
}
REQUIRED = ("id", "title")
UPSTREAM_KEYS = ("pr", "state", "relationship", "url", "related")
APPLIES_TO_KEYS = ("vllm", "model_arch", "is_hybrid", "sm_min", "sm_max", "kv_cache_dtype", "quantization")


@dataclass(frozen=True)
class Upstream:
    pr: int | str | None = None
    state: str | None = None
    relationship: str | None = None


@dataclass(frozen=True)
class PatchMeta:
    """A typed, read-only view of a header. ``raw`` keeps every key, known or not."""

    raw: dict[str, Any]
    key_lines: dict[str, int] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        return self.raw.get(key, default)

    @property
    def id(self) -> str:
        return str(self.raw.get("id", ""))

    @property
    def title(self) -> str:
        return str(self.raw.get("title", ""))

    @property
    def lifecycle(self) -> str:
        return str(self.raw.get("lifecycle", "experimental"))

    @property
    def default_on(self) -> bool:
        return bool(self.raw.get("default_on", False))

    @property
    def env_flag(self) -> str | None:
        value = self.raw.get("env_flag")
        return str(value) if value else None

    @property
    def upstream(self) -> Upstream:
        up = self.raw.get("upstream") or {}
        if not isinstance(up, dict):
            return Upstream()
        return Upstream(up.get("pr"), up.get("state"), up.get("relationship"))

    @property
    def vllm_spec(self) -> str | None:
        applies = self.raw.get("applies_to")
        if isinstance(applies, str):
            return applies
        if isinstance(applies, dict) and applies.get("vllm") is not None:
            return str(applies["vllm"])
        return None

    @property
    def requires(self) -> list[str]:
        return [str(x) for x in self.raw.get("requires") or []]

    @property
    def conflicts(self) -> list[str]:
        return [str(x) for x in self.raw.get("conflicts") or []]

    @property
    def allow(self) -> list[str]:
        return [str(x) for x in self.raw.get("allow") or []]

    def line_of(self, key: str) -> int | None:
        return self.key_lines.get(key)


_AUTHOR = re.compile(r"([^<>]*[^<>\s]) <([^<>\s]+)>")


def author_problem(value: str) -> str | None:
    """Why ``value`` is not an author a commit can carry (one line, ``Name <mail>``), or None.

    The name and the mail go into git's commit header as they are: a line break there would
    start commands of their own, and a '<' or '>' would end the name or the mail early."""
    if any(c in "\n\r\x85\u2028\u2029" for c in value):
        return "must be one line ('Name <mail>'), not several"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        return "must not hold control characters"
    if _AUTHOR.fullmatch(value) is None:
        return "must be 'Name <mail>': a name, one space, the mail in '<' '>', and no other '<' or '>'"
    return None


def check_meta(meta: PatchMeta, *, path: str, first_line: int = 1) -> None:
    """Raise FormatError on the first structural problem (missing id, wrong type)."""
    for key in REQUIRED:
        if key not in meta.raw or meta.raw[key] in (None, ""):
            raise FormatError(f"header lacks required key '{key}'", path=path, line=first_line)
    for key, value in meta.raw.items():
        expected = SCHEMA.get(key)
        if expected is not None and not isinstance(value, expected):
            names = " or ".join("null" if t is type(None) else t.__name__ for t in expected)
            raise FormatError(
                f"header key '{key}' must be {names}, not {type(value).__name__}",
                path=path,
                line=meta.line_of(key) or first_line,
            )
    author = meta.raw.get("author")
    problem = author_problem(author) if isinstance(author, str) else None
    if problem is not None:
        raise FormatError(f"header key 'author' {problem}", path=path, line=meta.line_of("author") or first_line)
