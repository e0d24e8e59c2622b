"""Runtime switches for the patches built into this vLLM.

``enabled("PN14")`` answers from the environment, every call, so one binary can be A/B
tested: ``GENESIS_ENABLE_<SUFFIX>`` and ``SNDR_ENABLE_<SUFFIX>`` are equal spellings,
``=0/false/no/off`` turns a patch off, and ``GENESIS_DISABLE_<SUFFIX>`` (or SNDR_DISABLE)
turns off a default-on patch. Patches without an env flag are always on. The table of
patches comes from ``registry.json`` beside this file, generated from the queue headers.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Mapping

PREFIXES = ("GENESIS_", "SNDR_")
TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off", ""})

logger = logging.getLogger("vllm_genesis")
_warned: set[str] = set()
_logged = threading.Event()


@dataclass(frozen=True)
class Switch:
    id: str
    title: str
    env_flag: str | None
    default_on: bool

    @property
    def suffix(self) -> str | None:
        if not self.env_flag:
            return None
        for prefix in PREFIXES:
            for verb in ("ENABLE_", "DISABLE_"):
                if self.env_flag.startswith(prefix + verb):
                    return self.env_flag[len(prefix + verb) :]
        return self.env_flag

    def spellings(self, verb: str) -> tuple[str, ...]:
        suffix = self.suffix
        return () if suffix is None else tuple(f"{p}{verb}_{suffix}" for p in PREFIXES)


@dataclass(frozen=True)
class State:
    id: str
    on: bool
    reason: str


@lru_cache(maxsize=1)
def registry() -> dict[str, Switch]:
    path = Path(__file__).with_name("registry.json")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return {
        p["id"]: Switch(p["id"], p.get("title", ""), p.get("env_flag"), bool(p.get("default_on", False)))
        for p in data.get("patches", [])
    }


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        logger.warning(message)


def _read(environ: Mapping[str, str], names: tuple[str, ...]) -> tuple[str, bool] | None:
    """The first of ``names`` set in the environment, with its truth value."""
    for name in names:
        if name in environ:
            value = environ[name].strip().lower()
            if value in TRUE_WORDS:
                return name, True
            if value in FALSE_WORDS:
                return name, False
            _warn_once(name, f"{name}={environ[name]!r} is neither on (1/true/yes/on) nor off (0/false/no/off)")
            return name, True
    return None


def state(patch_id: str, environ: Mapping[str, str] | None = None) -> State:
    env = os.environ if environ is None else environ
    switch = registry().get(patch_id)
    if switch is None:
        _warn_once(patch_id, f"patch {patch_id} is not in the vllm_genesis registry; treating it as off")
        return State(patch_id, False, "not in the registry")
    if switch.env_flag is None:
        return State(patch_id, True, "always on (no env flag)")
    disabled = _read(env, switch.spellings("DISABLE"))
    if disabled is not None and disabled[1]:
        return State(patch_id, False, f"{disabled[0]} is set")
    chosen = _read(env, switch.spellings("ENABLE"))
    if chosen is not None:
        return State(patch_id, chosen[1], f"{chosen[0]}={env[chosen[0]]}")
    return State(patch_id, switch.default_on, "default on" if switch.default_on else "default off")


def enabled(patch_id: str) -> bool:
    """Whether the patch ``patch_id`` should act now; off means exactly upstream behaviour."""
    return state(patch_id).on


def near_misses(environ: Mapping[str, str] | None = None) -> list[tuple[str, str | None]]:
    """Environment variables that look like a switch but match none, with the closest real one."""
    env = os.environ if environ is None else environ
    known: set[str] = set()
    for switch in registry().values():
        known.update(switch.spellings("ENABLE"))
        known.update(switch.spellings("DISABLE"))
    out: list[tuple[str, str | None]] = []
    for name in sorted(env):
        if name.startswith(PREFIXES) and ("_ENABLE_" in name or "_DISABLE_" in name) and name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.75)
            out.append((name, close[0] if close else None))
    return out


def report(environ: Mapping[str, str] | None = None) -> list[State]:
    return [state(pid, environ) for pid in registry()]


def startup_block(environ: Mapping[str, str] | None = None) -> str:
    states = report(environ)
    on = sum(s.on for s in states)
    lines = [f"Genesis patches built in: {len(states)}, on: {on}"]
    for s in states:
        lines.append(f"  {'ON ' if s.on else 'off'} {s.id:<16} {s.reason}")
    for name, suggestion in near_misses(environ):
        hint = f" (did you mean {suggestion}?)" if suggestion else ""
        lines.append(f"  unknown switch {name}{hint}")
    return "\n".join(lines)


def log_startup(log: logging.Logger | None = None) -> None:
    """Log the block once per process."""
    if _logged.is_set():
        return
    _logged.set()
    (log or logger).info("%s", startup_block())
