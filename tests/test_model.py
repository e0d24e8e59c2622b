"""The pure model: round trips, diff parsing errors with lines, hunk placement."""

from __future__ import annotations

from pathlib import Path

import pytest

from paths import REPO
from synth import make_queue
from gqueue.errors import FormatError
from gqueue.model.apply import apply_hunks
from gqueue.model.diff import parse_diff
from gqueue.model.patch import format_patch, parse_patch, with_fields
from gqueue.model.pin import parse_pins
from gqueue.model.series import parse_series
from gqueue.store import Store

QUEUE_FILES = sorted((REPO / "queue").rglob("*.patch"))  # the variants under queue/variants/ too


@pytest.mark.parametrize("path", QUEUE_FILES, ids=[str(p.relative_to(REPO / "queue")) for p in QUEUE_FILES])
def test_every_queue_file_round_trips_byte_for_byte(path: Path) -> None:
    data = path.read_bytes()
    assert format_patch(parse_patch(data, name=path.name)) == data


def test_project_series_and_pin_round_trip() -> None:
    text = (REPO / "series").read_text()
    assert parse_series(text).text() == text
    pins = (REPO / "vendor-pin.txt").read_text()
    parsed = parse_pins(pins)
    assert parsed.text() == pins and parsed.main.version == "0.34.0"
    assert [(p.label, p.version) for p in parsed.pins] == [("pin", "0.34.0"), ("rollback", "0.24.0")]


def test_with_fields_touches_only_its_lines() -> None:
    data = b"---\nid: P1\n# a comment kept\ntitle: t\nlifecycle: experimental\nnotes: |\n  two\n  lines\n...\nbody\n"
    patch = with_fields(parse_patch(data, name="P1-x.patch"), {"lifecycle": "merged_upstream"})
    assert format_patch(patch) == data.replace(b"lifecycle: experimental", b"lifecycle: merged_upstream")


def test_header_errors_name_the_line() -> None:
    with pytest.raises(FormatError) as err:
        parse_patch(b"---\nid: P1\ntitle: [unclosed\n...\n", name="x.patch")
    assert err.value.line is not None and err.value.line >= 3
    with pytest.raises(FormatError, match="anchors and aliases"):
        parse_patch(b"---\nid: &a P1\ntitle: *a\n...\n", name="x.patch")
    with pytest.raises(FormatError, match="never closed"):
        parse_patch(b"---\nid: P1\n", name="x.patch")


def test_diff_line_counts_that_lie_are_reported_with_line() -> None:
    body = b"diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+c\n"
    with pytest.raises(FormatError) as err:
        parse_diff(body, path="queue/x.patch", first_line=10)
    assert err.value.path == "queue/x.patch" and err.value.line == 13


def test_hunk_offsets_are_relative_to_the_header_line() -> None:
    old = b"".join(b"l%d\n" % i for i in range(30))
    body = b"--- a/f\n+++ b/f\n@@ -5,3 +5,3 @@\n l4\n-l5\n+L5\n l6\n@@ -20,3 +20,3 @@\n l19\n-l20\n+L20\n l21\n"
    fd = parse_diff(body)[0]
    shifted = b"x\nx\n" + old
    outcome = apply_hunks(shifted, fd)
    assert [(h.status, h.offset) for h in outcome.hunks] == [("offset", 2), ("offset", 2)]
    assert outcome.new == shifted.replace(b"l5\n", b"L5\n", 1).replace(b"l20\n", b"L20\n", 1)


def test_fuzz_is_never_taken_silently() -> None:
    old = b"".join(b"l%d\n" % i for i in range(10)).replace(b"l2\n", b"CHANGED\n")
    body = b"--- a/f\n+++ b/f\n@@ -3,4 +3,4 @@\n l2\n l3\n-l4\n+L4\n l5\n"
    fd = parse_diff(body)[0]
    assert apply_hunks(old, fd).hunks[0].status == "failed"
    fuzzed = apply_hunks(old, fd, max_fuzz=1)
    assert fuzzed.hunks[0].status == "fuzz" and fuzzed.hunks[0].fuzz == 1 and b"L4\n" in fuzzed.new


