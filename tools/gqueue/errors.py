"""The error hierarchy. Only the CLI boundary turns these into messages and exit codes."""

from __future__ import annotations

import errno
import os
from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    ERROR = 1
    USAGE = 2
    CONFLICT = 3
    BUG = 4
    FILESYSTEM = 5


def one_line(text: str) -> str:
    """``text`` as one terminal line: newlines become spaces, other control characters (a CR, an
    escape sequence, U+2028 from a file the user wrote) are shown escaped instead of acted on."""
    return "".join(
        " " if ch == "\n" else ch if ch.isprintable() else repr(ch)[1:-1] for ch in text
    )


class GqueueError(Exception):
    """Base class: carries an exit code, a short kebab-case reference and a hint."""

    code: ExitCode = ExitCode.ERROR
    ref: str = "error"

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        hint: str | None = None,
        ref: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.line = line
        self.hint = hint
        if ref is not None:
            self.ref = ref

    @property
    def location(self) -> str:
        if self.path is None:
            return ""
        return f"{self.path}:{self.line}" if self.line is not None else self.path

    def one_line(self) -> str:
        loc = self.location
        return one_line(f"{loc}: {self.message}" if loc else self.message)

    def to_json(self) -> dict[str, object]:
        return {
            "ref": self.ref,
            "message": self.message,
            "path": self.path,
            "line": self.line,
            "hint": self.hint,
            "exit_code": int(self.code),
        }


class UsageError(GqueueError):
    code = ExitCode.USAGE
    ref = "usage"


class FormatError(GqueueError):
    """A file the user wrote (patch header, series, pin) is malformed."""

    ref = "bad-format"


class UnsafePatchError(GqueueError):
    """A patch would write outside the tree, through a link, or binary data."""

    ref = "unsafe-patch"


class IntegrityError(GqueueError):
    """A download or archive did not match what the pin promised."""

    ref = "integrity"


class StateError(GqueueError):
    """The stack is not in a state that allows the operation."""

    ref = "state"


class LockedError(GqueueError):
    ref = "locked"


class ConflictError(GqueueError):
    """A patch does not apply."""

    code = ExitCode.CONFLICT
    ref = "conflict"


class NetworkError(GqueueError):
    ref = "network"


# what a write can meet that is the file system's doing, not gqueue's: -> (reason, hint)
_WRITE_ERRNOS: dict[int, tuple[str, str]] = {
    errno.EROFS: ("the file system is read-only", "remount it read-write, then run the command again"),
    errno.EACCES: ("permission denied", "make it writable (chmod u+w), then run the command again"),
    errno.EPERM: ("operation not permitted", "make it writable (chmod u+w), then run the command again"),
    errno.ENOSPC: ("no space left on the device", "free some space, then run the command again"),
    errno.EDQUOT: ("the disk quota is exceeded", "free some space, then run the command again"),
}


class FilesystemError(GqueueError):
    """A write was refused by the file system: read-only, no permission, full disk."""

    code = ExitCode.FILESYSTEM
    ref = "filesystem"

    @classmethod
    def from_os_error(cls, exc: BaseException, root: "os.PathLike[str] | str | None" = None) -> "FilesystemError | None":
        """The typed error for an OSError a write met, or None when it is not one of those."""
        if not isinstance(exc, OSError) or exc.errno not in _WRITE_ERRNOS:
            return None
        reason, hint = _WRITE_ERRNOS[exc.errno]
        where = exc.filename if isinstance(exc.filename, str) else None
        if where is not None:
            name = os.path.basename(where)
            if name.startswith(".") and name.endswith(".tmp"):  # an atomic write's temporary: its folder
                where = os.path.dirname(where)
            if root is not None:
                rel = os.path.relpath(where, root)
                where = where if rel.startswith("..") else rel
        return cls(f"cannot write: {reason}", path=where, hint=hint)
