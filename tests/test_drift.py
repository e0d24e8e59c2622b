"""gqueue check on a synthetic upstream whose two versions produce every drift status."""

from __future__ import annotations

import difflib
import json
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from synth import Queue, make_queue, make_sdist, sha256

GOLDEN = Path(__file__).resolve().parent / "golden"


def funcs(prefix: str, n: int, start: int = 0) -> str:
    return "".join(f"def {prefix}{i}(x):\n    y = x * {i}\n    return y + {i}\n\n\n" for i in range(start, n))


def big_function(tail: str) -> str:
    body = "".join(f"    v{i} = {i}\n" for i in range(14))
    return f"import os\n\n\ndef big(x):\n{body}    return {tail}\n\n\ndef other():\n    return 0\n"


OLD: dict[str, str] = {
    "pyproject.toml": "[project]\nname = 'vllm'\n",
    "vllm/__init__.py": "__version__ = '0.1.0'\n",
    "vllm/clean.py": funcs("c", 10),
    "vllm/shift.py": funcs("s", 10),
    "vllm/merge.py": funcs("m", 10),
    "vllm/fuzzy.py": funcs("z", 10),
    "vllm/conflict.py": funcs("k", 10),
    "vllm/engine_a.py": funcs("e", 10),
    "vllm/fixed.py": funcs("u", 10),
    "vllm/partial.py": funcs("p", 20),
    "vllm/gone.py": "".join(f"def gone{i}(x):\n    return str(x) * {i}\n\n\n" for i in range(5)),
    "vllm/old_name.py": funcs("r", 10),
    "vllm/drift.py": big_function("x"),
}


def _sub(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def new_files() -> dict[str, str]:
    new = dict(OLD)
    new["vllm/__init__.py"] = "__version__ = '0.2.0'\n"
    new["vllm/shift.py"] = "".join(f"# header line {i}\n" for i in range(10)) + OLD["vllm/shift.py"]
    new["vllm/merge.py"] = _sub(OLD["vllm/merge.py"], "def m4(x):\n", "def m4(x, scale=1):\n")
    new["vllm/fuzzy.py"] = _sub(OLD["vllm/fuzzy.py"], "    y = x * 4\n", "    y = x * 4  # scaled\n")
    new["vllm/conflict.py"] = _sub(OLD["vllm/conflict.py"], "    y = x * 4\n", "    y = x * 4 + 0\n")
    new["vllm/engine_a.py"] = funcs("e", 5) + funcs("e", 10, 8)
    new["vllm/engine_b.py"] = "import math\n\n\n" + funcs("e", 8, 5) + "def helper():\n    return math.pi\n"
    new["vllm/fixed.py"] = _sub(OLD["vllm/fixed.py"], "    return y + 2\n", "    return y + 22\n")
    new["vllm/partial.py"] = _sub(OLD["vllm/partial.py"], "    return y + 2\n", "    return y + 22\n")
    del new["vllm/gone.py"]
    new["vllm/moved/new_name.py"] = new.pop("vllm/old_name.py")
    new["vllm/drift.py"] = big_function("x + v13")
    return new


def diff(path: str, old: str, new: str, context: int = 3) -> str:
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                 f"a/{path}", f"b/{path}", n=context)
    return f"diff --git a/{path} b/{path}\n" + "".join(lines)


def edit(path: str, old: str, new: str, *, base: dict[str, str] | None = None, context: int = 3) -> str:
    text = (base or OLD)[path]
    return diff(path, text, _sub(text, old, new), context)


E1_ADDED = "    y = x * 4\n    y = clamp(y)  # guard E1\n"


