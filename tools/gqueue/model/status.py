"""The status vocabulary: how a hunk, a file or a whole patch went, on push and on check.

One enum for both: push's applier gives clean, offset, fuzz or failed per hunk, and a file
also file-exists or file-missing; check and rebase use the drift statuses (model/drift.py
ranks them). The members are strings (``Status.CLEAN == "clean"``) and print, format and
go into JSON as their value, so reports read as before and statuses read back from a JSON
state file compare equal to them.
"""

from __future__ import annotations

from enum import Enum


class Status(str, Enum):
    CLEAN = "clean"
    OFFSET = "offset"
    WHITESPACE = "whitespace"
    MERGED3 = "merged3"
    UPSTREAM = "upstream"
    PARTIAL_UPSTREAM = "partial-upstream"
    FUZZ = "fuzz"
    RENAMED = "renamed"
    FILE_EXISTS = "file-exists"
    FILE_MISSING = "file-missing"
    FAILED = "failed"
    CONFLICT = "conflict"
    BLOCKED = "blocked"
    NOT_CARRIED = "n/a"  # no file of the patch admits the pin (model/variants.py)

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


# applied exactly as written, at most moved: what push takes without --fuzz or --force
EXACT = frozenset({Status.CLEAN, Status.OFFSET})
# push's file statuses, from best to worst (a patch takes its worst file's)
PUSH_ORDER = (Status.CLEAN, Status.OFFSET, Status.FUZZ, Status.FILE_EXISTS, Status.FILE_MISSING, Status.FAILED)
