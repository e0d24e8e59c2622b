"""gqueue bisect run: the first patch of the series after which a command fails.

Every position of the series (0: the pinned release, k: the first k patches applied) is a
commit: the stack's own commits for what is applied, and for the rest commits written once,
in memory, on a scratch ref. Each step of the search is then a checkout of one of them.
The stack's HEAD is recorded in .gqueue/bisect.json before the first step and put back at
the end, on an error, on Ctrl-C and on SIGTERM; after a SIGKILL the next 'gqueue bisect'
command (or 'gqueue bisect reset') puts it back.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

from ..errors import ConflictError, GqueueError, StateError, UsageError
from ..fsutil import atomic_write
from ..model import names as naming
from ..model.bisect import GOOD, SKIP, Search, verdict_of
from ..model.patch import PatchFile
from ..model.series import Series, SeriesEntry
from ..vcs.git import CommitSpec
from .engine import TreeView, apply_patch
from .stackops import (DEFAULT_AUTHOR, check_stack_matches, commit_author, commit_message, not_carried_message,
                       require_clean, require_refreshed)
from .transaction import Files, move
from .workspace import Stack, Workspace

SCRATCH = "refs/gqueue/bisect"
STATE = "bisect.json"

# (argv, cwd, env) -> exit status; swapped in tests.
Runner = Callable[[Sequence[str], Path, dict[str, str]], int]


def subprocess_runner(argv: Sequence[str], cwd: Path, env: dict[str, str]) -> int:
    """Run CMD with its stdout sent to our stderr, so that --json output stays one document."""
    try:
        out: int | None = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        out = None
    shell = len(argv) == 1 and any(c.isspace() for c in argv[0])
    command: str | list[str] = argv[0] if shell else list(argv)
    try:
        proc = subprocess.run(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, shell=shell)
    except OSError as exc:  # not found, not executable: no verdict to give
        raise UsageError(f"cannot run '{argv[0]}': {exc.strerror or exc}",
                         hint="give a command that exists, or one argument with spaces for the shell") from None
    return proc.returncode


@dataclass(frozen=True)
class Culprit:
    position: int
    name: str
    id: str
    title: str
    upstream_pr: object
    upstream_state: str | None
    credit: object

    @classmethod
    def of(cls, position: int, patch: PatchFile) -> "Culprit":
        up = patch.meta.upstream
        return cls(position, patch.name, patch.meta.id, patch.meta.title, up.pr, up.state, patch.meta.get("credit"))

    def to_json(self) -> dict[str, object]:
        return {
            "position": self.position, "name": self.name, "id": self.id, "title": self.title,
            "upstream_pr": self.upstream_pr, "upstream_state": self.upstream_state, "credit": self.credit,
        }

    def describe(self) -> str:
        pr = f"vllm#{self.upstream_pr}" if self.upstream_pr not in (None, "") else "no upstream PR"
        return f"{self.name} (id {self.id}, #{self.position} in the series): {self.title} [{pr}]"


@dataclass(frozen=True)
class Step:
    position: int
    top: str | None
    verdict: str
    exit_code: int

    def to_json(self) -> dict[str, object]:
        return {"position": self.position, "top": self.top, "verdict": self.verdict, "exit_code": self.exit_code}


@dataclass
class BisectResult:
    good: int
    bad: int
    steps: list[Step] = field(default_factory=list)
    culprit: Culprit | None = None
    candidates: list[Culprit] = field(default_factory=list)
    head: str = ""
    applied: list[str] = field(default_factory=list)  # the stack the bisect started from (and put back)

    @property
    def top(self) -> str | None:
        return self.applied[-1] if self.applied else None

    def to_json(self) -> dict[str, object]:
        return {
            "good": self.good, "bad": self.bad, "culprit": self.culprit.to_json() if self.culprit else None,
            "candidates": [c.to_json() for c in self.candidates], "steps": [s.to_json() for s in self.steps],
            "tests": len(self.steps), "head": self.head, "applied": self.applied, "top": self.top,
        }


def describe_stack(applied: Sequence[str]) -> str:
    """The stack in words: its top patch and how many are applied, or the pinned release."""
    if not applied:
        return "no patch applied (the pinned release)"
    return f"{applied[-1]} on top ({len(applied)} patch(es) applied)"


# --- positions -------------------------------------------------------------------------------


def parse_position(spec: str, series: Series, read: Callable[[SeriesEntry], PatchFile]) -> int:
    """A position from a number (0..N), 'base', a patch name or a patch id (that patch applied);
    ``read`` gives an entry's patch, asked for only when ``spec`` is neither a number nor 'base'."""
    if spec == "base":
        return 0
    if spec.isdigit():
        number = int(spec)
        if number > len(series.entries):
            raise UsageError(f"position {number} is past the end of the series ({len(series.entries)} patches)")
        return number
    ids = {entry.name: read(entry).meta.id for entry in series.entries}
    try:
        return series.index(naming.resolve(spec, series.names, ids)) + 1
    except naming.UnknownName as exc:
        raise UsageError(f"'{spec}' is neither a position, 'base', nor a patch of the series", hint=exc.hint,
                         ref=exc.ref) from None