def patches() -> list[tuple[str, str, str]]:
    """(name, extra header, diff) in series order: one or more per status."""
    conflict_after_e1 = dict(OLD, **{"vllm/conflict.py": _sub(OLD["vllm/conflict.py"], "    y = x * 4\n", E1_ADDED)})
    partial = OLD["vllm/partial.py"]
    partial_new = _sub(_sub(partial, "    return y + 2\n", "    return y + 22\n"), "    return y + 15\n", "    return y + 150\n")
    return [
        ("A1-clean.patch", "", edit("vllm/clean.py", "    y = x * 3\n", "    y = x * 33\n")),
        ("B1-offset.patch", "", edit("vllm/shift.py", "    y = x * 5\n", "    y = x * 55\n")),
        ("C1-merged3.patch", "", edit("vllm/merge.py", "    return y + 4\n", "    return y + 44\n")),
        ("D1-fuzz.patch", "", edit("vllm/fuzzy.py", "    return y + 4\n", "    return y + 44\n", context=1)),
        ("E1-conflict.patch", "", edit("vllm/conflict.py", "    y = x * 4\n", E1_ADDED)),
        ("F1-relocated.patch", "", edit("vllm/engine_a.py", "    y = x * 6\n", "    y = x * 66\n")),
        ("G1-upstream.patch", "", edit("vllm/fixed.py", "    return y + 2\n", "    return y + 22\n")),
        ("H1-partial.patch", "", diff("vllm/partial.py", partial, partial_new)),
        ("I1-missing.patch", "", edit("vllm/gone.py", "    return str(x) * 2\n", "    return repr(x) * 2\n")),
        ("J1-renamed.patch", "", edit("vllm/old_name.py", "    y = x * 3\n", "    y = x * 33\n")),
        ("K1-blocked.patch", "", edit("vllm/conflict.py", "  # guard E1\n    return y + 4\n",
                                      "  # guard E1\n    return y + 4 if y else 0\n", base=conflict_after_e1)),
        ("L1-requires.patch", "requires: [E1]\n", edit("vllm/clean.py", "    y = x * 7\n", "    y = x * 77\n")),
        ("M1-drift.patch", "", edit("vllm/drift.py", "    v1 = 1\n", "    v1 = 100\n")),
    ]


EXPECTED = {
    "A1-clean.patch": "clean", "B1-offset.patch": "offset", "C1-merged3.patch": "merged3",
    "D1-fuzz.patch": "fuzz", "E1-conflict.patch": "conflict", "F1-relocated.patch": "conflict",
    "G1-upstream.patch": "upstream", "H1-partial.patch": "partial-upstream", "I1-missing.patch": "file-missing",
    "J1-renamed.patch": "renamed", "K1-blocked.patch": "blocked", "L1-requires.patch": "blocked",
    "M1-drift.patch": "clean",
}


def two_pins(tmp: Path, new: dict[str, str]) -> Queue:
    """A queue on 0.1.0 (the OLD files) with a 'next' pin on 0.2.0 holding ``new``; no patches."""
    q = make_queue(tmp, OLD, "0.1.0")
    archive = make_sdist(tmp / "upstream", "0.2.0", new)
    with (q.root / "vendor-pin.txt").open("a") as handle:
        handle.write(f"next {archive.as_uri()}#sha256={sha256(archive)}\n")
    return q


def build_queue(tmp: Path, names: list[str] | None = None, *, checkout: bool = True) -> Queue:
    """A queue on 0.1.0 with a 'next' pin on 0.2.0, the chosen patches in the series."""
    q = make_queue(tmp, OLD, "0.1.0")
    new_archive = make_sdist(tmp / "upstream", "0.2.0", new_files())
    with (q.root / "vendor-pin.txt").open("a") as handle:
        handle.write(f"next {new_archive.as_uri()}#sha256={sha256(new_archive)}\n")
    chosen = [p for p in patches() if names is None or p[0] in names]
    for name, extra, body in chosen:
        q.write_patch(name, body, extra=extra)
    q.set_series(*[p[0] for p in chosen])
    if checkout:
        q.run("checkout")
    return q


def normalise(doc: object, root: Path) -> object:
    text = json.dumps(doc, indent=2, sort_keys=True)
    text = text.replace(root.as_uri(), "file://TMP").replace(str(root), "TMP")
    text = re.sub(r"#sha256=[0-9a-f]{64}", "#sha256=SHA", text)
    return json.loads(text)


