"""push / pop / refresh / new on the synthetic upstream."""

from __future__ import annotations

import json
from pathlib import Path

from synth import BASE_FILES, Queue, make_queue, unified


def _edit(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)


def _two_patch_queue(tmp_path: Path) -> Queue:
    """A checked-out queue of A1-a and A2-b, two edits of vllm/util.py; nothing pushed."""
    q = make_queue(tmp_path)
    util = BASE_FILES["vllm/util.py"]
    q.write_patch("A1-a.patch", unified("vllm/util.py", util, _edit(util, "return x + 7\n", "return x + 70\n")))
    q.write_patch("A2-b.patch", unified("vllm/util.py", util, _edit(util, "return x + 30\n", "return x + 300\n")))
    q.set_series("A1-a.patch", "A2-b.patch")
    q.run("checkout")
    return q


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
    (q.work / "vllm/begun.py").write_text("BEGUN = 1\n")  # a new file: saved and removed too
    q.run("pop", "--force")
    saved = list((q.root / ".gqueue/saved").glob("*.diff"))
    assert len(saved) == 1 and b"+edited" in saved[0].read_bytes() and b"+BEGUN = 1" in saved[0].read_bytes()
    assert not (q.work / "vllm/begun.py").exists()
    q.run("push")  # nothing left in work/ for it to refuse


