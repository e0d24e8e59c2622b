"""Which file names a patch may write: inside the tree, and none that git itself refuses.

git refuses to put in its index (``verify_path``) a name with an empty, ``.`` or ``..``
component, and one whose component a file system would read as ``.git``: ``.GIT`` and other
cases, ``.git`` followed by dots or spaces (NTFS drops them, and an NTFS alternate data stream
suffix ``:...``), the NTFS short name ``GIT~1``, and ``.git`` with code points HFS+ ignores
(zero-width joiners, direction marks, U+FEFF). For a symbolic link the same goes for
``.gitmodules`` (with its short names ``GITMOD~1`` ... and ``gi7eba~N``). A name git refuses
cannot be written to work/ by ``read-tree``, so a patch naming one would wedge the stack; gqueue
refuses it up front, with git's rules on every platform (core.protectNTFS and protectHFS).
"""

from __future__ import annotations

import re

SYMLINK = "120000"

# the code points HFS+ leaves out when it compares names (git's next_hfs_char)
_HFS_IGNORED = frozenset(
    [0x200C, 0x200D, 0x200E, 0x200F, 0x202A, 0x202B, 0x202C, 0x202D, 0x202E,
     0x206A, 0x206B, 0x206C, 0x206D, 0x206E, 0x206F, 0xFEFF]
)
_DRIVE = re.compile(r"^[A-Za-z]:")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")  # git's tolower: no other letters


def _ntfs_tail(rest: str) -> bool:
    """What NTFS drops after a name: dots and spaces, up to the end or an alternate data stream."""
    return re.fullmatch(r"[. ]*(:.*)?", rest, re.S) is not None


def _ntfs_dotgit(component: str) -> bool:
    """Whether NTFS may open ``component`` as ``.git``: in any case, with dots and spaces after it,
    or as its 8.3 short name GIT~1 (git's is_ntfs_dotgit)."""
    lower = component.translate(_ASCII_LOWER)
    return any(lower.startswith(name) and _ntfs_tail(component[len(name):]) for name in (".git", "git~1"))


def _ntfs_dotgitmodules(component: str) -> bool:
    """Whether NTFS may open ``component`` as ``.gitmodules``: in any case with dots and spaces
    after it, as the short name GITMOD~1 to ~4, or as the hashed short name Windows falls back to
    (the first letters of 'gi7eba', '~', then digits to eight characters; git's is_ntfs_dot_generic)."""
    lower = component.translate(_ASCII_LOWER)
    if lower.startswith(".gitmodules") and _ntfs_tail(component[11:]):
        return True
    if re.match(r"gitmod~[1-4]", lower) and _ntfs_tail(component[8:]):
        return True
    short = re.match(r"([a-z0-9]{0,6})~[1-9][0-9]*", lower[:8])
    return (short is not None and len(short.group(0)) == 8 and "gi7eba".startswith(short.group(1))
            and _ntfs_tail(component[8:]))


def _hfs_is(component: str, name: str) -> bool:
    """Whether HFS+ reads ``component`` as ``.name``: the same letters in any case once the code
    points it ignores are left out."""
    # every code point HFS+ ignores is outside ASCII: an ASCII name (nearly all) is kept whole
    kept = component if component.isascii() else "".join(c for c in component if ord(c) not in _HFS_IGNORED)
    return kept.isascii() and kept.translate(_ASCII_LOWER) == "." + name


def reads_as(component: str, *, symlink: bool = False) -> str | None:
    """The name git protects that one path ``component`` may stand for ('.git', '.gitmodules'), or None."""
    if _ntfs_dotgit(component) or _hfs_is(component, "git"):
        return ".git"
    if symlink and (_ntfs_dotgitmodules(component) or _hfs_is(component, "gitmodules")):
        return ".gitmodules"
    return None


def path_problem(path: str, mode: str | None = None) -> str | None:
    """Why a patch may not write ``path`` (``mode``: the mode it gives it), or None when it may.

    The reason reads after the name: "patch touches 'x', <reason>"."""
    if "\0" in path:
        return "an odd path (it holds a NUL byte)"
    if not path or path.startswith("/") or "\\" in path or _DRIVE.match(path):
        return "an absolute or odd path"
    parts = path.split("/")
    if ".." in parts or "." in parts or "" in parts:
        return "outside the tree"
    for part in parts:
        protected = reads_as(part, symlink=mode == SYMLINK)
        if protected == ".git":
            return "inside .git" if part == ".git" else f"inside .git (git reads '{part}' as '.git' and refuses it)"
        if protected is not None:
            return f"a symbolic link git reads as '{protected}' and refuses ('{part}')"
    return None
