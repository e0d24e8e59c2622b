"""Two gqueue processes on one queue: the second waits or fails naming the holder; stale locks clear."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crashkit import PATCHES, applied_names, git
from synth import Queue, make_queue

HOLD = 3.0  # seconds the holder keeps the lock


def _queue(tmp: Path) -> Queue:
    q = make_queue(tmp)
    for name, body in PATCHES.items():
        q.write_patch(name, body)
    q.set_series(*PATCHES)
    q.run("checkout")
    return q


def _popen(q: Queue, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    full = dict(os.environ)
    full.update(env or {})
    return subprocess.Popen([sys.executable, "-m", "gqueue", "-C", str(q.root), *args], env=full,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _hold_lock(q: Queue, seconds: float = HOLD) -> subprocess.Popen[str]:
    """A real gqueue command that holds the lock: 'header --edit' with an editor that sleeps."""
    proc = _popen(q, "header", "A1-parser.patch", "--edit", env={"GQUEUE_EDITOR": f"sh -c 'sleep {seconds}' --"})
    lock = q.root / ".gqueue" / "lock"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if json.loads(lock.read_text() or "{}").get("pid") == proc.pid:
                return proc
        except (OSError, ValueError):
            pass
        time.sleep(0.02)
    proc.kill()
    raise AssertionError("the holder never took the lock")


def test_second_process_fails_naming_the_holder(tmp_path: Path) -> None:
    q = _queue(tmp_path)
    holder = _hold_lock(q)
    try:
        proc = q.run("push", check=False, env={"GQUEUE_LOCK_WAIT": "0"})
    finally:
        holder.wait(timeout=60)
    assert proc.returncode == 1
    line = proc.stderr.splitlines()[0]
    assert line.startswith("error[locked]: ")
    assert f"gqueue pid {holder.pid} on {socket.gethostname()}" in line
    assert "header A1-parser.patch --edit" in line
    assert "GQUEUE_LOCK_WAIT" in proc.stderr  # the hint says how to wait longer
    assert q.run("applied").stdout.split() == []  # nothing happened
    doc = json.loads(q.run("push", "--json", env={"GQUEUE_LOCK_WAIT": "0"}).stdout)
    assert doc["ok"] and [p["name"] for p in doc["result"]["pushed"]] == ["A1-parser.patch"]


def test_second_process_waits_for_the_holder(tmp_path: Path) -> None:
    q = _queue(tmp_path)
    holder = _hold_lock(q, 2.0)
    start = time.monotonic()
    proc = q.run("push", "--all", check=False, env={"GQUEUE_LOCK_WAIT": "60"})
    waited = time.monotonic() - start
    holder.wait(timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert waited >= 1.0  # it waited for the holder instead of failing
    assert list(applied_names(q.work) or ()) == list(PATCHES)


def test_readers_do_not_wait_for_the_lock(tmp_path: Path) -> None:
    q = _queue(tmp_path)
    holder = _hold_lock(q)
    try:
        for args in (("status",), ("series", "-v"), ("applied",), ("unapplied",)):
            proc = q.run(*args, env={"GQUEUE_LOCK_WAIT": "0"})
            assert proc.returncode == 0
    finally:
        holder.wait(timeout=60)


def test_stale_lock_of_a_killed_process_is_cleared(tmp_path: Path) -> None:
    q = _queue(tmp_path)
    killed = q.run("push", "--all", check=False, env={"GQUEUE_TEST_CRASH_AFTER": "1"})
    assert killed.returncode == -signal.SIGKILL
    record = json.loads((q.root / ".gqueue" / "lock").read_text())
    assert record["pid"] and "push --all" in record["command"]
    proc = q.run("push", "--all", "--json", env={"GQUEUE_LOCK_WAIT": "0"})
    doc = json.loads(proc.stdout)
    assert doc["ok"]
    assert any(f"stale lock left by pid {record['pid']}" in note for note in doc["notes"])
    assert (q.root / ".gqueue" / "lock").read_text() == ""  # released cleanly this time
    assert q.run("status", "--json").returncode == 0


def test_stale_git_index_lock_is_cleared(tmp_path: Path) -> None:
    """git's own index.lock, left by a git process killed with gqueue, does not wedge the queue."""
    q = _queue(tmp_path)
    (q.work / ".git" / "index.lock").write_bytes(b"")
    doc = json.loads(q.run("push", "--json").stdout)
    assert doc["ok"]
    assert any("index.lock" in note for note in doc["notes"])


@pytest.mark.parametrize("wait", ["0", "60"])
def test_racing_pushes_and_pops(tmp_path: Path, wait: str) -> None:
    """Two processes started together, many times: each succeeds or is refused by the lock; never both broken."""
    q = _queue(tmp_path)
    outcomes: dict[str, int] = {}
    for round_ in range(6):
        a = _popen(q, "push", "--all", env={"GQUEUE_LOCK_WAIT": wait})
        b = _popen(q, "pop", "--all", env={"GQUEUE_LOCK_WAIT": wait})
        for name, proc in (("push", a), ("pop", b)):
            out, err = proc.communicate(timeout=120)
            if proc.returncode == 0:
                outcomes[f"{name} ok"] = outcomes.get(f"{name} ok", 0) + 1
            elif "error[locked]" in err:
                assert "gqueue pid" in err
                outcomes[f"{name} locked"] = outcomes.get(f"{name} locked", 0) + 1
            else:  # the other one ran first: nothing to push / nothing to pop
                assert proc.returncode == 1 and "error[state]" in err, (round_, name, proc.returncode, err)
                outcomes[f"{name} nothing to do"] = outcomes.get(f"{name} nothing to do", 0) + 1
        assert not (q.root / ".gqueue" / "journal.json").exists()
        applied = applied_names(q.work)
        assert applied in ((), tuple(PATCHES))
        assert git(q.work, "status", "--porcelain") == ""
    if wait != "0":
        assert not any(k.endswith("locked") for k in outcomes), outcomes


def test_a_lock_wait_that_is_not_a_number_is_a_usage_error(tmp_path: Path) -> None:
    q = _queue(tmp_path)
    proc = q.run("pop", check=False, env={"GQUEUE_LOCK_WAIT": "ten"})
    assert proc.returncode == 2 and proc.stderr.startswith("error[usage]: GQUEUE_LOCK_WAIT='ten' is not a number")
