"""gqueue undo / redo: the queue files, the series and the stack put back, driven through the CLI."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from synth import BASE_FILES, Queue, make_queue, unified

UTIL = BASE_FILES["vllm/util.py"]


def _util(old: str, new: str) -> str:
    assert old in UTIL
    return unified("vllm/util.py", UTIL, UTIL.replace(old, new, 1))


def _queue(tmp_path: Path) -> Queue:
    q = make_queue(tmp_path)
    q.write_patch("A-a.patch", _util("return x + 7\n", "return x + 70\n"))
    q.write_patch("B-b.patch", _util("return x + 20\n", "return x + 200\n"))
    q.write_patch("C-c.patch", _util("return x + 33\n", "return x + 330\n"))
    (q.root / "series").write_text("# the queue\nA-a.patch\nB-b.patch  # keep this comment\nC-c.patch\n")
    q.run("checkout")
    return q


def _applied(q: Queue) -> list[str]:
    return q.run("applied").stdout.split()


def _git(q: Queue, *args: str) -> str:
    return subprocess.run(["git", "-C", str(q.work), *args], capture_output=True, text=True, check=True).stdout


def _state(q: Queue) -> tuple[bytes, dict[str, bytes], str, str]:
    """series, queue/ files, HEAD and the work tree's status: what an undo must put back."""
    queue = {p.name: p.read_bytes() for p in sorted((q.root / "queue").iterdir())}
    return (q.root / "series").read_bytes(), queue, _git(q, "rev-parse", "HEAD"), _git(q, "status", "--porcelain")


def _undo(q: Queue, *args: str) -> dict[str, object]:
    return json.loads(q.run("undo", "--json", *args).stdout)["result"]


def test_undo_and_redo_of_push_and_pop(tmp_path: Path) -> None:
    q = _queue(tmp_path)
    before = _state(q)
    q.run("push", "-n", "2")
    pushed = _state(q)
    result = _undo(q)
    assert result["steps"][0]["op"] == "push" and result["can_redo"] == 1
    assert _state(q) == before and _applied(q) == []
    assert "x + 70\n" not in (q.work / "vllm/util.py").read_text()
    assert "redid push: now at B-b.patch" in q.run("redo").stdout
    assert _state(q) == pushed and _applied(q) == ["A-a.patch", "B-b.patch"]
    q.run("pop")
    assert _applied(q) == ["A-a.patch"]
    assert "undid pop: now at B-b.patch (was A-a.patch)" in q.run("undo").stdout
    assert _state(q) == pushed
    q.run("redo")
    assert _applied(q) == ["A-a.patch"]
    assert "x + 200\n" not in (q.work / "vllm/util.py").read_text()


def test_undo_twice_and_undo_n(tmp_path: Path) -> None:
    q = _queue(tmp_path)
    start = _state(q)
    q.run("push")
    one = _state(q)
    q.run("push")
    q.run("goto", "C-c.patch")
    q.run("undo")
    assert _applied(q) == ["A-a.patch", "B-b.patch"]
    q.run("undo")
    assert _state(q) == one
    q.run("undo")
    assert _state(q) == start
    proc = q.run("undo", check=False)
    assert proc.returncode == 1 and "nothing to undo" in proc.stderr
    assert "only 3 operation(s) to redo" in q.run("redo", "-n", "4", check=False).stderr
    doc = json.loads(q.run("redo", "-n", "3", "--json").stdout)["result"]
    assert [s["op"] for s in doc["steps"]] == ["push", "push", "goto"] and doc["can_redo"] == 0
    assert _applied(q) == ["A-a.patch", "B-b.patch", "C-c.patch"]
    _undo(q, "-n", "2")
    assert _state(q) == one


