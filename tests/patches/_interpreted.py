"""Running a script against the patched tree in a fresh process under Triton's CPU interpreter.

vLLM turns Triton off at import when it finds no GPU driver; an empty CUDA_VISIBLE_DEVICES keeps
it on, and TRITON_INTERPRET must be set before Triton binds any kernel, hence a new process.

Importing torch and vLLM is most of each script's CPU time, so the scripts are forked from a
server (one per test process, tree and module list) that has imported the modules the script
imports first (``preload``, in the script's order) once, under the same TRITON_INTERPRET,
CUDA_VISIBLE_DEVICES and PYTHONPATH, with no Genesis switch set, and has run nothing else. Each script runs in a fresh fork with the environment, working directory and
arguments a new ``python -c`` would have had, its output in files of its own, and is killed
when it runs past the timeout; a crash, a timeout or a nonzero exit fails that script only.
Every script, forked or not, runs with the kernel tests' faster interpreter paths
(tests/fast_interpreter.py, put in by tests/interpreter_site/sitecustomize.py when triton
is imported): the same kernels, without work the interpreter does for nothing.

The server records every environment variable its imports read. A script whose environment
differs from the server's in one of them (a Genesis switch read at import, say) runs in a new
interpreter as before, and so does every script when an import failed or a module of the tree
or of vllm_genesis listed the whole environment while importing. HOME and the XDG folders are
exempt: the server has a private empty home of its own, as each test has (the scripts read
neither).
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from forkserver import SERVER_HEAD, SERVER_LOOP, ChildTimeout, ForkServer

TIMEOUT_S = 300
# its sitecustomize.py puts the kernel tests' faster interpreter paths in once triton is imported
INTERPRETER_SITE = Path(__file__).resolve().parents[1] / "interpreter_site"
MAX_SERVERS = 2
SWITCH_PREFIXES = ("GENESIS_", "SNDR_")
# read at import but set per test (a private empty folder each time), never by a script
EXEMPT = frozenset({"HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "PWD", "OLDPWD"})
# what the TurboQuant scripts (those that start with _tq_routing.SETUP) import first
TQ_IMPORTS = ("torch", "vllm.config", "vllm.model_executor.layers.quantization.turboquant.config",
              "vllm.v1.attention.backends.turboquant_attn")

SERVER = SERVER_HEAD + r"""
env_type = type(os.environ)
read, listed = {}, set()  # reader (innermost source file) -> names read; readers that listed all
def _reader():
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith("<") and os.path.basename(name) != "os.py":
            return name
        frame = frame.f_back
    return "?"
_get, _contains, _iter = env_type.__getitem__, env_type.__contains__, env_type.__iter__
def _name(key):
    return key if isinstance(key, str) else key.decode(errors="replace")
def _rec_get(self, key):
    read.setdefault(_reader(), set()).add(_name(key))
    return _get(self, key)
def _rec_contains(self, key):
    read.setdefault(_reader(), set()).add(_name(key))
    return _contains(self, key)
def _rec_iter(self):
    listed.add(_reader())
    return _iter(self)
before = dict(os.environ)
env_type.__getitem__, env_type.__contains__, env_type.__iter__ = _rec_get, _rec_contains, _rec_iter
error = None
try:
    for name in json.loads(sys.argv[1]):
        __import__(name)
except BaseException:
    error = traceback.format_exc()
env_type.__getitem__, env_type.__contains__, env_type.__iter__ = _get, _contains, _iter
after = dict(os.environ)
# what the imports set in the environment, as they would in a new interpreter
made = {k: after.get(k) for k in set(before) | set(after) if before.get(k) != after.get(k)}
# a module that lists the whole environment (a snapshot, or a search for its own prefix) is
# told apart from one that reads a name: the names it reads while listing are not kept
named = sorted(set().union(*(names for reader, names in read.items() if reader not in listed)))
reply.write(json.dumps({"error": error, "read": named, "listed": sorted(listed),
                        "env": before}) + "\n")
reply.flush()

def child(req):
    import random, types
    enter(req)
    for key, value in made.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    random.seed()  # a new interpreter's state, not the server's
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    sys.argv = ["-c", *req["args"]]
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    # an uncaught exception as python -c reports it: without the frames of leave() and this call
    leave(lambda: exec(compile(req["script"], "<string>", "exec"), main.__dict__), skip=2)
