"""Shell completion: click's completion protocol driven as bash and zsh drive it, on a small queue."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from synth import Queue, make_queue


def _queue(tmp_path: Path) -> Queue:
    q = make_queue(tmp_path)
    body = "diff --git a/README.md b/README.md\n--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-synthetic upstream\n+x\n"
    q.write_patch("PN100-first-fix.patch", body, patch_id="PN100")
    q.write_patch("PN101-second.patch", body, patch_id="PN101")
    q.write_patch("kernel-tune.patch", body, patch_id="KT7")
    q.set_series("PN100-first-fix.patch", "PN101-second.patch", "kernel-tune.patch")
    return q


def _complete(words: str, *, cwd: Path, shell: str = "bash") -> subprocess.CompletedProcess[str]:
    """What the shell's completion function gets back for the command line ``words`` (cursor at the end)."""
    env = dict(os.environ, _GQUEUE_COMPLETE=f"{shell}_complete", COMP_WORDS=words,
               COMP_CWORD=str(len(words.split()) - (0 if words.endswith(" ") else 1)))
    return subprocess.run([sys.executable, "-m", "gqueue"], capture_output=True, text=True, env=env, cwd=cwd)


def _values(words: str, *, cwd: Path) -> list[str]:
    proc = _complete(words, cwd=cwd)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return [line.split(",", 1)[1] for line in proc.stdout.splitlines() if line]


@pytest.mark.parametrize("command", ["push", "pop", "goto", "header", "delete", "rename", "move", "fold", "diff", "files"])
def test_patch_arguments_complete_the_series_names(tmp_path: Path, command: str) -> None:
    q = _queue(tmp_path)
    assert _values(f"gqueue {command} ", cwd=q.root) == ["PN100-first-fix.patch", "PN101-second.patch",
                                                         "kernel-tune.patch"]


def test_a_typed_prefix_completes_names_and_ids(tmp_path: Path) -> None:
    q = _queue(tmp_path)
    assert _values("gqueue push PN10", cwd=q.root) == ["PN100-first-fix.patch", "PN101-second.patch", "PN100", "PN101"]
    assert _values("gqueue goto K", cwd=q.root) == ["KT7"]
    assert _values("gqueue goto ker", cwd=q.root) == ["kernel-tune.patch"]


def test_completion_follows_dash_c_and_option_values(tmp_path: Path) -> None:
    q = _queue(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert _values(f"gqueue -C {q.root} move kernel-tune.patch --before PN", cwd=elsewhere) == [
        "PN100-first-fix.patch", "PN101-second.patch", "PN100", "PN101"]
    assert _values(f"gqueue -C {q.root} rename PN101-second.patch ", cwd=elsewhere) == []  # NEW is a new name
    assert _values("gqueue push ", cwd=elsewhere) == []  # no queue here: nothing, and no error


def test_commands_complete_and_zsh_gets_the_patch_an_id_names(tmp_path: Path) -> None:
    q = _queue(tmp_path)
    assert _values("gqueue un", cwd=q.root) == ["unapplied", "undo"]
    proc = _complete("gqueue goto KT", cwd=q.root, shell="zsh")
    assert proc.returncode == 0 and proc.stdout.splitlines() == ["plain", "KT7", "kernel-tune.patch"]
    script = subprocess.run([sys.executable, "-m", "gqueue"], capture_output=True, text=True,
                            env=dict(os.environ, _GQUEUE_COMPLETE="bash_source"), cwd=q.root)
    assert script.returncode == 0 and "complete -o nosort -F _gqueue_completion gqueue" in script.stdout
