"""A forking server for the tests: an interpreter that has done its imports once forks a child
per request, and the child runs as a new process would have run: the request's environment,
working directory and arguments, stdin from /dev/null, stdout and stderr in files of its own,
and the exit code a new interpreter would give (SystemExit's code; 1 and the traceback for an
uncaught exception). tests/patches/_interpreted.py (scripts under Triton's interpreter, torch
and vLLM imported once) and tests/reliability/forked_gqueue.py (gqueue commands, the package
imported once) each build one from these parts.

The server's text is ``SERVER_HEAD``, the server's own imports and a ``child(req)`` function
that calls ``enter(req)`` and then ``leave(call, skip)``, then ``SERVER_LOOP`` with
``serve(child)``. It answers each request line with ``{"pid": ...}`` at once and
``{"returncode": ...}`` when the child has ended, and leaves when its stdin closes.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SERVER_HEAD = r"""
import json, os, sys, traceback
reply = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)  # what the imports print goes to the server's log, not into the replies
"""

SERVER_LOOP = r"""
def enter(req):
    '''The child's stdin, stdout, stderr, environment and folder, as the request gives them.'''
    reply.close()
    fd_in = os.open(os.devnull, os.O_RDONLY)
    fd_out = os.open(req["stdout"], os.O_WRONLY | os.O_TRUNC)
    fd_err = os.open(req["stderr"], os.O_WRONLY | os.O_TRUNC)
    os.dup2(fd_in, 0); os.dup2(fd_out, 1); os.dup2(fd_err, 2)
    sys.stdin = open(0, closefd=False)
    os.environ.clear()
    os.environ.update(req["env"])
    os.chdir(req["cwd"])

def leave(call, skip=0):
    '''Run call(), then exit as a new interpreter would; an uncaught exception's traceback
    leaves out its first ``skip`` frames (the server's own).'''
    import atexit
    code = 0
    try:
        call()
    except SystemExit as stop:
        if stop.code is None:
            code = 0
        elif isinstance(stop.code, int):
            code = stop.code
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except BaseException as failed:
        tb = failed.__traceback__
        for _ in range(skip):
            tb = tb.tb_next if tb is not None else None
        traceback.print_exception(type(failed), failed, tb)
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

def serve(child):
    for line in sys.stdin:
        req = json.loads(line)
        sys.stdout.flush(); sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            try:
                child(req)
            finally:
                os._exit(70)
        reply.write(json.dumps({"pid": pid}) + "\n"); reply.flush()
        _, status = os.waitpid(pid, 0)
        reply.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n"); reply.flush()
    # stdin closed: the test process is done with this server. Leave at once: an interpreter
    # that imported torch and vLLM can take longer than close() waits to shut down (threads of
    # theirs), and the server holds nothing that needs a clean shutdown.
    sys.stdout.flush(); sys.stderr.flush()
    os._exit(0)
"""


class ChildTimeout(Exception):
    """The child ran past its time and was killed; what it wrote so far."""

    def __init__(self, stdout: str, stderr: str) -> None:
        super().__init__("the child ran past its time")
        self.stdout, self.stderr = stdout, stderr


class ForkServer:
    """The test side of one server: started with ``code`` (its text) and ``argv``, answered
    line by line; ``ask`` runs one request in a fork."""

    def __init__(self, code: str, argv: tuple[str, ...] = (), *, env: dict[str, str] | None = None,
                 prefix: str = "gq-fork-", what: str = "the server") -> None:
        self.dir = tempfile.TemporaryDirectory(prefix=prefix)
        self.what = what
        self.log = Path(self.dir.name) / "server.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen([sys.executable, "-c", code, *argv], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=log, env=env, text=True)
        self.count = 0
        self.pending = b""  # what the server wrote past the last answer line read

    def reply(self, timeout: float) -> dict:
        """The server's next answer line. Read from the pipe's descriptor into a buffer of our
        own: a buffered readline() can take two answers in one read (a quick child's pid and
        return code together), and select() on the descriptor then waits for a line that is
        already read."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self.pending:
            ready, _, _ = select.select([self.proc.stdout.fileno()], [], [], max(deadline - time.monotonic(), 0))
            chunk = os.read(self.proc.stdout.fileno(), 65536) if ready else b""
            if not chunk:
                raise RuntimeError(f"{self.what} stopped answering; its log:\n{self.log.read_text()[-4000:]}")
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return json.loads(line)

    def ask(self, req: dict, timeout: float) -> tuple[int, str, str]:
        """Run ``req`` (its env, cwd and what the server's child reads) in a fork: its exit code,
        stdout and stderr; ``ChildTimeout`` when it runs past ``timeout`` (it is killed)."""
        assert self.proc.stdin is not None
        self.count += 1
        out, err = (Path(self.dir.name) / f"{self.count}.{n}" for n in ("out", "err"))
        out.touch()
        err.touch()
        self.proc.stdin.write(json.dumps({**req, "stdout": str(out), "stderr": str(err)}) + "\n")
        self.proc.stdin.flush()
        pid = self.reply(30)["pid"]
        try:
            done = self.reply(timeout)
        except RuntimeError:
            if self.proc.poll() is not None:
                raise
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:  # it ended right at the deadline: its reply is on the way
                done = self.reply(30)
            else:
                self.reply(30)
                raise ChildTimeout(out.read_text(), err.read_text()) from None
        result = done["returncode"], out.read_text(), err.read_text()
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