def position_commits(ws: Workspace, series: Series, stack: Stack, upto: int) -> tuple[list[str], str | None]:
    """Commits for positions 0..n (n <= upto) and, if n < upto, why the series stops there.

    Applied positions reuse the commits of ``stack`` (the stack now); the others are written
    once on SCRATCH.
    """
    commits = [stack.base] + [a.commit for a in stack.applied]
    if upto < len(commits):
        return commits[: upto + 1], None
    view = TreeView(ws.repo, stack.head)
    specs: list[CommitSpec] = []
    stopped = None
    pin = ws.pin()
    for entry in series.entries[len(stack.applied) : upto]:
        found, patch = ws.resolve(entry.name, line=entry.line, pin=pin)
        if patch is None:  # not carried on the pin: its empty commit, as push makes it
            specs.append(CommitSpec(not_carried_message(found, pin.describe()), {}, DEFAULT_AUTHOR))
            continue
        ws.reporter.progress(f"preparing {entry.name}")
        outcome = apply_patch(view, patch, strip=entry.strip)
        if not outcome.ok:
            stopped = f"{entry.name} does not apply ({outcome.status})"
            break
        specs.append(CommitSpec(commit_message(patch), outcome.changes, commit_author(patch)))
    commits += ws.repo.write_commits(stack.head, specs, SCRATCH)
    return commits, stopped


# --- state kept across an interruption ---------------------------------------------------------


def _state_path(ws: Workspace) -> Path:
    return ws.state_dir / STATE