def compare_golden(name: str, doc: object) -> None:
    path = GOLDEN / name
    if os.environ.get("GQUEUE_UPDATE_GOLDEN") == "1" or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    assert doc == json.loads(path.read_text()), f"differs from tests/golden/{name} (GQUEUE_UPDATE_GOLDEN=1 rewrites it)"


def _tree_state(q: Queue) -> tuple[str, str, dict[str, bytes]]:
    import subprocess

    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=q.work, capture_output=True, text=True).stdout
    status = subprocess.run(["git", "status", "--porcelain"], cwd=q.work, capture_output=True, text=True).stdout
    files = {str(p.relative_to(q.work)): p.read_bytes() for p in q.work.rglob("*") if p.is_file() and ".git" not in p.parts}
    return head, status, files


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Queue, dict, object, object]:
    tmp = tmp_path_factory.mktemp("drift")
    os.environ.setdefault("GQUEUE_CACHE", str(tmp / "cache"))
    q = build_queue(tmp)
    q.run("push", "--all")
    before = _tree_state(q)
    proc = q.run("check", "--json", "--junit", str(tmp / "report.xml"), check=False)
    assert proc.returncode == 3, proc.stderr
    doc = json.loads(proc.stdout)
    assert _tree_state(q) == before  # check never touches the work tree
    return q, doc, tmp, proc


def _pin(doc: dict, version: str) -> dict:
    return next(p for p in doc["pins"] if p["version"] == version)


def test_every_status_on_the_new_pin(checked: tuple) -> None:
    _q, doc, _tmp, _proc = checked
    assert doc["schema"] == "gqueue.check/1" and doc["ok"] is False
    new = _pin(doc, "0.2.0")
    assert {p["name"]: p["status"] for p in new["patches"]} == EXPECTED
    assert new["ok"] is False and new["label"] == "next"
    seen = {h["status"] for p in new["patches"] for h in p["hunks"]} | {p["status"] for p in new["patches"]}
    assert {"clean", "offset", "fuzz", "merged3", "conflict", "upstream", "partial-upstream", "file-missing",
            "renamed", "blocked"} <= seen


def test_main_pin_is_all_clean(checked: tuple) -> None:
    _q, doc, _tmp, _proc = checked
    old = _pin(doc, "0.1.0")
    assert old["ok"] and {p["status"] for p in old["patches"]} == {"clean"}
    assert not any(p["semantic_drift"] for p in old["patches"])


def test_details(checked: tuple) -> None:
    _q, doc, _tmp, _proc = checked
    by = {p["name"]: p for p in _pin(doc, "0.2.0")["patches"]}
    offset = by["B1-offset.patch"]["hunks"][0]
    assert offset["offset"] == 10
    fuzz = by["D1-fuzz.patch"]["hunks"][0]
    assert fuzz["fuzz"] == 1 and "fuzz 1" in fuzz["detail"]
    conflict = by["E1-conflict.patch"]["hunks"][0]
    assert conflict["expected"][2] == "    y = x * 4" and conflict["closest"]["file"] == "vllm/conflict.py"
    assert conflict["closest"]["similarity"] > 0.8
    moved = by["F1-relocated.patch"]["hunks"][0]
    assert moved["relocation"]["file"] == "vllm/engine_b.py" and moved["relocation"]["similarity"] > 0.9
    assert by["H1-partial.patch"]["upstream_hunks"] == ["vllm/partial.py#1"]
    assert [h["status"] for h in by["H1-partial.patch"]["hunks"]] == ["upstream", "clean"]
    renamed = by["J1-renamed.patch"]["hunks"][0]
    assert renamed["renamed_to"] == "vllm/moved/new_name.py" and renamed["applies_there"] == "clean"
    assert by["K1-blocked.patch"]["blocked_by"] == "E1-conflict.patch"
    assert by["L1-requires.patch"]["blocked_by"] == "E1-conflict.patch"
    assert by["M1-drift.patch"]["semantic_drift"] and "'big'" in by["M1-drift.patch"]["hunks"][0]["drift"][0]
    assert not by["A1-clean.patch"]["semantic_drift"]
    assert by["C1-merged3.patch"]["acceptable"] and not by["D1-fuzz.patch"]["acceptable"]


