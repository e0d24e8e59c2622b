"""Hostile and broken input: every case of tests/data/hostile/ gets one clear error and changes nothing.

For each case the test snapshots the whole sandbox (the queue root with series, queue/, the pin
and the work tree's files and refs, the upstream archive, a sentinel folder beside the queue and
the download cache) before and after the command, and checks they are identical: nothing was
written outside the queue root and the work tree, and series, queue/ and work/ are as they were.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from synth import BASE_FILES, Queue, make_queue, make_sdist, sha256

CORPUS = Path(__file__).resolve().parents[1] / "data" / "hostile"
OUTSIDE_PROBES = (Path("/tmp/gqueue-evil.py"), Path("/tmp/gqueue-owned"))

# patch file -> (exit code, error reference, a fragment of the message); pushed alone on the synthetic upstream
PATCH_CASES: dict[str, tuple[int, str, str]] = {
    "dotdot.patch": (1, "unsafe-patch", "outside the tree"),
    "dotdot-middle.patch": (1, "unsafe-patch", "outside the tree"),
    "absolute.patch": (1, "unsafe-patch", "absolute"),
    "git-dir.patch": (1, "unsafe-patch", "inside .git"),
    "backslash.patch": (1, "unsafe-patch", "odd path"),
    "symlink-new.patch": (1, "unsafe-patch", "mode 120000"),
    "mode-symlink.patch": (1, "unsafe-patch", "mode 120000"),
    "gitlink.patch": (1, "unsafe-patch", "mode 160000"),
    "binary-literal.patch": (1, "unsafe-patch", "binary patch"),
    "binary-differ.patch": (1, "unsafe-patch", "binary patch"),
    "crlf-everywhere.patch": (1, "bad-format", "CRLF"),
    "crlf-body.patch": (3, "conflict", "vllm/parser.py: hunk #1 of 1"),
    "latin1-header.patch": (1, "bad-format", "header is not valid UTF-8"),
    "latin1-path.patch": (1, "bad-format", "file name in patch is not UTF-8"),
    "latin1-body.patch": (3, "conflict", "vllm/parser.py: hunk #1 of 1"),
    "truncated-hunk.patch": (1, "bad-format", "hunk ends early"),
    "lying-counts-short.patch": (1, "bad-format", "hunk line counts lie"),
    "lying-counts-long.patch": (1, "bad-format", "hunk line counts lie"),
    "malformed-hunk-header.patch": (1, "bad-format", "malformed hunk header"),
    "minus-without-plus.patch": (1, "bad-format", "not followed by '+++'"),
    "no-hunks.patch": (1, "bad-format", "without hunks"),
    "quoted-name.patch": (1, "bad-format", "quoted file names"),
    "rename.patch": (1, "unsafe-patch", "outside the tree"),
    "missing-target.patch": (3, "conflict", "vllm/nope.py [file-missing]"),
    "existing-target.patch": (3, "conflict", "README.md [file-exists]"),
    "empty.patch": (1, "bad-format", "no gqueue header"),
    "no-header.patch": (1, "bad-format", "no gqueue header"),
    "unclosed-header.patch": (1, "bad-format", "never closed"),
    "prose-only.patch": (1, "bad-format", "no diff"),
    "yaml-alias-bomb.patch": (1, "bad-format", "anchors and aliases"),
    "yaml-huge-scalar.patch": (1, "bad-format", "scalar longer than"),
    "yaml-huge-header.patch": (1, "bad-format", "header larger than"),
    "yaml-deep-nesting.patch": (1, "bad-format", "nest"),
    "yaml-python-tag.patch": (1, "bad-format", "invalid YAML header"),
    "yaml-not-mapping.patch": (1, "bad-format", "must be a YAML mapping"),
    "yaml-wrong-type.patch": (1, "bad-format", "'requires' must be list"),
    "yaml-no-id.patch": (1, "bad-format", "lacks required key 'id'"),
}

# series file -> (exit code, ref, fragment); the series' patches come from the corpus
SERIES_CASES: dict[str, tuple[int, str, str]] = {
    "named-twice.series": (1, "bad-format", "named twice"),
    "missing-file.series": (1, "bad-format", "queue/not-there.patch does not exist"),
    "dotdot-name.series": (1, "bad-format", "invalid patch name"),
    "absolute-p0.series": (1, "unsafe-patch", "absolute"),
    "reversed.series": (1, "bad-format", "-R"),
    "dup-ids.series": (1, "bad-format", "patch id 'H35' is used by both"),
    "not-utf8.series": (1, "bad-format", "not valid UTF-8"),
}

# archive -> (ref, fragment); 'gqueue checkout' of a pin that names it (with its true sha256)
ARCHIVE_CASES: dict[str, tuple[str, str]] = {
    "tar-dotdot.tar.gz": ("integrity", "escapes the extraction folder"),
    "tar-absolute.tar.gz": ("integrity", "absolute path"),
    "tar-symlink-out.tar.gz": ("integrity", "points out of the tree"),
    "tar-symlink-absolute.tar.gz": ("integrity", "points to an absolute path"),
    "tar-link-then-write.tar.gz": ("integrity", "points out of the tree"),
    "tar-hardlink.tar.gz": ("integrity", "is a hard link to '/etc/passwd', which is no file of the archive before it"),
    "tar-device.tar.gz": ("integrity", "is a device or pipe"),
    "tar-bomb.tar.gz": ("integrity", "decompression bomb"),
    "tar-truncated.tar.gz": ("integrity", "cannot read archive"),
    "not-an-archive.tar.gz": ("integrity", "cannot read archive"),
    "zip-dotdot.zip": ("integrity", "escapes the extraction folder"),
    "zip-absolute.zip": ("integrity", "absolute path"),
    "zip-symlink-out.zip": ("integrity", "points out of the tree"),
    "zip-bomb.zip": ("integrity", "bomb"),
    "zip-size-lie.zip": ("integrity", "cannot read archive"),
}

# patches pushed on symlink-inside.tar.gz (vllm/alias -> ops is allowed; writing through it is not)
LINK_CASES: dict[str, str] = {
    "through-link-new.patch": "through the symbolic link 'vllm/alias'",
    "through-link-edit.patch": "through the symbolic link 'vllm/alias'",
    "edit-link-itself.patch": "through the symbolic link 'vllm/alias'",
}


# --- sandbox ----------------------------------------------------------------------------------------


def _digest_tree(root: Path, skip: set[Path]) -> dict[str, str]:
    out: dict[str, str] = {}
    if not root.exists():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if here / d not in skip]
        for name in [*filenames, *[d for d in dirnames if (here / d).is_symlink()]]:
            full = here / name
            rel = str(full.relative_to(root))
            if full.is_symlink():
                out[rel] = "link:" + os.readlink(full)
            else:
                out[rel] = hashlib.sha256(full.read_bytes()).hexdigest()
        for d in dirnames:
            out.setdefault(str((here / d).relative_to(root)) + "/", "dir")
    return out


def _refs(work: Path) -> str:
    if not (work / ".git").is_dir():
        return ""
    proc = subprocess.run(["git", "show-ref", "--head"], cwd=work, capture_output=True, text=True)
    return proc.stdout


class Sandbox:
    """tmp/ holds the queue q/, the upstream archive and a sentinel folder outside/ beside q/."""

    def __init__(self, tmp: Path, queue: Queue) -> None:
        self.tmp = tmp
        self.q = queue
        sentinel = tmp / "outside"
        sentinel.mkdir(exist_ok=True)
        (sentinel / "keep.txt").write_text("must not change\n")
        Path(os.environ["GQUEUE_CACHE"]).mkdir(parents=True, exist_ok=True)

    def state(self) -> tuple[dict[str, str], str, dict[str, str], list[bool]]:
        skip = {self.q.root / ".gqueue", self.q.work / ".git"}
        cache = Path(os.environ["GQUEUE_CACHE"])
        tree = _digest_tree(self.tmp, skip)
        tree.pop(str(self.q.work.relative_to(self.tmp)) + "/", None)  # a failed first checkout may leave work/.git
        return tree, _refs(self.q.work), _digest_tree(cache, set()), [p.exists() for p in OUTSIDE_PROBES]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gqueue", "-C", str(self.q.root), *args],
                              capture_output=True, text=True, timeout=120)


_TEMPLATES: dict[str, Path] = {}


def _checked_out(factory: pytest.TempPathFactory, tmp: Path, archive: str | None = None) -> Sandbox:
    """A checked-out queue on the synthetic upstream (or on a corpus archive), copied from a template."""
    key = archive or "base"
    if key not in _TEMPLATES:
        base = factory.mktemp(f"hostile-template-{key}")
        q = make_queue(base)
        if archive is not None:
            _use_archive(q, base, archive)
        q.run("checkout")
        _TEMPLATES[key] = base
    shutil.copytree(_TEMPLATES[key], tmp, dirs_exist_ok=True, symlinks=True)
    return Sandbox(tmp, Queue(tmp / "q"))


def _use_archive(q: Queue, tmp: Path, archive: str, *, digest: str | None = None) -> None:
    source = CORPUS / "archives" / archive
    suffix = ".zip" if archive.endswith(".zip") else ".tar.gz"
    target = tmp / "upstream" / f"vllm-0.1.0{suffix}"
    target.parent.mkdir(parents=True, exist_ok=True)
    for old in target.parent.iterdir():
        old.unlink()
    shutil.copy(source, target)
    (q.root / "vendor-pin.txt").write_text(f"pin {target.as_uri()}#sha256={digest or sha256(target)}\n")


def _assert_one_line_error(proc: subprocess.CompletedProcess[str], code: int, ref: str, fragment: str) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    if code == 3:  # does not apply: the push report names the patch, the file and the hunk
        lines = proc.stdout.splitlines()
        failed = [i for i, line in enumerate(lines) if line.startswith("FAILED")]
        assert len(failed) == 1, proc.stdout
        # the FAILED line names the patch; the lines under it name each file and hunk
        detail = lines[failed[0] + 1:]
        detail = detail[:next((i for i, line in enumerate(detail) if not line.startswith("  ")), len(detail))]
        assert any(fragment in line for line in detail), proc.stdout
        return
    lines = [line for line in proc.stderr.splitlines() if not line.startswith(("hint: ", "note: "))]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error[{ref}]: ") and fragment in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def _copy_patch(q: Queue, name: str) -> None:
    shutil.copy(CORPUS / "patches" / name, q.root / "queue" / name)


# --- the cases --------------------------------------------------------------------------------------


def test_corpus_is_complete() -> None:
    """Every committed file of the corpus is one of the cases below (and the reverse)."""
    patches = {p.name for p in (CORPUS / "patches").iterdir()}
    used = set(PATCH_CASES) | set(LINK_CASES) | {"ok.patch", "absolute-p0.patch", "dup-id-a.patch", "dup-id-b.patch"}
    used |= set(KIND_CASES)
    used |= set(AUTHOR_CASES) | set(GIT_NAME_CASES) | {"dep3-author-continued.patch"}
    assert patches == used
    assert {p.name for p in (CORPUS / "series").iterdir()} == set(SERIES_CASES)
    assert {p.name for p in (CORPUS / "archives").iterdir()} == set(ARCHIVE_CASES) | {"symlink-inside.tar.gz"}


@pytest.mark.parametrize("name", sorted(PATCH_CASES))
def test_hostile_patch(name: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    box = _checked_out(tmp_path_factory, tmp_path)
    _copy_patch(box.q, name)
    box.q.set_series(name)
    before = box.state()
    code, ref, fragment = PATCH_CASES[name]
    _assert_one_line_error(box.run("push"), code, ref, fragment)
    assert box.state() == before
    assert box.run("status").returncode == 0


@pytest.mark.parametrize("name", sorted(SERIES_CASES))
def test_hostile_series(name: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    box = _checked_out(tmp_path_factory, tmp_path)
    for patch in ("ok.patch", "dup-id-a.patch", "dup-id-b.patch", "absolute-p0.patch"):
        _copy_patch(box.q, patch)
    shutil.copy(CORPUS / "series" / name, box.q.root / "series")
    before = box.state()
    code, ref, fragment = SERIES_CASES[name]
    _assert_one_line_error(box.run("push", "--all"), code, ref, fragment)
    assert box.state() == before


@pytest.mark.parametrize("name", sorted(ARCHIVE_CASES))
def test_hostile_archive(name: str, tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    _use_archive(q, tmp_path, name)
    box = Sandbox(tmp_path, q)
    before = box.state()
    ref, fragment = ARCHIVE_CASES[name]
    _assert_one_line_error(box.run("checkout"), 1, ref, fragment)
    tree, refs, cache, probes = box.state()
    assert (tree, refs, probes) == (before[0], before[1], before[3])
    assert not q.work.exists() or [p.name for p in q.work.iterdir()] == [".git"]
    # the download cache may keep the archive it verified, under its own sha256, and nothing else
    for rel, digest in cache.items():
        assert digest == "dir" or rel.split("/")[2] == digest, rel


def test_wrong_sha256_for_the_pin(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    _use_archive(q, tmp_path, "symlink-inside.tar.gz", digest="0" * 64)
    box = Sandbox(tmp_path, q)
    before = box.state()
    _assert_one_line_error(box.run("checkout"), 1, "integrity", "sha256 mismatch")
    assert box.state() == before  # the cache too: no file and no empty folder left in it


def test_wrong_sha256_for_a_cached_file(tmp_path: Path) -> None:
    """A cache entry whose bytes no longer match its name is fetched again, never used."""
    q = make_queue(tmp_path)
    q.run("checkout")
    cached = next(Path(os.environ["GQUEUE_CACHE"]).rglob("vllm-0.1.0.tar.gz"))
    cached.write_bytes(cached.read_bytes()[:-10] + b"0123456789")
    shutil.rmtree(q.work)
    q.run("checkout")
    assert (q.work / "vllm/parser.py").read_text() == BASE_FILES["vllm/parser.py"]
    assert sha256(cached) in (q.root / "vendor-pin.txt").read_text()


@pytest.mark.parametrize("name", sorted(LINK_CASES))
def test_write_through_an_in_tree_link(name: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The upstream archive may hold a link that stays inside the tree; a patch may not write through it."""
    box = _checked_out(tmp_path_factory, tmp_path, archive="symlink-inside.tar.gz")
    assert os.readlink(box.q.work / "vllm/alias") == "ops"
    _copy_patch(box.q, name)
    box.q.set_series(name)
    before = box.state()
    _assert_one_line_error(box.run("push"), 1, "unsafe-patch", LINK_CASES[name])
    assert box.state() == before


