"""Unified diffs as bytes: a strict parser that keeps file line numbers for error messages.

Works on bytes (patches may carry any encoding) and knows git's extended headers
(new/deleted file, modes, index, binary); every malformed hunk is reported with the line
of the patch file where it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import FormatError

_HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@ ?(.*?)\r?\n?$")
NO_NEWLINE = b"\\ No newline at end of file"
_MODE = re.compile(rb"[0-7]{6}")
_INDEX = re.compile(rb"([0-9a-f]+)\.\.([0-9a-f]+)")


@dataclass(frozen=True)
class Hunk:
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    lines: tuple[tuple[bytes, bytes], ...]  # (tag, text with its line ending); tag in b" -+"
    line: int  # line of the '@@' in the patch file
    section: bytes = b""

    def old_lines(self) -> list[bytes]:
        return [text for tag, text in self.lines if tag in (b" ", b"-")]

    def new_lines(self) -> list[bytes]:
        return [text for tag, text in self.lines if tag in (b" ", b"+")]

    def reversed(self) -> "Hunk":
        swap = {b"-": b"+", b"+": b"-", b" ": b" "}
        return Hunk(
            self.new_start, self.new_len, self.old_start, self.old_len,
            tuple((swap[t], x) for t, x in self.lines), self.line, self.section,
        )


@dataclass(frozen=True)
class FileDiff:
    old_path: str | None  # None for a new file
    new_path: str | None  # None for a deleted file
    hunks: tuple[Hunk, ...]
    line: int  # first line of this file's header in the patch file
    old_mode: str | None = None
    new_mode: str | None = None
    binary: bool = False
    old_index: str | None = None
    new_index: str | None = None
    rename: bool = False  # git's 'rename from'/'rename to': old_path goes, new_path gets its text
    copy: bool = False  # git's 'copy from'/'copy to': new_path gets old_path's text, which stays

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or ""

    @property
    def source(self) -> str:
        """The file whose text the hunks apply to: old_path for a rename or copy, else ``path``."""
        return (self.old_path or self.path) if self.rename or self.copy else self.path

    @property
    def is_new(self) -> bool:
        return self.old_path is None

    @property
    def is_delete(self) -> bool:
        return self.new_path is None

    def reversed(self) -> "FileDiff":
        return FileDiff(
            self.new_path, self.old_path, tuple(h.reversed() for h in self.hunks), self.line,
            self.new_mode, self.old_mode, self.binary, self.new_index, self.old_index, self.rename, self.copy,
        )


def _strip(raw: bytes, strip: int, *, path: str, line: int) -> str | None:
    name = raw.split(b"\t", 1)[0].rstrip(b"\r\n")
    if name.startswith(b'"'):
        raise FormatError("quoted file names in patches are not supported", path=path, line=line)
    if name == b"/dev/null":
        return None
    try:
        text = name.decode("utf-8")
    except UnicodeDecodeError:
        raise FormatError("file name in patch is not UTF-8", path=path, line=line) from None
    parts = text.split("/")
    if strip and len(parts) <= strip:
        raise FormatError(f"cannot strip {strip} components from '{text}'", path=path, line=line)
    return "/".join(parts[strip:])


def _git_header_names(names: bytes, strip: int, renamed_from: str | None, renamed_to: str | None, *,
                      path: str, line: int) -> tuple[str | None, str | None]:
    """The two file names of a 'diff --git' line, for an entry without '---'/'+++' lines.

    Names may hold spaces, so the line is split where the names come out right: in the middle
    when both sides name one file (a mode change, a binary file), or where they are the
    'rename from'/'rename to' names; else before the first ' b/'."""
    cuts = [k for k in range(len(names)) if names[k : k + 1] == b" "]

    def split(k: int) -> tuple[str | None, str | None] | None:
        try:
            return (_strip(names[:k], strip, path=path, line=line), _strip(names[k + 1 :], strip, path=path, line=line))
        except FormatError:
            return None

    if len(names) % 2 == 1 and len(names) // 2 in cuts:
        both = split(len(names) // 2)
        if both is not None and both[0] == both[1]:
            return both
    if renamed_from is not None and renamed_to is not None:
        for k in cuts:
            if split(k) == (renamed_from, renamed_to):
                return renamed_from, renamed_to
    git_names = names.split(b" b/", 1)
    if len(git_names) != 2:
        raise FormatError("cannot tell the two file names apart on the 'diff --git' line", path=path, line=line)
    return _strip(git_names[0], strip, path=path, line=line), _strip(b"b/" + git_names[1], strip, path=path, line=line)


def byte_lines(data: bytes) -> list[bytes]:
    """Lines ending in ``\\n`` (the last may lack it), as git and patch count them.

    ``bytes.splitlines`` also breaks at a lone ``\\r``, which a line of a source file may hold.
    """
    lines = [line + b"\n" for line in data.split(b"\n")]
    lines[-1] = lines[-1][:-1]
    return lines if lines[-1] else lines[:-1]


def parse_diff(body: bytes, *, path: str = "<patch>", first_line: int = 1, strip: int = 1) -> list[FileDiff]:
    lines = byte_lines(body)
    files: list[FileDiff] = []
    i = 0
    n = len(lines)

    def lineno(k: int) -> int:
        return first_line + k

    while i < n:
        line = lines[i]
        if not (line.startswith(b"diff --git ") or line.startswith(b"--- ")):
            if files and _HUNK.match(line):
                raise FormatError("hunk header outside any file: a line that is no hunk line (a blank one?) "
                                  "comes between it and the hunks before it", path=path, line=lineno(i))
            i += 1
            continue
        start = i
        meta: dict[str, str | bool | None] = {}
        if line.startswith(b"diff --git "):
            i += 1
            while i < n and not lines[i].startswith((b"--- ", b"diff --git ", b"@@ ")):
                ext = lines[i].rstrip(b"\r\n")
                here = lineno(i)
                if ext.startswith(b"new file mode "):
                    meta["new_mode"], meta["new"] = _mode(ext[14:], path, here), True
                elif ext.startswith(b"deleted file mode "):
                    meta["old_mode"], meta["deleted"] = _mode(ext[18:], path, here), True
                elif ext.startswith(b"old mode "):
                    meta["old_mode"] = _mode(ext[9:], path, here)
                elif ext.startswith(b"new mode "):
                    meta["new_mode"] = _mode(ext[9:], path, here)
                elif ext.startswith(b"index "):
                    fields = ext[6:].split()
                    match = _INDEX.fullmatch(fields[0]) if fields else None
                    if match is None or len(fields) > 2:
                        raise FormatError("malformed 'index' line", path=path, line=here)
                    meta["old_index"], meta["new_index"] = match.group(1).decode(), match.group(2).decode()
                    if len(fields) > 1:
                        meta.setdefault("old_mode", _mode(fields[1], path, here))
                        meta.setdefault("new_mode", _mode(fields[1], path, here))
                elif ext.startswith((b"rename from ", b"rename to ", b"copy from ", b"copy to ")):
                    meta["rename" if ext.startswith(b"rename") else "copy"] = True
                    side = "rename_from" if ext.startswith((b"rename from ", b"copy from ")) else "rename_to"
                    meta[side] = ext.split(b" ", 2)[2].decode("utf-8", "replace")
                elif ext.startswith(b"Binary files ") or ext == b"GIT binary patch":
                    meta["binary"] = True
                elif ext.startswith((b"similarity index", b"dissimilarity index")):
                    pass
                else:
                    break
                i += 1
            if meta.get("rename") and meta.get("copy"):
                raise FormatError("a file header says both 'rename' and 'copy'", path=path, line=lineno(start))
            if i < n and lines[i].startswith(b"@@ ") and not meta.get("binary"):
                raise FormatError("hunk without the '---' and '+++' lines of its file", path=path, line=lineno(i))
            if meta.get("binary") or i >= n or not lines[i].startswith(b"--- "):
                old, new = _git_header_names(line[11:].rstrip(b"\r\n"), strip, _s(meta, "rename_from"),
                                             _s(meta, "rename_to"), path=path, line=lineno(start))
                if meta.get("new") and meta.get("deleted"):
                    raise FormatError("a file header says both 'new file' and 'deleted file'", path=path, line=lineno(start))
                files.append(
                    FileDiff(
                        None if meta.get("new") else old, None if meta.get("deleted") else new, (), lineno(start),
                        _s(meta, "old_mode"), _s(meta, "new_mode"), bool(meta.get("binary")),
                        _s(meta, "old_index"), _s(meta, "new_index"), bool(meta.get("rename")), bool(meta.get("copy")),
                    )
                )
                continue
        if i + 1 >= n or not lines[i + 1].startswith(b"+++ "):
            raise FormatError("'---' line not followed by '+++'", path=path, line=lineno(i))
        dashes = i
        old_path = _strip(lines[i][4:], strip, path=path, line=lineno(i))
        new_path = _strip(lines[i + 1][4:], strip, path=path, line=lineno(i + 1))
        if old_path is None and new_path is None:
            raise FormatError("both sides of the file header are /dev/null", path=path, line=lineno(i))
        i += 2
        hunks: list[Hunk] = []
        while i < n and lines[i].startswith(b"@@"):
            hunk, i = _parse_hunk(lines, i, path=path, first_line=first_line)
            hunks.append(hunk)
            if i < n and _hunk_line_after_count(lines[i]):
                raise FormatError(
                    f"hunk line counts lie: the header says {hunk.old_len} old and {hunk.new_len} new lines, "
                    "but more hunk lines follow", path=path, line=lineno(i),
                )
        moved = bool(meta.get("rename") or meta.get("copy"))
        if not hunks and not (meta.get("new") or meta.get("deleted") or moved):
            raise FormatError("file header without hunks", path=path, line=lineno(start))
        if moved and (old_path is None or new_path is None or old_path == new_path):
            raise FormatError("a rename or copy needs two different file names on its '---' and '+++' lines",
                              path=path, line=lineno(dashes))
        files.append(
            FileDiff(
                old_path, new_path, tuple(hunks), lineno(start), _s(meta, "old_mode"), _s(meta, "new_mode"),
                False, _s(meta, "old_index"), _s(meta, "new_index"), bool(meta.get("rename")), bool(meta.get("copy")),
            )
        )
    return files


def as_p1(body: bytes, strip: int, *, path: str = "<patch>") -> bytes:
    """``body``, a diff applied with -p``strip``, with its file names rewritten for -p1 (``a/``
    and ``b/`` before each name; what ``git am`` and a plain ``patch -p1`` expect). Only the file
    headers change; hunks, and header lines other than the names, are kept byte for byte."""
    if strip == 1:
        return body
    files = parse_diff(body, path=path, strip=strip)
    lines = byte_lines(body)
    starts = [fd.line - 1 for fd in files] + [len(lines)]
    for k, fd in enumerate(files):
        end = min(starts[k + 1], fd.hunks[0].line - 1) if fd.hunks else starts[k + 1]
        old, new = fd.old_path, fd.new_path
        for j in range(starts[k], end):
            line = lines[j]
            eol = line[len(line.rstrip(b"\r\n")):]
            if line.startswith(b"diff --git "):
                lines[j] = f"diff --git a/{old or new} b/{new or old}".encode() + eol
            elif line.startswith(b"--- "):
                lines[j] = (b"--- /dev/null" if old is None else f"--- a/{old}".encode()) + eol
            elif line.startswith(b"+++ "):
                lines[j] = (b"+++ /dev/null" if new is None else f"+++ b/{new}".encode()) + eol
    return b"".join(lines)


def _hunk_line_after_count(line: bytes) -> bool:
    """A context, added or removed line right after a hunk whose counts are used up."""
    if line.startswith((b"--- ", b"-- \n", b"-- \r\n")) or line in (b"--\n", b"-- "):
        return False  # the next file's header, or a mail signature
    if line[:1] in (b"+", b"-"):
        return True  # a lone '+' or '-' adds or removes an empty line
    return line[:1] == b" " and len(line.rstrip(b"\r\n")) > 1


def _mode(raw: bytes, path: str, line: int) -> str:
    if not _MODE.fullmatch(raw):
        raise FormatError("malformed file mode in a git header line", path=path, line=line)
    return raw.decode()


def _s(meta: dict[str, str | bool | None], key: str) -> str | None:
    value = meta.get(key)
    return value if isinstance(value, str) else None


def _parse_hunk(lines: list[bytes], i: int, *, path: str, first_line: int) -> tuple[Hunk, int]:
    match = _HUNK.match(lines[i])
    if not match:
        raise FormatError("malformed hunk header", path=path, line=first_line + i)
    old_start, new_start = int(match.group(1)), int(match.group(3))
    old_len = int(match.group(2)) if match.group(2) is not None else 1
    new_len = int(match.group(4)) if match.group(4) is not None else 1
    header_index = i
    i += 1
    body: list[tuple[bytes, bytes]] = []
    old_seen = new_seen = 0
    while old_seen < old_len or new_seen < new_len:
        if i >= len(lines):
            raise FormatError(
                f"hunk ends early: expected {old_len} old and {new_len} new lines, found {old_seen} and {new_seen}",
                path=path, line=first_line + header_index,
            )
        raw = lines[i]
        tag = raw[:1]
        if raw in (b"\n", b"\r\n"):  # an empty context line whose leading space was eaten
            tag, raw = b" ", b" " + raw
        if tag not in (b" ", b"-", b"+"):
            if raw.startswith(NO_NEWLINE) and body:
                body[-1] = (body[-1][0], _chomp(body[-1][1]))
                i += 1
                continue
            raise FormatError(
                f"hunk line counts lie: expected {old_len} old and {new_len} new lines, found {old_seen} and {new_seen}",
                path=path, line=first_line + i,
            )
        if not raw.endswith(b"\n"):
            raise FormatError("the patch file ends inside a hunk line (its newline is missing; a line without "
                              "one is marked '\\ No newline at end of file')", path=path, line=first_line + i)
        body.append((tag, raw[1:]))
        if tag in (b" ", b"-"):
            old_seen += 1
        if tag in (b" ", b"+"):
            new_seen += 1
        i += 1
        if old_seen > old_len or new_seen > new_len:
            raise FormatError("hunk has more lines than its header says", path=path, line=first_line + i - 1)
    if i < len(lines) and lines[i].startswith(NO_NEWLINE):
        if not body:
            raise FormatError(f"'{NO_NEWLINE.decode()}' follows a hunk without lines", path=path, line=first_line + i)
        body[-1] = (body[-1][0], _chomp(body[-1][1]))
        i += 1
    section = match.group(5) or b""
    return Hunk(old_start, old_len, new_start, new_len, tuple(body), first_line + header_index, section), i


def _chomp(text: bytes) -> bytes:
    return text[:-1] if text.endswith(b"\n") else text