def test_golden_report(checked: tuple) -> None:
    q, doc, _tmp, _proc = checked
    compare_golden("check-synthetic.json", normalise(doc, q.root.parent))


def test_junit_report(checked: tuple) -> None:
    _q, _doc, tmp, _proc = checked
    root = ET.parse(tmp / "report.xml").getroot()
    suites = root.findall("testsuite")
    assert len(suites) == 2
    new = next(s for s in suites if "0.2.0" in s.get("name", ""))
    cases = {c.get("name"): c for c in new.findall("testcase")}
    assert len(cases) == 13 and int(new.get("failures", "0")) == 8
    assert cases["E1-conflict.patch"].find("failure").get("type") == "conflict"
    assert cases["A1-clean.patch"].find("failure") is None


def test_human_table_and_github_annotations(checked: tuple) -> None:
    q, _doc, _tmp, _proc = checked
    proc = q.run("check", "--pin", "next", "--github", check=False)
    assert proc.returncode == 3
    out = proc.stdout
    assert re.search(r"!conflict\s+E1-conflict.patch", out)
    assert re.search(r" clean\s+~ M1-drift.patch", out)
    assert "now in vllm/engine_b.py" in out
    errors = [line for line in out.splitlines() if line.startswith("::error ")]
    assert any(line.startswith("::error file=queue/E1-conflict.patch,line=") for line in errors)
    assert any(line.startswith("::warning file=queue/M1-drift.patch,line=") for line in out.splitlines())
    assert not any("A1-clean" in line for line in errors)


def test_accept_and_pin_selection(checked: tuple) -> None:
    q, _doc, _tmp, _proc = checked
    proc = q.run("check", "--pin", "pin", "--json")
    doc = json.loads(proc.stdout)
    assert [p["version"] for p in doc["pins"]] == ["0.1.0"] and doc["ok"]
    bad = q.run("check", "--accept", "clean,bogus", check=False)
    assert bad.returncode == 2


def test_check_without_checkout(tmp_path: Path) -> None:
    q = build_queue(tmp_path, ["A1-clean.patch", "B1-offset.patch", "G1-upstream.patch"], checkout=False)
    proc = q.run("check", "--pin", "next", "--json")
    doc = json.loads(proc.stdout)
    assert doc["ok"] and [p["status"] for p in doc["pins"][0]["patches"]] == ["clean", "offset", "upstream"]
    assert not (q.work / "vllm").exists()
    q.run("checkout")
    q.run("push", "--all")


def test_patch_status_arithmetic() -> None:
    from gqueue.model import drift as d

    assert d.patch_status(["clean", "offset"]) == "offset"
    assert d.patch_status(["upstream", "upstream"]) == "upstream"
    assert d.patch_status(["upstream", "clean"]) == "partial-upstream"
    assert d.patch_status(["upstream", "merged3"]) == "partial-upstream"
    assert d.patch_status(["upstream", "conflict"]) == "conflict"
    assert d.patch_status(["fuzz", "clean"]) == "fuzz"
    assert d.parse_accept("+fuzz,-merged3") == frozenset({"clean", "offset", "whitespace", "upstream", "fuzz"})
    assert d.patch_status(["upstream", "whitespace"]) == "partial-upstream"
    assert d.patch_status(["whitespace", "merged3"]) == "merged3"
    assert d.parse_accept("clean") == frozenset({"clean"})
    with pytest.raises(ValueError):
        d.parse_accept("nope")


