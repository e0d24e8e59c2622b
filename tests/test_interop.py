"""import of quilt / DEP-3 / git format-patch patches, export to quilt and to an mbox for git am."""

from __future__ import annotations

import json
import subprocess
from email.message import EmailMessage
from pathlib import Path
from typing import Callable

import yaml

from gqueue.model.series import parse_series
from synth import BASE_FILES, base_git_repo, make_queue, unified

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


def test_import_of_a_series_keeps_its_comments_blank_lines_and_guards(tmp_path: Path) -> None:
    """What a quilt series says besides its names comes along, in place: the lines above each
    entry, an entry's own comment and guards, the lines after the last (a Debian series groups
    its patches under comments); the queue's own lines stay where they were."""
    q = make_queue(tmp_path)
    util, config = BASE_FILES["vllm/util.py"], BASE_FILES["vllm/config.py"]
    quilt = tmp_path / "patches"
    quilt.mkdir()
    (quilt / "tweak-util.patch").write_text(unified("vllm/util.py", util, util.replace("return x + 7\n", "return x + 70\n")))
    (quilt / "p0-config.patch").write_text(unified("vllm/config.py", config, config.replace("OPTION_3 = 3\n", "OPTION_3 = 33\n"))
                                           .replace("a/vllm/", "vllm/").replace("b/vllm/", "vllm/"))
    (quilt / "series").write_text("# Packaging patches.\ntweak-util.patch # from upstream\n\n# CVE fixes.\n"
                                  "p0-config.patch  -p0 #+security \n# end of the fixes\n")  # spaces kept too
    q.run("import", "--series", str(quilt / "series"))
    assert (q.root / "series").read_text() == (
        "# test series\n# Packaging patches.\ntweak-util.patch # from upstream\n\n# CVE fixes.\n"
        "p0-config.patch  -p0 #+security \n# end of the fixes\n")
    assert q.run("series").stdout.split() == ["tweak-util.patch", "p0-config.patch"]
    q.run("checkout")
    q.run("push", "--all")  # the -p0 entry applies with its strip
    assert q.run("applied").stdout.split() == ["tweak-util.patch", "p0-config.patch"]
    assert parse_series((q.root / "series").read_text()).entries[1].guards == ("+security",)
    assert q.run("lint").returncode == 0
    # and back out: the exported series is the queue's, comments and guards in place
    (q.root / "series").write_text((q.root / "series").read_text() + "# parked: P9-later.patch\n")
    q.run("export", "--quilt", str(tmp_path / "out"))
    assert (tmp_path / "out" / "series").read_text() == "# test series\n" + (quilt / "series").read_text()


def test_import_of_a_series_keeps_entry_names_with_folders_and_other_endings(tmp_path: Path) -> None:
    """A quilt series names its files as it likes: debian/NAME.patch in a folder (systemd), a
    format-patch mail saved as CVE-....diff (python3.11); import keeps those names, and the
    variants' folder stays reserved."""
    q = make_queue(tmp_path)
    util, config = BASE_FILES["vllm/util.py"], BASE_FILES["vllm/config.py"]
    quilt = tmp_path / "patches"
    (quilt / "debian").mkdir(parents=True)
    (quilt / "debian" / "Use-debian-paths.patch").write_text(unified("vllm/util.py", util, util.replace("return x + 7\n", "return x + 70\n")))
    (quilt / "CVE-2024-0397.diff").write_text(
        "From 01c37f1d0714f5822d34063ca7180b595abf589d Mon Sep 17 00:00:00 2001\nFrom: A U Thor <a@example.org>\n"
        "Date: Tue, 20 Feb 2024 17:34:44 +0100\nSubject: [PATCH] Fix locking\n\nWhy.\n---\n"
        + unified("vllm/config.py", config, config.replace("OPTION_3 = 3\n", "OPTION_3 = 33\n")))
    (quilt / "series").write_text("debian/Use-debian-paths.patch\nCVE-2024-0397.diff\n")
    q.run("import", "--series", str(quilt / "series"))
    assert (q.root / "series").read_text() == "# test series\ndebian/Use-debian-paths.patch\nCVE-2024-0397.diff\n"
    assert _header(q.root / "queue/debian/Use-debian-paths.patch")["id"] == "Use"
    assert _header(q.root / "queue/CVE-2024-0397.diff")["title"] == "Fix locking"
    q.run("checkout")
    q.run("push", "--all")
    assert q.run("lint").returncode == 0
    q.run("export", "--quilt", str(tmp_path / "out"))
    assert (tmp_path / "out" / "debian" / "Use-debian-paths.patch").is_file()
    (quilt / "variants").mkdir()
    (quilt / "variants" / "x.patch").write_text(DIFF)
    (quilt / "series").write_text("variants/x.patch\n")
    proc = q.run("import", "--series", str(quilt / "series"), check=False)
    assert proc.returncode == 2 and "'variants/x.patch' is not a valid patch name" in proc.stderr


