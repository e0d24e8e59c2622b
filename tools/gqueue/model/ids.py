"""How a patch's id and its file name go together: the name is ``ID.patch`` or ``ID-....patch``
(lint's file-name-id). Pure."""

from __future__ import annotations

from collections import Counter
from typing import Collection, Iterable, Sequence

SUFFIX = ".patch"


def stem(name: str) -> str:
    """The file name without its folder and ``.patch``."""
    base = name.rsplit("/", 1)[-1]
    return base[: -len(SUFFIX)] if base.endswith(SUFFIX) else base


def file_name_id(name: str) -> str:
    """The id a file name gives when nothing else says: its part before the first '-'
    (``0001`` for ``0001-Add-a-change.patch``)."""
    return stem(name).split("-", 1)[0]


def name_fits_id(name: str, patch_id: str) -> bool:
    """The file name is ``ID.patch`` or starts with ``ID-``."""
    own = stem(name)
    return bool(patch_id) and (own == patch_id or own.startswith(patch_id + "-"))


def distinct_ids(names: Sequence[str], *, others: Iterable[str] = (), taken: Collection[str] = ()) -> dict[str, str]:
    """An id for each of ``names`` that its file name fits and no other patch has: its first
    word (``file_name_id``) where no other name (of ``names`` or ``others``) begins with that
    word and no id of ``taken`` is it, else its whole stem where that is free.

    ``0001-Add-a-change.patch`` of a format-patch series gets ``0001``; Debian's
    ``CVE-2023-27533.patch`` and ``CVE-2023-27534.patch`` get their stems (``CVE`` begins
    both). A name whose whole stem is taken is left out: it needs another name."""
    firsts = Counter(file_name_id(n) for n in {stem(n) for n in (*names, *others)})
    used = set(taken)
    out: dict[str, str] = {}
    for name in names:
        first, whole = file_name_id(name), stem(name)
        chosen = first if firsts[first] == 1 and first not in used else whole if whole not in used else None
        if chosen is not None:
            out[name] = chosen
            used.add(chosen)
    return out
