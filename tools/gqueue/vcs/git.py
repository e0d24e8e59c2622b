"""The git adapter: every git process gqueue starts goes through this module.

Reads go through GitPython's long-lived ``cat-file --batch``; commits are written in one
``git fast-import`` stream; refs move with compare-and-swap ``update-ref``.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

if TYPE_CHECKING:
    import git as gitpython

from ..errors import GqueueError
from ..fsutil import fault_point
from ..lock import held_fds
from .worktree import REGULAR, Write, apply_writes, index_records, plan_writes

BRANCH = "refs/heads/gqueue"
FIXED_DATE = "1000000000 +0000"
CONFIG = (
    "-c", "core.quotepath=off", "-c", "core.autocrlf=false", "-c", "core.safecrlf=false",
    "-c", "core.filemode=true", "-c", "diff.noprefix=false", "-c", "diff.mnemonicPrefix=false",
    "-c", "advice.detachedHead=false", "-c", "gc.auto=0", "-c", "maintenance.auto=false",
    "-c", "checkout.workers=4",  # parallel checkout: work-tree switches of big trees (rebase) are I/O bound
)
DIFF_OPTIONS = (
    "--no-color", "--no-ext-diff", "--no-renames", "--no-textconv", "--full-index",
    "--src-prefix=a/", "--dst-prefix=b/", "-U3", "--diff-algorithm=myers",
)
TRAILER = "Gqueue-Patch"
COMMITTER = "gqueue <gqueue@localhost>"
_FI_DATE = re.compile(r"\d+ [+-]\d{4}")
_FI_MODES = ("100644", "100755", "120000", "160000")
_PACK_TEMPORARIES = ("tmp_pack_", "tmp_idx_", "tmp_rev_", "tmp_mtimes_")  # what fast-import writes before its rename


def diff_options(strip: int = 1) -> tuple[str, ...]:
    """DIFF_OPTIONS for a series entry applied with -p``strip`` (a -p0 entry's names carry no a/ b/)."""
    return (*DIFF_OPTIONS, *_prefixes(strip))
CONTENT_ATTRIBUTES = ("text", "eol", "crlf", "filter", "ident", "working-tree-encoding")


class GitError(GqueueError):
    ref = "git"


@dataclass(frozen=True)
class Entry:
    mode: str
    sha: str


@dataclass(frozen=True)
class CommitSpec:
    """One commit to write: the files it changes (None deletes) on top of its parent."""

    message: str
    changes: dict[str, tuple[str, bytes] | None]  # path -> (mode, content) or None
    author: str = "gqueue <gqueue@localhost>"


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "GIT_OPTIONAL_LOCKS": "0"})
    for key in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        env.pop(key, None)
    if extra:
        env.update(extra)
    return env