@pytest.mark.parametrize(
    ("header", "line", "message"),
    [
        (b"id: P1\ntitle: t\ntitle: u\n", 4, "duplicate key 'title' (first on line 3)"),
        (b"id: P1\ntitle: t\nupstream:\n  pr: 1\n  pr: 2\n", 6, "duplicate key 'pr' (first on line 5)"),
        (b"id: P1\ntitle: t\nnotes: x\n1: x\n", 5, "header key '1' is not a string"),
        (b"id: P1\ntitle: t\n~: x\n", 4, "header key '~' is not a string"),
    ],
)
def test_duplicate_and_non_string_keys_are_refused_on_their_line(header: bytes, line: int, message: str) -> None:
    with pytest.raises(FormatError) as err:
        parse_patch(b"---\n" + header + b"...\n", name="x.patch")
    assert (err.value.line, err.value.message) == (line, message)


@pytest.mark.parametrize(
    ("body", "line", "message"),
    [
        (b"diff --git a/f b/f\nindex \n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n", 11, "malformed 'index' line"),
        (b"diff --git a/f b/f\nold mode \xff\nnew mode 100755\n", 11, "malformed file mode in a git header line"),
        (b"diff --git a/f b/f\nnew file mode 10064x\n", 11, "malformed file mode in a git header line"),
        (b"--- a/f\n+++ b/f\n@@ -1,0 +1,0 @@\n\\ No newline at end of file\n", 13,
         "'\\ No newline at end of file' follows a hunk without lines"),
    ],
)
def test_malformed_git_header_lines_are_format_errors(body: bytes, line: int, message: str) -> None:
    with pytest.raises(FormatError) as err:
        parse_diff(body, path="queue/x.patch", first_line=10)
    assert (err.value.line, err.value.message) == (line, message)


def test_series_and_pin_lines_break_only_at_newlines() -> None:
    # str.splitlines() also breaks at form feeds and vertical tabs: line numbers shifted
    with pytest.raises(FormatError) as err:
        parse_series("a.patch\x0cb.patch\nc.patch\na.patch\n")
    assert (err.value.line, err.value.message) == (1, "unexpected 'b.patch' after the patch name")
    series = parse_series("# x\x0by\nc.patch\nd.patch\n")
    assert [(e.name, e.line) for e in series.entries] == [("c.patch", 2), ("d.patch", 3)]
    assert series.remove("c.patch").text() == "# x\x0by\nd.patch\n"
    with pytest.raises(FormatError) as err:
        parse_pins("# a\x0cb\nnext vllm==0.25.0\npin vllm==0.24.0\npin vllm==0.24.0\n")
    assert err.value.line == 4


@pytest.mark.parametrize("char", ["\x85", "\u2028", "\u2029"])
def test_header_with_a_unicode_line_break_is_refused_on_its_line(char: str) -> None:
    data = f"---\nid: P1\ntitle: t\nnotes: a{char}lifecycle: retired\n...\n".encode()
    with pytest.raises(FormatError) as err:
        parse_patch(data, name="x.patch")
    assert err.value.line == 4 and "U+" in err.value.message


def test_a_pin_option_given_twice_or_two_different_sdist_hashes_are_refused() -> None:
    a, b = "a" * 64, "b" * 64
    with pytest.raises(FormatError, match="'sdist' is given twice") as err:
        parse_pins(f"# pins\npin vllm==0.24.0 sdist=sha256:{a} sdist=sha256:{b}\n")
    assert err.value.line == 2
    with pytest.raises(FormatError, match="different hashes") as err:
        parse_pins(f"pin file:///x/vllm-0.24.0.tar.gz#sha256={a} sdist=sha256:{b}\n")
    assert err.value.line == 1
    same = parse_pins(f"pin file:///x/vllm-0.24.0.tar.gz#sha256={a} sdist=sha256:{a}\n")
    assert same.main.sdist_sha256 == a


