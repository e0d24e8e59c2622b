"""import of quilt / DEP-3 / git format-patch patches, export to quilt and to an mbox for git am."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from synth import BASE_FILES, make_queue, unified

PARSER = BASE_FILES["vllm/parser.py"]
DIFF = unified("vllm/parser.py", PARSER, PARSER.replace("== 'null'", "in ('null', 'None')"))


def _header(path: Path) -> dict:
    text = path.read_text()
    assert text.startswith("---\n")
    return yaml.safe_load(text[4 : text.index("\n...\n")])


def test_import_dep3_keeps_every_field(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    src = tmp_path / "fix-none.patch"
    src.write_text(
        "Description: accept None as null\n the parser treats None like null\n .\n second paragraph\n"
        "Author: Jane Doe <jane@example.org>\nOrigin: upstream, https://example.org/pr/1\nBug: https://example.org/b/2\n"
        "Bug-Debian: https://bugs.debian.org/3\nForwarded: yes\nApplied-Upstream: 1.2\nLast-Update: 2026-01-02\n"
        "Reviewed-By: Rev <rev@example.org>\n---\n" + DIFF
    )
    q.run("import", str(src))
    meta = _header(q.root / "queue/fix-none.patch")
    assert meta["title"] == "accept None as null"
    assert "the parser treats None like null" in meta["description"] and "second paragraph" in meta["description"]
    assert meta["author"] == "Jane Doe <jane@example.org>"
    assert meta["origin"].startswith("upstream") and meta["bug"].endswith("/b/2")
    assert meta["forwarded"] == "yes" and meta["applied_upstream"] == "1.2" and meta["last_update"] == "2026-01-02"
    assert meta["headers"] == {"Bug-Debian": "https://bugs.debian.org/3", "Reviewed-By": "Rev <rev@example.org>"}
    assert q.run("series").stdout.split() == ["fix-none.patch"]
    q.run("checkout")
    q.run("push")
    assert "('null', 'None')" in (q.work / "vllm/parser.py").read_text()


def test_import_format_patch_mail_and_plain_quilt_series(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    mail = tmp_path / "0001-accept-None.patch"
    mail.write_text(
        "From 1234567890abcdef1234567890abcdef12345678 Mon Sep 17 00:00:00 2001\n"
        "From: John Roe <john@example.org>\nDate: Tue, 3 Mar 2026 10:00:00 +0100\n"
        "Subject: [PATCH 1/2] parser: accept None\n\nThe body explains why.\n\nSigned-off-by: John Roe <john@example.org>\n"
        "---\n vllm/parser.py | 2 +-\n 1 file changed\n\n" + DIFF + "-- \n2.39.5\n"
    )
    util = BASE_FILES["vllm/util.py"]
    plain = tmp_path / "quilt" / "tweak-util.patch"
    plain.parent.mkdir()
    plain.write_text("Make f7 add seventy.\n\n" + unified("vllm/util.py", util, util.replace("return x + 7\n", "return x + 70\n")))
    (plain.parent / "series").write_text("# a quilt series\ntweak-util.patch\n")
    q.run("import", str(mail))
    q.run("import", "--series", str(plain.parent / "series"))
    meta = _header(q.root / "queue/0001-accept-None.patch")
    assert meta["title"] == "parser: accept None"
    assert meta["author"] == "John Roe <john@example.org>"
    assert "The body explains why." in meta["description"] and "Signed-off-by" in meta["description"]
    assert meta["headers"]["Date"] == "Tue, 3 Mar 2026 10:00:00 +0100"
    assert _header(q.root / "queue/tweak-util.patch")["description"] == "Make f7 add seventy.\n"
    assert q.run("series").stdout.split() == ["0001-accept-None.patch", "tweak-util.patch"]
    q.run("checkout")
    q.run("push", "--all")


def test_export_mbox_is_accepted_by_git_am_and_quilt_dir_round_trips(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    q.write_patch("P15-none.patch", DIFF, extra="author: Jane Doe <jane@example.org>\n")
    q.set_series("P15-none.patch")
    q.run("checkout")
    mbox = tmp_path / "out.mbox"
    q.run("export", "--mbox", str(mbox))
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--branch", "gqueue", str(q.work), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@t", "am", "-q", str(mbox)], check=True)
    log = subprocess.run(["git", "-C", str(clone), "log", "-1", "--format=%an|%s|%B"], capture_output=True, text=True).stdout
    assert log.startswith("Jane Doe|P15-none.patch|") and "Gqueue-Patch: P15-none.patch" in log
    assert "('null', 'None')" in (clone / "vllm/parser.py").read_text()
    out = tmp_path / "quilt"
    q.run("export", "--quilt", str(out))
    assert (out / "series").read_text() == "P15-none.patch\n"
    assert (out / "P15-none.patch").read_bytes() == (q.root / "queue/P15-none.patch").read_bytes()


def test_export_mbox_writes_p0_and_p2_entries_for_git_am(tmp_path: Path) -> None:
    """git am applies -p1: entries the series applies with -p0 or -p2 are exported with a/ b/ names."""
    q = make_queue(tmp_path)
    util = BASE_FILES["vllm/util.py"]
    p0 = unified("vllm/util.py", util, util.replace("return x + 3\n", "return x + 33\n"))
    p0 = p0.replace("a/vllm/util.py", "vllm/util.py").replace("b/vllm/util.py", "vllm/util.py")
    p2 = unified("vllm/parser.py", PARSER, PARSER.replace("== 'null'", "in ('null', 'None')"))
    p2 = p2.replace("a/vllm/parser.py", "x/a/vllm/parser.py").replace("b/vllm/parser.py", "y/b/vllm/parser.py")
    new = ("diff --git x/a/vllm/new.py y/b/vllm/new.py\nnew file mode 100644\n--- /dev/null\n"
           "+++ y/b/vllm/new.py\n@@ -0,0 +1 @@\n+NEW = 1\n")
    q.write_patch("A1-p0.patch", p0)
    q.write_patch("A2-p2.patch", p2 + new)
    (q.root / "series").write_text("A1-p0.patch -p0\nA2-p2.patch -p2\n")
    q.run("checkout")
    q.run("push", "--all")  # the entries apply as the series says
    mbox = tmp_path / "out.mbox"
    q.run("export", "--mbox", str(mbox))
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--branch", "gqueue", str(q.work), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "reset", "-q", "--hard", "HEAD~2"], check=True)
    subprocess.run(["git", "-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@t", "am", "-q", str(mbox)],
                   check=True)
    for path in ("vllm/util.py", "vllm/parser.py", "vllm/new.py"):
        assert (clone / path).read_bytes() == (q.work / path).read_bytes(), path
    assert (q.root / "queue/A1-p0.patch").read_text().count("--- vllm/util.py") == 1  # the queue is unchanged


def test_import_refuses_a_diff_push_would_refuse_and_changes_nothing(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    series_before = (q.root / "series").read_bytes()
    outside = tmp_path / "escape.patch"
    outside.write_text("Write outside the tree.\n\n" + unified("../outside.py", "", "x = 1\n").replace(
        "--- a/../outside.py", "--- /dev/null"))
    proc = q.run("import", str(outside), check=False)
    assert proc.returncode != 0
    assert f"{outside}:3" in proc.stderr and "outside" in proc.stderr
    broken = tmp_path / "broken.patch"
    broken.write_text("A truncated hunk.\n\n" + DIFF.rsplit("\n", 3)[0] + "\n@@ -1,9 +1,9 @@\n garbage\n")
    proc = q.run("import", str(broken), check=False)
    assert proc.returncode == 1 and str(broken) in proc.stderr
    assert (q.root / "series").read_bytes() == series_before
    assert sorted(p.name for p in (q.root / "queue").iterdir()) == []


def test_import_of_two_files_with_one_name_is_a_usage_error(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "fix.patch").write_text(DIFF)
    series = (q.root / "series").read_bytes()
    proc = q.run("import", str(tmp_path / "a/fix.patch"), str(tmp_path / "b/fix.patch"), check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error[usage]: 'fix.patch' would be imported twice") and str(tmp_path / "b/fix.patch") in proc.stderr
    assert (q.root / "series").read_bytes() == series and not (q.root / "queue/fix.patch").exists()


def test_import_refuses_an_id_the_series_already_has(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    q.write_patch("P15-none.patch", DIFF)
    q.set_series("P15-none.patch")
    src = tmp_path / "P15-again.patch"
    src.write_text(DIFF)
    series = (q.root / "series").read_bytes()
    proc = q.run("import", str(src), check=False)
    assert proc.returncode == 2 and "the id 'P15' of P15-again.patch is already the id of P15-none.patch" in proc.stderr
    assert (q.root / "series").read_bytes() == series and not (q.root / "queue/P15-again.patch").exists()
