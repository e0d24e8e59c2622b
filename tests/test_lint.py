"""gqueue lint: every rule fires on a planted mistake and stays quiet on a good queue."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import pytest

from gqueue.model.lint_rules import RULES
from gqueue.ops.lint import lint
from gqueue.store import Store
from synth import BASE_FILES, Queue, make_queue, unified

PARSER = BASE_FILES["vllm/parser.py"]
UTIL = BASE_FILES["vllm/util.py"]

GOOD_HEADER = """\
---
id: {id}
title: a well formed patch
family: scheduler
lifecycle: experimental
tier: community
default_on: false
env_flag: GENESIS_ENABLE_{id}_GOOD
upstream:
  pr: 123
  state: open
  relationship: backport
credit: someone (vllm#123)
applies_to:
  vllm: ">=0.1.0,<0.2"
requires: {requires}
conflicts: []
role: defensive
candidate_when:
  max_num_seqs_gte: 4
...
"""


def header(pid: str, requires: str = "[]") -> str:
    return GOOD_HEADER.format(id=pid, requires=requires)


def good_queue(tmp: Path) -> Queue:
    q = make_queue(tmp)
    (q.root / "queue").mkdir(exist_ok=True)
    (q.root / "queue/G1-good.patch").write_text(
        header("G1") + unified("vllm/parser.py", PARSER, PARSER.replace("import json", "import json  # g1")))
    (q.root / "queue/G2-next.patch").write_text(
        header("G2", "[G1]") + unified("vllm/util.py", UTIL, UTIL.replace("return x + 5\n", "return x + 50\n")))
    (q.root / "queue/G3-parked.patch").write_text(
        header("G3") + unified("README.md", "synthetic upstream\n", "synthetic upstream, parked\n"))
    (q.root / "series").write_text("# test\nG1-good.patch\nG2-next.patch\n# parked: G3-parked.patch\n")
    return q


def rules_of(q: Queue) -> set[str]:
    return {f.rule for f in lint(Store(q.root)).findings}


def edit(q: Queue, name: str, old: str, new: str) -> None:
    path = q.root / "queue" / name
    text = path.read_text()
    assert old in text, (old, name)
    path.write_text(text.replace(old, new, 1))


def set_body(q: Queue, name: str, body: str | bytes) -> None:
    path = q.root / "queue" / name
    data = path.read_bytes()
    end = data.index(b"\n...\n") + 5
    path.write_bytes(data[:end] + (body.encode() if isinstance(body, str) else body))


def rename(q: Queue, old: str, new: str) -> None:
    (q.root / "queue" / old).rename(q.root / "queue" / new)
    series = q.root / "series"
    series.write_text(series.read_text().replace(old, new))


Mutation = Callable[[Queue], None]

CASES: dict[str, Mutation] = {
    "series-parse": lambda q: (q.root / "series").write_text("G1-good.patch\nG1-good.patch\n"),
    "pin-parse": lambda q: (q.root / "vendor-pin.txt").write_text("pin vllm>=0.1\n"),
    "header-parse": lambda q: set_body(q, "G1-good.patch", "") or (q.root / "queue/G1-good.patch").write_text("no header\n"),
    "header-required": lambda q: edit(q, "G1-good.patch", "title: a well formed patch\n", ""),
    "header-type": lambda q: edit(q, "G1-good.patch", "default_on: false", "default_on: 'no'"),
    "header-value": lambda q: edit(q, "G1-good.patch", "lifecycle: experimental", "lifecycle: shiny"),
    "header-unknown-key": lambda q: edit(q, "G1-good.patch", "tier: community\n", "tier: community\ncolour: red\n"),
    "header-author": lambda q: edit(q, "G1-good.patch", "tier: community\n", "tier: community\nauthor: Eve <e@x> <f@y>\n"),
    "id-duplicate": lambda q: edit(q, "G2-next.patch", "id: G2", "id: G1"),
    "file-name-id": lambda q: rename(q, "G2-next.patch", "X2-next.patch"),
    "series-missing-file": lambda q: (q.root / "series").write_text("G1-good.patch\nG2-next.patch\nG9-none.patch\n# parked: G3-parked.patch\n"),
    "queue-unlisted": lambda q: (q.root / "series").write_text("G1-good.patch\nG2-next.patch\n"),
    "parked-listed": lambda q: (q.root / "series").write_text("G1-good.patch\nG2-next.patch\n# parked: G3-parked.patch\n# parked: G1-good.patch\n"),
    "requires-unknown": lambda q: edit(q, "G2-next.patch", "requires: [G1]", "requires: [ZZ9]"),
    "requires-order": lambda q: edit(q, "G1-good.patch", "requires: []", "requires: [G2]"),
    "requires-inactive": lambda q: edit(q, "G2-next.patch", "requires: [G1]", "requires: [G3]"),
    "conflicts-active": lambda q: edit(q, "G2-next.patch", "conflicts: []", "conflicts: [G1]"),
    "applies-to-parse": lambda q: edit(q, "G1-good.patch", '">=0.1.0,<0.2"', '">=banana"'),
    "applies-to-pin": lambda q: edit(q, "G1-good.patch", '">=0.1.0,<0.2"', '">=0.5"'),
    "variant-id": lambda q: add_variant(q, "0.0.9", "G1-good.patch", "G9", "<0.1"),
    "requires-not-carried": lambda q: edit(q, "G1-good.patch", '">=0.1.0,<0.2"', '"<0.1"'),
    "header-retired": lambda q: edit(q, "G1-good.patch", "role: defensive\n", "role: defensive\nretired: {in: '0.1.0', reason: gone}\n"),
    "env-flag-spelling": lambda q: edit(q, "G1-good.patch", "GENESIS_ENABLE_G1_GOOD", "GENESIS_DISABLE_G1_GOOD"),
    "backport-credit": lambda q: edit(q, "G1-good.patch", "credit: someone (vllm#123)\n", ""),
    "backport-pr": lambda q: edit(q, "G1-good.patch", "pr: 123", "pr: null"),
    "candidate-when-key": lambda q: edit(q, "G1-good.patch", "max_num_seqs_gte: 4", "gpu_colour: red"),
    "diff-parse": lambda q: set_body(q, "G1-good.patch", "--- a/vllm/parser.py\n+++ b/vllm/parser.py\n@@ -1,3 +1,3 @@\n-import json\n"),
    "diff-empty": lambda q: set_body(q, "G1-good.patch", "just a description, no diff\n"),
    "path-outside-tree": lambda q: set_body(q, "G1-good.patch", unified("../escape.py", "a = 1\n", "a = 2\n")),
    "file-mode": lambda q: set_body(q, "G1-good.patch", "diff --git a/link b/link\nnew file mode 120000\n"
                                    "--- /dev/null\n+++ b/link\n@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n"),
    "binary-file": lambda q: set_body(q, "G1-good.patch", "diff --git a/logo.png b/logo.png\nindex 1111111..2222222 100644\n"
                                      "Binary files a/logo.png and b/logo.png differ\n"),
    "crlf": lambda q: set_body(q, "G1-good.patch", unified("vllm/parser.py", PARSER, PARSER.replace("import json\n", "import json\r\n"))),
    "trailing-whitespace": lambda q: set_body(q, "G1-good.patch", unified("vllm/parser.py", PARSER, PARSER.replace("import json\n", "import json  \n"))),
    "profile-parse": lambda q: write_profile(q, "name: p\npolicy: lean\n"),
    "profile-plan": lambda q: write_profile(q, "name: p\nattribution:\n  G1: {role: no_op}\n"),
    "profile-reference": lambda q: write_profile(q, "name: p\ndisable: [ZZ1]\n"),
}


def add_variant(q: Queue, folder: str, name: str, pid: str, spec: str) -> None:
    path = q.root / "queue/variants" / folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    text = (q.root / "queue" / name).read_text().replace('">=0.1.0,<0.2"', f'"{spec}"')
    path.write_text(text.replace("id: G1\n", f"id: {pid}\n", 1))


def write_profile(q: Queue, text: str) -> None:
    (q.root / "profiles").mkdir(exist_ok=True)
    (q.root / "profiles/p.yaml").write_text(text)


def test_every_rule_has_a_case() -> None:
    assert set(CASES) == set(RULES)


def test_good_queue_is_quiet(tmp_path: Path) -> None:
    q = good_queue(tmp_path)
    write_profile(q, "name: p\npolicy: minimal\ndeployment: {max_num_seqs: 8}\nattribution:\n  G2: {role: no_op}\n")
    assert lint(Store(q.root)).findings == ()


@pytest.mark.parametrize("rule", sorted(RULES))
def test_rule_fires(tmp_path: Path, rule: str) -> None:
    q = good_queue(tmp_path)
    CASES[rule](q)
    fired = rules_of(q)
    assert rule in fired, fired


def test_guarded_conflicts_are_allowed(tmp_path: Path) -> None:
    q = good_queue(tmp_path)
    edit(q, "G2-next.patch", "conflicts: []", "conflicts: [G1]")
    (q.root / "series").write_text("G1-good.patch #+fast\nG2-next.patch #-fast\n# parked: G3-parked.patch\n")
    edit(q, "G2-next.patch", "requires: [G1]", "requires: []")
    assert rules_of(q) == set()


def test_allow_declares_whitespace_crlf_and_binary(tmp_path: Path) -> None:
    q = good_queue(tmp_path)
    edit(q, "G1-good.patch", "role: defensive\n", "role: defensive\nallow: [crlf, trailing-whitespace, binary]\n")
    body = unified("vllm/parser.py", PARSER, PARSER.replace("import json\n", "import json \r\n"))
    body += "diff --git a/logo.png b/logo.png\nindex 1111111..2222222 100644\nBinary files a/logo.png and b/logo.png differ\n"
    set_body(q, "G1-good.patch", body)
    assert rules_of(q) == set()


def test_crlf_file_keeps_its_endings(tmp_path: Path) -> None:
    q = good_queue(tmp_path)
    dos = "a = 1\r\nb = 2\r\n"
    set_body(q, "G1-good.patch", unified("vllm/dos.txt", dos, dos.replace("b = 2", "b = 3")))
    assert "crlf" not in rules_of(q)


def test_default_on_wants_disable(tmp_path: Path) -> None:
    q = good_queue(tmp_path)
    edit(q, "G1-good.patch", "default_on: false", "default_on: true")
    assert rules_of(q) == {"env-flag-spelling"}
    edit(q, "G1-good.patch", "GENESIS_ENABLE_G1_GOOD", "SNDR_DISABLE_G1_GOOD")
    assert rules_of(q) == set()


def test_findings_name_file_and_line(tmp_path: Path) -> None:
    q = good_queue(tmp_path)
    edit(q, "G1-good.patch", "lifecycle: experimental", "lifecycle: shiny")
    set_body(q, "G2-next.patch", unified("vllm/util.py", UTIL, UTIL.replace("return x + 5\n", "return x + 50 \n")))
    findings = lint(Store(q.root)).findings
    rendered = [f.render() for f in findings]
    assert rendered[0].startswith("queue/G1-good.patch:5: error[header-value]: lifecycle 'shiny'")
    ws = next(f for f in findings if f.rule == "trailing-whitespace")
    lines = (q.root / "queue/G2-next.patch").read_text().splitlines()
    assert lines[ws.line - 1] == "+    return x + 50 "


def test_cli_exit_codes_and_json(tmp_path: Path) -> None:
    q = good_queue(tmp_path)
    ok = q.run("lint")
    assert ok.returncode == 0 and "0 error(s), 0 warning(s)" in ok.stdout
    CASES["candidate-when-key"](q)
    warn = q.run("lint", "--json")
    doc = json.loads(warn.stdout)
    assert warn.returncode == 0 and doc["schema"] == "gqueue.lint/1" and doc["result"]["warnings"] == 1
    CASES["header-value"](q)
    bad = q.run("lint", check=False)
    assert bad.returncode == 3 and "error[header-value]" in bad.stdout
    doc = json.loads(q.run("lint", "--json", check=False).stdout)
    assert doc["ok"] is False and doc["result"]["errors"] == 1
    assert {"path", "line", "rule", "severity", "message"} <= set(doc["result"]["findings"][0])
    rules = q.run("lint", "--list-rules").stdout
    assert all(rule in rules for rule in RULES)


REPO = Path(__file__).resolve().parents[1]


def test_project_queue_lints_clean() -> None:
    report = lint(Store(REPO))
    assert report.errors == 0, report.render()


@pytest.mark.parametrize(
    ("prefix", "old", "new", "line", "message"),
    [
        (b"\xef\xbb\xbf", b"", b"", 1, "byte order mark"),
        (b"", b"tier: community\n", b"tier: community\nnotes: a\xe2\x80\xa8b\n", 7, "U+2028"),
        (b"", b"tier: community\n", b"tier: community\ntier: engine\n", 7, "duplicate key 'tier' (first on line 6)"),
    ],
)
def test_lint_refuses_headers_as_push_does(tmp_path: Path, prefix: bytes, old: bytes, new: bytes, line: int,
                                           message: str) -> None:
    q = good_queue(tmp_path)
    path = q.root / "queue/G1-good.patch"
    path.write_bytes(prefix + path.read_bytes().replace(old, new, 1))
    found = [(f.line, f.rule) for f in lint(Store(q.root)).findings if message in f.message]
    assert found == [(line, "header-parse")]


def test_a_patch_that_requires_itself_is_an_error(tmp_path: Path) -> None:
    q = good_queue(tmp_path)
    edit(q, "G2-next.patch", "requires: [G1]", "requires: [G1, G2]")
    found = [(f.path, f.line, f.rule, f.message) for f in lint(Store(q.root)).findings if f.rule.startswith("requires")]
    assert found == [("queue/G2-next.patch", 16, "requires-order", "requires itself ('G2')")]


def test_a_patch_that_conflicts_with_itself_is_an_error(tmp_path: Path) -> None:
    q = good_queue(tmp_path)
    edit(q, "G2-next.patch", "conflicts: []", "conflicts: [G2]")
    found = [(f.path, f.rule, f.message) for f in lint(Store(q.root)).findings if f.rule.startswith("conflicts")]
    assert found == [("queue/G2-next.patch", "conflicts-active", "conflicts with itself ('G2'): it could never be applied")]


def test_a_finding_renders_control_characters_escaped(tmp_path: Path) -> None:
    q = good_queue(tmp_path)
    edit(q, "G1-good.patch", "tier: community\n", 'tier: community\n"col\\e[31mour": red\n')
    rendered = [f.render() for f in lint(Store(q.root)).findings if f.rule == "header-unknown-key"]
    assert rendered == ["queue/G1-good.patch:7: error[header-unknown-key]: unknown header key 'col\\x1b[31mour'"]


def test_crlf_and_whitespace_are_one_finding_per_file_with_its_lines(tmp_path: Path) -> None:
    """A new file of CRLF lines (an HTTP test fixture, say) is one finding on its first line,
    naming how many lines and which, not one finding a line."""
    q = good_queue(tmp_path)
    data = "GET / HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n"
    body = unified("tests/data/test478", "", data) + unified("vllm/util.py", UTIL, UTIL.replace("return x + 5\n", "return x + 50 \n"))
    set_body(q, "G2-next.patch", body)
    findings = [f for f in lint(Store(q.root)).findings if f.path.endswith("G2-next.patch")]
    crlf = [f for f in findings if f.rule == "crlf"]
    assert len(crlf) == 1 and crlf[0].message.startswith("4 added lines in 'tests/data/test478' end in CRLF (this one first; lines ")
    lines = (q.root / "queue/G2-next.patch").read_bytes().split(b"\n")
    first, last = crlf[0].message.rsplit("lines ", 1)[1].rstrip(")").split("-")
    assert lines[crlf[0].line - 1] == b"+GET / HTTP/1.1\r" and int(first) == crlf[0].line
    assert lines[int(last) - 1] == b"+\r"
    assert [f.message for f in findings if f.rule == "trailing-whitespace"] == ["added line in 'vllm/util.py' ends in whitespace"]