def test_closest_match_and_scope() -> None:
    from gqueue.model import drift as d

    lines = [f"line {i}\n".encode() for i in range(50)]
    found = d.closest_match(lines, [b"line 20\n", b"line 21 changed\n", b"line 22\n"])
    assert found is not None and found[0] == 20 and 0.8 < found[1] < 1
    src = b"class A:\n    def f(self):\n        x = 1\n\n        return x\n\n    def g(self):\n        pass\n"
    split = src.splitlines(keepends=True)
    scope = d.enclosing_scope(split, 2)
    assert scope is not None and scope.name == "f" and (scope.start, scope.end) == (1, 5)


def test_semantic_drift_arithmetic() -> None:
    from gqueue.model import drift as d

    old = [f"x{i} = {i}\n".encode() for i in range(30)]
    new = list(old)
    new[12] = b"x12 = 'changed'\n"
    # module-level code: the lines near the hunk are compared
    assert d.semantic_drift(old, 15, new, 15, 3, python=True) == ["lines within 6 of this hunk changed between the pins"]
    assert d.semantic_drift(old, 22, new, 22, 3, python=True) == []
    func_old = b"def f(a):\n" + b"".join(b"    a += %d\n" % i for i in range(20)) + b"    return a\n"
    func_new = func_old.replace(b"a += 19", b"a -= 19")
    lo, ln = func_old.splitlines(keepends=True), func_new.splitlines(keepends=True)
    warnings = d.semantic_drift(lo, 1, ln, 1, 3, focus=1)
    assert warnings == ["'f' around this hunk changed between the pins (-1 +1 lines)"]
    gone = d.semantic_drift(lo, 1, [b"def g():\n", b"    pass\n"], 0, 3, focus=1)
    assert gone == ["'f' around this hunk is gone on the new pin"]


def test_github_escaping() -> None:
    from gqueue.cli.cmd_drift import _esc_data, _esc_prop

    assert _esc_data("50%\nnext") == "50%25%0Anext"
    assert _esc_prop("a:b,c") == "a%3Ab%2Cc"


def test_broken_patch_on_its_own_pin(tmp_path: Path) -> None:
    q = build_queue(tmp_path, ["A1-clean.patch"], checkout=False)
    q.write_patch("Z1-broken.patch", diff("vllm/clean.py", "def nowhere():\n    return 1\n", "def nowhere():\n    return 2\n"))
    q.set_series("A1-clean.patch", "Z1-broken.patch")
    proc = q.run("check", "--pin", "pin", "--json", check=False)
    assert proc.returncode == 3
    doc = json.loads(proc.stdout)
    assert [p["status"] for p in doc["pins"][0]["patches"]] == ["clean", "conflict"]
    assert doc["pins"][0]["patches"][1]["hunks"][0]["status"] == "conflict"  # no three-way merge against itself


def test_change_upstream_with_its_context_changed_is_upstream(tmp_path: Path) -> None:
    """Upstream made the patch's change and also edited its context: the hunk does not
    reverse-apply, and a three-way merge adds nothing, so it is upstream (not merged3)."""
    new = dict(OLD)
    new["vllm/fixed.py"] = _sub(_sub(OLD["vllm/fixed.py"], "    return y + 2\n", "    return y + 22\n"),
                                "def u2(x):\n", "def u2(x, k=0):\n")
    q = two_pins(tmp_path, new)
    q.write_patch("G2-upstream.patch", edit("vllm/fixed.py", "    return y + 2\n", "    return y + 22\n"))
    q.set_series("G2-upstream.patch")
    doc = json.loads(q.run("check", "--pin", "next", "--json").stdout)
    patch = doc["pins"][0]["patches"][0]
    assert patch["status"] == "upstream" and patch["hunks"][0]["status"] == "upstream"
    assert patch["hunks"][0]["line"] == 10  # where its context starts
    q.run("checkout")
    q.run("push", "--all")
    moved = json.loads(q.run("rebase", "--pin", "next", "--json").stdout)["result"]
    assert moved["done"] and moved["summary"]["retired"] == ["G2-upstream.patch"]


