"""Crash-injection harness: run a gqueue command, kill it with SIGKILL part-way, check what is left.

A *scenario* is a queue in a known start state plus one command. The harness builds the start
state once (a template), copies it for every trial, and knows the two states a crash may leave:
the *old* one (the template) and the *new* one (what an uninterrupted run leaves).

Two ways to kill:
- deterministically: ``GQUEUE_TEST_CRASH_AFTER=N`` makes ``fsutil.fault_point`` SIGKILL the process
  at its N-th effect (a file write through atomic_write, or a git call in vcs/git.py);
- at a random time: the command is started and SIGKILLed after a random delay.
The runs of the first kind and the recovery runs are forks of a server that imported gqueue once
(forked_gqueue.py); those killed at a random time are processes of their own, start-up included.

After the kill, ``check_after_crash`` looks at the files as they were left; then the next command
(``gqueue repair``, or the same command run again) must bring the stack back, say what it did,
and ``check_recovered`` checks that the result is consistent and either the old or the new state.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import forked_gqueue
from synth import BASE_FILES, Queue, make_queue, unified

CRASH_ENV = "GQUEUE_TEST_CRASH_AFTER"
KILLED = -signal.SIGKILL
TEMPORARY = re.compile(r"(^|/)\.[^/]+\.([A-Za-z0-9_]{8}|rebase)\.tmp$")  # atomic writes' temporaries


# --- the state of a queue, as bytes --------------------------------------------------------------


@dataclass(frozen=True)
class State:
    series: bytes | None
    pin: bytes | None
    queue: dict[str, bytes]  # path under queue/ -> content
    work: dict[str, bytes]  # path under work/ (no .git) -> content; links as b"-> target"
    head: str | None
    applied: tuple[str, ...] | None  # None: the stack could not be read
    journal: bool
    saved: dict[str, bytes]  # .gqueue/saved/*
    temporaries: tuple[str, ...] = ()  # atomic-write temporaries left in the queue root
    wheels: tuple[str, ...] = ()  # dist/*.whl that are not whole zip files

    @property
    def files(self) -> tuple[bytes | None, bytes | None, dict[str, bytes]]:
        """What must be atomic as a whole after recovery: series, vendor-pin.txt and queue/."""
        return self.series, self.pin, self.queue


def _read_tree(root: Path, *, skip: tuple[str, ...] = ()) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    if not root.is_dir():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = [d for d in dirnames if os.path.normpath(os.path.join(rel_dir, d)) not in skip]
        for d in list(dirnames):
            full = Path(dirpath) / d
            if full.is_symlink():
                out[os.path.normpath(os.path.join(rel_dir, d))] = b"-> " + os.readlink(full).encode()
                dirnames.remove(d)
        for name in filenames:
            full = Path(dirpath) / name
            rel = os.path.normpath(os.path.join(rel_dir, name))
            out[rel] = b"-> " + os.readlink(full).encode() if full.is_symlink() else full.read_bytes()
    return out


def git(work: Path, *args: str, check: bool = True) -> str:
    proc = subprocess.run(["git", *args], cwd=work, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)}: {proc.stderr}")
    return proc.stdout


def applied_names(work: Path, head: str | None = None) -> tuple[str, ...] | None:
    """The applied patches, read from git the way gqueue does (trailers on the first-parent chain
    above the one pin tag that HEAD contains); ``head``: HEAD's commit, if already read."""
    if not (work / ".git").is_dir():
        return None
    if head is None:
        head = git(work, "rev-parse", "-q", "--verify", "HEAD", check=False).strip()
    if not head:
        return None
    bases = git(work, "tag", "--list", "--merged", head, "gqueue/pin/*", check=False).split()
    if len(bases) != 1:
        return None
    log = subprocess.run(
        ["git", "log", "--first-parent", "--format=%H%x00%B%x1e", f"{bases[0]}..{head}"],
        cwd=work, capture_output=True, text=True,
    )
    if log.returncode != 0:
        return None
    names = []
    for record in log.stdout.split("\x1e"):
        record = record.strip("\n")
        if not record:
            continue
        _, _, message = record.partition("\0")
        trailer = [ln for ln in message.splitlines() if ln.startswith("Gqueue-Patch: ")]
        if not trailer:
            return None
        names.append(trailer[-1][len("Gqueue-Patch: ") :])
    return tuple(reversed(names))


