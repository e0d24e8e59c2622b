"""gqueue bisect run on the synthetic upstream: a planted culprit at every position."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Sequence

import pytest

from gqueue.errors import StateError, UsageError
from gqueue.model.bisect import BAD, GOOD, Search
from gqueue.ops import bisect as bisect_op
from gqueue.ops.workspace import Workspace
from gqueue.store import Store
from synth import BASE_FILES, Queue, make_queue, unified


def build_queue(tmp: Path, n: int) -> Queue:
    """n patches; patch i adds vllm/mark_i.py and edits f{i} in vllm/util.py."""
    q = make_queue(tmp)
    util = BASE_FILES["vllm/util.py"]
    names = []
    for i in range(1, n + 1):
        name = f"B{i}-step-{i}.patch"
        body = unified("vllm/util.py", util, util.replace(f"return x + {i}\n", f"return x + {i * 100}\n", 1))
        body += unified(f"vllm/mark_{i}.py", "", f"MARK = {i}\n").replace(
            f"--- a/vllm/mark_{i}.py", "--- /dev/null").replace("diff --git", "diff --git", 1)
        body = body.replace(f"diff --git a/vllm/mark_{i}.py b/vllm/mark_{i}.py\n",
                            f"diff --git a/vllm/mark_{i}.py b/vllm/mark_{i}.py\nnew file mode 100644\n")
        q.write_patch(name, body, patch_id=f"B{i}",
                      extra=f"upstream:\n  pr: {1000 + i}\n  state: open\n  relationship: backport\ncredit: dev{i}\n")
        names.append(name)
    q.set_series(*names)
    q.run("checkout")
    return q


def culprit_runner(k: int, calls: list[int] | None = None) -> bisect_op.Runner:
    def run(argv: Sequence[str], cwd: Path, env: dict[str, str]) -> int:
        if calls is not None:
            calls.append(int(env["GQUEUE_BISECT_POSITION"]))
        return 1 if (cwd / f"vllm/mark_{k}.py").exists() else 0

    return run


def snapshot(q: Queue) -> tuple[str, list[str], dict[str, str]]:
    ws = Workspace(Store(q.root))
    try:
        head = ws.repo.head() or ""
        applied = ws.stack().names
        dirty = ws.repo.dirty_paths()
    finally:
        ws.close()
    files = {p.relative_to(q.work).as_posix(): p.read_text() for p in sorted(q.work.rglob("*.py"))}
    assert dirty == []
    return head, applied, files


def bisect(q: Queue, runner: bisect_op.Runner, **kwargs: str | bool) -> bisect_op.BisectResult:
    ws = Workspace(Store(q.root))
    ws.lock()
    try:
        return bisect_op.run(ws, ["test"], runner=runner, **kwargs)
    finally:
        ws.close()


@pytest.mark.parametrize("n,pushed", [(2, 0), (3, 1), (17, 5)])
def test_planted_culprit_found_at_every_position(tmp_path: Path, n: int, pushed: int) -> None:
    q = build_queue(tmp_path, n)
    if pushed:
        q.run("push", "-n", str(pushed))
    before = snapshot(q)
    limit = max(1, (n - 1).bit_length()) + 2  # the search plus the two ends
    for k in range(1, n + 1):
        calls: list[int] = []
        result = bisect(q, culprit_runner(k, calls))
        assert result.culprit is not None, k
        assert (result.culprit.position, result.culprit.name, result.culprit.id) == (k, f"B{k}-step-{k}.patch", f"B{k}")
        assert result.culprit.upstream_pr == 1000 + k and result.culprit.credit == f"dev{k}"
        assert len(calls) <= limit
        assert snapshot(q) == before, f"the stack moved after bisecting for B{k}"
    assert not (q.root / ".gqueue" / "bisect.json").exists()


def test_edits_the_command_makes_to_tracked_files(tmp_path: Path) -> None:
    """A step rewrites the files its position differs in from the last one (git bisect's
    checkout), so an edit the command made there is gone; an edit to a file every position
    shares may stay for the next steps, and the put-back at the end undoes it too."""
    n, k = 9, 6
    q = build_queue(tmp_path, n)
    before = snapshot(q)
    util = BASE_FILES["vllm/util.py"]
    seen: list[tuple[int, bool, bool]] = []

    def run(argv: Sequence[str], cwd: Path, env: dict[str, str]) -> int:
        position = int(env["GQUEUE_BISECT_POSITION"])
        expected = util
        for i in range(1, position + 1):
            expected = expected.replace(f"return x + {i}\n", f"return x + {i * 100}\n", 1)
        seen.append((position, (cwd / "vllm/util.py").read_text() == expected,
                     (cwd / "vllm/config.py").read_text().endswith("# edited by the test\n")))
        with (cwd / "vllm/util.py").open("a") as handle:  # every position has its own util.py
            handle.write("# edited by the test\n")
        with (cwd / "vllm/config.py").open("a") as handle:  # one config.py for every position
            handle.write("# edited by the test\n")
        return 1 if (cwd / f"vllm/mark_{k}.py").exists() else 0

    result = bisect(q, run)
    assert result.culprit is not None and result.culprit.position == k
    assert len(seen) >= 3
    assert all(fresh for _, fresh, _ in seen), seen  # util.py as its position has it, at every step
    assert not seen[0][2] and seen[1][2]  # config.py: the first step's edit was still there at the second
    assert snapshot(q) == before  # all put back, the shared file's edit too


def test_an_end_is_tested_only_when_the_answer_leans_on_it(tmp_path: Path) -> None:
    """The search starts as git bisect does, trusting both ends; an end is tested when the
    search ends next to it (the culprit is the first patch, or the last), so a culprit inside
    costs only the search's tests, and the answer still rests on a pass right below a failure."""
    n = 17
    q = build_queue(tmp_path, n)
    search_only = (n - 1).bit_length()  # at most ceil(log2(n)) tests for n candidates
    for k, end in ((1, 0), (n // 2, None), (n, n)):
        calls: list[int] = []
        result = bisect(q, culprit_runner(k, calls))
        assert result.culprit is not None and result.culprit.position == k
        if end is None:
            assert 0 not in calls and n not in calls, calls
            assert len(calls) <= search_only, calls
        else:
            assert calls.count(end) == 1 and calls[-1] == end, calls  # the end, once, after the search
            assert len(calls) <= search_only + 1, calls
        tested = {s.position: s.verdict for s in result.steps}
        assert tested.get(k) == "bad" and tested.get(k - 1) == "good"


def _git_bisect_probes(repo: Path, culprit: int) -> list[int]:
    """The positions ``git bisect run`` tests on ``repo`` (commit i holds n = i) for a culprit."""
    log = repo.parent / f"probes-{culprit}"
    log.write_text("")
    first = subprocess.run(["git", "rev-list", "--max-parents=0", "HEAD"], cwd=repo, capture_output=True,
                           text=True, check=True).stdout.strip()
    subprocess.run(["git", "bisect", "start", "HEAD", first], cwd=repo, capture_output=True, check=True)
    try:
        check = f'n=$(cat n); echo "$n" >> "{log}"; [ "$n" -lt {culprit} ]'
        subprocess.run(["git", "bisect", "run", "sh", "-c", check], cwd=repo, capture_output=True, check=True)
    finally:
        subprocess.run(["git", "bisect", "reset"], cwd=repo, capture_output=True, check=True)
    return [int(line) for line in log.read_text().split()]


def _model_probes(n: int, culprit: int) -> list[int]:
    search, probes = Search(0, n), []
    while (position := search.next_probe()) is not None:
        probes.append(position)
        search = search.record(position, BAD if position >= culprit else GOOD)
    assert search.culprit == culprit
    return probes


@pytest.mark.parametrize("n", [3, 40])
def test_the_search_tests_what_git_bisect_run_tests(tmp_path: Path, n: int) -> None:
    """With both ends trusted, the positions tested, in order, are git bisect run's on a linear
    history of the same length, for every culprit: never more tests than git's."""
    repo = tmp_path / "linear"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    for i in range(n + 1):
        (repo / "n").write_text(f"{i}\n")
        subprocess.run([*git, "add", "n"], cwd=repo, check=True)
        subprocess.run([*git, "commit", "-q", "-m", f"c{i}"], cwd=repo, check=True)
    culprits = range(1, n + 1) if n < 10 else (1, 2, 3, 7, n // 3, n // 2, n // 2 + 1, n - 2, n - 1, n)
    for culprit in culprits:
        assert _model_probes(n, culprit) == _git_bisect_probes(repo, culprit), culprit


def test_trusted_ends_are_not_tested(tmp_path: Path) -> None:
    """--trust-ends: a culprit next to an end costs no test of that end (git bisect's count);
    an end that does not behave as given yields that end's patch, as git bisect would."""
    n = 9
    q = build_queue(tmp_path, n)
    for k in (1, n):
        calls: list[int] = []
        result = bisect(q, culprit_runner(k, calls), trust_ends=True)
        assert result.culprit is not None and result.culprit.position == k
        assert 0 not in calls and n not in calls, calls
        assert calls == _model_probes(n, k)
    calls = []
    result = bisect(q, culprit_runner(6, calls), bad="4", trust_ends=True)  # passes at the "bad" end
    assert result.culprit is not None and result.culprit.position == 4 and 4 not in calls


def test_good_and_bad_bounds_by_name_id_and_number(tmp_path: Path) -> None:
    q = build_queue(tmp_path, 6)
    calls: list[int] = []
    result = bisect(q, culprit_runner(4, calls), good="B2", bad="5")
    assert result.culprit is not None and result.culprit.position == 4
    assert set(calls) <= {2, 3, 4, 5}
    result = bisect(q, culprit_runner(4), good="B2-step-2.patch", bad="B4-step-4")
    assert result.culprit is not None and result.culprit.id == "B4"
    with pytest.raises(UsageError):
        bisect(q, culprit_runner(4), good="5", bad="2")
    with pytest.raises(StateError, match="bad end"):
        bisect(q, culprit_runner(6), bad="4")  # passes at the bad end
    with pytest.raises(StateError, match="good end"):
        bisect(q, culprit_runner(2), good="3")


def test_skips_leave_candidates(tmp_path: Path) -> None:
    q = build_queue(tmp_path, 5)

    def runner(argv: Sequence[str], cwd: Path, env: dict[str, str]) -> int:
        if env["GQUEUE_BISECT_POSITION"] == "2":
            return 125
        return 1 if (cwd / "vllm/mark_4.py").exists() else 0

    result = bisect(q, runner)
    assert result.culprit is not None and result.culprit.position == 4
    assert [s.verdict for s in result.steps if s.position == 2] == ["skip"]
    result = bisect(q, lambda a, c, e: 125 if e["GQUEUE_BISECT_POSITION"] in ("2", "3") else (
        1 if (c / "vllm/mark_3.py").exists() else 0))
    assert result.culprit is None and [c.position for c in result.candidates] == [2, 3, 4]


@pytest.mark.parametrize("fail_at", [1, 2, 3])  # the first, a middle and the last of its 3 tests
def test_interrupt_puts_the_stack_back(tmp_path: Path, fail_at: int) -> None:
    q = build_queue(tmp_path, 9)
    q.run("push", "-n", "3")
    before = snapshot(q)
    calls: list[int] = []

    def runner(argv: Sequence[str], cwd: Path, env: dict[str, str]) -> int:
        calls.append(1)
        if len(calls) == fail_at:
            raise KeyboardInterrupt
        return 1 if (cwd / "vllm/mark_7.py").exists() else 0

    with pytest.raises(KeyboardInterrupt):
        bisect(q, runner)
    assert snapshot(q) == before
    assert not (q.root / ".gqueue" / "bisect.json").exists()


def test_cli_json_and_exit_codes(tmp_path: Path) -> None:
    q = build_queue(tmp_path, 4)
    check = "import os, sys; sys.exit(1 if os.path.exists('vllm/mark_3.py') else 0)"
    proc = q.run("bisect", "run", "--json", "--", sys.executable, "-c", check)
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "gqueue.bisect-run/1" and doc["ok"]
    assert doc["result"]["culprit"]["name"] == "B3-step-3.patch"
    assert doc["result"]["culprit"]["upstream_pr"] == 1003
    human = q.run("bisect", "run", "--", sys.executable, "-c", check)
    assert "first bad patch: B3-step-3.patch (id B3, #3 in the series)" in human.stdout
    assert q.run("applied").stdout.split() == []
    aborted = q.run("bisect", "run", "--", sys.executable, "-c", "import sys; sys.exit(200)", check=False)
    assert aborted.returncode == 1 and "aborted" in aborted.stderr
    assert q.run("status", "--json").stdout and json.loads(q.run("status", "--json").stdout)["result"]["dirty"] == []


@pytest.mark.parametrize("crash_after", [8, 14, 20, 26])
def test_killed_bisect_is_put_back_by_reset(tmp_path: Path, crash_after: int) -> None:
    q = build_queue(tmp_path, 8)
    q.run("push", "-n", "2")
    before = snapshot(q)
    check = "import os, sys; sys.exit(1 if os.path.exists('vllm/mark_6.py') else 0)"
    proc = q.run("bisect", "run", "--", sys.executable, "-c", check, check=False,
                 env={"GQUEUE_TEST_CRASH_AFTER": str(crash_after)})
    assert proc.returncode in (-9, 0)
    q.run("bisect", "reset")
    assert snapshot(q) == before


def test_plain_git_bisect_works_on_the_work_tree(tmp_path: Path) -> None:
    import subprocess

    q = build_queue(tmp_path, 5)
    q.run("push", "--all")
    git = ["git", "-C", str(q.work)]
    subprocess.run([*git, "bisect", "start", "gqueue", "gqueue/pin/vllm-0.1.0"], check=True, capture_output=True)
    out = subprocess.run([*git, "bisect", "run", "sh", "-c", "test ! -e vllm/mark_4.py"], check=True,
                         capture_output=True, text=True).stdout
    assert "is the first bad commit" in out and "Gqueue-Patch: B4-step-4.patch" in out
    subprocess.run([*git, "bisect", "reset"], check=True, capture_output=True)
    assert q.run("applied").stdout.split() == [f"B{i}-step-{i}.patch" for i in range(1, 6)]


def test_sigterm_puts_the_stack_back(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import time

    q = build_queue(tmp_path, 6)
    q.run("push", "-n", "2")
    before = snapshot(q)
    started = tmp_path / "started"
    cmd = f"import pathlib, time; pathlib.Path({str(started)!r}).touch(); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-m", "gqueue", "-C", str(q.root), "bisect", "run", "--",
                             sys.executable, "-c", cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started.exists()
    os.kill(proc.pid, signal.SIGTERM)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "interrupted" in err
    assert snapshot(q) == before
    assert not (q.root / ".gqueue" / "bisect.json").exists()


def test_command_that_cannot_run_is_a_usage_error(tmp_path: Path) -> None:
    q = build_queue(tmp_path, 3)
    q.run("push", "-n", "1")
    before = snapshot(q)
    proc = q.run("bisect", "run", "--", "no-such-command-for-gqueue", "--flag", check=False)
    assert proc.returncode == 2, proc.stderr
    assert "cannot run 'no-such-command-for-gqueue'" in proc.stderr and "Traceback" not in proc.stderr
    assert snapshot(q) == before
    assert not (q.root / ".gqueue/bisect.json").exists()
