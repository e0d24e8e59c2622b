"""gqueue commands forked from a server that has imported the whole package once.

The crash harness runs gqueue thousands of times, and each run used to start an interpreter and
import the CLI (about 70 of the 100 ms that a recovery run costs). A run that is killed at a
random moment still starts as a process of its own (its start-up is part of what may be hit);
the runs that are killed at a counted effect (``GQUEUE_TEST_CRASH_AFTER``) and the recovery runs
are forks of a server that has imported every module of gqueue and run nothing: each fork gets
the environment, working directory and arguments that ``python -m gqueue ARGS`` would have had,
its stdin from /dev/null and its output in files of its own, runs ``gqueue.cli.main.main()``
and exits with its code, or dies by the SIGKILL that the counted effect sends. gqueue reads its
environment when it runs, not when it is imported (test_forked_gqueue.py compares forks with
processes of their own).

One server a thread (the harness runs trials on two threads, a new pool for each test), started
on first use and closed once its thread has ended, or when the test process exits.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

SERVER = r"""
import json, os, pkgutil, sys, traceback
reply = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
import gqueue
import gqueue.cli.main as cli_main
for module in pkgutil.walk_packages(gqueue.__path__, "gqueue."):
    if not module.name.endswith(".__main__"):  # that one runs the CLI
        __import__(module.name)
reply.write(json.dumps({"ready": True}) + "\n")
reply.flush()

def run(req):
    import atexit
    reply.close()
    fd_in = os.open(os.devnull, os.O_RDONLY)
    fd_out = os.open(req["stdout"], os.O_WRONLY | os.O_TRUNC)
    fd_err = os.open(req["stderr"], os.O_WRONLY | os.O_TRUNC)
    os.dup2(fd_in, 0); os.dup2(fd_out, 1); os.dup2(fd_err, 2)
    os.environ.clear()
    os.environ.update(req["env"])
    os.chdir(req["cwd"])
    sys.argv = ["gqueue", *req["args"]]
    code = 0
    try:
        cli_main.main()
    except SystemExit as stop:
        if stop.code is None:
            code = 0
        elif isinstance(stop.code, int):
            code = stop.code
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except BaseException as failed:  # as python -m reports an uncaught exception
        traceback.print_exception(type(failed), failed, failed.__traceback__)
        code = 1
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)

for line in sys.stdin:
    req = json.loads(line)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            run(req)
        finally:
            os._exit(70)
    reply.write(json.dumps({"pid": pid}) + "\n"); reply.flush()
    _, status = os.waitpid(pid, 0)
    reply.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n"); reply.flush()
sys.stdout.flush(); sys.stderr.flush()
os._exit(0)
"""


class _Server:
    def __init__(self) -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="gq-forked-")
        self.log = Path(self.dir.name) / "server.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=log, text=True)
        self.count = 0
        self._reply(120)

    def _reply(self, timeout: float) -> dict:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            raise RuntimeError(f"the gqueue server stopped answering; its log:\n{self.log.read_text()[-4000:]}")
        return json.loads(line)

    def run(self, args: list[str], env: dict[str, str], cwd: Path,
            timeout: float) -> subprocess.CompletedProcess[str]:
        assert self.proc.stdin is not None
        self.count += 1
        out, err = (Path(self.dir.name) / f"{self.count}.{n}" for n in ("out", "err"))
        out.touch()
        err.touch()
        req = {"args": args, "env": env, "cwd": str(cwd), "stdout": str(out), "stderr": str(err)}
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        pid = self._reply(30)["pid"]
        try:
            done = self._reply(timeout)
        except RuntimeError:
            if self.proc.poll() is not None:
                raise
            os.kill(pid, signal.SIGKILL)
            self._reply(30)
            raise subprocess.TimeoutExpired(["gqueue", *args], timeout, out.read_text(), err.read_text()) from None
        result = subprocess.CompletedProcess(["gqueue", *args], done["returncode"], out.read_text(), err.read_text())
        out.unlink()
        err.unlink()
        return result

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.dir.cleanup()


_servers: dict[threading.Thread, _Server] = {}  # the thread each one serves
_servers_lock = threading.Lock()


@atexit.register
def _close_servers() -> None:
    with _servers_lock:
        while _servers:
            _servers.popitem()[1].close()


def _server() -> _Server:
    """This thread's server; those of threads that have ended (each trial pool has its own) go."""
    me = threading.current_thread()
    with _servers_lock:
        for thread in [t for t in _servers if not t.is_alive()]:
            _servers.pop(thread).close()
        server = _servers.get(me)
    if server is None or server.proc.poll() is not None:
        server = _Server()
        with _servers_lock:
            _servers[me] = server
    return server


def run(args: list[str], *, env: dict[str, str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """``python -m gqueue ARGS`` with ``env`` in ``cwd``, as a fork of this thread's server."""
    return _server().run(args, env, cwd, timeout)