def test_byte_order_mark_before_the_header_is_named() -> None:
    with pytest.raises(FormatError, match="byte order mark") as err:
        parse_patch(b"\xef\xbb\xbf---\nid: P1\ntitle: t\n...\n", name="x.patch")
    assert err.value.line == 1


def test_a_lone_carriage_return_inside_a_line_is_part_of_it() -> None:
    # git diff of a source line holding a bare CR: one line for git, two for bytes.splitlines
    old = b'x = "a\rb"\ny = 1\n'
    body = b'--- a/f.py\n+++ b/f.py\n@@ -1,2 +1,2 @@\n x = "a\rb"\n-y = 1\n+y = 2\n'
    fd = parse_diff(body)[0]
    assert fd.hunks[0].old_lines() == [b'x = "a\rb"\n', b"y = 1\n"]
    assert apply_hunks(old, fd).new == old.replace(b"y = 1", b"y = 2")
    with pytest.raises(FormatError) as err:
        parse_diff(body.replace(b"@@ -1,2 +1,2 @@", b"@@ -1,3 +1,3 @@") + b"a\rb\n", path="x", first_line=5)
    assert err.value.line == 11


@pytest.mark.parametrize(
    ("body", "line", "message"),
    [
        (b"--- /dev/null\n+++ /dev/null\n@@ -0,0 +1 @@\n+a\n", 10, "both sides of the file header are /dev/null"),
        (b"x\ndiff --git a/n b/n\nindex 0000000..1111111\n--- /dev/null\n+++ /dev/null\n@@ -0,0 +1 @@\n+a\n", 13,
         "both sides of the file header are /dev/null"),
        (b"diff --git a/n b/n\nnew file mode 100644\ndeleted file mode 100644\n", 10,
         "a file header says both 'new file' and 'deleted file'"),
    ],
)
def test_a_file_diff_without_any_path_is_refused(body: bytes, line: int, message: str) -> None:
    # it reached git fast-import as a file at the root ("Root cannot be a non-directory")
    with pytest.raises(FormatError) as err:
        parse_diff(body, path="queue/x.patch", first_line=10)
    assert (err.value.line, err.value.message) == (line, message)


def test_with_fields_keeps_the_comments_and_blank_lines_after_a_key() -> None:
    data = (b"---\nid: P1\ntitle: t\nlifecycle: experimental\n\n# why the notes\nnotes: |\n  a\n\n  b\n"
            b"# closing remark\n...\nbody\n")
    patch = parse_patch(data, name="P1-x.patch")
    assert format_patch(with_fields(patch, {"lifecycle": "retired"})) == data.replace(b"experimental", b"retired")
    assert format_patch(with_fields(patch, {"notes": "n"})) == data.replace(b"|\n  a\n\n  b\n", b"n\n")


@pytest.mark.parametrize("spelling", [b'"lifecycle":', b"'lifecycle':", b"lifecycle :"])
def test_with_fields_finds_a_quoted_or_spaced_key(spelling: bytes) -> None:
    data = b"---\nid: P1\ntitle: t\n" + spelling + b" experimental\nnotes: n\n...\nbody\n"
    patch = with_fields(parse_patch(data, name="P1-x.patch"), {"lifecycle": "retired"})
    assert format_patch(patch) == data.replace(spelling + b" experimental", b"lifecycle: retired")


def test_a_closing_line_without_its_newline_is_named_as_such() -> None:
    with pytest.raises(FormatError, match="lacks its newline") as err:
        parse_patch(b"---\nid: P1\ntitle: t\n...", name="x.patch")
    assert err.value.line == 4
    with pytest.raises(FormatError, match="never closed"):
        parse_patch(b"---\nid: P1\ntitle: t\n", name="x.patch")


