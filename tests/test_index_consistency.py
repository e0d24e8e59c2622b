"""After every stack move the index, HEAD and the work tree agree (issue 43).

A push or pop writes the changed files in place and restats them into the index
(vcs/worktree.py, WorkRepo.move_clean). A file rewritten in the same second with the same
size keeps its inode and, with the written files' modification time, its whole stat record:
the index must still end up with the new blob. These tests drive generated stacked series
(several patches on the same files, many edits that keep a file's size) through push, pop,
goto, refresh and move in random order and depth, and check after each step that

- the index holds exactly HEAD's tree (`git ls-files -s` against `git ls-tree -r HEAD`),
- every tracked file holds HEAD's bytes, nothing else is there,
- gqueue's dirty list (`git status`) is empty, or name exactly the file the user edited.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
import random
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gqueue.errors import ConflictError
from gqueue.ops import checkout as checkout_op
from gqueue.ops import reorder, stackops
from gqueue.ops.workspace import Workspace
from gqueue.store import Store
from paths import REPO
from synth import make_sdist, sha256

LINES = 24
BASE = {
    f"vllm/{name}": "".join(f"{name[0]}{i:02d} = {i % 10}\n" for i in range(LINES))
    for name in ("alpha.py", "beta.py", "sub/gamma.py")
}
NEW_PATH = "vllm/sub/delta.py"


def git(work: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=work, check=True, capture_output=True,
                          text=True, errors="surrogateescape").stdout


def assert_consistent(ws: Workspace, edited: frozenset[str] | set[str] = frozenset(),
                      paths: set[str] | None = None) -> None:
    """Index == HEAD's tree, work tree == HEAD's files (``paths``: the bytes of those only; the
    others by git's status); dirty exactly where the user edited."""
    work = ws.repo.path
    head = {}
    for record in filter(None, git(work, "ls-tree", "-r", "-z", "HEAD").split("\0")):
        info, path = record.split("\t", 1)
        mode, _kind, sha = info.split()
        head[path] = (mode, sha)
    index = {}
    for record in filter(None, git(work, "ls-files", "-s", "-z").split("\0")):
        info, path = record.split("\t", 1)
        mode, sha, _stage = info.split()
        index[path] = (mode, sha)
    on_disk = {p.relative_to(work).as_posix() for p in work.rglob("*")
               if p.is_file() and ".git" not in p.relative_to(work).parts}
    assert on_disk == set(head)
    for path, (_mode, sha) in head.items():
        if path not in edited and (paths is None or path in paths):
            data = (work / path).read_bytes()
            assert hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == sha, f"{path} differs from HEAD"
    stale = sorted(p for p in set(head) | set(index) if head.get(p) != index.get(p))
    assert stale == [], f"the index disagrees with HEAD on {stale}"
    assert sorted(ws.repo.dirty_paths()) == sorted(edited)


# --- generated series ------------------------------------------------------------------------------


def _edit(rng: random.Random, text: str | None, kinds: list[str]) -> str | None:
    """One small change of a file's text; most keep its size (a digit changed in place)."""
    if text is None:
        return "".join(f"d{i:02d} = {i % 10}\n" for i in range(rng.randrange(3, 9)))
    lines = text.splitlines(keepends=True)
    kind = rng.choice(kinds)
    i = rng.randrange(len(lines))
    if kind == "same-size":
        digit = lines[i].rstrip("\n")[-1]
        lines[i] = lines[i][:-2] + rng.choice([d for d in "0123456789" if d != digit]) + "\n"
    elif kind == "insert":
        lines.insert(i, f"x{rng.randrange(100):02d} = {rng.randrange(10)}\n")
    elif kind == "delete" and len(lines) > 4:
        del lines[i]
    else:
        return None
    return "".join(lines)


def _diff(path: str, old: str | None, new: str | None) -> str:
    a = old.splitlines(keepends=True) if old is not None else []
    b = new.splitlines(keepends=True) if new is not None else []
    body = "".join(difflib.unified_diff(a, b, "/dev/null" if old is None else f"a/{path}",
                                        "/dev/null" if new is None else f"b/{path}", n=3))
    head = f"diff --git a/{path} b/{path}\n"
    if old is None:
        head += "new file mode 100644\n"
    elif new is None:
        head += "deleted file mode 100644\n"
    return head + body


def stacked_series(seed: int, count: int) -> list[tuple[str, str]]:
    """``count`` patches (name, diff), each on the tree the ones before it leave: one to three
    files each, most files touched by several patches, a file made and later deleted."""
    rng = random.Random(seed)
    state: dict[str, str | None] = {**BASE, NEW_PATH: None}
    patches = []
    for number in range(1, count + 1):
        diffs = []
        for path in sorted(rng.sample(sorted(state), rng.choice((1, 1, 2, 3)))):
            old = state[path]
            if path == NEW_PATH and old is not None and rng.random() < 0.2:
                new = None
            else:
                new = _edit(rng, old, ["same-size"] * 4 + ["insert", "delete"])
            if new is None and old is not None and path != NEW_PATH or new == old:
                continue
            diffs.append(_diff(path, old, new))
            state[path] = new
        if diffs:
            patches.append((f"T{number:02d}-step.patch", "".join(diffs)))
    return patches


# --- the random walk -------------------------------------------------------------------------------

STEPS = st.lists(st.tuples(st.sampled_from(["push", "pop", "push-all", "pop-all", "goto", "refresh", "move"]),
                           st.integers(0, 1000)), min_size=3, max_size=8)


def _reset(ws: Workspace, patches: list[tuple[str, str]]) -> None:
    if ws.stack().applied:
        stackops.pop(ws, count=None, force=True)
    for old in (ws.store.root / "queue").glob("*.patch"):
        old.unlink()
    for name, body in patches:
        pid = name.split("-", 1)[0]
        (ws.store.root / "queue" / name).write_text(f"---\nid: {pid}\ntitle: {name}\n...\n{body}")
    (ws.store.root / "series").write_text("".join(f"{name}\n" for name, _ in patches))


def _step(ws: Workspace, op: str, arg: int) -> None:
    stack = ws.stack()
    names = ws.store.read_series().names
    applied, waiting = len(stack.applied), len(names) - len(stack.applied)
    if op == "push" and waiting:
        stackops.push(ws, count=1 + arg % waiting)
    elif op == "pop" and applied:
        stackops.pop(ws, count=1 + arg % applied)
    elif op == "push-all" and waiting:
        stackops.push(ws, count=None)
    elif op == "pop-all" and applied:
        stackops.pop(ws, count=None)
    elif op == "goto":
        target = names[arg % len(names)]
        if target != (stack.top.name if stack.top else None):
            stackops.goto(ws, target)
    elif op == "refresh" and applied:
        # the user changes a line of a file of the top patch in place (same size), refreshes
        touched = [p for p in git(ws.repo.path, "diff", "--name-only", "--no-renames", "HEAD~1", "HEAD").split()
                   if (ws.repo.path / p).exists()]
        if touched:
            path = ws.repo.path / touched[arg % len(touched)]
            data = bytearray(path.read_bytes())
            at = data.index(b"\n") - 1
            data[at] = ord("0") + (data[at] - ord("0") + 1 + arg % 9) % 10
            path.write_bytes(bytes(data))
            assert_consistent(ws, {touched[arg % len(touched)]})
        stackops.refresh(ws)
    elif op == "move" and len(names) > 1:
        name, other = names[arg % len(names)], names[(arg // 7) % len(names)]
        if name != other:
            try:
                reorder.move_patch(ws, name, before=other)
            except ConflictError:
                pass


def test_every_stack_move_leaves_index_head_and_tree_in_agreement(tmp_path: Path) -> None:
    archive = make_sdist(tmp_path / "upstream", "0.1.0", dict(BASE))
    root = tmp_path / "q"
    (root / "queue").mkdir(parents=True)
    (root / "series").write_text("")
    (root / "vendor-pin.txt").write_text(f"pin {archive.as_uri()}#sha256={sha256(archive)}\n")
    ws = Workspace(Store(root))
    try:
        checkout_op.checkout(ws)

        @settings(max_examples=6, deadline=None, derandomize=True,
                  suppress_health_check=[HealthCheck.too_slow])
        @given(st.integers(0, 2**32), st.integers(3, 12), STEPS)
        def walk(seed: int, count: int, steps: list[tuple[str, int]]) -> None:
            _reset(ws, stacked_series(seed, count))
            assert_consistent(ws)
            for op, arg in [("push-all", 0), *steps]:
                _step(ws, op, arg)
                assert_consistent(ws)

        walk()
    finally:
        ws.close()


# --- a few hundred patches on the real pinned tree ------------------------------------------------


def _synthseries() -> ModuleType:
    spec = importlib.util.spec_from_file_location("synthseries", REPO / "tools" / "bench" / "synthseries.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _keeps_a_size(patch: Path) -> bool:
    """The patch changes some file without changing its length (what a stale index needed)."""
    text = patch.read_text()
    for part in text.split("diff --git ")[1:]:
        lines = part.splitlines(keepends=True)
        added = sum(len(x) for x in lines if x.startswith("+") and not x.startswith("+++"))
        removed = sum(len(x) for x in lines if x.startswith("-") and not x.startswith("---"))
        if added == removed:
            return True
    return False


@pytest.mark.slow
def test_three_hundred_patches_on_real_vllm_keep_index_head_and_tree_in_agreement(tmp_path: Path,
                                                                                 real_cache: str) -> None:
    """The project's series generator (tools/bench/synthseries.py) on the pinned sdist, with many
    edits that keep a file's size: push --all, pop --all, push --all, then at patches picked at
    random among those that keep a file's size, goto there, pop one and push it again in quick
    succession (its files written twice within a second), checked after each move."""
    root = tmp_path / "q"
    (root / "queue").mkdir(parents=True)
    shutil.copy(REPO / "vendor-pin.txt", root / "vendor-pin.txt")
    (root / "series").write_text("")
    ws = Workspace(Store(root))
    try:
        checkout_op.checkout(ws)
        names = _synthseries().generate(ws.repo.path, root, n=300, seed=43, same_size=0.6)
        assert len(names) == 300
        touched = {line[6:].rstrip("\n") for name in names for line in (root / "queue" / name).open()
                   if line.startswith("+++ b/")}
        for move in ("push", "pop", "push"):
            (stackops.push if move == "push" else stackops.pop)(ws, count=None)
            assert_consistent(ws, paths=touched)
        same_size = [name for name in names if _keeps_a_size(root / "queue" / name)]
        assert len(same_size) >= 20
        for name in random.Random(43).sample(same_size, 10):
            stackops.goto(ws, name)
            assert_consistent(ws, paths=touched)
            for move in ("pop", "push", "pop", "push"):
                (stackops.push if move == "push" else stackops.pop)(ws)
                assert_consistent(ws, paths=touched)
        assert ws.stack().names == names[: len(ws.stack().applied)]
    finally:
        ws.close()
