"""push / pop / refresh / new on the synthetic upstream."""

from __future__ import annotations

import json
from pathlib import Path

from synth import BASE_FILES, make_queue, unified


def _edit(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)


def test_checkout_push_pop_round_trip(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    parser = BASE_FILES["vllm/parser.py"]
    q.write_patch("P15-none.patch", unified("vllm/parser.py", parser, _edit(parser, "== 'null'", "in ('null', 'None')")))
    util = BASE_FILES["vllm/util.py"]
    q.write_patch("P2-util.patch", unified("vllm/util.py", util, _edit(util, "return x + 7\n", "return x + 70\n")))
    q.set_series("P15-none.patch", "P2-util.patch")
    q.run("checkout")
    out = q.run("push", "--all", "--json")
    doc = json.loads(out.stdout)
    assert doc["schema"] == "gqueue.push/1" and doc["ok"]
    assert [p["name"] for p in doc["result"]["pushed"]] == ["P15-none.patch", "P2-util.patch"]
    assert "('null', 'None')" in (q.work / "vllm/parser.py").read_text()
    assert q.run("applied").stdout.split() == ["P15-none.patch", "P2-util.patch"]
    q.run("pop", "--all")
    assert (q.work / "vllm/parser.py").read_text() == parser
    assert (q.work / "vllm/util.py").read_text() == util


def test_push_stops_at_failing_patch_with_tree_clean(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    parser = BASE_FILES["vllm/parser.py"]
    good = unified("vllm/parser.py", parser, _edit(parser, "import json", "import json  # ok"))
    bad = unified("vllm/config.py", "OPTION_X = 1\n", "OPTION_X = 2\n")
    q.write_patch("A1-good.patch", good)
    q.write_patch("A2-bad.patch", bad)
    q.set_series("A1-good.patch", "A2-bad.patch")
    q.run("checkout")
    proc = q.run("push", "--all", check=False)
    assert proc.returncode == 3
    assert "A2-bad.patch" in proc.stdout and "vllm/config.py" in proc.stdout
    assert q.run("applied").stdout.split() == ["A1-good.patch"]
    assert q.run("status", "--json").stdout and json.loads(q.run("status", "--json").stdout)["result"]["dirty"] == []


def test_refresh_keeps_header_and_is_idempotent(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    q.run("checkout")
    q.run("new", "PN1-change.patch")
    target = q.work / "vllm/util.py"
    target.write_text(target.read_text().replace("return x + 3\n", "return x + 33\n"))
    (q.work / "vllm/newfile.py").write_text("NEW = 1\n")
    q.run("refresh")
    patch = (q.root / "queue/PN1-change.patch").read_bytes()
    assert patch.startswith(b"---\nid: PN1\n")
    assert b"+    return x + 33" in patch and b"b/vllm/newfile.py" in patch
    q.run("refresh")
    assert (q.root / "queue/PN1-change.patch").read_bytes() == patch
    q.run("pop")
    assert not (q.work / "vllm/newfile.py").exists()
    q.run("push")
    assert (q.work / "vllm/newfile.py").read_text() == "NEW = 1\n"


def test_pop_refuses_unrefreshed_changes_and_force_saves_them(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    q.run("checkout")
    q.run("new", "X1-a.patch")
    (q.work / "README.md").write_text("edited\n")
    proc = q.run("pop", check=False)
    assert proc.returncode == 1 and "README.md" in proc.stderr
    assert (q.work / "README.md").read_text() == "edited\n"
    q.run("pop", "--force")
    saved = list((q.root / ".gqueue/saved").glob("*.diff"))
    assert len(saved) == 1 and b"+edited" in saved[0].read_bytes()


def test_wrong_sha256_refused_and_nothing_created(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    pin = q.root / "vendor-pin.txt"
    text = pin.read_text()
    pin.write_text(text[:-5] + ("0000\n" if not text.endswith("0000\n") else "1111\n"))
    proc = q.run("checkout", check=False)
    assert proc.returncode == 1
    assert "vendor-pin.txt:1" in proc.stderr and "sha256 mismatch" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 2