def test_addition_at_end_of_file_already_upstream(tmp_path: Path) -> None:
    """A hunk with no context after its change must match at the end of the file (as patch and
    git apply have it): when upstream appended the same line it is upstream, not applied again."""
    base = OLD["vllm/clean.py"]
    new = dict(OLD, **{"vllm/clean.py": base + "X_ADDED = 1\n"})
    q = two_pins(tmp_path, new)
    q.write_patch("A9-eof.patch", diff("vllm/clean.py", base, base + "X_ADDED = 1\n"))
    q.set_series("A9-eof.patch")
    doc = json.loads(q.run("check", "--pin", "next", "--json").stdout)
    assert doc["pins"][0]["patches"][0]["status"] == "upstream"
    q.run("checkout")
    q.run("push", "--all")
    result = json.loads(q.run("rebase", "--pin", "next", "--json").stdout)["result"]
    assert result["summary"]["retired"] == ["A9-eof.patch"]
    assert (q.work / "vllm/clean.py").read_text().count("X_ADDED = 1\n") == 1


def test_hunks_anchored_at_the_ends_of_the_file() -> None:
    from gqueue.model.apply import apply_hunks
    from gqueue.model.diff import parse_diff

    text = b"a\nb\nc\nd\ne\nf\ng\nh\n"
    tail = parse_diff(diff("x.py", text.decode(), text.decode() + "i\n").encode())[0]
    assert apply_hunks(text, tail).new == text + b"i\n"
    assert apply_hunks(text + b"i\n", tail).new is None  # not a second i after h
    head = parse_diff(diff("x.py", text.decode(), "0\n" + text.decode()).encode())[0]
    assert apply_hunks(text, head).new == b"0\n" + text
    assert apply_hunks(b"0\n" + text, head).new is None  # not a second 0 before a
    middle = parse_diff(diff("x.py", text.decode(), text.decode().replace("d\n", "D\n")).encode())[0]
    assert apply_hunks(b"z\n" + text, middle).new == b"z\n" + text.replace(b"d\n", b"D\n")  # offset as before