def test_undo_of_refresh_restores_the_old_text_and_leaves_the_edit_unrefreshed(tmp_path: Path) -> None:
    q = _queue(tmp_path)
    q.run("push", "-n", "2")
    patch = q.root / "queue" / "B-b.patch"
    old_text = patch.read_bytes()
    util = q.work / "vllm/util.py"
    util.write_text(util.read_text().replace("return x + 21\n", "return x + 2100\n"))
    edited = util.read_bytes()
    q.run("refresh")
    new_text = patch.read_bytes()
    assert new_text != old_text
    result = _undo(q)
    assert result["steps"][0]["files"] == ["queue/B-b.patch"]
    assert patch.read_bytes() == old_text  # byte for byte
    assert util.read_bytes() == edited  # the change is back in work/, not refreshed
    assert _git(q, "status", "--porcelain").strip() == "M vllm/util.py"
    assert "2100" in q.run("diff").stdout
    q.run("redo")
    assert patch.read_bytes() == new_text and _git(q, "status", "--porcelain") == ""
    q.run("pop", "-a")
    q.run("push", "-a")  # the redone patch applies
    assert "x + 2100\n" in util.read_text()


def test_undo_of_new_delete_and_rename(tmp_path: Path) -> None:
    q = _queue(tmp_path)
    q.run("push")
    start = _state(q)
    q.run("new", "N-new.patch")
    assert _applied(q) == ["A-a.patch", "N-new.patch"]
    q.run("undo")
    assert _state(q) == start and not (q.root / "queue" / "N-new.patch").exists()
    q.run("redo")
    assert _applied(q) == ["A-a.patch", "N-new.patch"] and (q.root / "queue" / "N-new.patch").is_file()
    q.run("undo")

    q.run("delete", "C-c.patch")
    assert not (q.root / "queue" / "C-c.patch").exists()
    q.run("undo")
    assert _state(q) == start

    q.run("rename", "A-a.patch", "A-renamed.patch")
    assert _applied(q) == ["A-renamed.patch"]
    q.run("undo")
    assert _state(q) == start and _applied(q) == ["A-a.patch"]
    assert not (q.root / "queue" / "A-renamed.patch").exists()
    q.run("redo")
    assert _applied(q) == ["A-renamed.patch"] and "A-renamed.patch" in (q.root / "series").read_text()


def test_undo_of_move(tmp_path: Path) -> None:
    q = _queue(tmp_path)
    q.run("push", "-n", "2")
    start = _state(q)
    q.run("move", "C-c.patch", "--first")
    assert _applied(q) == ["C-c.patch", "A-a.patch", "B-b.patch"]
    q.run("undo")
    assert _state(q) == start and _applied(q) == ["A-a.patch", "B-b.patch"]
    q.run("redo")
    assert q.run("series").stdout.split() == ["C-c.patch", "A-a.patch", "B-b.patch"]


def test_undo_of_header_edit_fold_and_import(tmp_path: Path) -> None:
    q = _queue(tmp_path)
    q.run("push")
    start = _state(q)
    q.run("header", "B-b.patch", "--edit", env={"GQUEUE_EDITOR": "sed -i 's/^title:.*/title: retitled/'"})
    assert "retitled" in (q.root / "queue" / "B-b.patch").read_text()
    q.run("header", "B-b.patch")  # only shown: not recorded
    assert _undo(q)["steps"][0]["op"] == "header"
    assert _state(q) == start

    q.run("fold", "C-c.patch")
    assert "C-c.patch" not in (q.root / "series").read_text()
    q.run("undo")
    assert _state(q) == start and _applied(q) == ["A-a.patch"]

    source = tmp_path / "D-d.patch"
    source.write_text(_util("return x + 9\n", "return x + 90\n"))
    q.run("import", str(source))
    assert (q.root / "queue" / "D-d.patch").is_file()
    q.run("undo")
    assert _state(q) == start
    assert list((q.root / ".gqueue" / "deleted").glob("*-D-d.patch"))  # moved aside, not unlinked


def test_a_new_operation_ends_what_could_be_redone(tmp_path: Path) -> None:
    q = _queue(tmp_path)
    q.run("push", "-n", "2")
    q.run("undo")
    q.run("push")
    proc = q.run("redo", check=False)
    assert proc.returncode == 1 and "nothing to redo" in proc.stderr
    assert _applied(q) == ["A-a.patch"]
    q.run("undo")
    assert _applied(q) == []
    assert q.run("undo", check=False).returncode == 1  # the undone push -n 2 is gone from the log


