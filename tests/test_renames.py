"""Renames and copies in patches, as git writes them ('rename from'/'rename to', 'copy from'/
'copy to', with or without hunks): parsed, pushed, popped, checked against another pin, and
taken by git apply and GNU patch as gqueue takes them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from gqueue.errors import FormatError
from gqueue.model.diff import parse_diff
from synth import BASE_FILES, Queue, base_git_repo, make_queue, make_sdist, sha256

UTIL = BASE_FILES["vllm/util.py"]

PURE = ("diff --git a/vllm/util.py b/vllm/utils.py\nsimilarity index 100%\n"
        "rename from vllm/util.py\nrename to vllm/utils.py\n")
EDITED = ("diff --git a/vllm/util.py b/vllm/utils.py\nsimilarity index 97%\n"
          "rename from vllm/util.py\nrename to vllm/utils.py\nindex 1111111..2222222 100644\n"
          "--- a/vllm/util.py\n+++ b/vllm/utils.py\n@@ -1,5 +1,5 @@\n def f0(x):\n-    return x + 0\n+    return x + 100\n \n \n def f1(x):\n")
COPY = ("diff --git a/vllm/parser.py b/vllm/parser2.py\nsimilarity index 100%\n"
        "copy from vllm/parser.py\ncopy to vllm/parser2.py\n")


def test_renames_and_copies_parse_with_both_names_and_the_source_their_hunks_apply_to() -> None:
    pure, edited, copy = (parse_diff(body.encode())[0] for body in (PURE, EDITED, COPY))
    assert (pure.old_path, pure.new_path, pure.rename, pure.copy, pure.hunks) == ("vllm/util.py", "vllm/utils.py", True, False, ())
    assert (edited.source, edited.path, len(edited.hunks)) == ("vllm/util.py", "vllm/utils.py", 1)
    assert (copy.source, copy.path, copy.rename, copy.copy) == ("vllm/parser.py", "vllm/parser2.py", False, True)
    two = parse_diff((PURE + COPY).encode())
    assert [fd.line for fd in two] == [1, 5]


@pytest.mark.parametrize(("body", "message"), [
    (PURE.replace("rename to vllm/utils.py\n", "rename to vllm/utils.py\ncopy from vllm/x\n"), "both 'rename' and 'copy'"),
    (EDITED.replace("+++ b/vllm/utils.py", "+++ b/vllm/util.py"), "two different file names"),
])
def test_a_rename_that_says_two_things_is_refused_on_its_line(body: str, message: str) -> None:
    with pytest.raises(FormatError, match=message):
        parse_diff(body.encode(), path="queue/X.patch")


def _queue(tmp_path: Path, *bodies: str) -> Queue:
    q = make_queue(tmp_path)
    names = []
    for k, body in enumerate(bodies, start=1):
        names.append(f"R{k}-move.patch")
        q.write_patch(names[-1], body)
    q.set_series(*names)
    q.run("checkout")
    return q


def test_push_renames_and_copies_and_pop_puts_the_files_back(tmp_path: Path) -> None:
    q = _queue(tmp_path, EDITED, COPY)
    assert q.run("files", "R1-move").stdout.split() == ["vllm/util.py", "vllm/utils.py"]
    assert q.run("files", "R2-move").stdout.split() == ["vllm/parser2.py"]
    q.run("push", "--all")
    assert not (q.work / "vllm/util.py").exists()
    assert (q.work / "vllm/utils.py").read_text() == UTIL.replace("return x + 0\n", "return x + 100\n", 1)
    assert (q.work / "vllm/parser2.py").read_text() == (q.work / "vllm/parser.py").read_text() == BASE_FILES["vllm/parser.py"]
    assert subprocess.run(["git", "-C", str(q.work), "status", "--porcelain"], capture_output=True, text=True).stdout == ""
    q.run("pop", "--all")
    assert (q.work / "vllm/util.py").read_text() == UTIL
    assert not (q.work / "vllm/utils.py").exists() and not (q.work / "vllm/parser2.py").exists()
    assert q.run("lint").returncode == 0


def test_refresh_of_a_patch_that_renames_writes_a_rename(tmp_path: Path) -> None:
    q = _queue(tmp_path, EDITED)
    q.run("push")
    with (q.work / "vllm/utils.py").open("a") as handle:
        handle.write("# one more line\n")
    q.run("refresh")
    text = (q.root / "queue/R1-move.patch").read_text()
    assert "rename from vllm/util.py\nrename to vllm/utils.py\n" in text and "+# one more line\n" in text
    assert "deleted file mode" not in text
    q.run("pop")
    q.run("push")
    assert (q.work / "vllm/utils.py").read_text().endswith("# one more line\n") and not (q.work / "vllm/util.py").exists()


def test_git_apply_and_gnu_patch_take_the_queue_file_as_push_does(tmp_path: Path) -> None:
    q = _queue(tmp_path, PURE)
    q.run("push")
    pushed = {p: (q.work / p).read_bytes() for p in ("vllm/utils.py",)}
    for tool in (["git", "apply", "-p1"], ["patch", "-p1", "-s", "-i"]):
        tree = tmp_path / f"tree-{tool[0]}"
        tree.mkdir()
        for name, text in BASE_FILES.items():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            (tree / name).write_text(text)
        subprocess.run([*tool, str(q.root / "queue/R1-move.patch")], cwd=tree, check=True, capture_output=True)
        assert not (tree / "vllm/util.py").exists() and (tree / "vllm/utils.py").read_bytes() == pushed["vllm/utils.py"]


def test_a_rename_onto_a_file_that_is_there_or_from_one_that_is_not_stops_the_push(tmp_path: Path) -> None:
    onto = PURE.replace("utils.py", "parser.py")
    q = _queue(tmp_path, onto)
    proc = q.run("push", "--json", check=False)
    doc = json.loads(proc.stdout)
    assert proc.returncode != 0 and doc["result"]["failed"]["files"][0]["status"] == "file-exists"
    assert (q.work / "vllm/util.py").read_text() == UTIL
    q2 = _queue(tmp_path / "two", PURE.replace("vllm/util.py", "vllm/gone.py"))
    doc = json.loads(q2.run("push", "--json", check=False).stdout)
    failed = doc["result"]["failed"]["files"][0]
    assert (failed["file"], failed["status"]) == ("vllm/gone.py", "file-missing")


def _two_pins(tmp_path: Path, new_files: dict[str, str], *bodies: str) -> Queue:
    q = _queue(tmp_path, *bodies)
    archive = make_sdist(tmp_path / "upstream", "0.2.0", new_files)
    with (q.root / "vendor-pin.txt").open("a") as handle:
        handle.write(f"next {archive.as_uri()}#sha256={sha256(archive)}\n")
    return q


def _statuses(q: Queue) -> list[tuple[str, str, list[tuple[str, int, str]]]]:
    doc = json.loads(q.run("check", "--pin", "next", "--json", check=False).stdout)
    return [(p["name"], p["status"], [(h["file"], h["hunk"], h["status"]) for h in p["hunks"]]) for p in doc["pins"][0]["patches"]]


def test_check_lands_a_rename_where_its_source_moved_on_and_reports_what_stops_it(tmp_path: Path) -> None:
    upstream = UTIL.replace("return x + 30\n", "return x + 3000\n")  # the source changed elsewhere on the new pin
    q = _two_pins(tmp_path / "lands", {**BASE_FILES, "vllm/util.py": upstream}, EDITED, COPY)
    assert _statuses(q) == [("R1-move.patch", "clean", [("vllm/util.py", 1, "clean")]), ("R2-move.patch", "clean", [])]
    q.run("rebase", "--pin", "next")
    assert (q.work / "vllm/utils.py").read_text() == upstream.replace("return x + 0\n", "return x + 100\n", 1)
    assert not (q.work / "vllm/util.py").exists()

    gone = {k: v for k, v in BASE_FILES.items() if k != "vllm/util.py"}
    q = _two_pins(tmp_path / "gone", gone, EDITED)
    assert _statuses(q) == [("R1-move.patch", "file-missing", [("vllm/util.py", 0, "file-missing")])]
    taken = {**BASE_FILES, "vllm/utils.py": "upstream's own utils\n"}
    q = _two_pins(tmp_path / "taken", taken, PURE)
    assert _statuses(q) == [("R1-move.patch", "conflict", [("vllm/util.py", 0, "conflict")])]


def test_import_of_a_format_patch_rename_pushes(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    repo = tmp_path / "git"
    git = base_git_repo(repo)
    git("mv", "vllm/util.py", "vllm/utils.py")
    (repo / "vllm/utils.py").write_text(UTIL.replace("return x + 0\n", "return x + 100\n", 1))
    git("commit", "-qam", "Move util")
    mbox = tmp_path / "moved.mbox"
    mbox.write_text(git("format-patch", "--stdout", "-M", "HEAD~1"))
    assert "rename from vllm/util.py" in mbox.read_text()
    q.run("import", str(mbox))
    q.run("checkout")
    q.run("push", "--all")
    assert (q.work / "vllm/utils.py").read_text() == (repo / "vllm/utils.py").read_text()
    assert not (q.work / "vllm/util.py").exists()
