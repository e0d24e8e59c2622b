"""Property tests (hypothesis): the model's round trips, and push/pop/refresh on generated trees."""

from __future__ import annotations

import difflib
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gqueue.model.apply import apply_hunks
from gqueue.model.diff import parse_diff
from gqueue.model.patch import format_patch, parse_patch, render_header, with_body, with_fields
from gqueue.model.series import parse_series
from gqueue.ops import checkout as checkout_op
from gqueue.ops import stackops
from gqueue.ops.workspace import Workspace
from gqueue.store import Store
from synth import make_sdist, sha256

PURE = settings(max_examples=60, deadline=None)

# --- patch headers ----------------------------------------------------------------------------------

_TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\ufeff\x85\u2028\u2029"),
                max_size=40)
_LINE = _TEXT.filter(lambda s: s.strip() == s and s != "")
_WORD = st.from_regex(r"[A-Za-z][A-Za-z0-9_-]{0,12}", fullmatch=True)

header_fields = st.fixed_dictionaries(
    {"id": _WORD, "title": _LINE},
    optional={
        "description": st.one_of(_TEXT, st.lists(_LINE, min_size=1, max_size=4).map("\n".join)),
        "lifecycle": st.sampled_from(["experimental", "stable", "legacy", "retired"]),
        "default_on": st.booleans(),
        "env_flag": st.one_of(st.none(), _WORD),
        "requires": st.lists(_WORD, max_size=4),
        "conflicts": st.lists(_WORD, max_size=3),
        "upstream": st.fixed_dictionaries({"pr": st.integers(1, 10**6), "state": st.sampled_from(["open", "merged"])}),
        "notes": _TEXT,
        "x-custom": st.one_of(st.integers(), _TEXT, st.lists(st.integers(), max_size=3)),
    },
)
BODY = b"diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n"


@PURE
@given(header_fields, st.sampled_from([b"", BODY]))
def test_header_parse_format_round_trip(fields: dict[str, Any], body: bytes) -> None:
    data = render_header(fields) + body
    patch = parse_patch(data, name="P.patch")
    assert patch.meta.raw == fields
    assert format_patch(patch) == data
    assert patch.body == body
    again = parse_patch(format_patch(patch), name="P.patch")
    assert again.meta.raw == fields and format_patch(again) == data


@PURE
@given(header_fields, st.sampled_from(["title", "notes", "requires", "env_flag", "new-key"]), st.data())
def test_header_field_edit_touches_only_that_field(fields: dict[str, Any], key: str, data: st.DataObject) -> None:
    value = data.draw({"title": _LINE, "notes": _TEXT, "requires": st.lists(_WORD, max_size=3),
                       "env_flag": st.one_of(st.none(), _WORD), "new-key": _TEXT}[key])
    assume(not (key in ("title",) and value is None))
    patch = parse_patch(render_header(fields) + BODY, name="P.patch")
    edited = with_fields(patch, {key: value})
    expected = dict(fields)
    if value is None:
        expected.pop(key, None)
    else:
        expected[key] = value
    assert edited.meta.raw == expected
    assert edited.body == BODY
    assert format_patch(parse_patch(format_patch(edited), name="P.patch")) == format_patch(edited)
    # every other key is still there, on a line of its own
    for other in fields:
        if other != key:
            old_line = patch.meta.line_of(other)
            assert old_line is not None and edited.meta.line_of(other) is not None


# --- series -----------------------------------------------------------------------------------------

_NAME = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.+@-]{0,15}(/[A-Za-z0-9][A-Za-z0-9_.+@-]{0,8})?", fullmatch=True).filter(
    lambda n: ".." not in n.split("/"))
_GUARD = st.tuples(st.sampled_from("+-"), st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True)).map("".join)
_COMMENT_TEXT = st.text(st.characters(whitelist_categories=("L", "N", "Zs"), whitelist_characters=".,:()"),
                        max_size=20).map(lambda s: s.replace("#", ""))


@st.composite
def series_text(draw: st.DrawFn) -> tuple[str, list[tuple[str, int, tuple[str, ...]]]]:
    names = draw(st.lists(_NAME, min_size=0, max_size=8, unique=True))
    lines: list[str] = []
    entries = []
    for name in names:
        for _ in range(draw(st.integers(0, 2))):
            lines.append(draw(st.sampled_from(["\n", "   \n", "# " + draw(_COMMENT_TEXT) + "\n",
                                               "# parked: " + draw(_NAME) + "\n"])))
        strip = draw(st.sampled_from([None, 0, 1, 2]))
        guards = tuple(draw(st.lists(_GUARD, max_size=3)))
        comment = draw(st.sampled_from(["", "note"]))
        line = name + (f" -p{strip}" if strip is not None else "")
        if guards or comment:
            line += " #" + "".join(f"{g} " if i == 0 else f"#{g} " for i, g in enumerate(guards)) + comment
        lines.append(line + draw(st.sampled_from(["\n", "\r\n"])))
        entries.append((name, 1 if strip is None else strip, guards))
    text = "".join(lines)
    if draw(st.booleans()) and text.endswith("\n"):
        text = text.rstrip("\r\n")  # no newline at the end of the file
    return text, entries