def test_undo_refuses_unrefreshed_changes_and_force_saves_them(tmp_path: Path) -> None:
    q = _queue(tmp_path)
    q.run("push", "-n", "2")
    util = q.work / "vllm/util.py"
    util.write_text(util.read_text() + "# mine\n")
    before = _state(q)
    proc = q.run("undo", check=False)
    assert proc.returncode == 1
    assert "not yet refreshed (vllm/util.py); refusing to undo" in proc.stderr
    assert _state(q) == before  # nothing changed
    q.run("undo", "--force")
    assert _applied(q) == [] and _git(q, "status", "--porcelain") == ""
    saved = list((q.root / ".gqueue" / "saved").glob("*-undo-*.diff"))
    assert len(saved) == 1 and "+# mine" in saved[0].read_text()


def test_undo_refuses_a_queue_file_edited_since(tmp_path: Path) -> None:
    q = _queue(tmp_path)
    q.run("push", "-n", "2")
    patch = q.root / "queue" / "B-b.patch"
    text = patch.read_text()
    util = q.work / "vllm/util.py"
    util.write_text(util.read_text().replace("return x + 22\n", "return x + 2200\n"))
    q.run("refresh")
    hand = patch.read_text() + "# edited by hand\n"
    patch.write_text(hand)
    proc = q.run("undo", check=False)
    assert proc.returncode == 1 and "queue/B-b.patch changed since 'gqueue refresh'" in proc.stderr
    assert patch.read_text() == hand
    q.run("undo", "--force")
    assert patch.read_text() == text
    saved = list((q.root / ".gqueue" / "saved").glob("*-undo-B-b.patch"))
    assert [s.read_text() for s in saved] == [hand]


@pytest.mark.slow  # a kill at every effect of a two-step undo: some 15 trials of four commands each
def test_a_killed_undo_is_finished_by_the_next_command(tmp_path: Path) -> None:
    q = _queue(tmp_path)
    start = _state(q)
    q.run("new", "N-new.patch")
    q.run("rename", "N-new.patch", "N-other.patch")
    done = None
    for n in range(1, 40):
        trial = Queue(tmp_path / f"t{n}")
        subprocess.run(["cp", "-a", str(q.root), str(trial.root)], check=True)
        proc = trial.run("undo", "-n", "2", check=False, env={"GQUEUE_TEST_CRASH_AFTER": str(n)})
        trial.run("repair")  # as the next locked command would, it finishes what was begun
        if proc.returncode == 0:
            done = n
            break
        assert proc.returncode < 0  # killed
        notes = trial.run("applied").stderr
        assert "Traceback" not in notes
        state = _state(trial)
        log = json.loads((trial.root / ".gqueue/undo/log.json").read_text())
        # each step is whole: undone twice, once, or not at all
        applied = _applied(trial)
        assert applied in (["N-other.patch"], ["N-new.patch"], []), (n, applied)
        if applied == []:
            assert state[:3] == start[:3] and log["pos"] == 0
    assert done is not None and done > 2


def test_a_copy_the_log_lost_is_made_again_before_the_next_command(tmp_path: Path) -> None:
    """The log's copies of what a command wrote are not synced (the files are): one lost to a
    power cut is copied again, from the unchanged file, before the next command replaces it."""
    q = _queue(tmp_path)
    original = (q.root / "queue" / "A-a.patch").read_bytes()
    q.run("delete", "C-c.patch")  # a recorded command: the log copies every queue file it sees
    objects = q.root / ".gqueue" / "undo" / "objects"
    import hashlib

    (objects / hashlib.sha256(original).hexdigest()).unlink()  # as a power cut may leave it
    q.run("delete", "A-a.patch")
    assert not (q.root / "queue" / "A-a.patch").exists()
    q.run("undo")
    assert (q.root / "queue" / "A-a.patch").read_bytes() == original