def test_an_mbox_named_in_a_series_gives_its_mails_under_their_own_names(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    _repo, git = _upstream_repo(tmp_path, SERIES_COMMITS[:2])
    quilt = tmp_path / "patches"
    quilt.mkdir()
    (quilt / "two.mbox").write_text(git("format-patch", "--stdout", "HEAD~2"))
    (quilt / "series").write_text("# mails\ntwo.mbox # both\n")
    q.run("import", "--series", str(quilt / "series"))
    assert q.run("series").stdout.split() == ["0001-Add-an-imported-change.patch", "0002-Fix-typo.patch"]
    assert "two.mbox" not in (q.root / "series").read_text() and "# mails\n" in (q.root / "series").read_text()
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


def test_import_refuses_an_id_given_that_the_series_already_has(tmp_path: Path) -> None:
    """An id given (--id, or a queue patch's own header) that another patch has is refused; one
    that only the file name gave gets the next free id (see below)."""
    q = make_queue(tmp_path)
    q.write_patch("P15-none.patch", DIFF)
    q.set_series("P15-none.patch")
    src = tmp_path / "again.patch"
    src.write_text(DIFF)
    queued = tmp_path / "P15-queued.patch"
    queued.write_text("---\nid: P15\ntitle: again\n...\n" + DIFF)
    series = (q.root / "series").read_bytes()
    proc = q.run("import", "--id", "P15", str(src), check=False)
    assert proc.returncode == 2 and "the id 'P15' of P15-again.patch is already the id of P15-none.patch" in proc.stderr
    proc = q.run("import", str(queued), check=False)
    assert proc.returncode == 2 and "the id 'P15' of P15-queued.patch is already the id of P15-none.patch" in proc.stderr
    assert (q.root / "series").read_bytes() == series and sorted(p.name for p in (q.root / "queue").iterdir()) == ["P15-none.patch"]


# --- real-shaped series: git format-patch, mboxes, ids ------------------------------------------

UTIL = BASE_FILES["vllm/util.py"]


def _upstream_repo(tmp_path: Path, commits: list[tuple[str, str, str]]) -> tuple[Path, Callable[..., str]]:
    """A git repository of the synthetic upstream with one commit per (message, old, new) edit of
    vllm/util.py, its author a name git writes as an RFC 2047 word."""
    repo = tmp_path / "upstream-git"
    git = base_git_repo(repo, user="Jörg Doe", email="jorg@example.org")
    for message, old, new in commits:
        path = repo / "vllm/util.py"
        path.write_text(path.read_text().replace(old, new))
        git("commit", "-qam", message)
    return repo, git


SERIES_COMMITS = [
    ("Add an imported change\n\nFrom the reporter: f3 was off.\n>From a quoted mail.", "return x + 3\n", "return x + 33\n"),
    ("Fix typo", "return x + 5\n", "return x + 55\n"),
    ("Fix typo", "return x + 9\n", "return x + 99\n"),
]


def test_import_of_a_format_patch_series_lints_and_checks_clean(tmp_path: Path) -> None:
    """Names of format-patch files (two of one subject) keep their order; each id is what its file
    name starts with, so lint and check pass; the author's RFC 2047 name is decoded."""
    q = make_queue(tmp_path)
    _repo, git = _upstream_repo(tmp_path, SERIES_COMMITS)
    out = tmp_path / "fp"
    names = [Path(p).name for p in git("format-patch", "-o", str(out), "HEAD~3").split()]
    assert names == ["0001-Add-an-imported-change.patch", "0002-Fix-typo.patch", "0003-Fix-typo.patch"]
    q.run("import", *(str(out / n) for n in names))
    assert q.run("series").stdout.split() == names
    meta = _header(q.root / "queue/0001-Add-an-imported-change.patch")
    assert meta["id"] == "0001" and meta["title"] == "Add an imported change"
    assert meta["author"] == "Jörg Doe <jorg@example.org>"
    assert [_header(q.root / "queue" / n)["id"] for n in names[1:]] == ["0002", "0003"]
    assert q.run("lint").returncode == 0
    assert q.run("check").returncode == 0
    q.run("checkout")
    q.run("push", "--all")
    assert "return x + 99\n" in (q.work / "vllm/util.py").read_text()


def test_import_of_an_mbox_makes_one_patch_per_mail_and_skips_the_cover_letter(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    _repo, git = _upstream_repo(tmp_path, SERIES_COMMITS)
    mbox = tmp_path / "series.mbox"
    mbox.write_text(git("format-patch", "--stdout", "--cover-letter", "HEAD~3"))
    proc = q.run("import", str(mbox))
    assert f"{mbox}:1: skipped the mail '*** SUBJECT HERE ***': no diff in it" in proc.stderr
    names = ["0001-Add-an-imported-change.patch", "0002-Fix-typo.patch", "0003-Fix-typo.patch"]
    assert q.run("series").stdout.split() == names
    # a message line 'From ...' that format-patch writes unescaped does not start a mail
    assert _header(q.root / "queue" / names[0])["description"] == "From the reporter: f3 was off.\n>From a quoted mail.\n"
    assert q.run("lint").returncode == 0
    q.run("checkout")
    q.run("push", "--all")
    assert "return x + 99\n" in (q.work / "vllm/util.py").read_text()


def test_import_of_an_mboxrd_unescapes_from_lines(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    _repo, git = _upstream_repo(tmp_path, SERIES_COMMITS)
    mbox = tmp_path / "rd.mbox"
    mbox.write_text(git("format-patch", "--stdout", "--pretty=mboxrd", "HEAD~3..HEAD~1"))
    assert ">From the reporter" in mbox.read_text() and ">>From a quoted" in mbox.read_text()
    q.run("import", str(mbox))
    assert q.run("series").stdout.split() == ["0001-Add-an-imported-change.patch", "0002-Fix-typo.patch"]
    meta = _header(q.root / "queue/0001-Add-an-imported-change.patch")
    assert meta["description"] == "From the reporter: f3 was off.\n>From a quoted mail.\n"
    # an mbox of one mail is named from its subject too; its first word 0001 is an id already,
    # so its id is its whole name less .patch, and the name stays as the mail gives it
    one = tmp_path / "last.mbox"
    one.write_text(git("format-patch", "--stdout", "HEAD~1"))
    proc = q.run("import", str(one))
    assert (f"{one}:1: imported with the id 0001-Fix-typo (its first word, 0001, is the id of "
            "0001-Add-an-imported-change.patch)") in proc.stderr
    assert q.run("series").stdout.split()[-1] == "0001-Fix-typo.patch"
    assert _header(q.root / "queue/0001-Fix-typo.patch")["id"] == "0001-Fix-typo"
    assert q.run("lint").returncode == 0


def test_import_keeps_the_names_and_gives_the_whole_stem_as_id_where_the_first_word_is_shared(tmp_path: Path) -> None:
    """Debian names CVE-2023-27533.patch, CVE-2023-27534.patch ...: the first word begins every
    name, so each id is the whole name less .patch, and no file is renamed; a name whose whole
    stem is another patch's id is renamed with the first free ID_2, ID_3 ..."""
    q = make_queue(tmp_path)
    quilt = tmp_path / "patches"
    quilt.mkdir()
    config = BASE_FILES["vllm/config.py"]
    (quilt / "fix-build.patch").write_text(unified("vllm/util.py", UTIL, UTIL.replace("return x + 3\n", "return x + 33\n")))
    (quilt / "fix-tests.patch").write_text(DIFF)
    (quilt / "fix.patch").write_text(unified("vllm/config.py", config, config.replace("OPTION_3 = 3\n", "OPTION_3 = 33\n")))
    (quilt / "series").write_text("fix-build.patch\nfix-tests.patch\nfix.patch\n")
    proc = q.run("import", "--series", str(quilt / "series"))
    assert f"{quilt / 'fix-tests.patch'}: imported with the id fix-tests (its first word, fix, begins other patches' names too)" in proc.stderr
    assert q.run("series").stdout.split() == ["fix-build.patch", "fix-tests.patch", "fix.patch"]
    assert [_header(q.root / "queue" / n)["id"] for n in ("fix-build.patch", "fix-tests.patch", "fix.patch")] == \
        ["fix-build", "fix-tests", "fix"]
    assert q.run("lint").returncode == 0
    q.run("checkout")
    q.run("rename", "fix-build.patch", "fix-build-and-link.patch")  # still starts with "fix-build-": kept
    assert _header(q.root / "queue/fix-build-and-link.patch")["id"] == "fix-build"

    other = make_queue(tmp_path / "other")  # fix-up.patch has the id fix there: fix.patch is renamed
    other.run("import", str(quilt / "fix-build.patch"), "--name", "fix-up.patch", "--id", "fix")
    proc = other.run("import", str(quilt / "fix.patch"))
    assert f"{quilt / 'fix.patch'}: imported as fix_2.patch (id fix_2): its id fix is the id of fix-up.patch" in proc.stderr
    assert other.run("series").stdout.split() == ["fix-up.patch", "fix_2.patch"]
    assert other.run("lint").returncode == 0


def test_import_name_and_id_options(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    _repo, git = _upstream_repo(tmp_path, SERIES_COMMITS)
    out = tmp_path / "fp"
    one, two, three = (out / n for n in git("format-patch", "-o", str(out), "HEAD~3").split())
    proc = q.run("import", "--id", "PN600", str(one), "--json")
    assert json.loads(proc.stdout)["result"]["imported"][0]["name"] == "PN600-Add-an-imported-change.patch"
    assert _header(q.root / "queue/PN600-Add-an-imported-change.patch")["id"] == "PN600"
    q.run("import", "--name", "PN601-typo.patch", str(two))
    assert _header(q.root / "queue/PN601-typo.patch")["id"] == "PN601"
    series = (q.root / "series").read_bytes()
    for args, message in (
        (("--name", "X1-a.patch", "--id", "Y1", str(three)), "--name X1-a.patch does not start with the id 'Y1-'"),
        (("--id", "PN600", str(three)), "the id 'PN600' of PN600-Fix-typo.patch is already the id of PN600-Add-an-imported-change.patch"),
        (("--id", "Z1", str(two), str(three)), "--name and --id are for one patch; this import has 2"),
    ):
        proc = q.run("import", *args, check=False)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert (q.root / "series").read_bytes() == series
    assert sorted(p.name for p in (q.root / "queue").iterdir()) == ["PN600-Add-an-imported-change.patch", "PN601-typo.patch"]
    assert q.run("lint").returncode == 0


def test_rename_gives_the_patch_the_id_of_its_new_name(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    _repo, git = _upstream_repo(tmp_path, SERIES_COMMITS)
    out = tmp_path / "fp"
    files = git("format-patch", "-o", str(out), "HEAD~3").split()
    q.run("import", *files)
    q.run("checkout")
    q.run("push", "--all")
    q.run("rename", "0002-Fix-typo.patch", "PN700-fix-f5.patch")
    assert _header(q.root / "queue/PN700-fix-f5.patch")["id"] == "PN700"
    assert q.run("lint").returncode == 0
    assert "Gqueue-Patch: PN700-fix-f5.patch" in subprocess.run(
        ["git", "-C", str(q.work), "log", "--format=%B", "-2"], capture_output=True, text=True).stdout
    # refused, nothing changed: an id another patch has; an id another patch requires
    before = {p.name: p.read_bytes() for p in (q.root / "queue").iterdir()} | {"series": (q.root / "series").read_bytes()}
    proc = q.run("rename", "0003-Fix-typo.patch", "0001-again.patch", check=False)
    assert proc.returncode == 2 and "would have the id '0001', which is already the id of 0001-Add-an-imported-change.patch" in proc.stderr
    path = q.root / "queue/0003-Fix-typo.patch"
    path.write_text(path.read_text().replace("lifecycle: experimental\n", "lifecycle: experimental\nrequires: ['PN700']\n"))
    before["0003-Fix-typo.patch"] = path.read_bytes()
    proc = q.run("rename", "PN700-fix-f5.patch", "PN701-fix-f5.patch", check=False)
    assert proc.returncode == 2 and "requires of queue/0003-Fix-typo.patch names 'PN700'" in proc.stderr, proc.stderr
    after = {p.name: p.read_bytes() for p in (q.root / "queue").iterdir()} | {"series": (q.root / "series").read_bytes()}
    assert after == before


# --- hostile and odd input ----------------------------------------------------------------------


def test_import_reads_a_patch_attached_to_a_mime_mail(tmp_path: Path) -> None:
    message = EmailMessage()
    message["From"] = "Jörg Doe <jorg@example.org>"
    message["Subject"] = "[PATCH] parser: accept None"
    message.set_content("Why: None comes from old clients.\n")
    message.add_attachment(DIFF.encode(), maintype="text", subtype="x-patch", filename="fix.patch")
    mail = tmp_path / "P15-mime.patch"
    mail.write_bytes(b"From 1234567890abcdef1234567890abcdef12345678 Mon Sep 17 00:00:00 2001\n" + bytes(message))
    q = make_queue(tmp_path)
    q.run("import", str(mail))
    meta = _header(q.root / "queue/P15-mime.patch")
    assert meta["description"] == "Why: None comes from old clients.\n" and meta["title"] == "parser: accept None"
    assert meta["author"] == "Jörg Doe <jorg@example.org>"
    q.run("checkout")
    q.run("push")
    assert "('null', 'None')" in (q.work / "vllm/parser.py").read_text()


def test_import_refuses_what_is_not_a_patch_and_changes_nothing(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    notes = tmp_path / "README.patch"
    notes.write_text("Only prose here.\nNo diff at all.\n")
    blob = tmp_path / "image.patch"
    blob.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    cover = tmp_path / "0000-cover-letter.patch"
    cover.write_text("From 1234567890abcdef1234567890abcdef12345678 Mon Sep 17 00:00:00 2001\nFrom: A <a@example.org>\n"
                     "Subject: [PATCH 0/2] a series\n\nIt explains.\n")
    series = (q.root / "series").read_bytes()
    for path in (notes, blob, cover):
        proc = q.run("import", str(path), check=False)
        assert proc.returncode == 1 and proc.stderr.startswith(f"error[bad-format]: {path}: has no diff in it"), proc.stderr
    proc = q.run("import", str(tmp_path), check=False)  # a folder
    assert proc.returncode == 2
    assert (q.root / "series").read_bytes() == series and list((q.root / "queue").iterdir()) == []


def test_import_of_a_series_never_follows_a_link_out_of_its_folder(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("token = 'do not read me'\n\n" + DIFF)
    quilt = tmp_path / "patches"
    quilt.mkdir()
    (quilt / "inner.patch").write_text(DIFF)
    (quilt / "P15-link.patch").symlink_to(quilt / "inner.patch")  # inside the folder: fine
    (quilt / "P16-evil.patch").symlink_to(secret)
    (quilt / "series").write_text("P15-link.patch\nP16-evil.patch\n")
    series = (q.root / "series").read_bytes()
    proc = q.run("import", "--series", str(quilt / "series"), check=False)
    assert proc.returncode == 1 and proc.stderr.startswith(f"error[unsafe-patch]: {quilt / 'P16-evil.patch'}: is a link to"), proc.stderr
    assert (q.root / "series").read_bytes() == series and list((q.root / "queue").iterdir()) == []
    (quilt / "series").write_text("P15-link.patch\n")
    q.run("import", "--series", str(quilt / "series"))
    assert (q.root / "queue/P15-link.patch").read_bytes().endswith(DIFF.encode())


def test_import_decodes_latin1_text_and_never_writes_replacement_marks(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    dep3 = tmp_path / "P15-latin.patch"
    dep3.write_bytes("Description: accept None (Größe)\nAuthor: Jörg Müller <jm@example.org>\n---\n".encode("latin-1") + DIFF.encode())
    proc = q.run("import", str(dep3))
    assert f"{dep3}: the text before the diff is not UTF-8 text; read as Latin-1" in proc.stderr
    meta = _header(q.root / "queue/P15-latin.patch")
    assert meta["title"] == "accept None (Größe)" and meta["author"] == "Jörg Müller <jm@example.org>"
    mail = tmp_path / "P16-mail.patch"
    mail.write_bytes(b"From 1234567890abcdef1234567890abcdef12345678 Mon Sep 17 00:00:00 2001\n"
                     b"From: =?ISO-8859-1?Q?J=F6rg_M=FCller?= <jm@example.org>\nSubject: =?ISO-8859-1?Q?Gr=F6=DFe?=\n"
                     b"MIME-Version: 1.0\nContent-Type: text/plain; charset=ISO-8859-1\nContent-Transfer-Encoding: 8bit\n\n"
                     + "Die Größe stimmt.\n---\n".encode("latin-1") + DIFF.replace("== 'null'", "is None").encode())
    proc = q.run("import", str(mail))
    assert "Latin-1" not in proc.stderr  # the charset was declared
    meta = _header(q.root / "queue/P16-mail.patch")
    assert (meta["title"], meta["author"], meta["description"]) == ("Größe", "Jörg Müller <jm@example.org>", "Die Größe stimmt.\n")
    assert "\ufffd" not in (q.root / "queue/P15-latin.patch").read_text() + (q.root / "queue/P16-mail.patch").read_text()


def test_import_writes_only_well_formed_authors(tmp_path: Path) -> None:
    """author is one line 'Name <mail>'; what cannot be one stays, as written, under headers."""
    q = make_queue(tmp_path)
    dep3 = tmp_path / "P15-dep3.patch"
    dep3.write_text("Description: accept None\nAuthor: Jane Doe\n---\n" + DIFF)
    mail = tmp_path / "P16-mail.patch"
    mail.write_text("From 1234567890abcdef1234567890abcdef12345678 Mon Sep 17 00:00:00 2001\n"
                    "From: jane@example.org\nSubject: [PATCH] accept None\n\n---\n"
                    + DIFF.replace("== 'null'", "is None"))
    folded = tmp_path / "P17-folded.patch"
    folded.write_text("From: \"Roe, John\"\n <john@example.org>\nSubject: accept None\n\n"
                      + DIFF.replace("== 'null'", "in ('null',)"))
    q.run("import", str(dep3), str(mail), str(folded))
    dep3_meta = _header(q.root / "queue/P15-dep3.patch")
    assert "author" not in dep3_meta and dep3_meta["headers"]["Author"] == "Jane Doe"
    assert _header(q.root / "queue/P16-mail.patch")["author"] == "jane <jane@example.org>"
    assert _header(q.root / "queue/P17-folded.patch")["author"] == "Roe, John <john@example.org>"


def test_import_of_an_mbox_with_a_broken_mail_names_its_line_and_writes_nothing(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    _repo, git = _upstream_repo(tmp_path, SERIES_COMMITS[:2])
    lines = git("format-patch", "--stdout", "HEAD~2").splitlines(keepends=True)
    hunk = [i for i, line in enumerate(lines) if line.startswith("@@ ")][1]
    del lines[hunk + 3]  # the second mail's hunk ends early
    mbox = tmp_path / "broken.mbox"
    mbox.write_text("".join(lines))
    series = (q.root / "series").read_bytes()
    proc = q.run("import", str(mbox), check=False)
    # the signature's '-- ' reads as one more removed line; the counts fail at the version line below it
    end = lines.index("-- \n", hunk) + 2
    assert proc.returncode == 1 and proc.stderr.startswith(f"error[bad-format]: {mbox}:{end}: hunk line counts lie"), proc.stderr
    assert (q.root / "series").read_bytes() == series and list((q.root / "queue").iterdir()) == []