def restore(ws: Workspace, *, say: bool = True) -> str | None:
    """Put the stack back where a bisect found it, if one was interrupted; say what was done
    (``say=False``: the end of a run, whose report says it: None)."""
    path = _state_path(ws)
    if not path.exists():
        return None
    try:
        head = json.loads(path.read_text())["head"]
    except (ValueError, KeyError):
        path.unlink()
        return "dropped an unreadable bisect state"
    current = ws.repo.head()
    if current is not None and current != head:
        move(ws, current, head, op="bisect-reset", files=Files.RESET)  # a forced checkout: CMD's edits go too
    else:
        ws.repo.checkout_fresh(head)  # undo edits CMD made to tracked files; its new files stay
    path.unlink()
    if ws.repo.rev(SCRATCH) is not None:
        ws.repo.delete_ref(SCRATCH)
    if not say:
        return None
    try:
        where = describe_stack(ws.stack().names)
    except GqueueError:  # a stack gqueue cannot read (HEAD moved by hand): its commit says where
        where = f"commit {head[:12]}"
    return f"the stack is back as the bisect found it: {where}"


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt while bisecting, so the stack is put back."""
    try:
        previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    except ValueError:  # not the main thread: nothing to install
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


# --- the search ---------------------------------------------------------------------------------


class _Prober:
    """Moves the work tree to a position, runs CMD there, and records the step."""

    def __init__(self, ws: Workspace, commits: list[str], names: list[str], argv: Sequence[str], runner: Runner) -> None:
        self.ws, self.commits, self.names, self.argv, self.runner = ws, commits, names, argv, runner
        self.steps: list[Step] = []
        self.current = ws.repo.head() or commits[0]

    def __call__(self, position: int) -> str:
        target = self.commits[position]
        # only the files that differ between the two positions are rewritten (as git bisect's
        # checkout); the put-back at the end resets the whole tree
        move(self.ws, self.current, target, op="bisect", files=Files.OVERWRITE)
        self.current = target
        top = self.names[position - 1] if position else None
        self.ws.reporter.progress(f"testing position {position} ({top or 'the pinned release'})")
        env = dict(os.environ, GQUEUE_BISECT_POSITION=str(position), GQUEUE_BISECT_TOP=top or "",
                   GQUEUE_BISECT_COMMIT=target)
        code = self.runner(self.argv, self.ws.repo.path, env)
        verdict = verdict_of(code)
        if verdict is None:
            raise StateError(f"the command exited {code} at position {position}: bisect aborted",
                             hint="exit 0 for good, 125 to skip, 1-127 (not 125) for bad")
        self.steps.append(Step(position, top, verdict, code))
        self.ws.reporter.note(f"position {position} ({top or 'base'}): {verdict} (exit {code})")
        return verdict


def _check_ends(probe: _Prober, search: Search, good: int, bad: int) -> None:
    """Test the ends the finished ``search`` leans on and no step tested: the bad end when no
    position below it failed, the good end when none above it passed.

    The search starts as if both ends had been tested (as git bisect trusts them), so a culprit
    inside the range costs no test of either end; one found next to an end is only reported
    once that end gave its verdict too. The answer stands on the same tests as when both ends
    were tested first: a tested pass right below a tested failure.
    """
    if search.bad == bad:
        verdict = probe(bad)
        if verdict == GOOD:
            raise StateError(f"the command passes at the bad end (position {bad}): there is nothing to find",
                             hint="give a later --bad, or check the command")
        if verdict == SKIP:
            raise StateError(f"the command skipped (125) the bad end, position {bad}; it must be testable")
    if search.good == good:
        verdict = probe(good)
        if verdict != GOOD:
            raise StateError(f"the command does not pass at the good end (position {good}: {verdict})",
                             hint="give an earlier --good ('base' is the pinned release)")


def run(ws: Workspace, argv: Sequence[str], *, good: str | None = None, bad: str | None = None,
        trust_ends: bool = False, runner: Runner = subprocess_runner) -> BisectResult:
    """Bisect the series between ``good`` and ``bad`` with ``argv``; ``trust_ends``: take the
    good end as passing and the bad end as failing without testing either, as git bisect does
    with the ends it is given (by default an end is tested when the answer leans on it)."""
    if not argv:
        raise UsageError("no command to run: gqueue bisect run [--good POS] [--bad POS] -- CMD...")
    note = restore(ws)
    if note:
        ws.reporter.note(note)
    series = ws.store.read_series()
    stack = ws.stack()
    check_stack_matches(stack, series)
    require_refreshed(ws)
    status = ws.repo.dirty_paths_later()  # git status runs while the positions are worked out
    patches: dict[str, PatchFile] = {}

    def read(entry: SeriesEntry) -> PatchFile:  # a patch's header is read when it is asked for
        if entry.name not in patches:
            patches[entry.name] = ws.store.read_patch(entry.name, line=entry.line)
        return patches[entry.name]

    try:
        lo = parse_position(good, series, read) if good is not None else 0
        hi = parse_position(bad, series, read) if bad is not None else len(series.entries)
        if lo >= hi:
            raise UsageError(f"the good position ({lo}) must come before the bad one ({hi})")
        commits, stopped = position_commits(ws, series, stack, hi)
    finally:
        require_clean(ws, "bisect", status)  # waits for it; a dirty tree is the error to report first
    if stopped is not None:
        if bad is not None or len(commits) - 1 <= lo:
            raise ConflictError(f"cannot reach position {hi}: {stopped}", path="series")
        hi = len(commits) - 1
        ws.reporter.note(f"bisecting up to position {hi}: {stopped}")
    names = series.names
    start = stack.head
    atomic_write(_state_path(ws), json.dumps({"head": start, "good": lo, "bad": hi, "argv": list(argv)}).encode())
    result = BisectResult(lo, hi, head=start, applied=stack.names)
    probe = _Prober(ws, commits, names, argv, runner)
    try:
        with _sigterm_as_interrupt():
            search = Search(lo, hi)
            while (position := search.next_probe()) is not None:
                search = search.record(position, probe(position))
            if not trust_ends:
                _check_ends(probe, search, lo, hi)
    finally:
        result.steps = probe.steps
        restore(ws, say=False)
    result.candidates = [Culprit.of(p, read(series.entries[p - 1])) for p in search.candidates]
    result.culprit = result.candidates[0] if len(result.candidates) == 1 else None
    return result


def reset(ws: Workspace) -> str:
    return restore(ws) or "no bisect to reset: the stack is as it was"