class WorkRepo:
    """The work tree's repository (``work/`` under the queue root)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._repo: "gitpython.Repo | None" = None
        # commit id -> message, of commits this process read or wrote: a commit's message never
        # changes, so ``messages`` asks git only for the others
        self._messages: dict[str, str] = {}

    # plumbing ---------------------------------------------------------------
    def run(self, *args: str, input: bytes | None = None, env: dict[str, str] | None = None, check: bool = True) -> bytes:
        fault_point("git")
        # stdin and stderr go through temporary files: with one pipe, the output is read in
        # one call instead of a select loop of 32 KiB reads (a blob batch is megabytes)
        with tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as feed:
            if input is not None:
                feed.write(input)
                feed.seek(0)
            proc = subprocess.run(
                ["git", *CONFIG, *args], cwd=self.path, stdin=feed, stdout=subprocess.PIPE, stderr=err,
                env=_env(env),
            )
            if check and proc.returncode != 0:
                err.seek(0)
                raise _failure(args[0], err.read(), proc.returncode)
        return proc.stdout

    def ok(self, *args: str) -> bool:
        return subprocess.run(
            ["git", *CONFIG, *args], cwd=self.path, capture_output=True, env=_env()
        ).returncode == 0

    @property
    def repo(self) -> "gitpython.Repo":
        if self._repo is None:
            import git as gitpython  # imported on first use: it costs start-up time

            self._repo = gitpython.Repo(self.path)
        return self._repo

    def close(self) -> None:
        if self._repo is not None:
            self._repo.close()
            self._repo = None

    def __enter__(self) -> "WorkRepo":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def git_dir(self) -> Path:
        return self.path / ".git"

    def exists(self) -> bool:
        # what git itself needs to see a repository: a 'git init' killed part-way leaves less,
        # and running init again completes it
        return (self.git_dir / "HEAD").is_file() and (self.git_dir / "objects").is_dir() and (self.git_dir / "refs").is_dir()

    def init(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(
            ["git", *CONFIG, "init", "-q", "--initial-branch=gqueue", str(self.path)],
            capture_output=True, env=_env(),
        )
        if proc.returncode != 0:
            raise _failure("init", proc.stderr, proc.returncode)
        self.run("config", "core.autocrlf", "false")
        self.run("config", "gc.auto", "0")

    # reading ------------------------------------------------------------------
    def rev(self, ref: str) -> str | None:
        out = subprocess.run(
            ["git", *CONFIG, "rev-parse", "-q", "--verify", ref + "^{commit}"],
            cwd=self.path, capture_output=True, env=_env(),
        )
        return out.stdout.decode().strip() or None if out.returncode == 0 else None

    def head(self) -> str | None:
        return self.rev("HEAD")

    def blob(self, sha: str) -> bytes:
        data: bytes = self.repo.odb.stream(bytes.fromhex(sha)).read()
        return data

    def tree_entries(self, commit: str) -> dict[str, Entry]:
        out = self.run("ls-tree", "-r", "-z", "--full-tree", commit)
        entries: dict[str, Entry] = {}
        for record in out.split(b"\0"):
            if not record:
                continue
            info, path = record.split(b"\t", 1)
            mode, _kind, sha = info.decode().split()
            entries[path.decode("utf-8", "surrogateescape")] = Entry(mode, sha)
        return entries

    def changed_paths(self, old: str, new: str) -> list[str]:
        """Paths whose blob or mode differ between two commits (no rename detection)."""
        out = self.run("diff-tree", "-r", "-z", "--no-renames", "--name-only", old, new)
        return [p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p]

    def tree_of(self, commit: str) -> str:
        return self.run("rev-parse", commit + "^{tree}").decode().strip()

    def message(self, commit: str) -> str:
        return self.run("log", "-1", "--format=%B", commit).decode("utf-8", "replace")

    def messages(self, commits: Iterable[str]) -> dict[str, str]:
        """Each commit's message (full id -> message): those this process has read (the stack's
        chain) or written (push, refresh) from memory, the others from one ``git log``."""
        wanted = list(commits)
        found = {sha: self._messages[sha] for sha in wanted if sha in self._messages}
        rest = [sha for sha in wanted if sha not in found]
        if not rest:
            return found
        out = self.run("log", "--no-walk=unsorted", "--format=%H%x00%B%x1e", *rest).decode("utf-8", "replace")
        for record in out.split("\x1e"):
            sha, _, message = record.strip("\n").partition("\0")
            if sha:
                found[sha] = self._messages[sha] = message
        return found

    def first_parent_chain(self, head: str, stop: str) -> list[tuple[str, str]]:
        """(sha, message) from ``stop`` (exclusive) up to ``head``, oldest first."""
        return [(sha, msg) for sha, _parent, _tree, msg in self.chain_with_parents(head, stop)]

    def chain_with_parents(self, head: str, stop: str) -> list[tuple[str, str, str, str]]:
        """(sha, first parent, tree, message) from ``stop`` (exclusive) up to ``head``, oldest first."""
        # --boundary: ``stop`` too, marked '-', for its message only (the undo log asks for the
        # message of the stack's base after a push from it or a pop to it)
        out = self.run("log", "--first-parent", "--boundary", "--format=%m%H%x00%P%x00%T%x00%B%x1e", f"{stop}..{head}")
        chain = []
        for record in out.decode("utf-8", "replace").split("\x1e"):
            record = record.strip("\n")
            if record:
                mark_sha, parents, tree, msg = record.split("\0", 3)
                sha = mark_sha[1:]
                self._messages[sha] = msg
                if mark_sha[0] != "-":
                    chain.append((sha, parents.split(" ")[0], tree, msg))
        return list(reversed(chain))

    def revs(self, *refs: str) -> list[str] | None:
        """The commits of several refs from one process; None if any of them does not resolve."""
        proc = subprocess.run(
            ["git", *CONFIG, "rev-parse", *(r + "^{commit}" for r in refs), "--"],
            cwd=self.path, stdin=subprocess.DEVNULL, capture_output=True, env=_env(),
        )
        shas = [s for s in proc.stdout.decode().split() if s != "--"]  # rev-parse echoes the "--"
        return shas if proc.returncode == 0 and len(shas) == len(refs) else None

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        return self.ok("merge-base", "--is-ancestor", ancestor, descendant)

    def dirty_paths(self) -> list[str]:
        """Paths whose work-tree or index state differs from HEAD (untracked, not ignored, too)."""
        return self.dirty_paths_later()()

    def dirty_paths_later(self) -> Callable[[], list[str]]:
        """Start ``dirty_paths``' git status now; the returned call waits for it (and must be made)."""
        finish = self.start("status", "--porcelain=v1", "-z", "--untracked-files=all")
        return lambda: _status_paths(finish())

    def start(self, *args: str) -> Callable[[], bytes]:
        """Start a git command that runs while Python goes on; the returned call waits for its output."""
        fault_point("git")
        err = tempfile.TemporaryFile()
        proc = subprocess.Popen(["git", *CONFIG, *args], cwd=self.path, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=err, env=_env())

        def finish() -> bytes:
            assert proc.stdout is not None
            with err:
                out = proc.stdout.read()
                proc.stdout.close()
                if proc.wait() != 0:
                    err.seek(0)
                    raise _failure(args[0], err.read(), proc.returncode)
            return out

        return finish

    def diff(self, old: str, new: str, paths: Iterable[str] = (), *, strip: int = 1) -> bytes:
        """``strip``: the file names carry that many leading components (a series entry's -pN)."""
        return self.run("diff", *diff_options(strip), old, new, "--", *paths)

    # writing ------------------------------------------------------------------
    def _fast_import(self, write: Callable[[Callable[[bytes], object]], None], *, fast_zlib: bool = False) -> dict[int, str]:
        """Run one ``git fast-import`` fed by ``write``; return its marks (mark number -> sha).

        ``fast_zlib``: store the objects uncompressed (zlib level 0). Compression is most of
        what a 300-patch push's fast-import costs (0.48 s at the default level, 0.28 s at 1,
        0.14 s at 0, measured on one stream); the work repository is a local cache.
        """
        level = ("-c", "pack.compression=0") if fast_zlib else ()
        with tempfile.TemporaryDirectory(prefix="gqueue-fi-") as tmp:
            marks = Path(tmp) / "marks"
            proc = subprocess.Popen(
                # --depth=0: no delta chains; fast-import deltas each blob against the one written
                # before it, unrelated files, which saved nothing here but made every later read
                # of a checked-out release's blobs four times slower
                ["git", *CONFIG, *level, "fast-import", "--quiet", "--done", "--depth=0", f"--export-marks={marks}", "--force"],
                cwd=self.path, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env(),
                pass_fds=held_fds(),  # it holds the queue lock too: a killed gqueue's fast-import ends first
            )
            assert proc.stdin is not None
            try:  # if fast-import dies, its stderr says why; the broken pipe does not
                write(proc.stdin.write)
                proc.stdin.write(b"done\n")
                proc.stdin.close()
            except BrokenPipeError:
                pass
            except BaseException:
                # a value refused part-way: the stream ends without 'done', so fast-import stops
                # without moving a ref; the crash report it writes about that is no news
                proc.stdin.close()
                proc.wait()
                (self.git_dir / f"fast_import_crash_{proc.pid}").unlink(missing_ok=True)
                raise
            err = proc.stderr.read() if proc.stderr else b""
            if proc.wait() != 0:
                raise GitError(f"git fast-import failed: {err.decode('utf-8', 'replace').strip()[-300:]}")
            fault_point("git")
            found = {}
            for line in marks.read_text().splitlines():
                mark, sha = line.split()
                found[int(mark[1:])] = sha
        return found

    def write_commits(self, parent: str, specs: list[CommitSpec], ref: str, date: str = FIXED_DATE) -> list[str]:
        """Write a chain of commits on ``parent`` in one fast-import run; ``ref`` ends at the last.

        ``ref`` should be a scratch ref: callers move the branch themselves with a CAS.
        """
        if not specs:
            return []
        _fi_word(ref)
        _fi_word(parent)
        for spec in specs:  # every value checked before fast-import starts (a refusal then costs nothing)
            _fi_ident(spec.author)
            for path, change in spec.changes.items():
                _fi_path(path)
                if change is not None:
                    _fi_mode(path, change[0])

        def stream(w: Callable[[bytes], object]) -> None:
            w(b"reset " + _fi_word(ref) + b"\nfrom " + _fi_word(parent) + b"\n\n")
            for number, spec in enumerate(specs, start=1):
                _commit_header(w, ref, number, spec.author, spec.message, date)
                if number == 1:
                    w(b"from " + _fi_word(parent) + b"\n")
                for path, change in sorted(spec.changes.items()):
                    if change is None:
                        w(b"D " + _fi_path(path) + b"\n")
                    else:
                        _file(w, path, *change)
                w(b"\n")

        marks = self._fast_import(stream, fast_zlib=True)
        commits = [marks[i + 1] for i in range(len(specs))]
        for sha, spec in zip(commits, specs):
            self._messages[sha] = spec.message
        return commits

    def import_tree(self, files: Iterator[tuple[str, str, bytes]], message: str, ref: str, tag: str) -> str:
        """Import a whole tree as a root commit (one fast-import stream) and tag it."""

        def stream(w: Callable[[bytes], object]) -> None:
            _commit_header(w, ref, 1, "gqueue <gqueue@localhost>", message, FIXED_DATE)
            for path, mode, data in files:
                _file(w, path, mode, data)
            w(b"\nreset " + _fi_word(f"refs/tags/{tag}") + b"\nfrom :1\n\n")

        return self._fast_import(stream)[1]

    def remove_leftover_packs(self) -> list[str]:
        """Remove the temporaries a killed ``git fast-import`` left in ``objects/pack`` (``tmp_pack_*``,
        ``tmp_idx_*``, ...); the names removed. Only for a caller holding the queue lock: every
        fast-import gqueue starts holds it too (``lock.held_fds``), so none of them is running."""
        removed = []
        for leftover in sorted((self.git_dir / "objects" / "pack").glob("tmp_*")):
            if leftover.name.startswith(_PACK_TEMPORARIES) and leftover.is_file() and not leftover.is_symlink():
                leftover.unlink()
                removed.append(leftover.name)
        return removed

    def update_ref(self, ref: str, new: str, old: str | None = None) -> None:
        args = ["update-ref", "-m", "gqueue", ref, new]
        if old is not None:
            args.append(old)
        self.run(*args)

    def delete_ref(self, ref: str) -> None:
        self.run("update-ref", "-d", ref)

    def switch_tree(self, old: str, new: str) -> None:
        """Move index and files from commit ``old`` to ``new``; refuses to overwrite local edits."""
        # read-tree -m trusts the index's stat data: after a touch, a copy or a restore it would
        # call unchanged files "not uptodate", so refresh it first (changed files stay changed).
        self.run("update-index", "-q", "--refresh", check=False)
        self.run("read-tree", "-m", "-u", old, new)

    def move_clean(self, old: str, new: str, changes: dict[str, tuple[str, bytes] | None] | None = None,
                   old_modes: dict[str, str] | None = None) -> None:
        """Move a work tree that the caller found clean (under the queue lock) from ``old`` to ``new``.

        ``changes`` (path -> (mode, bytes) or None), with ``old_modes`` (path -> mode in ``old``),
        may be given when the caller already holds them (a push built them). The files are
        written in place (vcs/worktree.py) and only those paths are restatted into the index;
        whatever that cannot do safely is left to ``switch_tree``.
        """
        if changes is None or old_modes is None:
            changes, old_modes = self._tree_changes(old, new)
        plan = plan_writes(self.path, old_modes, changes)
        if plan is None or not self._attributes_neutral([w.path for w in plan]):
            self.switch_tree(old, new)
            return
        apply_writes(self.path, plan)
        self._index_writes(plan, new)

    def _index_writes(self, plan: list[Write], commit: str) -> None:
        """Record the files ``plan`` wrote in the index, with their stat data.

        ``update-index --add --remove --stdin`` of the paths restats each one: a file whose
        stat data differ from its entry's is read and hashed (it holds the bytes written, so
        the entry gets their blob), a new one is added, a deleted one removed. That is not
        enough for a file rewritten in place at the same size: git keeps an entry whose stat
        data still match without reading the file, and such a file keeps its inode, so one
        written again in the same second (a pop right after a push, a patch that changes a
        digit) also matches in size, ctime and the backdated mtime worktree.py gives it, and
        the index kept the old blob. Those files first get their ids from the bytes written,
        with their stat data cleared (``--index-info``), so the restat reads each of them
        too. A file whose size changed cannot match its entry, so a move where every file
        changes size (most pushes and pops) starts one update-index, not two.
        """
        if not plan:
            return
        same = [w for w in plan if w.same_size]
        if same:
            self.run("update-index", "-z", "--index-info", input=index_records(same, self._hash_name(commit)))
        paths = b"".join(w.path.encode("utf-8", "surrogateescape") + b"\0" for w in plan)
        self.run("update-index", "-z", "--add", "--remove", "--stdin", input=paths)

    def _hash_name(self, commit: str) -> str:
        """The repository's object format (``sha1`` or ``sha256``), told by the length of a commit id."""
        if len(commit) in (40, 64) and all(c in "0123456789abcdef" for c in commit):
            return "sha1" if len(commit) == 40 else "sha256"
        return self.run("rev-parse", "--show-object-format").decode().strip()

    def _tree_changes(self, old: str, new: str) -> tuple[dict[str, tuple[str, bytes] | None], dict[str, str]]:
        out = self.run("diff-tree", "-r", "-z", "--no-renames", old, new)
        fields = out.split(b"\0")
        raw: list[tuple[str, str, str, str]] = []  # path, old mode, new mode, new sha
        for i in range(0, len(fields) - 1, 2):
            info = fields[i].decode().lstrip(":").split()
            raw.append((fields[i + 1].decode("utf-8", "surrogateescape"), info[0], info[1], info[3]))
        data = self.blobs(sha for _p, _o, mode, sha in raw if mode in REGULAR)
        changes: dict[str, tuple[str, bytes] | None] = {}
        old_modes: dict[str, str] = {}
        for path, old_mode, new_mode, sha in raw:
            if old_mode != "000000":
                old_modes[path] = old_mode
            changes[path] = None if new_mode == "000000" else (new_mode, data.get(sha, b""))
        return changes, old_modes

    def _attributes_neutral(self, paths: list[str]) -> bool:
        """No attribute that converts file contents on checkout applies to any of ``paths``."""
        if not paths:
            return True
        listed = b"".join(p.encode("utf-8", "surrogateescape") + b"\0" for p in paths)
        out = self.run("check-attr", "-z", "--stdin", *CONTENT_ATTRIBUTES, input=listed)
        values = out.split(b"\0")[2::3]
        return all(v in (b"unspecified", b"unset") for v in values)

    def switch_tree_forced(self, old: str, new: str) -> None:
        """Move index and files from commit ``old`` to ``new``, overwriting local edits in the
        files the two commits differ in; files they share are not looked at (git checkout's
        two-tree move, a third of a full reset's time on a big tree)."""
        self.run("read-tree", "--reset", "-u", old, new)

    def checkout_fresh(self, commit: str, *, show_progress: bool = False) -> None:
        """Index and files of ``commit``; ``show_progress``: git counts the files on the terminal."""
        if not show_progress:
            self.run("read-tree", "--reset", "-u", commit)
            return
        fault_point("git")
        proc = subprocess.run(["git", *CONFIG, "read-tree", "--reset", "-u", "-v", commit], cwd=self.path,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=_env())
        if proc.returncode != 0:
            raise _failure("read-tree", b"", proc.returncode)

    def export_files(self, commit: str, dest: Path) -> None:
        """Write every file of ``commit`` under ``dest`` (a plain folder: no .git, no index of its
        own), leaving the work tree, its index and HEAD as they are: a throw-away index file."""
        with tempfile.TemporaryDirectory(prefix="gqueue-export-") as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            self.run("read-tree", commit, env=env)
            self.run("checkout-index", "--all", "--force", f"--prefix={dest}/", env=env)

    def remove_untracked(self) -> None:
        """Delete the files git does not track and does not ignore (ignored ones stay)."""
        self.run("clean", "-f", "-d", "-q", "--", ".")

    def settle_index(self) -> None:
        """Rewrite the index once the clock has passed the second its files were written in.

        git records stat data by the second here; entries written in the same second as the
        index itself are "racily clean" and every later status re-reads those files (all
        5,664 after a checkout of 0.24.0: 60 ms a command). Waiting at most a second once, then
        refreshing, leaves an index whose entries are trusted.
        """
        index = self.git_dir / "index"
        try:
            written = index.stat().st_mtime
        except FileNotFoundError:
            return
        while time.time() < int(written) + 1.01:
            time.sleep(0.05)
        self.run("update-index", "-q", "--refresh", check=False)

    def reset_index(self, commit: str) -> None:
        self.run("read-tree", commit)

    def set_head(self, ref: str) -> None:
        self.run("symbolic-ref", "HEAD", ref)

    def stage_all(self) -> str:
        """Stage every change of the work tree (new files not ignored too) in the index; its tree."""
        self.run("add", "-A", "--", ".")
        return self.run("write-tree").decode().strip()

    def index_tree(self) -> str:
        """The index as a tree object; "" where it cannot be written (unmerged entries, damage)."""
        return self.run("write-tree", check=False).decode().strip()

    def snapshot_tree(self) -> str:
        """The work tree (tracked changes and new files not ignored) as a tree object.

        Uses a temporary index, so the real index is untouched.
        """
        with tempfile.TemporaryDirectory(prefix="gqueue-idx-") as tmp:
            index = Path(tmp) / "index"
            real = self.git_dir / "index"
            if real.exists():
                index.write_bytes(real.read_bytes())
            env = {"GIT_INDEX_FILE": str(index)}
            self.run("add", "-A", "--", ".", env=env)
            return self.run("write-tree", env=env).decode().strip()

    def commit_tree(self, tree: str, parent: str, message: str, author: str) -> str:
        name, _, email = _fi_ident(author).decode("utf-8").partition(" <")
        env = {
            "GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email.rstrip(">"), "GIT_AUTHOR_DATE": FIXED_DATE,
            "GIT_COMMITTER_NAME": "gqueue", "GIT_COMMITTER_EMAIL": "gqueue@localhost", "GIT_COMMITTER_DATE": FIXED_DATE,
        }
        sha = self.run("commit-tree", tree, "-p", parent, input=message.encode("utf-8"), env=env).decode().strip()
        self._messages[sha] = message
        return sha

    def diff_tree_to_tree(self, old: str, new_tree: str, *, binary: bool = False, strip: int = 1,
                          moves: bool = False) -> bytes:
        """``binary``: binary files as git's binary patches (a saved copy 'git apply' restores);
        ``strip``: as for ``diff``; ``moves``: renames and copies written as such (git's -M and
        -C, copies from any file of the tree), not as a delete and an add."""
        options = diff_options(strip)
        if moves:
            options = tuple(o for o in options if o != "--no-renames") + ("-M", "-C", "--find-copies-harder")
        return self.run("diff", *options, *(("--binary",) if binary else ()), old, new_tree)

    # three-way merges and batched diffs (check / rebase) ---------------------------
    def merge_file(self, ours: bytes, base: bytes, theirs: bytes,
                   labels: tuple[str, str, str] = ("ours", "base", "theirs")) -> tuple[bytes, int]:
        """``git merge-file``: the merged text (with conflict markers) and the number of conflicts."""
        with tempfile.TemporaryDirectory(prefix="gqueue-merge-") as tmp:
            paths = []
            for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
                path = Path(tmp) / name
                path.write_bytes(data)
                paths.append(str(path))
            proc = subprocess.run(
                ["git", *CONFIG, "merge-file", "-p", "-L", labels[0], "-L", labels[1], "-L", labels[2], *paths],
                cwd=tmp, capture_output=True, env=_env(),
            )
        if proc.returncode < 0 or proc.returncode > 127:
            raise GitError(f"git merge-file failed: {proc.stderr.decode('utf-8', 'replace').strip()}")
        return proc.stdout, proc.returncode

    def blobs(self, shas: Iterable[str]) -> dict[str, bytes]:
        """Many blobs at once: one ``git cat-file --batch`` fed every name up front."""
        wanted = sorted(set(shas))
        if not wanted:
            return {}
        out = self.run("cat-file", "--batch", input="".join(s + "\n" for s in wanted).encode())
        found: dict[str, bytes] = {}
        pos = 0
        for sha in wanted:
            end = out.index(b"\n", pos)
            header = out[pos:end].split()
            if len(header) != 3:
                raise GitError(f"git cat-file: no blob {sha}")
            size = int(header[2])
            found[sha] = out[end + 1 : end + 1 + size]
            pos = end + 1 + size + 1
        return found

    def diff_pairs(self, pairs: list[tuple[str, str]], *, strip: int = 1) -> list[bytes]:
        """The diff of each (old, new) commit pair, all from one ``git diff-tree --stdin``.

        Each input line is ``NEW OLD`` (a commit and the parent to diff against); git echoes
        ``NEW`` before each diff. Every NEW must be distinct.
        """
        if not pairs:
            return []
        stdin = "".join(f"{b} {a}\n" for a, b in pairs).encode()
        out = self.run("diff-tree", "--stdin", "-r", "-p", *diff_options(strip), input=stdin)
        marks = {f"{b}\n".encode(): i for i, (_a, b) in enumerate(pairs)}
        chunks: list[list[bytes]] = [[] for _ in pairs]
        current: list[bytes] | None = None
        for line in out.splitlines(keepends=True):
            index = marks.get(line)
            if index is not None and line[:1] not in (b" ", b"+", b"-"):
                current = chunks[index]
                continue
            if current is not None:
                current.append(line)
        return [b"".join(c) for c in chunks]


