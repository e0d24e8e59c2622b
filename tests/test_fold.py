"""fold: an unapplied patch of the series folded into the top patch."""

from __future__ import annotations

import subprocess
from pathlib import Path

from synth import BASE_FILES, Queue, make_queue, unified

UTIL = BASE_FILES["vllm/util.py"]
PARSER = BASE_FILES["vllm/parser.py"]


def _queue(tmp_path: Path) -> Queue:
    q = make_queue(tmp_path)
    q.write_patch("A1-a.patch", unified("vllm/util.py", UTIL, UTIL.replace("return x + 7\n", "return x + 70\n")))
    q.write_patch("A2-b.patch", unified("vllm/parser.py", PARSER, PARSER.replace("import json", "import json  # b")))
    q.set_series("A1-a.patch", "A2-b.patch")
    q.run("checkout")
    q.run("push")
    return q


def _state(q: Queue) -> tuple[bytes, dict[str, bytes], str]:
    files = {p.name: p.read_bytes() for p in sorted((q.root / "queue").iterdir())}
    status = subprocess.run(["git", "-C", str(q.work), "status", "--porcelain"], capture_output=True, text=True).stdout
    return (q.root / "series").read_bytes(), files, status


def test_fold_moves_the_patch_into_the_top(tmp_path: Path) -> None:
    q = _queue(tmp_path)
    q.run("fold", "A2-b.patch")
    assert q.run("series").stdout.split() == ["A1-a.patch"]
    body = (q.root / "queue/A1-a.patch").read_text()
    assert "+    return x + 70" in body and "+import json  # b" in body
    assert not (q.root / "queue/A2-b.patch").exists()


def test_fold_uses_the_series_strip_level(tmp_path: Path) -> None:
    q = _queue(tmp_path)
    p0 = unified("vllm/parser.py", PARSER, PARSER.replace("import json", "import json  # b"))
    p0 = p0.replace("a/vllm/", "vllm/").replace("b/vllm/", "vllm/")
    q.write_patch("A2-b.patch", p0)
    q.set_series("A1-a.patch", "A2-b.patch -p0")
    q.run("fold", "A2-b.patch")
    assert "+import json  # b" in (q.root / "queue/A1-a.patch").read_text()


def test_fold_of_an_empty_patch(tmp_path: Path) -> None:
    q = _queue(tmp_path)
    q.write_patch("E1-empty.patch", "")
    q.set_series("A1-a.patch", "E1-empty.patch", "A2-b.patch")
    q.run("fold", "E1-empty.patch")
    assert q.run("series").stdout.split() == ["A1-a.patch", "A2-b.patch"]
    assert q.run("files").stdout.split() == ["vllm/util.py"]
    assert not (q.root / "queue/E1-empty.patch").exists()


def test_fold_that_does_not_apply_is_a_conflict_and_changes_nothing(tmp_path: Path) -> None:
    q = _queue(tmp_path)
    bad = unified("vllm/parser.py", PARSER, PARSER.replace("import json", "import json  # b"))
    q.write_patch("A2-b.patch", bad.replace(" def parse(text):", " def parse(txt):"))
    before = _state(q)
    proc = q.run("fold", "A2-b.patch", check=False)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.startswith("error[conflict]: queue/A2-b.patch:5:") and "vllm/parser.py hunk #1" in proc.stderr
    assert _state(q) == before


def test_fold_into_a_hand_edited_top_changes_nothing(tmp_path: Path) -> None:
    q = _queue(tmp_path)
    top = q.root / "queue/A1-a.patch"
    top.write_text(top.read_text().replace("return x + 70", "return x + 71"))
    before = _state(q)
    proc = q.run("fold", "A2-b.patch", check=False)
    assert proc.returncode == 1 and "queue/A1-a.patch was edited after it was pushed" in proc.stderr
    assert _state(q) == before


def test_fold_killed_at_any_point_neither_loses_nor_doubles_the_patch(tmp_path: Path) -> None:
    import shutil

    template = _queue(tmp_path / "template")
    for n in range(1, 80):
        q = Queue(tmp_path / f"k{n}" / "q")
        shutil.copytree(template.root, q.root, symlinks=True)
        proc = q.run("fold", "A2-b.patch", check=False, env={"GQUEUE_TEST_CRASH_AFTER": str(n)})
        q.run("repair")
        listed = "A2-b.patch" in q.run("series").stdout.split()
        top = (q.root / "queue/A1-a.patch").read_text()
        in_work = "import json  # b" in (q.work / "vllm/parser.py").read_text()
        assert not (listed and "+import json  # b" in top), f"killed at effect {n}: folded and still in the series"
        assert listed or "+import json  # b" in top or in_work, f"killed at effect {n}: the patch is lost"
        if listed:
            assert (q.root / "queue/A2-b.patch").exists()
        if proc.returncode == 0:
            break
    else:
        raise AssertionError("fold was still killed after 79 effects")
