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
import subprocess
import threading
from pathlib import Path

from forkserver import SERVER_HEAD, SERVER_LOOP, ChildTimeout, ForkServer

SERVER = SERVER_HEAD + r"""
import pkgutil
import gqueue
import gqueue.cli.main as cli_main
for module in pkgutil.walk_packages(gqueue.__path__, "gqueue."):
    if not module.name.endswith(".__main__"):  # that one runs the CLI
        __import__(module.name)
reply.write(json.dumps({"ready": True}) + "\n")
reply.flush()

def child(req):
    enter(req)
    sys.argv = ["gqueue", *req["args"]]
    leave(cli_main.main)  # an uncaught exception's whole traceback, as python -m shows it
""" + SERVER_LOOP + "serve(child)\n"


class _Server(ForkServer):
    def __init__(self) -> None:
        super().__init__(SERVER, prefix="gq-forked-", what="the gqueue server")
        self.reply(120)

    def run(self, args: list[str], env: dict[str, str], cwd: Path,
            timeout: float) -> subprocess.CompletedProcess[str]:
        try:
            code, out, err = self.ask({"args": args, "env": env, "cwd": str(cwd)}, timeout)
        except ChildTimeout as late:
            raise subprocess.TimeoutExpired(["gqueue", *args], timeout, late.stdout, late.stderr) from None
        return subprocess.CompletedProcess(["gqueue", *args], code, out, err)


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
