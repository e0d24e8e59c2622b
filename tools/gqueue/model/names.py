"""How a patch is named on the command line: its file name, the name without ``.patch``, its
id, or a prefix of its name that only it has; ``push N`` / ``pop N`` count patches (quilt).

Pure: the caller passes the series' names and the patches' ids. A name that matches several
patches is refused with the candidates; one that matches none with the nearest names.
"""

from __future__ import annotations

import difflib
from typing import Mapping, Sequence

from ..errors import UsageError

SUFFIX = ".patch"
_FOLDERS = ("queue/", "patches/")  # a path as the shell completes it; quilt's folder is patches/
SHOWN = 6  # candidates named in an ambiguity error


class AmbiguousName(UsageError):
    ref = "ambiguous-patch"


class UnknownName(UsageError):
    ref = "unknown-patch"


def _exact(query: str, names: Sequence[str], ids: Mapping[str, str]) -> list[str]:
    """The patches ``query`` names exactly: the file name, the name less ``.patch``, the id."""
    if query in names:
        return [query]
    if query + SUFFIX in names:
        return [query + SUFFIX]
    return [n for n in names if ids.get(n) == query]


def matches(query: str, names: Sequence[str], ids: Mapping[str, str]) -> list[str]:
    """Every patch of ``names`` that ``query`` could name, best kind of match first.

    An exact name (with or without ``.patch``, or with a ``queue/`` or ``patches/`` folder in
    front) or id wins over a prefix; among prefixes, all that match are returned."""
    for candidate in (query, *(query[len(f):] for f in _FOLDERS if query.startswith(f))):
        found = _exact(candidate, names, ids)
        if found:
            return found
    if not query:
        return []
    for candidate in (query, *(query[len(f):] for f in _FOLDERS if query.startswith(f))):
        found = [n for n in names if n.startswith(candidate)]
        if found:
            return found
    return []


def suggestions(query: str, names: Sequence[str], ids: Mapping[str, str], limit: int = 3) -> list[str]:
    """The names nearest to ``query`` (compared without case, by name, stem and id)."""
    keys: dict[str, str] = {}
    for name in names:
        for key in (name, name.removesuffix(SUFFIX), ids.get(name, "")):
            if key:
                keys.setdefault(key.lower(), name)
    near = difflib.get_close_matches(query.lower(), list(keys), n=limit * 3, cutoff=0.6)
    out: list[str] = []
    for key in near:
        if keys[key] not in out:
            out.append(keys[key])
    return out[:limit]


def resolve(query: str, names: Sequence[str], ids: Mapping[str, str], *, where: str = "in the series") -> str:
    """The one patch of ``names`` that ``query`` names (see ``matches``); ``where`` words the
    error: which patches ``names`` are ('in the series', 'applied')."""
    found = matches(query, names, ids)
    if len(found) == 1:
        return found[0]
    if found:
        shown = ", ".join(found[:SHOWN]) + (f" and {len(found) - SHOWN} more" if len(found) > SHOWN else "")
        raise AmbiguousName(f"'{query}' names {len(found)} patches {where}: {shown}",
                            hint="give more of the name, or the id")
    near = suggestions(query, names, ids)
    raise UnknownName(f"'{query}' is not {where}",
                      hint=f"did you mean {' or '.join(near)}?" if near else "'gqueue series' lists the patches")


def resolve_target(query: str, names: Sequence[str], ids: Mapping[str, str]) -> str | int:
    """push's and pop's argument: a patch (as ``resolve``), or, as in quilt, a number of
    patches; a number is a count unless a patch has it as its exact name, stem or id."""
    if query.isdigit() and not _exact(query, names, ids):
        count = int(query)
        if count < 1:
            raise UsageError(f"'{query}': give a number of patches of at least 1, or a patch name")
        return count
    return resolve(query, names, ids)