@PURE
@given(series_text())
def test_series_round_trip_with_comments_and_guards(case: tuple[str, list[tuple[str, int, tuple[str, ...]]]]) -> None:
    text, entries = case
    series = parse_series(text)
    assert series.text() == text
    assert [(e.name, e.strip, e.guards) for e in series.entries] == entries


@PURE
@given(series_text(), st.data())
def test_series_edits_change_only_their_line(case: tuple[str, list[Any]], data: st.DataObject) -> None:
    text, entries = case
    series = parse_series(text)
    new_name = data.draw(_NAME.filter(lambda n: n not in series))
    position = data.draw(st.integers(0, len(entries)))
    inserted = series.insert(position, new_name)
    assert inserted.names == [*series.names[:position], new_name, *series.names[position:]]
    assert inserted.remove(new_name).text().rstrip("\r\n") == text.rstrip("\r\n")
    if entries:
        victim = data.draw(st.sampled_from([e[0] for e in entries]))
        renamed = series.rename(victim, new_name)
        assert renamed.names == [new_name if n == victim else n for n in series.names]
        assert renamed.entries[series.index(victim)].guards == series.entries[series.index(victim)].guards
        at = series.entries[series.index(victim)].line - 1
        assert [ln for i, ln in enumerate(renamed.lines) if i != at] == [ln for i, ln in enumerate(series.lines) if i != at]
        removed = series.remove(victim)
        assert removed.names == [n for n in series.names if n != victim]
        assert len(removed.lines) == len(series.lines) - 1


# --- hunks: apply and reverse on generated files ----------------------------------------------------

_SRC_LINE = st.sampled_from(["x = 1\n", "y = 2\n", "\n", "def f():\n", "    return 0\n", "# c\n", "pass\n"])


@st.composite
def file_edit(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    old = draw(st.lists(_SRC_LINE, min_size=0, max_size=40))
    new = list(old)
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["insert", "delete", "replace"]))
        at = draw(st.integers(0, max(len(new) - 1, 0)))
        if op == "insert" or not new:
            new.insert(at, draw(st.text("abcxyz =()", min_size=0, max_size=12)) + "\n")
        elif op == "delete":
            del new[at]
        else:
            new[at] = draw(st.text("abcxyz =()", min_size=0, max_size=12)) + "\n"
    return old, new


def _unified(path: str, old: list[str], new: list[str]) -> bytes:
    lines = difflib.unified_diff(old, new, f"a/{path}", f"b/{path}", n=3)
    return (f"diff --git a/{path} b/{path}\n" + "".join(lines)).encode()


@PURE
@given(file_edit())
def test_apply_then_reverse_is_identity(edit: tuple[list[str], list[str]]) -> None:
    old, new = edit
    assume(old != new)
    (fd,) = parse_diff(_unified("f.py", old, new))
    forward = apply_hunks("".join(old).encode(), fd)
    assert forward.ok and forward.new == "".join(new).encode()
    backward = apply_hunks("".join(new).encode(), fd.reversed())
    assert backward.ok and backward.new == "".join(old).encode()


def _indented(lines: list[str], by: str) -> bytes:
    return "".join(by + line if line.strip() else line for line in lines).encode()


@PURE
@given(file_edit(), st.sampled_from(["  ", "    ", "\t", "        "]))
def test_hunk_lands_the_same_on_a_reindented_file(edit: tuple[list[str], list[str]], by: str) -> None:
    """Each hunk on the file re-indented as a whole lands where it does on the file itself, with
    its added lines re-indented the same way."""
    from dataclasses import replace

    from gqueue.model.apply import apply_ignoring_whitespace

    old, new = edit
    assume(old != new)
    (fd,) = parse_diff(_unified("f.py", old, new))
    for hunk in fd.hunks:
        assume(any(line.strip() for line in hunk.old_lines()))
        alone = replace(fd, hunks=(hunk,))
        exact = apply_hunks("".join(old).encode(), alone)
        loose = apply_ignoring_whitespace(_indented(old, by), hunk, hunk.old_start - 1)
        assert loose is not None and exact.new is not None
        text, line, way = loose
        assert text == _indented(exact.new.decode().splitlines(True), by)
        assert line == exact.hunks[0].line and way.add == by.encode() and not way.remove


# --- push, pop and refresh through the real engine, on generated trees ------------------------------

_PATH = st.sampled_from(["a.py", "pkg/b.py", "pkg/sub/c.txt", "d.md"])