def test_wrong_sha256_refused_and_nothing_created(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    pin = q.root / "vendor-pin.txt"
    text = pin.read_text()
    pin.write_text(text[:-5] + ("0000\n" if not text.endswith("0000\n") else "1111\n"))
    proc = q.run("checkout", check=False)
    assert proc.returncode == 1
    assert "vendor-pin.txt:1" in proc.stderr and "sha256 mismatch" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 2


def test_push_refresh_rewrites_patches_whose_hunks_moved(tmp_path: Path) -> None:
    """A patch below grows the file, so the one above lands 3 lines lower: plain push reports
    the offset and leaves the files alone; push --refresh rewrites only that patch (header
    kept, hunk at its new place), after which it applies cleanly and refresh sees no hand edit."""
    q = make_queue(tmp_path)
    util = BASE_FILES["vllm/util.py"]
    grown = "import os\nimport sys\n\n" + util
    q.write_patch("A1-grow.patch", unified("vllm/util.py", util, grown))
    q.write_patch("A2-edit.patch", unified("vllm/util.py", util, _edit(util, "return x + 7\n", "return x + 77\n")),
                  extra="notes: keep me\n")
    q.set_series("A1-grow.patch", "A2-edit.patch")
    before = {n: (q.root / "queue" / n).read_bytes() for n in ("A1-grow.patch", "A2-edit.patch")}
    q.run("checkout")
    plain = json.loads(q.run("push", "--all", "--json").stdout)["result"]
    assert plain["refreshed"] == [] and plain["pushed"][1]["status"] == "offset"
    assert {n: (q.root / "queue" / n).read_bytes() for n in before} == before
    q.run("pop", "--all")

    out = q.run("push", "--all", "--refresh", "--json")
    doc = json.loads(out.stdout)["result"]
    assert doc["refreshed"] == ["A2-edit.patch"]
    assert (q.root / "queue/A1-grow.patch").read_bytes() == before["A1-grow.patch"]
    text = (q.root / "queue/A2-edit.patch").read_text()
    assert text.startswith("---\nid: A2\ntitle: A2-edit.patch\nnotes: keep me\n...\n")
    old_hunk = before["A2-edit.patch"].decode().split("@@")[1]
    new_hunk = text.split("@@")[1]
    assert old_hunk != new_hunk and new_hunk.strip().startswith("-") and "+77" not in new_hunk
    assert (q.work / "vllm/util.py").read_text() == _edit(grown, "return x + 7\n", "return x + 77\n")
    assert q.run("refresh").stdout.strip().endswith("unchanged")  # commit and file agree
    q.run("goto", "A1-grow.patch")
    (q.work / "vllm/util.py").write_text("import re\n" + (q.work / "vllm/util.py").read_text())
    said = q.run("refresh").stdout
    assert "refreshed A1-grow.patch" in said and "push --all --refresh" in said
    q.run("push", "--all", "--refresh")  # A2 lands one line lower again and is rewritten
    assert q.run("check", "--json", check=False).returncode == 0
    text = (q.root / "queue/A2-edit.patch").read_text()
    q.run("pop", "--all")
    again = json.loads(q.run("push", "--all", "--refresh", "--json").stdout)["result"]
    assert [p["status"] for p in again["pushed"]] == ["clean", "clean"] and again["refreshed"] == []
    assert (q.root / "queue/A2-edit.patch").read_text() == text
    q.run("pop", "--all")
    refused = q.run("push", "--all", "--refresh", "--force", check=False)
    assert refused.returncode == 2 and "--refresh and --force" in refused.stderr
    assert q.run("applied").stdout.split() == []


def test_refresh_refuses_a_binary_file_and_keeps_it_in_work(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    q.run("checkout")
    q.run("new", "B1-bin.patch")
    before = (q.root / "queue/B1-bin.patch").read_bytes()
    (q.work / "vllm/blob.bin").write_bytes(b"a\0b\xff")
    proc = q.run("refresh", check=False)
    assert proc.returncode == 1
    assert "work/vllm/blob.bin" in proc.stderr and "binary" in proc.stderr
    assert proc.stderr.startswith("error[unsafe-patch]:") and "Traceback" not in proc.stderr
    assert (q.root / "queue/B1-bin.patch").read_bytes() == before
    assert (q.work / "vllm/blob.bin").read_bytes() == b"a\0b\xff"
    (q.work / "vllm/blob.bin").unlink()
    (q.work / "README.md").write_text("edited\n")
    q.run("refresh")
    q.run("pop")
    q.run("push")
    assert (q.work / "README.md").read_text() == "edited\n"


def test_refresh_refuses_a_symbolic_link(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    q.run("checkout")
    q.run("new", "L1-link.patch")
    (q.work / "vllm/alias.py").symlink_to("util.py")
    proc = q.run("refresh", check=False)
    assert proc.returncode == 1 and "work/vllm/alias.py" in proc.stderr and "120000" in proc.stderr
    assert (q.work / "vllm/alias.py").is_symlink()


def test_pop_force_saves_binary_changes_restorably(tmp_path: Path) -> None:
    import subprocess

    q = make_queue(tmp_path)
    q.run("checkout")
    q.run("new", "X1-a.patch")
    (q.work / "vllm/blob.bin").write_bytes(b"a\0b\xff")
    subprocess.run(["git", "-C", str(q.work), "add", "vllm/blob.bin"], check=True)
    q.run("pop", "--force")
    assert not (q.work / "vllm/blob.bin").exists()
    saved = list((q.root / ".gqueue/saved").glob("*.diff"))
    assert len(saved) == 1 and b"GIT binary patch" in saved[0].read_bytes()
    subprocess.run(["git", "-C", str(q.work), "apply", str(saved[0])], check=True)
    assert (q.work / "vllm/blob.bin").read_bytes() == b"a\0b\xff"


def test_rename_of_an_applied_patch_refuses_when_a_patch_above_no_longer_applies(tmp_path: Path) -> None:
    q = _two_patch_queue(tmp_path)
    q.run("push", "--all")
    above = q.root / "queue/A2-b.patch"
    above.write_text(above.read_text().replace("-    return x + 30\n", "-    return x + 31\n"))
    series = (q.root / "series").read_bytes()
    proc = q.run("rename", "A1-a.patch", "A1-renamed.patch", check=False)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "error[conflict]: queue/A2-b.patch:" in proc.stderr and "nothing was changed" in proc.stderr
    assert q.run("applied").stdout.split() == ["A1-a.patch", "A2-b.patch"]
    assert (q.root / "series").read_bytes() == series and (q.root / "queue/A1-a.patch").exists()


def test_push_refusing_local_changes_does_not_offer_its_own_force(tmp_path: Path) -> None:
    q = _two_patch_queue(tmp_path)
    q.run("push")
    (q.work / "README.md").write_text("edited\n")
    proc = q.run("push", check=False)
    assert proc.returncode == 1 and "refusing to push" in proc.stderr
    assert "add --force" not in proc.stderr and "'gqueue pop --force'" in proc.stderr
    assert q.run("push", "--force", check=False).returncode == 1  # push --force does not take them either
    proc = q.run("pop", check=False)
    assert proc.returncode == 1 and "add --force" in proc.stderr


def test_new_refuses_on_top_of_a_forced_push_and_its_rejects_stay(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    parser = BASE_FILES["vllm/parser.py"]
    patch = unified("vllm/parser.py", parser, _edit(parser, "import json", "import json  # b"))
    q.write_patch("A1-b.patch", patch.replace("-import json\n", "-import jsonX\n"))
    q.set_series("A1-b.patch")
    q.run("checkout")
    assert q.run("push", "--force", check=False).returncode == 3
    assert (q.work / "vllm/parser.py.rej").exists()
    proc = q.run("new", "N1-new.patch", check=False)
    assert proc.returncode == 1 and "'A1-b.patch' was pushed with --force" in proc.stderr
    assert q.run("series").stdout.split() == ["A1-b.patch"] and not (q.root / "queue/N1-new.patch").exists()
    assert (q.work / "vllm/parser.py.rej").exists()


def test_pop_of_a_forced_push_takes_its_rejects_along(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    parser = BASE_FILES["vllm/parser.py"]
    util = BASE_FILES["vllm/util.py"]
    q.write_patch("A1-a.patch", unified("vllm/util.py", util, _edit(util, "return x + 7\n", "return x + 70\n")))
    patch = unified("vllm/parser.py", parser, _edit(parser, "import json", "import json  # b"))
    q.write_patch("A2-b.patch", patch.replace("-import json\n", "-import jsonX\n"))
    q.set_series("A1-a.patch", "A2-b.patch")
    q.run("checkout")
    q.run("push")
    assert q.run("push", "--force", check=False).returncode == 3
    assert (q.work / "vllm/parser.py.rej").exists()
    q.run("pop")
    assert not (q.work / "vllm/parser.py.rej").exists()
    (q.work / "README.md").write_text("edited\n")
    q.run("refresh")
    assert q.run("files").stdout.split() == ["README.md", "vllm/util.py"]


def test_push_and_pop_refuse_a_count_below_one(tmp_path: Path) -> None:
    q = _two_patch_queue(tmp_path)
    for args in (("push", "-n", "-1"), ("push", "-n", "0")):
        proc = q.run(*args, check=False)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert q.run("applied").stdout.split() == []
    q.run("push", "--all")
    for args in (("pop", "-n", "-1"), ("pop", "-n", "0")):
        proc = q.run(*args, check=False)
        assert proc.returncode == 2 and "internal error" not in proc.stderr, proc.stderr
    assert q.run("applied").stdout.split() == ["A1-a.patch", "A2-b.patch"]


def test_refresh_counts_a_mode_change_and_a_deletion(tmp_path: Path) -> None:
    import os

    q = make_queue(tmp_path)
    q.run("checkout")
    q.run("new", "M1-mode.patch")
    os.chmod(q.work / "README.md", 0o755)
    (q.work / "vllm/config.py").unlink()
    doc = json.loads(q.run("refresh", "--json").stdout)
    assert doc["result"]["files"] == ["README.md", "vllm/config.py"]


def test_refresh_refuses_a_file_name_git_quotes(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    q.run("checkout")
    q.run("new", "Q1-quote.patch")
    before = (q.root / "queue/Q1-quote.patch").read_bytes()
    (q.work / 'q"t.py').write_text("x\n")
    proc = q.run("refresh", check=False)
    assert proc.returncode == 1 and proc.stderr.startswith("error[unsafe-patch]: work: quoted file names")
    assert 'q\\"t.py' in proc.stderr
    assert (q.root / "queue/Q1-quote.patch").read_bytes() == before and (q.work / 'q"t.py').exists()


def test_new_refuses_an_id_the_series_already_has(tmp_path: Path) -> None:
    q = _two_patch_queue(tmp_path)
    q.run("push")
    for args in (("new", "A1-followup.patch"), ("new", "Z9-x.patch", "--id", "A2")):
        proc = q.run(*args, check=False)
        assert proc.returncode == 2 and "is already the id of" in proc.stderr, proc.stderr
    assert q.run("series").stdout.split() == ["A1-a.patch", "A2-b.patch"]
    q.run("new", "A1b-followup.patch")
    q.run("pop")
    q.run("push", "--all")


def test_refresh_of_a_p0_patch_keeps_it_pushable(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    util = BASE_FILES["vllm/util.py"]
    p0 = unified("vllm/util.py", util, _edit(util, "return x + 7\n", "return x + 70\n"))
    q.write_patch("D1-p0.patch", p0.replace("a/vllm/", "vllm/").replace("b/vllm/", "vllm/"))
    q.set_series("D1-p0.patch -p0")
    q.run("checkout")
    q.run("push")
    (q.work / "README.md").write_text("edited\n")
    (q.work / "vllm/config.py").chmod(0o755)  # a change with no ---/+++ lines: 'diff --git x x' in -p0
    q.run("refresh")
    assert json.loads(q.run("files", "--json").stdout)["result"]["files"] == ["README.md", "vllm/config.py", "vllm/util.py"]
    body = (q.root / "queue/D1-p0.patch").read_text()
    assert "\n--- README.md\n+++ README.md\n" in body and "\n+++ vllm/util.py\n" in body
    q.run("refresh")
    assert (q.root / "queue/D1-p0.patch").read_text() == body  # unchanged: no hand-edit alarm either
    q.run("pop")
    q.run("push")
    assert (q.work / "README.md").read_text() == "edited\n"
    assert "return x + 70" in (q.work / "vllm/util.py").read_text()
    assert (q.work / "vllm/config.py").stat().st_mode & 0o111


def test_push_refresh_rewrites_a_p0_patch_in_p0(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    util = BASE_FILES["vllm/util.py"]
    q.write_patch("A1-grow.patch", unified("vllm/util.py", util, _edit(util, "def f0(x):\n", "# one\n# two\ndef f0(x):\n")))
    p0 = unified("vllm/util.py", util, _edit(util, "return x + 30\n", "return x + 300\n"))
    q.write_patch("D1-p0.patch", p0.replace("a/vllm/", "vllm/").replace("b/vllm/", "vllm/"))
    q.set_series("A1-grow.patch", "D1-p0.patch -p0")
    q.run("checkout")
    doc = json.loads(q.run("push", "--all", "--refresh", "--json").stdout)
    assert doc["result"]["refreshed"] == ["D1-p0.patch"]
    assert "\n+++ vllm/util.py\n" in (q.root / "queue/D1-p0.patch").read_text()
    q.run("pop", "--all")
    q.run("push", "--all")
    assert q.run("applied").stdout.split() == ["A1-grow.patch", "D1-p0.patch"]


def test_delete_of_the_top_with_local_changes_names_delete(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    q.run("checkout")
    q.run("new", "X1-a.patch")
    (q.work / "README.md").write_text("edited\n")
    proc = q.run("delete", "X1-a.patch", check=False)
    assert proc.returncode == 1 and "refusing to delete the applied top patch" in proc.stderr
    assert "add --force" not in proc.stderr  # delete has no --force
    assert q.run("series").stdout.split() == ["X1-a.patch"] and (q.work / "README.md").read_text() == "edited\n"


def test_a_patch_name_that_leads_out_of_the_queue_is_a_usage_error(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    q.run("checkout")
    for args in (("header", "../vendor-pin.txt"), ("diff", "../series"), ("files", "/etc/passwd")):
        proc = q.run(*args, check=False)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith("error[usage]: '") and "leads out of queue/" in proc.stderr


def test_header_edit_refuses_a_closing_line_inside_and_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    q.run("checkout")
    q.write_patch("P1-a.patch", "")
    q.set_series("P1-a.patch")
    before = (q.root / "queue/P1-a.patch").read_bytes()
    editor = tmp_path / "editor.py"
    for content, line, message in ((b"id: P1\ntitle: t\n...\nnotes: n\n", 4, "a line '...'"),
                                   (b"id: P1\ntitle: \xff\n", 2, "not valid UTF-8")):
        editor.write_text(f"import sys\nopen(sys.argv[1], 'wb').write({content!r})\n")
        proc = q.run("header", "--edit", "P1-a.patch", check=False, env={"GQUEUE_EDITOR": f"python3 {editor}"})
        assert proc.returncode == 1 and message in proc.stderr and f":{line}: " in proc.stderr, proc.stderr
        assert (q.root / "queue/P1-a.patch").read_bytes() == before


def test_the_work_tree_holds_the_pins_bytes_whatever_its_gitattributes_say(tmp_path: Path) -> None:
    """A tree whose .gitattributes converts line endings (git's own source: '*.bat eol=crlf',
    with CRLF in the archive) reads as unchanged after a checkout, even when git re-reads every
    file, and its files are the archive's bytes."""
    import subprocess

    files = {**BASE_FILES, ".gitattributes": "*.bat eol=crlf\n*.txt text\n", "tools/run.bat": "echo a\r\necho b\r\n",
             "notes.txt": "one\r\ntwo\r\n"}
    q = make_queue(tmp_path, files)
    q.write_patch("A1-a.patch", unified("vllm/util.py", BASE_FILES["vllm/util.py"],
                                        _edit(BASE_FILES["vllm/util.py"], "return x + 7\n", "return x + 70\n")))
    q.set_series("A1-a.patch")
    q.run("checkout")
    git = ["git", "-C", str(q.work)]
    subprocess.run([*git, "update-index", "-q", "--really-refresh"], capture_output=True)
    assert subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True).stdout == ""
    assert (q.work / "tools/run.bat").read_bytes() == b"echo a\r\necho b\r\n"
    assert (q.work / "notes.txt").read_bytes() == b"one\r\ntwo\r\n"
    q.run("push")
    q.run("pop")
    assert subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True).stdout == ""