def test_the_pin_file_is_read_as_written(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    pin = q.root / "vendor-pin.txt"
    data = b"# pins\r\n" + pin.read_bytes().replace(b"\n", b"\r\n")
    pin.write_bytes(data)
    store = Store(q.root)
    store.write_pins(store.read_pins())
    assert pin.read_bytes() == data  # text mode read CRLF as LF, and the rewrite dropped the CRs
    pin.write_bytes(b"# pins\n# \xff\n" + data)
    with pytest.raises(FormatError, match="not valid UTF-8") as err:
        store.read_pins()
    assert err.value.line == 2


@pytest.mark.parametrize("extra", [b"+\n", b"-\n", b"+\r\n"])
def test_an_empty_added_or_removed_line_past_the_counts_is_not_dropped(extra: bytes) -> None:
    body = b"diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n" + extra
    with pytest.raises(FormatError, match="more hunk lines follow") as err:
        parse_diff(body, path="queue/x.patch", first_line=10)
    assert err.value.line == 16
    parse_diff(body[: -len(extra)] + b"-- \n2.43.0\n")  # a mail signature still ends the diff


def test_an_error_about_control_characters_stays_one_inert_line() -> None:
    with pytest.raises(FormatError) as err:
        parse_series("ok.patch\n\x1b[2Jx.patch\n")
    assert err.value.one_line() == "series:2: invalid patch name '\\x1b[2Jx.patch'"
    assert FormatError("a\rb\u2028c\nd é", path="p", line=1).one_line() == "p:1: a\\rb\\u2028c d é"


def test_a_closing_line_with_trailing_whitespace_is_named_on_its_line() -> None:
    with pytest.raises(FormatError, match="exactly '...'") as err:
        parse_patch(b"---\nid: P1\ntitle: t\n... \ndiff --git a/f b/f\n", name="x.patch")
    assert err.value.line == 4


def test_hunks_of_a_git_header_without_its_file_lines_are_not_dropped() -> None:
    body = b"diff --git a/f b/f\nindex 1111111..2222222 100644\n@@ -1 +1 @@\n-a\n+b\n"
    with pytest.raises(FormatError, match="without the '---' and '[+][+][+]' lines") as err:
        parse_diff(body, path="queue/x.patch", first_line=10)
    assert err.value.line == 12


@pytest.mark.parametrize("between", [b"\n", b"# note\n"])
def test_a_hunk_after_a_line_that_ends_the_file_is_not_dropped(between: bytes) -> None:
    body = b"--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n" + between + b"@@ -5 +5 @@\n-c\n+d\n"
    with pytest.raises(FormatError, match="hunk header outside any file") as err:
        parse_diff(body, path="queue/x.patch", first_line=10)
    assert err.value.line == 16


@pytest.mark.parametrize("name", ["../../x.whl", "/etc/passwd", "", "vllm.tar.gz"])
def test_a_wheel_file_that_is_no_wheel_file_name_is_refused(name: str) -> None:
    with pytest.raises(FormatError, match="'wheel-file' must be a wheel's file name") as err:
        parse_pins(f"# pins\npin vllm==0.24.0 wheel-file={name}\n")
    assert err.value.line == 2
    parse_pins("pin vllm==0.24.0 wheel-file=vllm-0.24.0+cu128-cp38-abi3-manylinux_2_28_x86_64.whl\n")


@pytest.mark.parametrize("name", [".hidden.patch", "d/.h/a.patch"])
def test_a_series_name_is_not_hidden(name: str) -> None:
    # lint and the queue's own temporary files treat hidden names as no patch file
    with pytest.raises(FormatError, match="invalid patch name") as err:
        parse_series(f"a.patch\n{name}\n")
    assert err.value.line == 2


@pytest.mark.parametrize("name", ["./a.patch", "d/./a.patch", "d//a.patch", "d/", "."])
def test_a_series_name_has_one_spelling(name: str) -> None:
    # './a.patch' is the file 'a.patch' under a second name: twice in the series unnoticed
    with pytest.raises(FormatError, match="invalid patch name") as err:
        parse_series(f"a.patch\n{name}\n")
    assert err.value.line == 2


def test_a_second_strip_option_is_refused() -> None:
    with pytest.raises(FormatError, match="'-p0' after another -p option") as err:
        parse_series("a.patch\nb.patch -p1 -p0\n")
    assert err.value.line == 2
    assert [e.strip for e in parse_series("a.patch -p0\nb.patch\n").entries] == [0, 1]


def test_a_patch_file_cut_inside_its_last_hunk_line_is_refused() -> None:
    # git apply: "corrupt patch"; the target file silently lost its final newline
    with pytest.raises(FormatError, match="ends inside a hunk line") as err:
        parse_diff(b"--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n x\n-a\n+b", path="queue/x.patch", first_line=10)
    assert err.value.line == 15
    fd = parse_diff(b"--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n x\n-a\n+b\n\\ No newline at end of file")[0]
    assert apply_hunks(b"x\na\n", fd).new == b"x\nb"


@pytest.mark.parametrize(
    ("body", "strip", "names"),
    [
        (b"diff --git a/d b/x b/d b/x\nold mode 100644\nnew mode 100755\n", 1, ("d b/x", "d b/x")),
        (b"diff --git d b/x d b/x\nold mode 100644\nnew mode 100755\n", 0, ("d b/x", "d b/x")),
        (b"diff --git a/x y b/x y\nBinary files a/x y and b/x y differ\n", 1, ("x y", "x y")),
        (b"diff --git a/d b/o b/d b/n\nsimilarity index 100%\nrename from d b/o\nrename to d b/n\n", 1, ("d b/o", "d b/n")),
        (b"diff --git old new\nsimilarity index 100%\nrename from old\nrename to new\n", 0, ("old", "new")),
        (b"diff --git a/p/x b/p/x\nold mode 100644\nnew mode 100755\n", 2, ("x", "x")),
    ],
)
def test_names_of_an_entry_without_file_lines_may_hold_spaces_and_b_slash(body: bytes, strip: int,
                                                                           names: tuple[str, str]) -> None:
    (fd,) = parse_diff(body, strip=strip)
    assert (fd.old_path, fd.new_path) == names


def test_names_of_an_entry_without_file_lines_that_cannot_be_split_are_refused() -> None:
    with pytest.raises(FormatError, match="cannot tell the two file names apart") as err:
        parse_diff(b"\n" + b"diff --git x y\nold mode 100644\nnew mode 100755\n", strip=0, path="queue/X.patch")
    assert err.value.line == 2


def test_a_header_value_ending_in_blank_lines_does_not_end_the_header() -> None:
    """YAML keeps such a value with a document end ('...') after it; written in the middle of a
    header, that line closed the header there and the keys after it became diff text."""
    from gqueue.model.patch import new_patch

    body = b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"
    fields = {"id": "P1", "title": "t", "notes": "kept\n\n", "author": "A U Thor <a@example.org>"}
    patch = new_patch("P1-t.patch", fields, body)
    assert patch.body == body
    assert {k: patch.meta.raw[k] for k in fields} == fields
    assert parse_patch(format_patch(patch), name="P1-t.patch") == patch


def test_headers_are_written_as_the_python_emitter_writes_them() -> None:
    """render_header takes libyaml's faster text only where it has no double-quoted scalar;
    whichever emitter writes it, the text is PyYAML's Python emitter's, key by key."""
    import random

    from gqueue.model.patch import CANONICAL_ORDER, HEADER_END, HEADER_START, render_field, render_header

    rng = random.Random(7)
    alphabet = list("abcdefghij klmnop,.:-_/<>@#'\"\n\t") + ["é", "中", "😀", "\u00a0", "\x85", "\x07", "\ufeff"]
    odd = ["", " lead", "trail ", "tab\tin", "x\n\n", "line\n", "multi\nline", "emoji 😀", "q'uote", 'd"quote',
           "yes", "null", "1.0", "- dash", "# hash", "a: b", "w " * 80, "x" * 150, "tail \nspace"]
    samples = [{"id": "P1", "title": v, "description": v + "\n", "headers": {"Date": v}, "requires": [v, "P0"]}
               for v in odd]
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.choice([3, 20, 120])))
        samples.append({"id": "P2", "title": text, "description": text, "credit": [text], "upstream": {"url": text}})
    samples += [parse_patch(path.read_bytes(), name=path.name).meta.raw for path in sorted((REPO / "queue").glob("*.patch"))]
    for fields in samples:
        keys = [k for k in CANONICAL_ORDER if k in fields] + [k for k in fields if k not in CANONICAL_ORDER]
        expected = "".join(render_field(k, fields[k]) for k in keys).replace("\n...\n", "\n")
        assert render_header(fields) == HEADER_START + expected.encode("utf-8") + HEADER_END, fields