""" + SERVER_LOOP + "serve(child)\n"


def _script_env(tree: Path, kernels: Path) -> dict[str, str]:
    env = dict(os.environ)
    path = [str(INTERPRETER_SITE), str(kernels), str(tree)]
    env.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="", PYTHONPATH=os.pathsep.join(path))
    return env


class _Server(ForkServer):
    """One forking server: the imports done once, a fork per script."""

    def __init__(self, tree: Path, kernels: Path, preload: tuple[str, ...]) -> None:
        home_dir = tempfile.TemporaryDirectory(prefix="gq-interp-home-")
        home = Path(home_dir.name)
        env = {k: v for k, v in _script_env(tree, kernels).items() if not k.startswith(SWITCH_PREFIXES)}
        env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_CACHE_HOME=str(home / ".cache"))
        super().__init__(SERVER, (json.dumps(preload),), env=env, prefix="gq-interp-", what="the script server")
        self.home = home_dir
        try:
            hello = self.reply(TIMEOUT_S)
        except RuntimeError:  # no server: every script runs in a new interpreter
            self.usable, self.read, self.env = False, frozenset(), {}
            return
        self.env: dict[str, str] = hello["env"]
        roots = (str(tree), str(kernels))
        own_listing = any(Path(f).resolve().is_relative_to(r) for f in hello["listed"] for r in roots)
        self.usable = hello["error"] is None and not own_listing
        self.read = frozenset(hello["read"]) - EXEMPT

    def fits(self, env: dict[str, str]) -> bool:
        return self.usable and all(env.get(k) == self.env.get(k) for k in self.read)

    def run(self, script: str, args: tuple[str, ...], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        try:
            code, out, err = self.ask({"script": script, "args": list(args), "env": env, "cwd": os.getcwd()}, TIMEOUT_S)
        except ChildTimeout as late:
            raise AssertionError(f"the script ran past {TIMEOUT_S} s; its stderr:\n{late.stderr[-4000:]}") from None
        return subprocess.CompletedProcess([], code, out, err)

    def close(self) -> None:
        super().close()
        self.home.cleanup()


_servers: dict[tuple[Path, Path, tuple[str, ...]], _Server] = {}


@atexit.register
def _close_servers() -> None:
    while _servers:
        _servers.popitem()[1].close()


def _server(tree: Path, kernels: Path, preload: tuple[str, ...]) -> _Server:
    key = (tree, kernels, preload)
    server = _servers.pop(key, None)  # put back last: the most recently used
    if server is not None and server.usable and server.proc.poll() is not None:
        server.close()
        server = None
    if server is None:
        while len(_servers) >= MAX_SERVERS:  # each holds torch and vLLM (most of a GiB)
            # the one with the fewest imports goes (the cheapest to start again: the TurboQuant
            # server's imports are ~18 s of CPU), the least recently used of those
            cheapest = min(_servers, key=lambda k: len(k[2]))
            _servers.pop(cheapest).close()
        server = _Server(tree, kernels, preload)
    _servers[key] = server
    return server


def run_script(
    script: str, tree: Path, kernels: Path, args: tuple[str, ...] = (), preload: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """``python -c script *args`` in a fresh process state: a fork of the server that imported
    ``preload`` (what the script imports first), or else (no ``preload``) a new interpreter."""
    env = _script_env(tree, kernels)
    if preload:
        server = _server(tree, kernels, preload)
        if server.fits(env):
            return server.run(script, args, env)
    try:
        return subprocess.run(
            [sys.executable, "-c", script, *args], env=env, capture_output=True, text=True, timeout=TIMEOUT_S
        )
    except subprocess.TimeoutExpired as late:
        err = late.stderr.decode(errors="replace") if isinstance(late.stderr, bytes) else late.stderr or ""
        raise AssertionError(f"the script ran past {TIMEOUT_S} s; its stderr:\n{err[-4000:]}") from None


def run_interpreted(
    script: str, tree: Path, kernels: Path, args: tuple[str, ...] = (), preload: tuple[str, ...] = ()
) -> dict:
    """Run ``script``; return the JSON document it prints on its last line."""
    proc = run_script(script, tree, kernels, args, preload)
    assert proc.returncode == 0, f"the script exited with {proc.returncode}; its stderr:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])
