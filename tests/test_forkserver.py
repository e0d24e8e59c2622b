"""tests/forkserver.py: a forked child runs as a new interpreter would (exit code, stdout and
stderr, environment, folder, stdin, traceback), and one that runs past its time is killed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forkserver import SERVER_HEAD, SERVER_LOOP, ChildTimeout, ForkServer

SERVER = SERVER_HEAD + r"""
import types
reply.write(json.dumps({"ready": True}) + "\n")
reply.flush()

def child(req):
    enter(req)
    main = types.ModuleType("__main__")
    leave(lambda: exec(compile(req["script"], "<string>", "exec"), main.__dict__), skip=2)
""" + SERVER_LOOP + "serve(child)\n"

SCRIPTS = [
    "print('out'); import sys; print('err', file=sys.stderr)",
    "raise SystemExit(3)",
    "raise SystemExit('a message')",
    "import sys; sys.exit()",
    "def f():\n    raise ValueError('boom')\nf()",
    "import os, sys; print(os.environ.get('FS_PROBE'), os.getcwd() == sys.argv[0] or os.getcwd(), sys.stdin.read() == '')",
    "import atexit; atexit.register(lambda: print('at exit'))",
]


@pytest.fixture
def server():  # type: ignore[no-untyped-def]
    started = ForkServer(SERVER, what="the test server")
    started.reply(60)
    yield started
    started.close()


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_child_answers_as_a_new_interpreter(server: ForkServer, script: str, tmp_path: Path) -> None:
    env = dict(os.environ, FS_PROBE="probe")
    alone = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True,
                           stdin=subprocess.DEVNULL)
    code, out, err = server.ask({"script": script, "env": env, "cwd": str(tmp_path)}, 300)  # a loaded machine
    assert (code, out) == (alone.returncode, alone.stdout)
    assert err.splitlines()[-1:] == alone.stderr.splitlines()[-1:]
    if "Traceback" in alone.stderr:  # the script's own frames first, none of the server's
        assert err.splitlines()[1] == alone.stderr.splitlines()[1] == '  File "<string>", line 3, in <module>'


def test_a_child_past_its_time_is_killed_and_the_server_goes_on(server: ForkServer, tmp_path: Path) -> None:
    with pytest.raises(ChildTimeout) as late:
        server.ask({"script": "import sys, time; print('started', flush=True); time.sleep(60)",
                    "env": dict(os.environ), "cwd": str(tmp_path)}, 1)
    assert late.value.stdout == "started\n"
    assert server.ask({"script": "print('next')", "env": dict(os.environ), "cwd": str(tmp_path)}, 30)[:2] == (0, "next\n")


def test_two_answers_that_arrive_together_are_both_read() -> None:
    """A quick child's pid and return code reach the pipe in one write; reading the first must
    not leave the second where select() no longer sees it (it did: the test waited 300 s)."""
    both = ForkServer('import sys, time; sys.stdout.write(\'{"pid": 1}\\n{"returncode": 0}\\n\'); sys.stdout.flush(); '
                      'time.sleep(30)', what="a server of two lines")
    try:
        time.sleep(0.5)  # both lines are in the pipe before the first is read
        assert both.reply(10) == {"pid": 1}
        assert both.reply(2) == {"returncode": 0}
    finally:
        both.proc.kill()
        both.close()