def snapshot(root: Path) -> State:
    work = root / "work"
    head = git(work, "rev-parse", "-q", "--verify", "HEAD", check=False).strip() if (work / ".git").is_dir() else ""
    queue = _read_tree(root / "queue")
    temporaries = [f"queue/{n}" for n in queue if TEMPORARY.search(n)]
    temporaries += [n for n in os.listdir(root) if TEMPORARY.search(n)]
    dist = root / "dist"
    temporaries += [f"dist/{n}" for n in (os.listdir(dist) if dist.is_dir() else []) if TEMPORARY.search(n)]
    broken_wheels = tuple(str(w.name) for w in sorted(dist.glob("*.whl")) if not _whole_zip(w)) if dist.is_dir() else ()
    return State(
        series=(root / "series").read_bytes() if (root / "series").exists() else None,
        pin=(root / "vendor-pin.txt").read_bytes() if (root / "vendor-pin.txt").exists() else None,
        queue={n: d for n, d in queue.items() if not TEMPORARY.search(n)},
        work=_read_tree(work, skip=(".git",)),
        head=head or None,
        applied=applied_names(work, head),
        journal=(root / ".gqueue" / "journal.json").exists(),
        saved=_read_tree(root / ".gqueue" / "saved"),
        temporaries=tuple(sorted(temporaries)),
        wheels=broken_wheels,
    )


def _whole_zip(path: Path) -> bool:
    import zipfile

    try:
        with zipfile.ZipFile(path) as zf:
            return zf.testzip() is None
    except (zipfile.BadZipFile, OSError):
        return False


# --- scenarios -------------------------------------------------------------------------------------


