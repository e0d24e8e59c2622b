"""Writes the hostile-input corpus next to this file. The outputs are committed; run this only
to change them (python tests/data/hostile/make_corpus.py). tests/reliability/test_hostile.py says what
each case must do; docs/RELIABILITY.md sums them up.

Patches target the synthetic upstream of tests/synth.py (BASE_FILES); archives stand in for
the pinned sdist (the tests copy them to vllm-0.1.0.tar.gz / .zip before 'gqueue checkout').
"""

from __future__ import annotations

import io
import json
import stat
import sys
import tarfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
from synth import BASE_FILES  # noqa: E402

PARSER = BASE_FILES["vllm/parser.py"]


def header(pid: str, title: str, extra: str = "") -> bytes:
    return f"---\nid: {pid}\ntitle: {title}\n{extra}...\n".encode()


def new_file(path: str, lines: list[str], *, a: str | None = None, b: str | None = None, mode: str = "100644") -> bytes:
    a = a or f"a/{path}"
    b = b or f"b/{path}"
    body = "".join(f"+{line}\n" for line in lines)
    return (f"diff --git {a} {b}\nnew file mode {mode}\n--- /dev/null\n+++ {b}\n"
            f"@@ -0,0 +1,{len(lines)} @@\n{body}").encode()


PARSER_HUNK = (
    "--- a/vllm/parser.py\n+++ b/vllm/parser.py\n@@ -4,4 +4,4 @@\n def parse(text):\n"
    "-    if text == 'null':\n+    if text in ('null', 'None'):\n         return None\n     return json.loads(text)\n"
)

