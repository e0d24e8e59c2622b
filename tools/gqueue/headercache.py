"""Parsed patch headers kept between commands (``.gqueue/cache/headers.json``).

Loading 300 YAML headers costs about 35 ms of every push, lint and check. An entry is
keyed by the sha1 of the header text (and the line it starts on), so it can only stand for
byte-identical text; only values JSON carries exactly (strings, numbers, booleans, null,
lists, mappings) are kept, a header with a date in it is simply parsed every time. The
header's validation (``check_meta``) still runs on every read. The file is a cache: an
unreadable or odd one is ignored and rewritten, losing it costs only time, and it is
written without fsync.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

MAX_ENTRIES = 4000  # past this the oldest half is dropped on save
# Part of every key: raised whenever the loader starts refusing headers it used to accept
# (2: duplicate keys), so that no entry saved by an older gqueue answers for such a header.
LOADER_VERSION = 2

Loader = Callable[..., "tuple[dict[str, Any], dict[str, int]]"]


class HeaderCache:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: dict[str, str] | None = None
        self._added = False

    def _read(self) -> dict[str, str]:
        if self._entries is None:
            try:
                doc = json.loads(self.path.read_bytes())
                ok = isinstance(doc, dict) and all(isinstance(v, str) for v in doc.values())
                self._entries = doc if ok else {}
            except (OSError, ValueError, RecursionError):  # unreadable, not JSON, nested past Python's limit
                self._entries = {}
        return self._entries

    def load(self, load_mapping: Loader, text: str, *, path: str, first_line: int) -> tuple[dict[str, Any], dict[str, int]]:
        """``load_mapping(text, ...)``'s answer, from the cache when this exact text was seen."""
        key = self._key(text, first_line)
        entries = self._read()
        cached = entries.get(key)
        if cached is not None:
            try:
                data, lines = json.loads(cached)
                if isinstance(data, dict) and isinstance(lines, dict):
                    return data, lines
            except (ValueError, TypeError, RecursionError):  # not JSON, not a pair, nested past the limit
                pass
        data, lines = load_mapping(text, path=path, first_line=first_line)
        self._keep(key, data, lines)
        return data, lines

    def remember(self, text: str, data: dict[str, Any], lines: dict[str, int], *, first_line: int) -> None:
        """Keep what a loader made of ``text`` (a header just written, parsed by its writer),
        so that the next command that reads it does not parse it again."""
        self._read()
        self._keep(self._key(text, first_line), data, lines)

    @staticmethod
    def _key(text: str, first_line: int) -> str:
        return f"{LOADER_VERSION}:{first_line}:" + hashlib.sha1(text.encode("utf-8", "surrogateescape")).hexdigest()

    def _keep(self, key: str, data: dict[str, Any], lines: dict[str, int]) -> None:
        try:
            encoded = json.dumps([data, lines], ensure_ascii=False)
        except (TypeError, ValueError):  # a date, say
            return
        if json.loads(encoded) == [data, lines]:  # nothing JSON would turn into something else
            assert self._entries is not None
            self._entries[key] = encoded
            self._added = True

    def save(self) -> None:
        if not self._added or self._entries is None:
            return
        entries = self._entries
        if len(entries) > MAX_ENTRIES:
            entries = dict(list(entries.items())[-MAX_ENTRIES // 2 :])
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".headers.", suffix=".tmp", dir=self.path.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(entries, handle, ensure_ascii=False)
            os.replace(tmp, self.path)
        except OSError:
            return  # a cache that cannot be written is only slower next time
        self._added = False