def test_a_new_patch_of_plain_fields_does_not_parse_its_header_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Import writes hundreds of headers: the fields it wrote are the meta, not a parse of them."""
    from gqueue.model import patch as patch_module

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the header was parsed again")

    fields = {"id": "P1", "title": "Fix: a 'quoted' title", "author": "A U Thor <a@example.org>",
              "requires": ["P0"], "headers": {"Date": "Fri, 17 Nov 2023 10:00:00 +0100"},
              "description": "first line\n\nsecond paragraph\n", "x-count": 3}
    monkeypatch.setattr(patch_module, "load_mapping", refuse)
    made = patch_module.new_patch("P1-t.patch", fields, b"")
    monkeypatch.undo()
    assert made == parse_patch(format_patch(made), name="P1-t.patch")
    assert made.meta.raw == fields and made.meta.line_of("requires") == 8  # after the 3-line description


@pytest.mark.parametrize(("names", "others", "taken", "ids"), [
    (["0001-Add-a-change.patch", "0002-Fix-it.patch"], [], [], ["0001", "0002"]),
    (["CVE-2023-27533.patch", "CVE-2023-27534.patch", "CVE-2024-2004.patch"], [], [],
     ["CVE-2023-27533", "CVE-2023-27534", "CVE-2024-2004"]),
    (["CVE-2023-28320.patch", "CVE-2023-28320-1.patch"], [], [], ["CVE-2023-28320", "CVE-2023-28320-1"]),
    (["fix.patch", "fix-build.patch"], [], [], ["fix", "fix-build"]),
    (["0001-Fix-typo.patch"], ["0001-Add.patch"], ["0001"], ["0001-Fix-typo"]),
    (["fix.patch"], ["fix-up.patch"], ["fix"], [None]),  # its whole stem is an id: needs another name
    (["04_workaround_bug.patch"], [], [], ["04_workaround_bug"]),
])
def test_distinct_ids_keep_every_name_and_give_each_its_own_id(names: list[str], others: list[str],
                                                               taken: list[str], ids: list[str | None]) -> None:
    from gqueue.model.ids import distinct_ids, name_fits_id

    found = distinct_ids(names, others=others, taken=taken)
    assert [found.get(n) for n in names] == ids
    assert all(name_fits_id(n, i) for n, i in found.items())
    assert len(set(found.values())) == len(found) and not set(found.values()) & set(taken)


def test_a_name_fits_an_id_it_is_or_starts_with_and_a_dash() -> None:
    from gqueue.model.ids import name_fits_id

    assert name_fits_id("P62-struct-out.patch", "P62") and name_fits_id("CVE-2023-1.patch", "CVE-2023-1")
    assert name_fits_id("queue/variants/0.24/P62-x.patch", "P62")
    assert not name_fits_id("P621-x.patch", "P62") and not name_fits_id("P6.patch", "P62")
    assert not name_fits_id("P62-x.patch", "") and not name_fits_id("CVE-2023-1.patch", "CVE-2023-1-x")