class MirrorRepo(WorkRepo):
    """A bare repository in the download cache holding the upstream commits that pins name.

    A commit is fetched by its full id (objects checked as they arrive), so what is kept is
    what the id names; each one fetched is held by a ref of its own.
    """

    @property
    def git_dir(self) -> Path:
        return self.path

    def exists(self) -> bool:
        return (self.path / "HEAD").is_file() and (self.path / "objects").is_dir()

    def init(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(["git", *CONFIG, "init", "-q", "--bare", str(self.path)], capture_output=True, env=_env())
        if proc.returncode != 0:
            raise _failure("init", proc.stderr, proc.returncode)
        self.run("config", "gc.auto", "0")

    def has_commit(self, commit: str) -> bool:
        return self.rev(commit) == commit

    def fetch_commit(self, url: str, commit: str, *, show_progress: bool = False) -> None:
        """Fetch ``commit`` from ``url``; where the server will not hand out a commit by its id,
        its branches and tags instead. ``show_progress``: git draws its own on the terminal."""
        if not self.exists():
            self.init()
        checked = ("-c", "fetch.fsckObjects=true", "-c", "protocol.file.allow=always")
        for refspecs in ((commit,), ("+refs/heads/*:refs/upstream/heads/*", "+refs/tags/*:refs/upstream/tags/*")):
            args = ["git", *CONFIG, *checked, "fetch", "--no-tags", "--no-write-fetch-head",
                    "--progress" if show_progress else "--quiet", "--", url, *refspecs]
            proc = subprocess.run(args, cwd=self.path, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=None if show_progress else subprocess.PIPE, env=_env())
            if self.has_commit(commit):
                self.update_ref(f"refs/gqueue/pins/{commit}", commit)
                return
            failure = proc.stderr if proc.stderr else b""
        raise _failure("fetch", failure, proc.returncode)

    def tree_files(self, commit: str) -> tuple[list[tuple[str, str, bytes]], list[str]]:
        """(files as (path, mode, data), paths of submodules, which are not included) of ``commit``."""
        entries = self.tree_entries(commit)
        gitlinks = sorted(p for p, e in entries.items() if e.mode == "160000")
        files = {p: e for p, e in entries.items() if e.mode != "160000"}
        data = self.blobs(e.sha for e in files.values())
        return [(p, e.mode if e.mode != "100664" else "100644", data[e.sha]) for p, e in sorted(files.items())], gitlinks


def _prefixes(strip: int) -> tuple[str, ...]:
    """Prefix options that give each file name ``strip`` leading components (DIFF_OPTIONS: one)."""
    return () if strip == 1 else (f"--src-prefix={'a/' * strip}", f"--dst-prefix={'b/' * strip}")


def _failure(command: str, stderr: bytes, code: int) -> GitError:
    """git's own last line of complaint, as the one-line error."""
    lines = stderr.decode("utf-8", "replace").strip().splitlines()
    return GitError(f"git {command} failed: {lines[-1] if lines else code}")


def _status_paths(out: bytes) -> list[str]:
    return [record[3:].decode("utf-8", "surrogateescape") for record in out.split(b"\0") if len(record) > 3]


def _commit_header(w: Callable[[bytes], object], ref: str, mark: int, author: str, message: str, date: str) -> None:
    """A commit command whose values cannot start commands of their own: the ref, idents and
    date are refused if a line break or a misplaced '<' '>' is in them, and the message goes in
    a ``data`` block of its exact byte count."""
    msg = message.encode("utf-8")
    if not isinstance(mark, int) or _FI_DATE.fullmatch(date) is None:
        raise GitError(f"refusing to write a commit with mark {mark!r} and date {date!r}")
    w(b"commit " + _fi_word(ref) + b"\nmark :%d\n" % mark)
    w(b"author " + _fi_ident(author) + b" " + date.encode() + b"\n")
    w(b"committer " + _fi_ident(COMMITTER) + b" " + date.encode() + b"\n")
    w(b"data %d\n%s\n" % (len(msg), msg))


@functools.lru_cache(maxsize=256)  # a push of 300 patches checks the same few idents 900 times
def _fi_ident(ident: str) -> bytes:
    """``Name <mail>`` for fast-import's author and committer lines; refused unless it is one
    line with one '<' and one '>', in that order, at the end."""
    name, sep, rest = ident.partition(" <")
    if not sep or not rest.endswith(">") or any(c in name + rest[:-1] for c in "<>") \
            or any(ord(c) < 0x20 or ord(c) == 0x7F for c in ident):
        raise GitError(f"author {ident!r} cannot go into a commit: it must be one line 'Name <mail>'")
    return ident.encode("utf-8")


@functools.lru_cache(maxsize=256)
def _fi_word(value: str) -> bytes:
    """A ref or commit name for the stream: one word, nothing that would end its line."""
    if not value or any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise GitError(f"refusing to name {value!r} in a fast-import stream")
    return value.encode("utf-8")


def _file(w: Callable[[bytes], object], path: str, mode: str, data: bytes) -> None:
    w(b"M " + _fi_mode(path, mode) + b" inline " + _fi_path(path) + b"\n")
    w(b"data %d\n" % len(data))
    w(data)
    w(b"\n")


def _fi_mode(path: str, mode: str) -> bytes:
    if mode not in _FI_MODES:
        raise GitError(f"refusing to write {path!r} with mode {mode!r}")
    return mode.encode()


def _fi_path(path: str) -> bytes:
    """A path as fast-import reads it: C-quoted (backslash, double quote and control bytes escaped)
    when it starts with a quote or a space or holds a control byte, such as a line break; a NUL
    cannot be written, nor an empty name."""
    raw = path.encode("utf-8", "surrogateescape")
    if not raw or b"\0" in raw:
        raise GitError(f"file name {path!r} cannot go into a commit")
    if not (raw.startswith((b'"', b" ")) or any(b < 0x20 or b == 0x7F for b in raw)):
        return raw
    out = bytearray(b'"')
    for b in raw:
        if b in (0x22, 0x5C):
            out += b"\\" + bytes([b])
        elif b < 0x20 or b == 0x7F:
            out += b"\\%03o" % b
        else:
            out.append(b)
    return bytes(out + b'"')