def _edit(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


UTIL = BASE_FILES["vllm/util.py"]
PARSER = BASE_FILES["vllm/parser.py"]
CONFIG = BASE_FILES["vllm/config.py"]
README = BASE_FILES["README.md"]

# Three patches that change, add and delete files; the stack most scenarios start from.
PATCHES: dict[str, str] = {
    "A1-parser.patch": unified("vllm/parser.py", PARSER, _edit(PARSER, "== 'null'", "in ('null', 'None')")),
    "A2-util.patch": unified("vllm/util.py", UTIL, _edit(_edit(UTIL, "return x + 7\n", "return x + 70\n"),
                                                          "return x + 30\n", "return x + 300\n")),
    "A3-newfile.patch": (
        "diff --git a/vllm/extra.py b/vllm/extra.py\nnew file mode 100644\n--- /dev/null\n+++ b/vllm/extra.py\n"
        "@@ -0,0 +1,2 @@\n+EXTRA = 1\n+MORE = 2\n"
        + "diff --git a/README.md b/README.md\ndeleted file mode 100644\n--- a/README.md\n+++ /dev/null\n"
        "@@ -1 +0,0 @@\n-synthetic upstream\n"
    ),
}
# The user's unrefreshed edits in work/ (path -> new content); refresh must keep them.
USER_EDITS: dict[str, str] = {
    "vllm/config.py": _edit(CONFIG, "OPTION_5 = 5\n", "OPTION_5 = 55  # user edit\n"),
    "vllm/user_new.py": "USER = 'unrefreshed new file'\n",
}


@dataclass(frozen=True)
class Scenario:
    name: str
    command: str  # the gqueue command under test, for the figures
    args: tuple[str, ...]
    setup: tuple[tuple[str, ...], ...] = ()  # gqueue commands run after checkout
    user_edits: dict[str, str] = field(default_factory=dict)  # written in work/ after setup
    compound: bool = False  # several moves (pop, edit, push): the stack may stop in between
    multi_file: bool = False  # creates or deletes patch files besides rewriting the series
    recovery: str = ""  # force one way of recovering ("rerun": repair cannot redo a download)
    next_args: tuple[str, ...] = ()  # the "next command" when running the same one again would go further
    extra_files: dict[str, str] = field(default_factory=dict)  # files written next to the queue root
    checkout: bool = True

    # stack: PATCHES on synth's upstream; grown: the same below a patch that grows util.py, so
    # that A2 lands at an offset; drift: test_drift's two pins; build: + a wheel
    builder: str = "stack"

    def prepare(self, tmp: Path) -> Queue:
        if self.builder == "drift":
            from test_drift import build_queue
            from test_rebase import LANDING

            q = build_queue(tmp, LANDING, checkout=False)
        elif self.builder == "build":
            from test_build import make_build_queue, parser_patch

            q, _wheel = make_build_queue(tmp)
            parser_patch(q)
            for name, body in list(PATCHES.items())[1:]:
                q.write_patch(name, body)
            q.set_series("P15-none.patch", *list(PATCHES)[1:])
        else:
            q = make_queue(tmp)
            for name, body in PATCHES.items():
                q.write_patch(name, body)
            if self.builder == "grown":
                q.write_patch("A0-grow.patch", unified("vllm/util.py", UTIL, "import os\nimport sys\n\n" + UTIL))
                q.set_series("A0-grow.patch", *PATCHES)
            else:
                q.set_series(*PATCHES)
        for rel, text in self.extra_files.items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_text(text)
        if self.checkout:
            q.run("checkout")
        for args in self.setup:
            q.run(*args)
        for rel, text in self.user_edits.items():
            (q.work / rel).write_text(text)
        return q


_IMPORT_SRC = unified("vllm/config.py", CONFIG, _edit(CONFIG, "OPTION_9 = 9\n", "OPTION_9 = 99\n"))
_IMPORT_DEP3 = "Description: imported fix\nAuthor: Jane Doe <jane@example.org>\n---\n" + _IMPORT_SRC

SCENARIOS: dict[str, Scenario] = {s.name: s for s in [
    Scenario("push-all", "push", ("push", "--all")),
    Scenario("push-one", "push", ("push",), setup=(("push",),), next_args=("goto", "A2-util.patch")),
    Scenario("push-refresh", "push", ("push", "--all", "--refresh"), builder="grown", compound=True),
    Scenario("pop-all", "pop", ("pop", "--all"), setup=(("push", "--all"),)),
    Scenario("pop-force", "pop", ("pop", "--force"), setup=(("push", "--all"),), user_edits=USER_EDITS,
             next_args=("goto", "A2-util.patch", "--force")),
    Scenario("goto", "push", ("goto", "A1-parser.patch"), setup=(("push", "--all"),)),
    Scenario("refresh", "refresh", ("refresh",), setup=(("push", "--all"),), user_edits=USER_EDITS),
    Scenario("refresh-new", "refresh", ("refresh",), setup=(("push", "--all"), ("new", "PN1-fresh.patch")),
             user_edits=USER_EDITS),
    Scenario("new", "new", ("new", "PN2-created.patch"), setup=(("push", "--all"),), multi_file=True),
    Scenario("new-dirty", "new", ("new", "PN3-dirty.patch"), setup=(("push", "--all"),), user_edits=USER_EDITS,
             multi_file=True),
    Scenario("delete", "delete", ("delete", "A3-newfile.patch"), setup=(("push", "--all"),), compound=True,
             multi_file=True),
    Scenario("delete-unapplied", "delete", ("delete", "A3-newfile.patch"), setup=(("push",),), multi_file=True),
    Scenario("rename", "rename", ("rename", "A2-util.patch", "A2-renamed.patch"), setup=(("push", "--all"),),
             compound=True, multi_file=True),
    Scenario("move", "move", ("move", "A3-newfile.patch", "--first"), setup=(("push", "--all"),)),  # old or new
    Scenario("import", "import", ("import", "../import-src/B1-imported.patch", "../import-src/B2-dep3.patch"),
             setup=(("push",),), multi_file=True,
             extra_files={"import-src/B1-imported.patch": _IMPORT_SRC, "import-src/B2-dep3.patch": _IMPORT_DEP3}),
    Scenario("checkout", "checkout", ("checkout",), checkout=False, recovery="rerun"),
    Scenario("rebase", "rebase", ("rebase", "--pin", "next"), builder="drift", setup=(("push", "--all"),),
             compound=True),
    Scenario("build", "build", ("build",), builder="build", setup=(("push", "--all"),)),
]}


# --- running ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def killed(self) -> bool:
        return self.code == KILLED

    def json(self) -> dict[str, object]:
        return json.loads(self.stdout) if self.stdout.strip().startswith("{") else {}


ENV: dict[str, str] = {}  # set by Templates: the download cache the templates were built with


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop(CRASH_ENV, None)
    env.update(ENV)
    return env


def gqueue_argv(root: Path, args: tuple[str, ...]) -> list[str]:
    return [sys.executable, "-m", "gqueue", "-C", str(root), *args]


FORK = os.environ.get("GQUEUE_CRASH_FORK", "1") != "0"  # 0: every run a process of its own


def run(root: Path, args: tuple[str, ...], *, crash_after: int | None = None, timeout: float = 120,
        fork: bool | None = None) -> Run:
    """The command run to its end, or to the SIGKILL of its ``crash_after``-th effect: a fork of
    forked_gqueue's server (``fork``, by default unless GQUEUE_CRASH_FORK=0) or a new process."""
    env = _env()
    if crash_after is not None:
        env[CRASH_ENV] = str(crash_after)
    start = time.monotonic()
    if FORK if fork is None else fork:
        proc = forked_gqueue.run(["-C", str(root), *args], env=env, cwd=root, timeout=timeout)
    else:
        proc = subprocess.run(gqueue_argv(root, args), capture_output=True, text=True, env=env, timeout=timeout,
                              cwd=root)
    return Run(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)


def _wait_for_lock(root: Path, proc: subprocess.Popen[str]) -> float:
    """Seconds until ``proc`` holds the queue lock (its pid in the lock record), or it has exited."""
    lock = root / ".gqueue" / "lock"
    start = time.monotonic()
    mark = f'"pid": {proc.pid},'
    while proc.poll() is None:
        try:
            if mark in lock.read_text():
                break
        except OSError:
            pass
        time.sleep(0.002)
    return time.monotonic() - start


def _live_members(group: int) -> bool:
    """Whether a process of the group is still running (zombies, which nobody may reap here, aside)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path("/proc", entry, "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # state, ppid, pgrp, ...
        if int(fields[2]) == group and fields[0] != "Z":
            return True
    return False


def _wait_for_orphans(group: int, timeout: float = 30.0) -> None:
    """Let the git processes a killed gqueue left behind finish: the checks look at the state at rest."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _live_members(group):
        time.sleep(0.01)


def run_killed_at(root: Path, args: tuple[str, ...], delay: float, *, group: bool = False,
                  after_lock: bool = False) -> Run:
    """Start the command and SIGKILL it after ``delay`` seconds (if it is still running).

    ``after_lock``: count the delay from the moment it holds the queue lock, i.e. once start-up
    is over and it works on the queue. With ``group`` the git processes it started die with it
    (a power cut, a killed session); without, they run on as orphans (an OOM kill of gqueue alone).
    """
    env = _env()
    start = time.monotonic()
    proc = subprocess.Popen(gqueue_argv(root, args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            cwd=root, text=True, start_new_session=True)
    if after_lock:
        _wait_for_lock(root, proc)
    try:
        out, err = proc.communicate(timeout=delay)
    except subprocess.TimeoutExpired:
        if group:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate()
        _wait_for_orphans(proc.pid)
    return Run(proc.returncode, out, err, time.monotonic() - start)


class Templates:
    """Start states built once and copied for every trial; the new state measured once."""

    def __init__(self, base: Path) -> None:
        self.base = base
        ENV["GQUEUE_CACHE"] = str(base / "cache")
        self._old: dict[str, tuple[Path, State]] = {}
        self._new: dict[str, tuple[State, Run]] = {}
        self._work: dict[str, float] = {}

    def template(self, scenario: Scenario) -> tuple[Path, State]:
        if scenario.name not in self._old:
            tmp = self.base / f"template-{scenario.name}"
            saved = {k: os.environ.get(k) for k in ENV}
            os.environ.update(ENV)
            try:
                q = scenario.prepare(tmp)
            finally:
                for key, value in saved.items():
                    if value is None:
                        os.environ.pop(key, None)
                    else:
                        os.environ[key] = value
            self._old[scenario.name] = (tmp, snapshot(q.root))
        return self._old[scenario.name]

    def copy(self, scenario: Scenario, dest: Path) -> Path:
        tmp, _ = self.template(scenario)
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(tmp, dest, symlinks=True)
        return dest / "q"

    def new_state(self, scenario: Scenario) -> tuple[State, Run]:
        if scenario.name not in self._new:
            root = self.copy(scenario, self.base / f"clean-{scenario.name}")
            result = run(root, scenario.args)
            assert result.code in (0,), f"{scenario.name}: clean run exited {result.code}: {result.stderr}"
            self._new[scenario.name] = (snapshot(root), result)
        return self._new[scenario.name]

    def work_seconds(self, scenario: Scenario) -> float:
        """How long the command works once it holds the lock (start-up excluded), measured once."""
        if scenario.name not in self._work:
            root = self.copy(scenario, self.base / f"timed-{scenario.name}")
            proc = subprocess.Popen(gqueue_argv(root, scenario.args), stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, env=_env(), cwd=root)
            _wait_for_lock(root, proc)
            start = time.monotonic()
            lock, mark = root / ".gqueue" / "lock", f'"pid": {proc.pid},'
            while proc.poll() is None and mark in lock.read_text():  # until it lets the lock go
                time.sleep(0.002)
            self._work[scenario.name] = time.monotonic() - start
            proc.wait(timeout=300)
        return self._work[scenario.name]

    def old_state(self, scenario: Scenario) -> State:
        return self.template(scenario)[1]


# --- checks ----------------------------------------------------------------------------------------


class Broken(AssertionError):
    """An invariant failed after a crash: the message says which and how."""


def _one_of(label: str, now: object, old: object, new: object) -> None:
    if now != old and now != new:
        raise Broken(f"{label} is neither the old nor the new version")


def check_after_crash(scenario: Scenario, old: State, new: State, now: State) -> None:
    """Right after the kill: every queue file is whole (old or new bytes), no user edit is lost."""
    _one_of("series", now.series, old.series, new.series)
    _one_of("vendor-pin.txt", now.pin, old.pin, new.pin)
    for name in set(now.queue) | set(old.queue) | set(new.queue):
        _one_of(f"queue/{name}", now.queue.get(name), old.queue.get(name), new.queue.get(name))
    if now.wheels:
        raise Broken(f"dist/ holds wheels that are not whole: {list(now.wheels)}")
    check_user_edits(scenario, new, now)


def _edit_kept(rel: str, text: str, new: State, now: State) -> bool:
    content = text.encode()
    if now.work.get(rel) == content:
        return True
    # in the refreshed patch (the bytes the uninterrupted run wrote), and the patch is on disk
    for name, data in now.queue.items():
        if data == new.queue.get(name) and data != b"" and _added_lines_in(content, data):
            return True
    # saved by a --force before it was discarded
    return any(_added_lines_in(content, diff) for diff in now.saved.values())


def _added_lines_in(content: bytes, patch: bytes) -> bool:
    """Whether the user's marker lines (every edit in USER_EDITS has a line saying 'user') are
    among the lines ``patch`` adds."""
    added = {line[1:] for line in patch.splitlines() if line.startswith(b"+") and not line.startswith(b"+++")}
    markers = [line for line in content.splitlines() if b"user" in line.lower()]
    return bool(markers) and all(line in added for line in markers)


def check_user_edits(scenario: Scenario, new: State, now: State) -> None:
    for rel, text in scenario.user_edits.items():
        if not _edit_kept(rel, text, new, now):
            raise Broken(f"the user's edit of work/{rel} is gone (not in work/, not in the patch, not saved)")


def check_recovered(scenario: Scenario, old: State, new: State, now: State, root: Path, *,
                    strict_files: bool = True) -> None:
    """After the next command: no journal, a readable stack that matches the series, files old or new."""
    if now.journal:
        raise Broken("the journal is still there after recovery")
    if now.applied is None:
        raise Broken("the stack cannot be read after recovery")
    work = root / "work"
    branch = git(work, "symbolic-ref", "-q", "HEAD", check=False).strip()
    if branch != "refs/heads/gqueue":
        raise Broken(f"HEAD is not on the gqueue branch after recovery ({branch or 'detached'})")
    if now.temporaries:
        raise Broken(f"temporary files of interrupted writes are still there: {list(now.temporaries)}")
    if now.files != old.files and now.files != new.files:
        diff = [k for k in ("series", "pin") if getattr(now, k) not in (getattr(old, k), getattr(new, k))]
        queue = sorted(set(now.queue) ^ set(new.queue) | set(now.queue) ^ set(old.queue))
        message = f"series/queue/pin are a mix of old and new after recovery (differs: {diff}, queue: {queue})"
        if strict_files:
            raise Broken(message)
        check_after_crash(scenario, old, new, now)  # at least every file is whole
    series_names = [ln.split()[0] for ln in (now.series or b"").decode().splitlines()
                    if ln.strip() and not ln.lstrip().startswith("#")]
    if list(now.applied) != series_names[: len(now.applied)]:
        raise Broken(f"applied {list(now.applied)} is not a prefix of the series {series_names}")
    if not scenario.compound and now.applied not in (old.applied, new.applied):
        raise Broken(f"applied {list(now.applied)} is neither the old nor the new stack")
    if not scenario.compound and old.files != new.files and old.applied != new.applied:
        # a command that changes both: the files and the stack go back or forward together
        if (now.files, now.applied) == (new.files, old.applied):
            raise Broken("the new series/queue came back with the old stack")
        if (now.files, now.applied) == (old.files, new.applied):
            raise Broken("the old series/queue came back with the new stack")
    cached = git(work, "diff", "--cached", "--name-only", "HEAD", check=False).split()
    dirty = set(git(work, "status", "--porcelain", "--untracked-files=all").splitlines())
    expected_dirty = set(scenario.user_edits)
    unexpected = sorted(d[3:] for d in dirty if d[3:] not in expected_dirty and not d[3:].endswith(".rej"))
    if unexpected:
        raise Broken(f"the work tree has changes nobody made after recovery: {unexpected}")
    if cached and not set(cached) <= expected_dirty:
        raise Broken(f"the index differs from HEAD after recovery: {cached}")
    check_user_edits(scenario, new, now)


# --- one trial -------------------------------------------------------------------------------------


@dataclass
class Trial:
    scenario: str
    how: str  # "after-N" or "at-T"
    killed: bool  # the kill landed while the command ran
    inside: bool  # ... after it took the queue lock (it had started to work)
    recovery: str  # "repair" or "rerun"
    recovery_code: int
    said: str  # what the recovery command reported
    failure: str | None = None
    lost: int = 0  # bytes of the user's work found nowhere after recovery (see bytes_lost)

    def to_json(self) -> dict[str, object]:
        return dict(self.__dict__)


def _lock_held_by_dead(root: Path) -> bool:
    lock = root / ".gqueue" / "lock"
    try:
        return bool(json.loads(lock.read_text() or "{}").get("pid"))
    except (OSError, ValueError):
        return False


RERUN_OK = (0, 1, 2)  # after a crash the rerun may find the work done: "already applied" (1), "no such patch" (2)


def trial(templates: Templates, scenario: Scenario, dest: Path, *, crash_after: int | None = None,
          delay: float | None = None, recovery: str = "repair", strict_files: bool = True,
          group: bool = False, after_lock: bool = False) -> Trial:
    """One kill and one recovery. ``strict_files``: series+queue/+pin as a whole must be old or new
    after recovery (else: at least every file whole)."""
    recovery = scenario.recovery or recovery
    old = templates.old_state(scenario)
    new, _clean = templates.new_state(scenario)
    root = templates.copy(scenario, dest)
    if crash_after is not None:
        result = run(root, scenario.args, crash_after=crash_after)
        how = f"after-{crash_after}"
    else:
        assert delay is not None
        result = run_killed_at(root, scenario.args, delay, group=group, after_lock=after_lock)
        how = f"at-{delay:.3f}s" + ("-after-lock" if after_lock else "") + ("-group" if group else "")
    inside = result.killed and _lock_held_by_dead(root)
    record = Trial(scenario.name, how, result.killed, inside, recovery, 0, "")
    recovered: State | None = None  # the state after recovery, once read
    try:
        if not result.killed and result.code != 0:
            raise Broken(f"the command failed without being killed: {result.code}: {result.stderr.strip()}")
        after = snapshot(root)
        check_after_crash(scenario, old, new, after)
        args = ("repair", "--json") if recovery == "repair" else (*(scenario.next_args or scenario.args), "--json")
        rec = run(root, args)
        record.recovery_code = rec.code
        doc = rec.json()
        notes = [str(n) for n in doc.get("notes", [])] if isinstance(doc.get("notes"), list) else []
        actions = doc.get("result", {}).get("actions", []) if isinstance(doc.get("result"), dict) else []
        error = doc.get("error") if isinstance(doc.get("error"), dict) else {}
        said = [*notes, *[str(a) for a in actions or []]]
        if error:
            said.append(f"error[{error.get('ref')}]: {error.get('message')} (hint: {error.get('hint')})")
        record.said = "; ".join(said)
        if rec.code == 4 or (recovery == "repair" and rec.code != 0) or rec.code not in RERUN_OK + (3,):
            raise Broken(f"{' '.join(args[:1])} after the crash exited {rec.code}: {rec.stdout} {rec.stderr}")
        if recovery == "rerun" and error.get("ref") == "git":
            raise Broken(f"running the command again failed in git: {error.get('message')}")
        if recovery == "rerun" and rec.code != 0 and "gqueue repair" in str(error.get("hint")):
            # the next command refused and sent the user to 'gqueue repair': follow the hint
            fix = run(root, ("repair", "--json"))
            record.said += f"; then repair: {fix.stdout.strip()[:300]}"
            if fix.code != 0:
                raise Broken(f"'gqueue repair', as the next command advised, exited {fix.code}: {fix.stdout}")
        if (root / ".gqueue" / "rebase" / "state.json").is_file():
            # a rebase the kill interrupted: what a user does next is --abort (or --continue)
            undo = run(root, ("rebase", "--abort", "--json"))
            record.said += f"; then rebase --abort: exit {undo.code}"
            if undo.code != 0:
                raise Broken(f"'gqueue rebase --abort' after the crash exited {undo.code}: {undo.stdout} {undo.stderr}")
        if after.journal and "interrupted" not in record.said:
            raise Broken(f"an interrupted operation was left but recovery did not say so: {record.said!r}")
        if inside and "stale lock" not in record.said:
            raise Broken(f"the dead process's lock was not reported as stale: {record.said!r}")
        recovered = snapshot(root)
        check_recovered(scenario, old, new, recovered, root, strict_files=strict_files)
        if recovery == "rerun" and not scenario.compound and rec.code == 0 and recovered.files != new.files:
            raise Broken("running the command again did not reach the new state")
    except Broken as exc:
        record.failure = str(exc)
    except subprocess.TimeoutExpired as exc:
        record.failure = f"timed out: {exc}"
    record.lost = bytes_lost(scenario, old, new, recovered or snapshot(root), root)
    return record


def bytes_lost(scenario: Scenario, old: State, new: State, now: State, root: Path) -> int:
    """Bytes of what the user wrote that are nowhere after recovery, for the figures: each of the
    scenario's unrefreshed edits that is not in work/, the refreshed patch or .gqueue/saved/, and,
    when queue/ is neither the old nor the new version as a whole, each old patch text that is not
    in queue/, .gqueue/saved/ or .gqueue/deleted/."""
    lost = sum(len(text.encode()) for rel, text in scenario.user_edits.items() if not _edit_kept(rel, text, new, now))
    if now.queue not in (old.queue, new.queue):
        kept = {*now.queue.values(), *now.saved.values(), *_read_tree(root / ".gqueue" / "deleted").values()}
        lost += sum(len(data) for data in old.queue.values() if data not in kept)
    return lost


def random_kill(rng: random.Random, clean_seconds: float, work_seconds: float) -> tuple[float, bool]:
    """(delay, after_lock): mostly a moment while the command works on the queue; one in ten
    anywhere from its start (start-up included)."""
    if rng.random() < 0.1:
        return rng.uniform(0.0, clean_seconds * 1.1), False
    return rng.uniform(0.0, work_seconds * 1.1), True