PATCHES: dict[str, bytes] = {
    # paths out of the tree
    "dotdot.patch": header("H1", "writes ../outside") + new_file("../outside/evil.py", ["EVIL = 1"]),
    "dotdot-middle.patch": header("H2", "writes vllm/../../outside") + new_file("vllm/../../outside/evil.py", ["EVIL = 1"]),
    "absolute.patch": header("H3", "writes /tmp through b//") + new_file("/tmp/gqueue-evil.py", ["EVIL = 1"],
                                                                          a="a//tmp/gqueue-evil.py", b="b//tmp/gqueue-evil.py"),
    "git-dir.patch": header("H4", "writes .git/hooks") + new_file(".git/hooks/post-checkout", ["#!/bin/sh", "echo owned"]),
    "backslash.patch": header("H5", "writes a backslash path") + new_file("vllm\\..\\..\\evil.py", ["EVIL = 1"]),
    # links and odd modes
    "symlink-new.patch": header("H6", "creates a symlink out of the tree")
    + new_file("vllm/escape", ["../../outside"], mode="120000"),
    "mode-symlink.patch": header("H7", "turns a file into a symlink") + (
        "diff --git a/README.md b/README.md\nold mode 100644\nnew mode 120000\n").encode(),
    "gitlink.patch": header("H8", "adds a submodule") + (
        "diff --git a/vllm/sub b/vllm/sub\nnew file mode 160000\nindex 0000000..1234567\n--- /dev/null\n+++ b/vllm/sub\n"
        "@@ -0,0 +1 @@\n+Subproject commit 1234567890123456789012345678901234567890\n").encode(),
    # binary
    "binary-literal.patch": header("H9", "git binary patch") + (
        "diff --git a/vllm/blob.bin b/vllm/blob.bin\nnew file mode 100644\nindex 0000000..e69de29\n"
        "GIT binary patch\nliteral 4\nLcmZ?wbYTDh00aO4\n\nliteral 0\nHcmV?d00001\n\n").encode(),
    "binary-differ.patch": header("H10", "binary files differ") + (
        "diff --git a/vllm/blob.bin b/vllm/blob.bin\nnew file mode 100644\nindex 0000000..e69de29\n"
        "Binary files /dev/null and b/vllm/blob.bin differ\n").encode(),
    # line endings and encodings
    "crlf-everywhere.patch": (header("H11", "CRLF everywhere") + PARSER_HUNK.encode()).replace(b"\n", b"\r\n"),
    "crlf-body.patch": header("H12", "CRLF diff body") + PARSER_HUNK.encode().replace(b"\n", b"\r\n"),
    "latin1-header.patch": b"---\nid: H13\ntitle: caf\xe9 latin-1\n...\n" + PARSER_HUNK.encode(),
    "latin1-path.patch": header("H14", "latin-1 file name") + new_file("vllm/cafXX.py", ["X = 1"]).replace(b"XX", b"\xe9"),
    "latin1-body.patch": header("H15", "latin-1 content on a UTF-8 file") + PARSER_HUNK.encode().replace(
        b"'None'", b"'N\xf6ne'").replace(b"    if text == 'null':", b"    if text == 'n\xfcll':"),
    # broken hunks
    "truncated-hunk.patch": header("H16", "truncated hunk") + (
        "--- a/vllm/parser.py\n+++ b/vllm/parser.py\n@@ -4,4 +4,4 @@\n def parse(text):\n"
        "-    if text == 'null':\n").encode(),
    "lying-counts-short.patch": header("H17", "hunk claims fewer lines") + PARSER_HUNK.replace("@@ -4,4 +4,4 @@", "@@ -4,2 +4,2 @@").encode(),
    "lying-counts-long.patch": header("H18", "hunk claims more lines") + (
        PARSER_HUNK.replace("@@ -4,4 +4,4 @@", "@@ -4,9 +4,9 @@")
        + "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-synthetic upstream\n+changed\n").encode(),
    "malformed-hunk-header.patch": header("H19", "hunk header garbage") + (
        "--- a/vllm/parser.py\n+++ b/vllm/parser.py\n@@ -four,4 +4,4 @@\n def parse(text):\n").encode(),
    "minus-without-plus.patch": header("H20", "--- without +++") + b"--- a/vllm/parser.py\n@@ -1 +1 @@\n-a\n+b\n",
    "no-hunks.patch": header("H21", "file header with no hunks") + b"--- a/vllm/parser.py\n+++ b/vllm/parser.py\n",
    "quoted-name.patch": header("H22", "quoted file name") + (
        'diff --git "a/vllm/x y.py" "b/vllm/x y.py"\nnew file mode 100644\n--- /dev/null\n+++ "b/vllm/x y.py"\n'
        "@@ -0,0 +1 @@\n+X = 1\n").encode(),
    "rename.patch": header("H23", "rename") + (  # a rename out of the tree
        "diff --git a/README.md b/../README2.md\nsimilarity index 100%\nrename from README.md\nrename to ../README2.md\n").encode(),
    "missing-target.patch": header("H24", "changes a file that does not exist") + (
        "--- a/vllm/nope.py\n+++ b/vllm/nope.py\n@@ -1 +1 @@\n-a\n+b\n").encode(),
    "existing-target.patch": header("H25", "creates a file that exists") + new_file("README.md", ["again"]),
    # empty and headerless
    "empty.patch": b"",
    "no-header.patch": PARSER_HUNK.encode(),
    "unclosed-header.patch": b"---\nid: H26\ntitle: never closed\n" + PARSER_HUNK.encode(),
    "prose-only.patch": header("H27", "text but no diff") + b"This patch lost its diff in transit.\n",
    # YAML headers
    "yaml-alias-bomb.patch": (
        b"---\nid: H28\ntitle: billion laughs\na: &a [x, x, x, x, x, x, x, x, x]\n"
        + b"".join(f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n".encode() for i in range(8))
        + b"...\n" + PARSER_HUNK.encode()
    ),
    "yaml-huge-scalar.patch": header("H29", "huge scalar", "notes: " + "x" * 100_000 + "\n") + PARSER_HUNK.encode(),
    "yaml-huge-header.patch": header("H30", "huge header", "".join(f"k{i}: {'y' * 60}\n" for i in range(5000))) + PARSER_HUNK.encode(),
    "yaml-deep-nesting.patch": header("H31", "deep nesting", "notes: " + "[" * 5000 + "]" * 5000 + "\n") + PARSER_HUNK.encode(),
    "yaml-python-tag.patch": header("H32", "python tag", "notes: !!python/object/apply:os.system ['touch /tmp/gqueue-owned']\n") + PARSER_HUNK.encode(),
    "yaml-not-mapping.patch": b"---\n- id: H33\n- title: a list\n...\n" + PARSER_HUNK.encode(),
    "yaml-wrong-type.patch": header("H34", "requires is a string", "requires: P1\n") + PARSER_HUNK.encode(),
    "yaml-no-id.patch": b"---\ntitle: no id\n...\n" + PARSER_HUNK.encode(),
    # duplicates (used with dup-id-b.patch in one series)
    "dup-id-a.patch": header("H35", "first of two with one id") + PARSER_HUNK.encode(),
    "dup-id-b.patch": header("H35", "second of two with one id") + new_file("vllm/dup.py", ["DUP = 1"]),
    # allowed, for the through-a-link cases (the archive symlink-inside.tar.gz has vllm/alias -> ops)
    "through-link-new.patch": header("H36", "new file through an in-tree link") + new_file("vllm/alias/evil.py", ["EVIL = 1"]),
    "through-link-edit.patch": header("H37", "edit through an in-tree link") + (
        "--- a/vllm/alias/real.py\n+++ b/vllm/alias/real.py\n@@ -1 +1 @@\n-REAL = 1\n+REAL = 2\n").encode(),
    "edit-link-itself.patch": header("H38", "rewrite the link itself") + (
        "--- a/vllm/alias\n+++ b/vllm/alias\n@@ -1 +1 @@\n-ops\n\\ No newline at end of file\n+../../outside\n"
        "\\ No newline at end of file\n").encode(),
}

SERIES: dict[str, bytes] = {
    "named-twice.series": b"dup-id-a.patch\nok.patch\ndup-id-a.patch\n",
    "missing-file.series": b"ok.patch\nnot-there.patch\n",
    "dotdot-name.series": b"../outside/evil.patch\n",
    "absolute-p0.series": b"absolute-p0.patch -p0\n",
    "reversed.series": b"ok.patch -R\n",
    "dup-ids.series": b"dup-id-a.patch\ndup-id-b.patch\n",
    "not-utf8.series": b"ok.patch # caf\xe9\n",
}
# used by the series cases
PATCHES["ok.patch"] = header("OK1", "a harmless patch") + new_file("vllm/ok.py", ["OK = 1"])
PATCHES["absolute-p0.patch"] = header("H39", "absolute path with -p0") + new_file(
    "/tmp/gqueue-evil.py", ["EVIL = 1"], a="/tmp/gqueue-evil.py", b="/tmp/gqueue-evil.py")

# --- authors, and names git protects ---------------------------------------------------------------
README_HUNK = "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-synthetic upstream\n+synthetic upstream!\n"
# what an author line with line breaks would have added to the fast-import stream: a hidden file
# in the commit (vllm/evil.py), and a second commit that swallows the rest of gqueue's own lines
INJECTED = ("Eve <eve@example.org> 1000000000 +0000\ncommitter x <x@example.org> 1000000000 +0000\ndata 2\nhi\n"
            "M 100644 inline vllm/evil.py\ndata 9\nEVIL = 1\n\ncommit refs/junk\nauthor a <a@example.org>")
PATCHES.update({
    "author-injection.patch": header("H40", "an author with fast-import lines in it",
                                     "author: " + json.dumps(INJECTED) + "\n") + README_HUNK.encode(),
    "author-angle.patch": header("H41", "an author with a '>' in the name",
                                 "author: Eve> <eve@example.org>\n") + README_HUNK.encode(),
    "author-no-mail.patch": header("H42", "an author without a mail", "author: Eve\n") + README_HUNK.encode(),
    # a DEP-3 header whose Author field goes on over continuation lines (imported, not pushed)
    "dep3-author-continued.patch": (
        "Description: fix the readme\nAuthor: " + INJECTED.replace("\n\n", "\n.\n").replace("\n", "\n ") + "\n\n"
        + README_HUNK).encode(),
    "git-upper.patch": header("H43", "writes .GIT/hooks") + new_file(".GIT/hooks/post-checkout", ["#!/bin/sh", "echo owned"]),
    "git-shortname.patch": header("H44", "writes GIT~1 (the NTFS short name of .git)") + new_file("GIT~1/config", ["[core]"]),
    "git-trailing-dot.patch": header("H45", "writes .git. (NTFS drops the dot)") + new_file("vllm/.git./config", ["[core]"]),
    "git-trailing-space.patch": header("H46", "writes '.git ' (NTFS drops the space)") + new_file("vllm/.git /config", ["[core]"]),
    "git-stream.patch": header("H47", "writes .git::$INDEX_ALLOCATION (an NTFS stream of .git)")
    + new_file(".git::$INDEX_ALLOCATION/config", ["[core]"]),
    "git-hfs.patch": header("H48", "writes .g<ZWNJ>it (HFS+ ignores the joiner)") + new_file(".g\u200cit/config", ["[core]"]),
    "nul-name.patch": header("H49", "a file name with a NUL byte") + new_file("vllm/a\0b.py", ["X = 1"]),
})

# --- a new file where a folder is, or under a file (issue 38, item 2) -------------------------------
PATCHES.update({
    "new-file-over-folder.patch": header("HK1", "creates a file named like the folder vllm/")
    + new_file("vllm", ["EVIL = 1"]),
    "new-file-under-file.patch": header("HK2", "creates a file under the file vllm/__init__.py")
    + new_file("vllm/__init__.py/evil.py", ["EVIL = 1"]),
    # pushed after ok.patch, which creates vllm/ok.py
    "new-file-under-new-file.patch": header("HK3", "creates a file under vllm/ok.py, made by the patch before")
    + new_file("vllm/ok.py/evil.py", ["EVIL = 1"]),
})


def _tar(members: list[tuple[str, str, bytes | str]], *, gz: bool = True) -> bytes:
    """members: (name, kind, data or link target); kind in file, sym, hard, chr, dir."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if gz else "w", format=tarfile.GNU_FORMAT) as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            info.mtime = 0
            info.mode = 0o644
            if kind == "file":
                raw = data.encode() if isinstance(data, str) else data
                info.size = len(raw)
                tar.addfile(info, io.BytesIO(raw))
                continue
            if kind == "sym":
                info.type, info.linkname = tarfile.SYMTYPE, str(data)
            elif kind == "hard":
                info.type, info.linkname = tarfile.LNKTYPE, str(data)
            elif kind == "chr":
                info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
            elif kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
    return buf.getvalue()


def _base(top: str = "vllm-0.1.0") -> list[tuple[str, str, bytes | str]]:
    return [(f"{top}/{name}", "file", text) for name, text in sorted(BASE_FILES.items())]


def _zip(members: list[tuple[str, bytes, int]]) -> bytes:
    """members: (name, data, unix mode)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for name, data, mode in members:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = mode << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    return buf.getvalue()


def _zip_base() -> list[tuple[str, bytes, int]]:
    return [(f"vllm-0.1.0/{n}", t.encode(), stat.S_IFREG | 0o644) for n, t in sorted(BASE_FILES.items())]


def _size_lie() -> bytes:
    data = bytearray(_zip([*_zip_base(), ("vllm-0.1.0/vllm/big.py", b"X = 1\n" * 4000, stat.S_IFREG | 0o644)]))
    # shrink the declared size of the last member in its central directory record
    central = data.rfind(b"PK\x01\x02")
    data[central + 24 : central + 28] = (10).to_bytes(4, "little")
    return bytes(data)


ARCHIVES: dict[str, bytes] = {
    "tar-dotdot.tar.gz": _tar([*_base(), ("vllm-0.1.0/../../outside/evil.py", "file", "EVIL = 1\n")]),
    "tar-absolute.tar.gz": _tar([*_base(), ("/tmp/gqueue-evil.py", "file", "EVIL = 1\n")]),
    "tar-symlink-out.tar.gz": _tar([*_base(), ("vllm-0.1.0/vllm/escape", "sym", "../../../outside")]),
    "tar-symlink-absolute.tar.gz": _tar([*_base(), ("vllm-0.1.0/vllm/escape", "sym", "/etc")]),
    "tar-link-then-write.tar.gz": _tar([*_base(), ("vllm-0.1.0/vllm/escape", "sym", "../../.."),
                                        ("vllm-0.1.0/vllm/escape/outside/evil.py", "file", "EVIL = 1\n")]),
    "tar-hardlink.tar.gz": _tar([*_base(), ("vllm-0.1.0/vllm/hard", "hard", "/etc/passwd")]),
    "tar-device.tar.gz": _tar([*_base(), ("vllm-0.1.0/vllm/null", "chr", "")]),
    "tar-bomb.tar.gz": _tar([*_base(), ("vllm-0.1.0/vllm/zeros.bin", "file", bytes(48 << 20))]),
    "tar-truncated.tar.gz": _tar(_base())[:300],
    "not-an-archive.tar.gz": b"this is not a tar file\n" * 20,
    "zip-dotdot.zip": _zip([*_zip_base(), ("vllm-0.1.0/../../outside/evil.py", b"EVIL = 1\n", stat.S_IFREG | 0o644)]),
    "zip-absolute.zip": _zip([*_zip_base(), ("/tmp/gqueue-evil.py", b"EVIL = 1\n", stat.S_IFREG | 0o644)]),
    "zip-symlink-out.zip": _zip([*_zip_base(), ("vllm-0.1.0/vllm/escape", b"../../../outside", stat.S_IFLNK | 0o777)]),
    "zip-bomb.zip": _zip([*_zip_base(), ("vllm-0.1.0/vllm/zeros.bin", bytes(48 << 20), stat.S_IFREG | 0o644)]),
    "zip-size-lie.zip": _size_lie(),
    # allowed: a link that stays inside the tree (the through-link patches are refused on it)
    "symlink-inside.tar.gz": _tar([*_base(), ("vllm-0.1.0/vllm/ops/real.py", "file", "REAL = 1\n"),
                                   ("vllm-0.1.0/vllm/alias", "sym", "ops")]),
}


def main() -> None:
    for folder, items in (("patches", PATCHES), ("series", SERIES), ("archives", ARCHIVES)):
        (HERE / folder).mkdir(exist_ok=True)
        for name, data in items.items():
            (HERE / folder / name).write_bytes(data)
    print(f"wrote {len(PATCHES)} patches, {len(SERIES)} series, {len(ARCHIVES)} archives")


if __name__ == "__main__":
    main()
