"""Stack moves that write the work tree directly (vcs/worktree.py) leave exactly what git would.

Each test checks the files against the commit's tree byte for byte, the executable bits,
that the index matches HEAD with trusted stat data (status is clean), and the cases that
must be left to git: hard links, content-converting attributes, links.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

from synth import BASE_FILES, make_queue, unified

from gqueue.vcs.worktree import Write, plan_writes


def git(work: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=work, check=True, capture_output=True, text=True).stdout


def assert_tree_matches_head(work: Path) -> None:
    """Every tracked file has HEAD's bytes and mode, nothing else is there, the index is HEAD's."""
    listed = git(work, "ls-tree", "-r", "-z", "HEAD").split("\0")
    tracked = {}
    for record in filter(None, listed):
        info, path = record.split("\t", 1)
        mode, _kind, sha = info.split()
        tracked[path] = (mode, sha)
    on_disk = {str(p.relative_to(work)) for p in work.rglob("*") if p.is_file() and ".git" not in p.parts}
    assert on_disk == set(tracked)
    for path, (mode, sha) in tracked.items():
        data = subprocess.run(["git", "cat-file", "blob", sha], cwd=work, check=True, capture_output=True).stdout
        assert (work / path).read_bytes() == data, path
        executable = bool(os.stat(work / path).st_mode & stat.S_IXUSR)
        assert executable == (mode == "100755"), path
    assert git(work, "status", "--porcelain", "--untracked-files=all") == ""
    assert git(work, "diff-index", "--cached", "HEAD") == ""
    empty_dirs = [d for d in work.rglob("*") if d.is_dir() and ".git" not in d.parts and not any(d.iterdir())]
    assert empty_dirs == []


def _queue_with_every_kind_of_change(tmp_path: Path):
    files = dict(BASE_FILES, **{"tools/run.sh": "echo run\n", "old/only.py": "GONE = 1\n"})
    q = make_queue(tmp_path, files)
    util = files["vllm/util.py"]
    q.write_patch("A1-edit.patch", unified("vllm/util.py", util, util.replace("return x + 3\n", "return x + 33\n")))
    q.write_patch("A2-new.patch", "diff --git a/vllm/deep/er/new.py b/vllm/deep/er/new.py\nnew file mode 100644\n"
                  "--- /dev/null\n+++ b/vllm/deep/er/new.py\n@@ -0,0 +1,2 @@\n+NEW = 1\n+MORE = 2\n")
    q.write_patch("A3-delete.patch", "diff --git a/old/only.py b/old/only.py\ndeleted file mode 100644\n"
                  "--- a/old/only.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-GONE = 1\n")
    q.write_patch("A4-chmod.patch", "diff --git a/tools/run.sh b/tools/run.sh\nold mode 100644\nnew mode 100755\n")
    q.write_patch("A5-shrink.patch", unified("vllm/util.py", util.replace("return x + 3\n", "return x + 33\n"),
                                             "".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(2))))
    q.set_series("A1-edit.patch", "A2-new.patch", "A3-delete.patch", "A4-chmod.patch", "A5-shrink.patch")
    return q


def test_push_and_pop_leave_what_git_checkout_would(tmp_path: Path) -> None:
    q = _queue_with_every_kind_of_change(tmp_path)
    q.run("checkout")
    q.run("push", "--all")
    assert_tree_matches_head(q.work)
    assert (q.work / "vllm/deep/er/new.py").read_text() == "NEW = 1\nMORE = 2\n"
    assert not (q.work / "old").exists()  # its last file went: the folder goes too, as with git
    assert os.stat(q.work / "tools/run.sh").st_mode & stat.S_IXUSR
    q.run("goto", "A2-new.patch")
    assert_tree_matches_head(q.work)
    q.run("pop", "--all")
    assert_tree_matches_head(q.work)
    assert not (q.work / "vllm/deep").exists()
    assert (q.work / "vllm/util.py").read_text() == BASE_FILES["vllm/util.py"]


def test_a_hard_linked_file_is_replaced_not_written_through(tmp_path: Path) -> None:
    q = _queue_with_every_kind_of_change(tmp_path)
    q.run("checkout")
    outside = tmp_path / "linked-util.py"
    os.link(q.work / "vllm/util.py", outside)
    q.run("push")
    assert "return x + 33" in (q.work / "vllm/util.py").read_text()
    assert outside.read_text() == BASE_FILES["vllm/util.py"]  # the other name still has the old text
    assert_tree_matches_head(q.work)


def test_content_attributes_of_the_tree_convert_nothing(tmp_path: Path) -> None:
    """work/ holds the pin's bytes (work/.git/info/attributes): a tree's 'eol=crlf' converts
    neither the checkout nor what a push writes."""
    files = dict(BASE_FILES, **{".gitattributes": "*.txt eol=crlf\n", "notes.txt": "one\n"})
    q = make_queue(tmp_path, files)
    q.write_patch("A1-notes.patch", unified("notes.txt", "one\n", "one\ntwo\n"))
    q.set_series("A1-notes.patch")
    q.run("checkout")
    assert (q.work / "notes.txt").read_bytes() == b"one\n"
    q.run("push")
    assert (q.work / "notes.txt").read_bytes() == b"one\ntwo\n"  # the patch's bytes, as its blob holds them
    assert git(q.work, "status", "--porcelain") == ""


def test_plan_refuses_what_only_git_should_do(tmp_path: Path) -> None:
    root = tmp_path / "w"
    (root / "d").mkdir(parents=True)
    (root / "d" / "f.py").write_text("x\n")
    (root / "blocker").write_text("a file where a folder must go\n")
    os.symlink("d", root / "link")
    edit = {"d/f.py": ("100644", b"y\n")}
    assert plan_writes(root, {"d/f.py": "100644"}, edit) == [Write("d/f.py", "100644", b"y\n", exists=True)]
    assert plan_writes(root, {"d/f.py": "100644"}, {"d/f.py": ("120000", b"target")}) is None  # becomes a link
    assert plan_writes(root, {}, {"blocker/new.py": ("100644", b"n\n")}) is None  # a file in the way
    assert plan_writes(root, {}, {"link/new.py": ("100644", b"n\n")}) is None  # through a link
    assert plan_writes(root, {}, {"d/f.py": ("100644", b"n\n")}) is None  # untracked file in the way
    assert plan_writes(root, {"d/f.py": "100644"}, {"../out.py": ("100644", b"n\n")}) is None
    assert plan_writes(root, {}, {".git/config": ("100644", b"n\n")}) is None
    assert plan_writes(root, {}, {"sub/.gitattributes": ("100644", b"* eol=crlf\n")}) is None
    assert plan_writes(root, {"d/f.py": "100644"}, {"d/f.py": None}) == [Write("d/f.py", None)]


def test_written_files_are_not_racily_clean_and_later_edits_still_show(tmp_path: Path) -> None:
    """git keeps stat times by the second: files the push wrote carry a time before the second the
    index was written in, so later commands trust their stat data instead of re-reading them; an
    edit of the same size made right after the push is still seen."""
    q = _queue_with_every_kind_of_change(tmp_path)
    q.run("checkout")
    q.run("push", "A2-new.patch")
    index_second = os.stat(q.work / ".git" / "index").st_mtime_ns // 1_000_000_000
    for path in ("vllm/util.py", "vllm/deep/er/new.py"):
        assert os.stat(q.work / path).st_mtime_ns // 1_000_000_000 < index_second, path
    assert_tree_matches_head(q.work)
    text = (q.work / "vllm/util.py").read_text()
    (q.work / "vllm/util.py").write_text(text.replace("return x + 33\n", "return x + 44\n"))  # same size
    assert git(q.work, "status", "--porcelain") == " M vllm/util.py\n"
    q.run("refresh")  # the top patch takes the edit
    assert "return x + 44" in (q.root / "queue" / "A2-new.patch").read_text()