def test_check_without_lint_reads_headers_as_push_does(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    q.write_patch("P1-a.patch", "", extra="requires: P0\nrequires: []\n")
    q.set_series("P1-a.patch")
    proc = q.run("check", "--no-lint", check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "queue/P1-a.patch:5: duplicate key 'requires' (first on line 4)" in proc.stderr


def _hunk_of(old: str, new: str):
    from gqueue.model.diff import parse_diff

    return parse_diff(diff("x.py", old, new).encode())[0].hunks[0]


def test_hunk_applied_with_the_new_pins_whitespace() -> None:
    from gqueue.model.apply import apply_ignoring_whitespace

    old = "import os\nimport re\n\n\ndef f(x):\n    a = 1\n    b = 2\n    return a + b\n\n\nX = 0\n"
    hunk = _hunk_of(old, old.replace("    b = 2\n", "    b = 3\n    c = b\n"))
    nested = "class K:\n" + "".join("    " + line if line.strip() else line for line in old.splitlines(True))
    text, line, way = apply_ignoring_whitespace(nested.encode(), hunk, 0)
    assert text.decode() == nested.replace("        b = 2\n", "        b = 3\n        c = b\n")
    assert line == 5 and way.describe() == "re-indented 4 spaces deeper"
    inner = _hunk_of(nested, nested.replace("        b = 2\n", "        b = 3\n        c = b\n"))
    text, line, way = apply_ignoring_whitespace(old.encode(), inner, 0)
    assert text.decode() == old.replace("    b = 2\n", "    b = 3\n    c = b\n")
    assert line == 4 and way.describe() == "re-indented 4 spaces shallower"
    trailing = old.replace("    a = 1\n", "    a = 1   \n")  # the text keeps its own context lines
    text, _, way = apply_ignoring_whitespace(trailing.encode(), hunk, 0)
    assert text.decode() == trailing.replace("    b = 2\n", "    b = 3\n    c = b\n")
    assert way.describe() == "same indentation"
    tabbed = "".join("\t" + line if line.strip() else line for line in old.splitlines(True))
    assert apply_ignoring_whitespace(tabbed.encode(), hunk, 0)[2].describe() == "re-indented 1 tab deeper"
    assert apply_ignoring_whitespace(old.encode(), hunk, 0) is None  # an exact match is no whitespace case
    assert apply_ignoring_whitespace(old.replace("b = 2", "b = 22").encode(), hunk, 0) is None


def test_whitespace_needs_one_reindent_for_added_lines() -> None:
    """Lines re-indented in two ways leave the added lines' indentation a guess: no match. A hunk
    that only removes lines has nothing to place, so it still lands."""
    from gqueue.model.apply import apply_ignoring_whitespace

    old = "if a:\n    x = 1\n    y = 2\n    z = 3\nq = 4\n"
    half = "if a:\n    x = 1\n    y = 2\n        z = 3\nq = 4\n"
    adding = _hunk_of(old, old.replace("    y = 2\n", "    y = 2\n    w = 9\n"))
    assert apply_ignoring_whitespace(half.encode(), adding, 0) is None
    assert apply_ignoring_whitespace(old.replace("    ", "  ").encode(), adding, 0) is None  # 'if' kept, body not
    removing = _hunk_of(old, old.replace("    y = 2\n", ""))
    text, _, _ = apply_ignoring_whitespace(half.encode(), removing, 0)
    assert text.decode() == half.replace("    y = 2\n", "")


def test_reindented_upstream_is_whitespace_and_rebase_lands_it(tmp_path: Path) -> None:
    """Upstream moved a function into a class (every line four spaces deeper): the hunk is
    'whitespace', passes the default gate, and rebase writes it at the new indentation."""
    base = OLD["vllm/clean.py"]
    nested = "class Holder:\n" + "".join("    " + line if line.strip() else line for line in base.splitlines(True))
    q = two_pins(tmp_path, dict(OLD, **{"vllm/clean.py": nested}))
    q.write_patch("A5-indent.patch", edit("vllm/clean.py", "    y = x * 3\n", "    y = x * 3\n    y = abs(y)\n"))
    q.set_series("A5-indent.patch")
    doc = json.loads(q.run("check", "--pin", "next", "--json").stdout)
    patch = doc["pins"][0]["patches"][0]
    hunk = patch["hunks"][0]
    assert (patch["status"], patch["acceptable"], hunk["status"]) == ("whitespace", True, "whitespace")
    assert hunk["line"] == 16 and "4 spaces deeper" in hunk["detail"]
    assert "whitespace" in q.run("check", "--pin", "next").stdout
    assert q.run("check", "--pin", "next", "--accept", "-whitespace", check=False).returncode != 0
    q.run("checkout")
    q.run("push", "--all")
    result = json.loads(q.run("rebase", "--pin", "next", "--json").stdout)["result"]
    assert result["done"] and result["summary"]["merged"] == ["A5-indent.patch"]
    assert (q.work / "vllm/clean.py").read_text() == nested.replace(
        "        y = x * 3\n", "        y = x * 3\n        y = abs(y)\n")
    assert "+        y = abs(y)\n" in (q.root / "queue/A5-indent.patch").read_text()


def test_relocation_is_looked_for_under_the_files_own_top_folder(tmp_path: Path) -> None:
    """Where a conflicting hunk's text went is looked for among the files of its own top folder
    (vllm/ for a vllm/ file): a test or benchmark that quotes the old code is no new home for it."""
    new = new_files()
    new["tests/test_engine.py"] = OLD["vllm/engine_a.py"]  # a verbatim copy of the old code, in tests/
    q = two_pins(tmp_path, new)
    q.write_patch("F2-relocated.patch", edit("vllm/engine_a.py", "    y = x * 6\n", "    y = x * 66\n"))
    q.set_series("F2-relocated.patch")
    doc = json.loads(q.run("check", "--pin", "next", "--json", check=False).stdout)
    hunk = doc["pins"][0]["patches"][0]["hunks"][0]
    assert hunk["status"] == "conflict" and hunk["relocation"]["file"] == "vllm/engine_b.py", hunk