@st.composite
def tree_and_change(draw: st.DrawFn) -> tuple[dict[str, str], dict[str, str | None]]:
    tree = {p: "".join(draw(st.lists(_SRC_LINE, min_size=1, max_size=25)))
            for p in draw(st.lists(_PATH, min_size=1, max_size=4, unique=True))}
    change: dict[str, str | None] = {}
    for path in draw(st.lists(_PATH, min_size=1, max_size=3, unique=True)):
        if path in tree and draw(st.booleans()):
            old, new = draw(file_edit())
            change[path] = "".join(new) if old != new else tree[path] + "z = 9\n"
            if draw(st.booleans()):
                change[path] = None if len(tree) > 1 else "only = 1\n"
        elif path not in tree:
            change[path] = "".join(draw(st.lists(_SRC_LINE, min_size=1, max_size=10)))
    assume(change)
    return tree, change


def _patch_body(tree: dict[str, str], change: dict[str, str | None]) -> bytes:
    parts = []
    for path, new in sorted(change.items()):
        old = tree.get(path)
        if old is None:
            assert new is not None
            lines = difflib.unified_diff([], new.splitlines(keepends=True), "/dev/null", f"b/{path}", n=3)
            parts.append(f"diff --git a/{path} b/{path}\nnew file mode 100644\n" + "".join(lines))
        elif new is None:
            lines = difflib.unified_diff(old.splitlines(keepends=True), [], f"a/{path}", "/dev/null", n=3)
            parts.append(f"diff --git a/{path} b/{path}\ndeleted file mode 100644\n" + "".join(lines))
        else:
            parts.append(_unified(path, old.splitlines(keepends=True), new.splitlines(keepends=True)).decode())
    return "".join(parts).replace("--- /dev/null\t\n", "--- /dev/null\n").encode()


def _files(work: Path) -> dict[str, str]:
    return {str(p.relative_to(work)): p.read_text() for p in work.rglob("*")
            if p.is_file() and ".git" not in p.relative_to(work).parts}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(tree_and_change())
def test_push_pop_identity_and_refresh_idempotence(case: tuple[dict[str, str], dict[str, str | None]]) -> None:
    tree, change = case
    with tempfile.TemporaryDirectory(prefix="gqueue-prop-") as tmp:
        base = Path(tmp)
        archive = make_sdist(base / "upstream", "0.1.0", dict(tree))
        root = base / "q"
        (root / "queue").mkdir(parents=True)
        (root / "series").write_text("G1.patch\n")
        (root / "vendor-pin.txt").write_text(f"pin {archive.as_uri()}#sha256={sha256(archive)}\n")
        (root / "queue" / "G1.patch").write_bytes(b"---\nid: G1\ntitle: generated\n...\n" + _patch_body(tree, change))
        ws = Workspace(Store(root))
        try:
            checkout_op.checkout(ws)
            expected = {p: t for p, t in {**tree, **change}.items() if t is not None}
            for _ in range(2):  # push then pop is the identity, twice over
                result = stackops.push(ws)
                assert result.failed is None
                assert _files(ws.repo.path) == expected
                stackops.pop(ws)
                assert _files(ws.repo.path) == tree
            stackops.push(ws)
            first = stackops.refresh(ws)
            once = (root / "queue" / "G1.patch").read_bytes()
            second = stackops.refresh(ws)
            assert not second.changed  # refresh is idempotent
            assert (root / "queue" / "G1.patch").read_bytes() == once
            assert first.changed or once.endswith(_patch_body(tree, change))
            stackops.pop(ws)
            stackops.push(ws)  # the refreshed patch still gives the same tree
            assert _files(ws.repo.path) == expected
            (ws.repo.path / "a.py").write_text("edited = True\n")  # a work-tree edit, refreshed and replayed
            stackops.refresh(ws)
            stackops.pop(ws)
            assert _files(ws.repo.path) == tree
            stackops.push(ws)
            assert _files(ws.repo.path) == {**expected, "a.py": "edited = True\n"}
            assert with_body(parse_patch(once, name="G1.patch"), b"").meta.id == "G1"
        finally:
            ws.close()


_PLAIN = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), _TEXT,
              st.text(max_size=30)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.one_of(_WORD, st.text(max_size=8)), inner,
                                                                         max_size=3)),
    max_leaves=8,
)


@PURE
@given(header_fields, st.dictionaries(st.one_of(_WORD, st.text(max_size=10)), _PLAIN, max_size=3))
def test_a_new_patch_is_what_its_header_reads_back_as(fields: dict[str, Any], extra: dict[str, Any]) -> None:
    """new_patch takes the fields as the header's meta without parsing what it wrote (where it
    can tell it is safe): the meta, key lines included, is what parsing the file gives."""
    from gqueue.errors import FormatError
    from gqueue.model.patch import new_patch

    fields = {**{k: v for k, v in extra.items() if k not in fields}, **fields}
    try:
        parsed = parse_patch(render_header(fields) + BODY, name="P.patch")
    except FormatError as exc:
        with pytest.raises(FormatError) as err:
            new_patch("P.patch", fields, BODY)
        assert (err.value.message, err.value.line) == (exc.message, exc.line)
        return
    made = new_patch("P.patch", fields, BODY)
    assert made == parsed
    assert made.meta.key_lines == parsed.meta.key_lines