def test_symlink_in_the_work_tree_pointing_out(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """A link the user made in work/ pointing out of the tree: push refuses the dirty tree, writes nothing."""
    box = _checked_out(tmp_path_factory, tmp_path)
    os.symlink("../../outside", box.q.work / "vllm" / "escape")
    _copy_patch(box.q, "ok.patch")
    (box.q.root / "queue" / "through.patch").write_bytes(
        (CORPUS / "patches" / "through-link-new.patch").read_bytes().replace(b"vllm/alias/", b"vllm/escape/"))
    box.q.set_series("through.patch")
    before = box.state()
    _assert_one_line_error(box.run("push"), 1, "state", "changes not yet refreshed")
    assert box.state() == before


def test_latin1_content_is_kept_byte_for_byte(tmp_path: Path) -> None:
    """Not an error: a patch whose lines are Latin-1 applies to a Latin-1 file, bytes unchanged."""
    files: dict[str, str | bytes] = dict(BASE_FILES)
    files["vllm/legacy.py"] = b"NAME = 'caf\xe9'\n"
    archive = make_sdist(tmp_path / "upstream", "0.1.0", files)
    q = make_queue(tmp_path / "x")
    (q.root / "vendor-pin.txt").write_text(f"pin {archive.as_uri()}#sha256={sha256(archive)}\n")
    body = b"--- a/vllm/legacy.py\n+++ b/vllm/legacy.py\n@@ -1 +1 @@\n-NAME = 'caf\xe9'\n+NAME = 'na\xefve'\n"
    (q.root / "queue" / "L1.patch").write_bytes(b"---\nid: L1\ntitle: latin-1\n...\n" + body)
    q.set_series("L1.patch")
    q.run("checkout")
    q.run("push")
    assert (q.work / "vllm/legacy.py").read_bytes() == b"NAME = 'na\xefve'\n"
    q.run("pop")
    assert (q.work / "vllm/legacy.py").read_bytes() == b"NAME = 'caf\xe9'\n"


def test_header_only_patch_is_an_empty_commit(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Not an error: a header with no diff is what 'gqueue new' writes; it pushes as an empty commit."""
    box = _checked_out(tmp_path_factory, tmp_path)
    (box.q.root / "queue" / "E1.patch").write_bytes(b"---\nid: E1\ntitle: empty\n...\n")
    box.q.set_series("E1.patch")
    assert box.run("push").returncode == 0
    assert box.run("applied").stdout.split() == ["E1.patch"]


# --- authors and the names git protects: nothing a patch says may add to a commit -----------------

# patch file -> a fragment of the one-line error; each is refused by push (bad-format) and lint (header-author)
AUTHOR_CASES: dict[str, str] = {
    "author-injection.patch": "queue/author-injection.patch:4: header key 'author' must be one line",
    "author-angle.patch": "queue/author-angle.patch:4: header key 'author' must be 'Name <mail>'",
    "author-no-mail.patch": "queue/author-no-mail.patch:4: header key 'author' must be 'Name <mail>'",
}

# patch file -> a fragment of the one-line error; refused by push, import and lint alike
GIT_NAME_CASES: dict[str, str] = {
    "git-upper.patch": "'.GIT/hooks/post-checkout', inside .git (git reads '.GIT' as '.git'",
    "git-shortname.patch": "'GIT~1/config', inside .git (git reads 'GIT~1' as '.git'",
    "git-trailing-dot.patch": "'vllm/.git./config', inside .git",
    "git-trailing-space.patch": "'vllm/.git /config', inside .git",
    "git-stream.patch": "inside .git (git reads '.git::$INDEX_ALLOCATION' as '.git'",
    "git-hfs.patch": "inside .git (git reads '.g\\u200cit' as '.git'",
    "nul-name.patch": "holds a NUL byte",
}


def _paths_of(work: Path, commit: str) -> set[str]:
    out = subprocess.run(["git", "ls-tree", "-r", "-z", "--name-only", commit], cwd=work, capture_output=True, check=True)
    return {p.decode() for p in out.stdout.split(b"\0") if p}


@pytest.mark.parametrize("name", sorted(AUTHOR_CASES))
def test_hostile_author(name: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """An author goes into git's commit header: one that is not one line 'Name <mail>' is refused
    before anything is written (it added a hidden vllm/evil.py to the commit, with a clean status)."""
    box = _checked_out(tmp_path_factory, tmp_path)
    _copy_patch(box.q, name)
    box.q.set_series(name)
    before = box.state()
    _assert_one_line_error(box.run("push"), 1, "bad-format", AUTHOR_CASES[name])
    assert box.state() == before
    lint = box.run("lint")
    assert lint.returncode == 3 and f"queue/{name}:4: error[header-author]: 'author'" in lint.stdout, lint.stdout


def test_dep3_author_over_continuation_lines(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """A DEP-3 Author field that goes on over continuation lines is imported with its first
    'Name <mail>' only; the commit push makes holds the diff's one file and nothing else."""
    box = _checked_out(tmp_path_factory, tmp_path)
    base = subprocess.run(["git", "rev-parse", "HEAD"], cwd=box.q.work, capture_output=True, text=True).stdout.strip()
    source = tmp_path / "D1-readme.patch"
    shutil.copy(CORPUS / "patches" / "dep3-author-continued.patch", source)
    imported = box.run("import", str(source))
    assert imported.returncode == 0, imported.stderr
    assert box.run("lint").returncode == 0
    pushed = box.run("push")
    assert pushed.returncode == 0, pushed.stderr
    head = subprocess.run(["git", "log", "-1", "--format=%H%x00%an <%ae>%x00%cn <%ce>"], cwd=box.q.work,
                          capture_output=True, text=True).stdout.strip().split("\0")
    assert head[1:] == ["Eve <eve@example.org>", "gqueue <gqueue@localhost>"]
    assert _paths_of(box.q.work, head[0]) == _paths_of(box.q.work, base)
    changed = subprocess.run(["git", "diff", "--name-only", base, head[0]], cwd=box.q.work, capture_output=True, text=True)
    assert changed.stdout.split() == ["README.md"]
    assert not (box.q.work / "vllm" / "evil.py").exists()
    refs = subprocess.run(["git", "for-each-ref", "--format=%(refname)"], cwd=box.q.work, capture_output=True, text=True)
    assert "refs/junk" not in refs.stdout.split()


@pytest.mark.parametrize("name", sorted(GIT_NAME_CASES))
def test_name_git_protects(name: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Names git refuses in its index (any case of .git, its NTFS and HFS+ spellings, a NUL) are
    refused by push, import and lint with one rule; they used to wedge the stack part-way."""
    box = _checked_out(tmp_path_factory, tmp_path)
    _copy_patch(box.q, name)
    box.q.set_series(name)
    before = box.state()
    _assert_one_line_error(box.run("push"), 1, "unsafe-patch", GIT_NAME_CASES[name])
    assert box.state() == before
    assert box.run("status").returncode == 0 and box.run("push").returncode == 1  # refused again, not wedged
    lint = box.run("lint")
    assert lint.returncode == 3 and "error[path-outside-tree]" in lint.stdout, lint.stdout
    (box.q.root / "queue" / name).unlink()
    box.q.set_series()
    source = tmp_path / "incoming" / name
    source.parent.mkdir()
    shutil.copy(CORPUS / "patches" / name, source)
    before = box.state()
    _assert_one_line_error(box.run("import", str(source)), 1, "unsafe-patch", GIT_NAME_CASES[name])
    assert box.state() == before


def test_fast_import_stream_takes_no_commands_from_values(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The adapter itself: an author that is not one line 'Name <mail>' is refused, and names with
    a line break, a leading quote or space are written C-quoted, each as the one file it names."""
    from gqueue.vcs.git import CommitSpec, GitError, WorkRepo

    box = _checked_out(tmp_path_factory, tmp_path)
    with WorkRepo(box.q.work) as repo:
        head = repo.head()
        assert head is not None
        before = _refs(box.q.work)
        for author in ("Eve <e@x>\nM 100644 inline vllm/evil.py", "Eve <e@x> <f@y>", "Eve", "Eve <e@x>\0"):
            with pytest.raises(GitError, match="cannot go into a commit"):
                repo.write_commits(head, [CommitSpec("m\n", {"README.md": ("100644", b"x\n")}, author)], "refs/gqueue/t")
        assert _refs(box.q.work) == before
        names = ["vllm/line\nM 100644 inline vllm/evil.py", '"quoted.py', " lead.py", "back\\slash \"q\".py", "tab\tx.py"]
        message = "title\ndata 3\nabc\n"
        [commit] = repo.write_commits(head, [CommitSpec(message, {n: ("100644", b"x\n") for n in names})], "refs/gqueue/t")
        assert _paths_of(box.q.work, commit) == _paths_of(box.q.work, head) | set(names)
        assert repo.message(commit) == message + "\n"
        with pytest.raises(GitError, match="cannot go into a commit"):
            repo.write_commits(head, [CommitSpec("m\n", {"a\0b": ("100644", b"x\n")})], "refs/gqueue/t")
    assert not list((box.q.work / ".git").glob("fast_import_crash_*"))


# --- a read-only queue or work tree, a full disk (issue 38, item 8) ---------------------------------
#
# Run in this process with click's runner, so that the file system's refusals can be made where a
# root test run cannot see permissions: os.access is told the folder is not writable (what the
# kernel says of a read-only mount) and the temporary-file primitive of atomic writes raises.
# Without root the folders are made read-only for real with chmod as well.


def _fs_queue(tmp: Path) -> Queue:
    q = make_queue(tmp)
    parser = BASE_FILES["vllm/parser.py"]
    q.write_patch("F1-fs.patch", _fs_unified("vllm/parser.py", parser, parser.replace("== 'null'", "in ('null', 'None')")))
    q.set_series("F1-fs.patch")
    q.run("checkout")
    q.run("push")
    (q.work / "vllm" / "config.py").write_text("OPTION = 'an edit to refresh'\n")
    return q


def _fs_unified(path: str, old: str, new: str) -> str:
    from synth import unified

    return unified(path, old, new)


def _in_process(q: Queue, *args: str) -> "subprocess.CompletedProcess[str]":
    from click.testing import CliRunner

    import gqueue.cli.commands  # noqa: F401 - registers the commands
    from gqueue.cli.main import cli

    result = CliRunner().invoke(cli, ["-C", str(q.root), *args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def _refuse_writes(monkeypatch: pytest.MonkeyPatch, folder: Path, code: int) -> None:
    """Writes under ``folder`` fail with ``code``; for EROFS/EACCES os.access says so too."""
    import errno
    import tempfile

    real_access, real_mkstemp = os.access, tempfile.mkstemp

    def inside(path: object) -> bool:
        return Path(os.fspath(path)).resolve().is_relative_to(folder.resolve())  # type: ignore[arg-type]

    def access(path: object, mode: int, *a: object, **k: object) -> bool:
        if mode & os.W_OK and inside(path) and code != errno.ENOSPC:
            return False
        return real_access(path, mode, *a, **k)  # type: ignore[arg-type]

    def mkstemp(*a: object, dir: object = None, **k: object) -> tuple[int, str]:
        if dir is not None and inside(dir):
            raise OSError(code, os.strerror(code), os.fspath(dir))  # type: ignore[arg-type]
        return real_mkstemp(*a, dir=dir, **k)  # type: ignore[arg-type]

    real_statvfs = os.statvfs

    def statvfs(path: object) -> object:
        found = real_statvfs(path)  # type: ignore[arg-type]
        if code == errno.EROFS and inside(path):
            return type("ReadOnly", (), {"f_flag": found.f_flag | os.ST_RDONLY})()
        return found

    monkeypatch.setattr(os, "access", access)
    monkeypatch.setattr(os, "statvfs", statvfs)
    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    if code != errno.ENOSPC and os.geteuid() != 0:
        for dirpath, _dirnames, _files in os.walk(folder, topdown=False):
            os.chmod(dirpath, 0o555)


def _allow_writes(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    monkeypatch.undo()
    for dirpath, _dirnames, _files in os.walk(folder):
        os.chmod(dirpath, 0o755)


def _quiet_state(q: Queue) -> tuple[bytes, bytes, str, str, bool]:
    """What must not change: the patch, the user's edit, HEAD, the index and no journal."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=q.work, capture_output=True, text=True).stdout
    cached = subprocess.run(["git", "diff", "--cached", "--name-only"], cwd=q.work, capture_output=True, text=True).stdout
    return ((q.root / "queue" / "F1-fs.patch").read_bytes(), (q.work / "vllm" / "config.py").read_bytes(), head,
            cached, (q.root / ".gqueue" / "journal.json").exists())


@pytest.mark.parametrize("code, reason", [(13, "permission denied"), (30, "read-only"), (28, "no space left")])
def test_refresh_refused_by_the_file_system(code: int, reason: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """refresh into a read-only queue/ (EACCES, EROFS: said before anything changes) or onto a full
    disk (ENOSPC: met when the patch is written, then undone): one clear error, exit 5, nothing
    half-written, and the next command says nothing of an 'interrupted refresh' (it was exit 4,
    'please report it', with the refresh's journal left behind)."""
    q = _fs_queue(tmp_path)
    before = _quiet_state(q)
    _refuse_writes(monkeypatch, q.root / "queue", code)
    proc = _in_process(q, "refresh")
    _assert_one_line_error(proc, 5, "filesystem", reason)
    assert "queue" in proc.stderr.splitlines()[0]
    assert _quiet_state(q) == before
    _allow_writes(monkeypatch, q.root / "queue")
    after = q.run("refresh")
    assert "interrupted" not in after.stderr, after.stderr
    assert b"an edit to refresh" in (q.root / "queue" / "F1-fs.patch").read_bytes()


def test_push_into_a_read_only_work_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-only work tree: push is refused before it writes anything (exit 5), not part-way."""
    q = _fs_queue(tmp_path)
    q.run("refresh")
    q.run("pop")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=q.work, capture_output=True, text=True).stdout
    files = _digest_tree(q.work, {q.work / ".git"})
    _refuse_writes(monkeypatch, q.work, 30)
    proc = _in_process(q, "push")
    _assert_one_line_error(proc, 5, "filesystem", "work")
    assert subprocess.run(["git", "rev-parse", "HEAD"], cwd=q.work, capture_output=True, text=True).stdout == head
    assert _digest_tree(q.work, {q.work / ".git"}) == files
    assert not (q.root / ".gqueue" / "journal.json").exists()
    _allow_writes(monkeypatch, q.work)
    assert q.run("push").returncode == 0


# --- the pin changed after checkout (issue 38, item 3) ---------------------------------------------
#
# checkout, check and rebase found the pin's tree by project and version only: after the pin's
# URL or sha256 changed, a wrong hash or a missing file was never noticed, and a changed archive
# was never imported. The tree is now keyed on what verified it (Pin.identity).


def _repin(q: Queue, archive: Path, digest: str) -> None:
    (q.root / "vendor-pin.txt").write_text(f"pin {archive.as_uri()}#sha256={digest}\n")


def test_wrong_sha256_after_checkout(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    box = _checked_out(tmp_path_factory, tmp_path)
    _repin(box.q, tmp_path / "upstream" / "vllm-0.1.0.tar.gz", "0" * 64)
    before = box.state()
    _assert_one_line_error(box.run("checkout"), 1, "integrity", "sha256 mismatch")
    _assert_one_line_error(box.run("check"), 1, "integrity", "sha256 mismatch")
    _assert_one_line_error(box.run("push"), 1, "state", "no base for")
    assert box.state() == before


def test_missing_archive_after_checkout(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    box = _checked_out(tmp_path_factory, tmp_path)
    _repin(box.q, tmp_path / "gone" / "vllm-0.1.0.tar.gz", "1" * 64)
    before = box.state()
    proc = box.run("checkout")
    assert proc.returncode == 1 and "gone" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert box.state() == before


@pytest.mark.parametrize("applied", [False, True])
def test_changed_archive_is_imported(applied: bool, tmp_path: Path) -> None:
    """A new archive for the same version (the pin's hash changed with it): checkout imports it and,
    with nothing applied, moves work/ onto it; with a stack applied it refuses and changes nothing
    (it kept the old tree and said nothing)."""
    q = make_queue(tmp_path)
    config = BASE_FILES["vllm/config.py"]
    q.write_patch("C1-cfg.patch", _fs_unified("vllm/config.py", config, config.replace("OPTION_3 = 3\n", "OPTION_3 = 33\n")))
    q.set_series("C1-cfg.patch")
    q.run("checkout")
    if applied:
        q.run("push")
    files: dict[str, str | bytes] = dict(BASE_FILES)
    files["README.md"] = "synthetic upstream, re-released\n"
    archive = make_sdist(tmp_path / "upstream2", "0.1.0", files)
    _repin(q, archive, sha256(archive))
    box = Sandbox(tmp_path, q)
    before = box.state()
    proc = q.run("checkout", check=False)
    if applied:
        _assert_one_line_error(proc, 1, "state", "built on another tree")
        after = box.state()
        assert (after[0], after[3]) == (before[0], before[3])  # the files: all as they were (the cache keeps what it verified)
        heads = [ln for ln in before[1].splitlines() if ln.endswith((" HEAD", " refs/heads/gqueue"))]
        assert heads and set(heads) <= set(after[1].splitlines())  # the stack too (the new tree is imported beside it)
        return
    assert proc.returncode == 0, proc.stderr
    assert (q.work / "README.md").read_text() == "synthetic upstream, re-released\n"
    assert q.run("status").returncode == 0
    q.run("push")
    assert (q.work / "README.md").read_text() == "synthetic upstream, re-released\n"
    assert "OPTION_3 = 33" in (q.work / "vllm" / "config.py").read_text()


# --- a new file where a folder is, or under a file (issue 38, item 2) -------------------------------
# The commit would replace the folder vllm/ (all its files deleted) or the file with the new file,
# while the report said '1 file, 1 hunk'. patch -> (series pushed with --all, message fragment)
KIND_CASES: dict[str, tuple[tuple[str, ...], str]] = {
    "new-file-over-folder.patch": ((), "queue/new-file-over-folder.patch:5: patch creates the file 'vllm', "
                                       "which is a folder of 4 file(s) (they would be deleted)"),
    "new-file-under-file.patch": ((), "queue/new-file-under-file.patch:5: patch creates 'vllm/__init__.py/evil.py' "
                                      "under 'vllm/__init__.py', which is a file"),
    "new-file-under-new-file.patch": (("ok.patch",), "queue/new-file-under-new-file.patch:5: patch creates "
                                                     "'vllm/ok.py/evil.py' under 'vllm/ok.py', which is a file"),
}


@pytest.mark.parametrize("name", sorted(KIND_CASES))
def test_new_file_where_a_folder_or_file_is(name: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    box = _checked_out(tmp_path_factory, tmp_path)
    below, fragment = KIND_CASES[name]
    for patch in (*below, name):
        _copy_patch(box.q, patch)
    box.q.set_series(*below, name)
    before = box.state()
    _assert_one_line_error(box.run("push", "--all"), 1, "unsafe-patch", fragment)
    assert box.state() == before  # nothing pushed, not even the patches below it
    _assert_one_line_error(box.run("check", "--no-lint"), 1, "unsafe-patch", fragment)
    assert box.state() == before
    assert sorted(p.name for p in (box.q.work / "vllm").iterdir()) == ["__init__.py", "config.py", "parser.py", "util.py"]


# --- downloads have a size limit ------------------------------------------------------------------


def _limited_run(box: Sandbox, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI with files capped at 64 MiB: a download without a limit dies of SIGXFSZ here
    instead of filling the disk."""
    import resource

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 20, 64 << 20))

    return subprocess.run([sys.executable, "-m", "gqueue", "-C", str(box.q.root), *args], capture_output=True,
                          text=True, timeout=60, preexec_fn=cap, env={**os.environ, **(env or {})})


def test_pin_on_a_device_is_refused(tmp_path: Path) -> None:
    """A pin pointing at /dev/zero filled the cache until the disk was full."""
    q = make_queue(tmp_path)
    (q.root / "vendor-pin.txt").write_text(f"pin file:///dev/zero#sha256={'0' * 64} project=vllm version=0.1.0\n")
    box = Sandbox(tmp_path, q)
    before = box.state()
    _assert_one_line_error(_limited_run(box, "checkout"), 1, "integrity", "/dev/zero is not a regular file")
    assert box.state() == before


def test_download_over_the_limit_is_refused(tmp_path: Path) -> None:
    """Without a size from the index, GQUEUE_MAX_DOWNLOAD (default 4 GiB) is the most a download may be."""
    q = make_queue(tmp_path)
    box = Sandbox(tmp_path, q)
    before = box.state()
    proc = _limited_run(box, "checkout", env={"GQUEUE_MAX_DOWNLOAD": "100"})
    _assert_one_line_error(proc, 1, "integrity", "is larger than 100 bytes")
    assert box.state() == before
    _assert_one_line_error(_limited_run(box, "checkout", env={"GQUEUE_MAX_DOWNLOAD": "lots"}), 2, "usage", "GQUEUE_MAX_DOWNLOAD")
    assert _limited_run(box, "checkout").returncode == 0


def test_download_stream_is_cut_at_the_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An endless HTTP body is cut at the size the index gives (else at GQUEUE_MAX_DOWNLOAD), and one
    whose Content-Length is over it is not read at all; nothing is left in the cache."""
    import urllib.request

    from gqueue.errors import IntegrityError
    from gqueue.upstream import cache

    reads: list[int] = []

    class Endless:
        def __init__(self, length: int | None) -> None:
            self.length = length

        def __enter__(self) -> "Endless":
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def read(self, n: int) -> bytes:
            reads.append(n)
            return bytes(n)

    length: list[int | None] = [None]
    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout=None: Endless(length[0]))
    root = Path(os.environ["GQUEUE_CACHE"])
    args = ("https://files.example.invalid/vllm-0.1.0.tar.gz", "1" * 64, "vllm-0.1.0.tar.gz")
    with pytest.raises(IntegrityError, match=f"larger than {3 << 20} bytes"):
        cache.fetch(*args, where="vendor-pin.txt:1", size=3 << 20)
    assert sum(reads) <= (4 << 20)
    monkeypatch.setenv("GQUEUE_MAX_DOWNLOAD", "2M")
    with pytest.raises(IntegrityError, match=f"larger than {2 << 20} bytes"):
        cache.fetch(*args, where="vendor-pin.txt:1")
    reads.clear()
    length[0] = 10 << 30
    with pytest.raises(IntegrityError, match="larger than"):
        cache.fetch(*args, where="vendor-pin.txt:1", size=5 << 20)
    assert reads == []
    assert not root.exists() or not [p for p in root.rglob("*") if p.is_file()]
