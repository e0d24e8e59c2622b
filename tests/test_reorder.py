"""gqueue move: a patch to another place in the series, the stack re-applied in the new order."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from synth import BASE_FILES, Queue, make_queue, unified

from gqueue.model.series import parse_series
from gqueue.ops.reorder import applied_after

UTIL = BASE_FILES["vllm/util.py"]


def _util(*edits: tuple[str, str]) -> str:
    text = UTIL
    for old, new in edits:
        assert old in text
        text = text.replace(old, new, 1)
    return unified("vllm/util.py", UTIL, text)


def _queue(tmp_path: Path, series: str) -> Queue:
    """Four patches of vllm/util.py; B and C change the same line (C on top of B's change)."""
    q = make_queue(tmp_path)
    q.write_patch("A-a.patch", _util(("return x + 7\n", "return x + 70\n")))
    q.write_patch("B-b.patch", _util(("return x + 20\n", "return x + 200\n")))
    q.write_patch("C-c.patch", unified("vllm/util.py", UTIL.replace("return x + 20\n", "return x + 200\n"),
                                       UTIL.replace("return x + 20\n", "return x + 2000\n")))
    q.write_patch("D-d.patch", _util(("return x + 33\n", "return x + 330\n")))
    (q.root / "series").write_text(series)
    q.run("checkout")
    return q


SERIES = "# the queue\nA-a.patch\nB-b.patch\nC-c.patch -p1  # needs B\n\nD-d.patch\n"


def _head(q: Queue) -> str:
    return subprocess.run(["git", "-C", str(q.work), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout


def _names(q: Queue, what: str) -> list[str]:
    return q.run(what).stdout.split()


def test_move_across_the_applied_patches_reapplies_them(tmp_path: Path) -> None:
    q = _queue(tmp_path, SERIES)
    q.run("push", "-n", "2")
    doc = json.loads(q.run("move", "D-d.patch", "--first", "--json").stdout)
    assert doc["ok"] and doc["result"]["popped"] == ["A-a.patch", "B-b.patch"]
    assert doc["result"]["pushed"] == ["D-d.patch", "A-a.patch", "B-b.patch"]  # moved below applied ones: applied
    assert _names(q, "applied") == ["D-d.patch", "A-a.patch", "B-b.patch"]
    assert (q.root / "series").read_text() == "# the queue\nD-d.patch\nA-a.patch\nB-b.patch\nC-c.patch -p1  # needs B\n\n"
    text = (q.work / "vllm/util.py").read_text()
    assert "x + 330\n" in text and "x + 70\n" in text and "x + 200\n" in text
    assert json.loads(q.run("status", "--json").stdout)["result"]["dirty"] == []
    q.run("push", "--all")
    assert "x + 2000\n" in (q.work / "vllm/util.py").read_text()


def test_move_of_unapplied_patches_only_rewrites_the_series(tmp_path: Path) -> None:
    q = _queue(tmp_path, SERIES)
    q.run("push")
    head = _head(q)
    doc = json.loads(q.run("move", "D-d.patch", "--before", "B-b.patch", "--json").stdout)["result"]
    assert (doc["popped"], doc["pushed"]) == ([], [])  # lands above the unapplied B: stays unapplied
    assert q.run("series").stdout.split() == ["A-a.patch", "D-d.patch", "B-b.patch", "C-c.patch"]
    assert _head(q) == head
    assert "already there" in q.run("move", "D-d.patch", "--after", "A-a.patch").stdout


def test_applied_top_moved_above_unapplied_ones_is_popped(tmp_path: Path) -> None:
    q = _queue(tmp_path, SERIES)
    q.run("push", "-n", "2")
    doc = json.loads(q.run("move", "B-b.patch", "--last", "--json").stdout)["result"]
    assert (doc["popped"], doc["pushed"]) == (["B-b.patch"], [])
    assert _names(q, "applied") == ["A-a.patch"] and _names(q, "unapplied")[-1] == "B-b.patch"


def test_move_that_breaks_a_dependent_patch_changes_nothing(tmp_path: Path) -> None:
    q = _queue(tmp_path, SERIES)
    q.run("push", "--all")
    series, head = (q.root / "series").read_text(), _head(q)
    proc = q.run("move", "C-c.patch", "--before", "B-b.patch", check=False)
    assert proc.returncode == 3
    assert "C-c.patch would not apply in the new order: vllm/util.py hunk #1" in proc.stderr
    assert "queue/C-c.patch" in proc.stderr
    assert (q.root / "series").read_text() == series and _head(q) == head
    assert _names(q, "applied") == ["A-a.patch", "B-b.patch", "C-c.patch", "D-d.patch"]


def test_move_refuses_unrefreshed_changes_when_the_stack_moves(tmp_path: Path) -> None:
    q = _queue(tmp_path, SERIES)
    q.run("push", "--all")
    (q.work / "vllm/util.py").write_text((q.work / "vllm/util.py").read_text() + "# mine\n")
    proc = q.run("move", "A-a.patch", "--last", check=False)
    assert proc.returncode != 0 and "refresh" in (proc.stderr + proc.stdout)
    assert (q.work / "vllm/util.py").read_text().endswith("# mine\n")
    assert (q.root / "series").read_text() == SERIES


@pytest.mark.parametrize(
    "args",
    [("A-a.patch",), ("A-a.patch", "--first", "--last"), ("Z.patch", "--first"), ("A-a.patch", "--after", "Z.patch"),
     ("A-a.patch", "--before", "A-a.patch")],
)
def test_move_usage_errors(tmp_path: Path, args: tuple[str, ...]) -> None:
    q = _queue(tmp_path, SERIES)
    proc = q.run("move", *args, check=False)
    assert proc.returncode == 2 and (q.root / "series").read_text() == SERIES


def test_series_move_keeps_the_line_and_the_others() -> None:
    s = parse_series("# head\nA.patch\nB.patch -p0  # +guard note\n\n# tail\nC.patch")
    assert s.move("B.patch", before="A.patch").text() == "# head\nB.patch -p0  # +guard note\nA.patch\n\n# tail\nC.patch\n"
    assert s.move("B.patch", after="C.patch").text() == "# head\nA.patch\n\n# tail\nC.patch\nB.patch -p0  # +guard note\n"
    assert s.move("C.patch", after="A.patch").names == ["A.patch", "C.patch", "B.patch"]
    assert s.move("B.patch", after="C.patch").entries[-1].strip == 0


@pytest.mark.parametrize(
    ("names", "applied", "name", "expected"),
    [
        (["D", "A", "B", "C"], ["A", "B"], "D", ["D", "A", "B"]),  # below applied ones: applied
        (["A", "D", "B", "C"], ["A"], "D", ["A"]),  # above an unapplied one: not
        (["A", "B", "D", "C"], ["A", "B"], "D", ["A", "B"]),  # right above the top: keeps its state
        (["B", "A", "C"], ["A", "B"], "A", ["B", "A"]),
        (["B", "C", "A"], ["A", "B"], "A", ["B"]),  # applied, moved above an unapplied one: popped
        (["A", "B", "C"], [], "C", []),
    ],
)
def test_which_patches_are_applied_after_a_move(names: list[str], applied: list[str], name: str,
                                                expected: list[str]) -> None:
    assert applied_after(names, applied, name) == expected
