"""How many git processes the stack commands start (GIT_TRACE lists each one): each process
costs start-up time and a read (often a write) of the index, which is most of what a push, pop
or refresh of a clean tree costs besides Python's own start-up. These pin the cuts made, so
that a later change that adds a process back shows up here, not only in a benchmark."""

from __future__ import annotations

import json
import re
from pathlib import Path

from synth import BASE_FILES, Queue, make_queue, unified
from test_worktree_writes import assert_tree_matches_head


def _queue(tmp_path: Path, n: int = 3) -> Queue:
    q = make_queue(tmp_path)
    util = BASE_FILES["vllm/util.py"]
    names = []
    for i in range(1, n + 1):
        name = f"A{i}-step.patch"
        q.write_patch(name, unified("vllm/util.py", util, util.replace(f"return x + {i}\n", f"return x + {i}0\n", 1)))
        names.append(name)
    q.set_series(*names)
    q.run("checkout")
    return q


def traced(q: Queue, tmp_path: Path, *args: str) -> list[str]:
    """Run gqueue ARGS; the git commands it started, one line each ('update-index -q ...')."""
    trace = tmp_path / f"trace-{len(list(tmp_path.glob('trace-*')))}.txt"
    q.run(*args, env={"GIT_TRACE": str(trace)})
    text = trace.read_text() if trace.exists() else ""
    return [m.group(1) for m in re.finditer(r"trace: built-in: git (.*)", text)]


def _update_index_runs(commands: list[str]) -> int:
    return sum(1 for c in commands if c.startswith("update-index "))


def test_a_move_whose_files_change_size_updates_the_index_once(tmp_path: Path) -> None:
    """Files whose size changed cannot match their index entries' stat data: one restat
    (``update-index --add --remove --stdin``) records them. A file rewritten at its old size
    first gets its id from the bytes written (``--index-info``), a second run; either way the
    index ends as git's own checkout leaves it."""
    q = make_queue(tmp_path)
    util = BASE_FILES["vllm/util.py"]
    q.write_patch("A1-grow.patch", unified("vllm/util.py", util, util.replace("return x + 1\n", "return x + 100\n", 1)))
    q.write_patch("A2-new.patch", "diff --git a/vllm/new.py b/vllm/new.py\nnew file mode 100644\n"
                  "--- /dev/null\n+++ b/vllm/new.py\n@@ -0,0 +1 @@\n+NEW = 1\n")
    grown = util.replace("return x + 1\n", "return x + 100\n", 1)
    q.write_patch("A3-digit.patch", unified("vllm/util.py", grown, grown.replace("return x + 7\n", "return x + 8\n", 1)))
    q.set_series("A1-grow.patch", "A2-new.patch", "A3-digit.patch")
    q.run("checkout")
    assert _update_index_runs(traced(q, tmp_path, "push", "-n", "2")) == 1
    assert_tree_matches_head(q.work)
    assert _update_index_runs(traced(q, tmp_path, "push")) == 2  # the same size: ids first
    assert_tree_matches_head(q.work)
    assert _update_index_runs(traced(q, tmp_path, "pop")) == 2
    assert_tree_matches_head(q.work)
    assert _update_index_runs(traced(q, tmp_path, "pop", "--all")) == 1  # a file deleted, one shrunk
    assert_tree_matches_head(q.work)
    assert (q.work / "vllm/util.py").read_text() == util


def test_the_undo_log_reads_no_commit_message_the_command_already_has(tmp_path: Path) -> None:
    """The undo log names the top patch before and after a command from the commits' messages:
    the stack's chain was read (with its base) and the new commits written in this process, so
    no 'git log --no-walk' is started for them."""
    q = _queue(tmp_path)
    q.run("push", "-n", "2")
    for args in (("push",), ("pop", "--all")):
        started = traced(q, tmp_path, *args)
        assert not [c for c in started if "--no-walk" in c], (args, started)
    q.run("push", "--all")
    (q.work / "vllm/util.py").write_text((q.work / "vllm/util.py").read_text() + "# more\n")
    started = traced(q, tmp_path, "refresh")
    assert not [c for c in started if "--no-walk" in c], started
    entries = json.loads((q.root / ".gqueue" / "undo" / "log.json").read_text())["entries"]
    tops = [(e["op"], e["before"]["top"], e["after"]["top"]) for e in entries]
    assert tops == [("push", None, "A2-step.patch"), ("push", "A2-step.patch", "A3-step.patch"),
                    ("pop", "A3-step.patch", None), ("push", None, "A3-step.patch"),
                    ("refresh", "A3-step.patch", "A3-step.patch")]


def test_move_checks_the_work_tree_once(tmp_path: Path) -> None:
    """move checks work/ for unrefreshed changes once, before it moves the stack; its own pop and
    push then move a tree it found clean (two more git status runs were 2x40-75 ms on vLLM's tree).
    An edit made before the move is still refused, with nothing changed."""
    q = _queue(tmp_path)
    q.run("push", "--all")
    started = traced(q, tmp_path, "move", "A1-step.patch", "--last")
    assert sum(1 for c in started if c.startswith("status ")) == 1, started
    assert q.run("applied").stdout.split() == ["A2-step.patch", "A3-step.patch", "A1-step.patch"]
    assert_tree_matches_head(q.work)
    (q.work / "vllm/util.py").write_text((q.work / "vllm/util.py").read_text() + "# mine\n")
    refused = q.run("move", "A1-step.patch", "--first", check=False)
    assert refused.returncode != 0 and "refusing to move" in refused.stderr
    assert q.run("applied").stdout.split() == ["A2-step.patch", "A3-step.patch", "A1-step.patch"]
    assert (q.work / "vllm/util.py").read_text().endswith("# mine\n")


def test_the_tools_commands_start_without_the_package_index_client() -> None:
    """bisect run, lint, docs and plan share cli/cmd_tools.py; the package index client (and
    packaging.tags) that only 'bisect pins' uses is imported by that command, not at start-up
    (it was 60 ms of every bisect run)."""
    import subprocess
    import sys

    code = ("import sys, gqueue.cli.main, gqueue.cli.cmd_tools as t; "
            "print(sorted(m for m in ('gqueue.upstream.index', 'gqueue.ops.bisect_pins', 'gqueue.ops.lint') if m in sys.modules)); "
            "print(sorted(c for c in t.bisect.commands))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["[]", "['pins', 'reset', 'run']"]
