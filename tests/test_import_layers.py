"""The package's import graph: no cycles, and the lower layers never import the upper ones
(and every dependency pyproject.toml declares is imported somewhere).

The graph is read from the source with ``ast``, not by importing it, and every ``import`` and
``from ... import`` statement counts wherever it stands: at module level, inside a function
(an import moved into a function still makes the two modules depend on each other; it only
hides the cycle from the interpreter) and inside an ``if TYPE_CHECKING:`` block (a type-only
import is still a dependency a reader and the type checker have to follow, and a cycle there
turns into a real one as soon as the name is used at run time). Only imports by a computed
name (``importlib.import_module(f"...")``) are not seen; the command line's lazy loading of its
command modules is of that kind, and it goes from the top module (cli/main.py) downwards.

An edge goes to the module a statement names: ``from .x import y`` is an edge to ``x``, or
to ``x.y`` when that is a module of its own. A package's ``__init__`` that Python imports on the
way is not an edge (they hold no code here).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

import gqueue

PACKAGE = Path(gqueue.__file__).resolve().parent
GIT_ADAPTER = "gqueue.vcs.git"
# Modules that start processes other than git, and what they run (a new one is added here, with its reason).
PROCESS_RUNNERS = {
    "gqueue.cli.commands": "the user's $EDITOR (header --edit)",
    "gqueue.ops.bisect": "the user's test command",
    "gqueue.ops.build": "pip wheel",
    "gqueue.ops.develop": "the target environment's python",
    "gqueue.upstream.index": "pip index versions",
}
GIT_LIBRARIES = ("git", "dulwich", "pygit2")  # GitPython's import name is 'git'
PROCESS_MODULES = ("subprocess", "pty", "multiprocessing")
OS_PROCESS_CALLS = ("system", "popen", "execv", "execvp", "execvpe", "execl", "execlp", "spawnv", "spawnvp",
                    "spawnl", "spawnlp", "posix_spawn", "posix_spawnp", "fork")


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int

    def __str__(self) -> str:
        return f"{self.source} (line {self.line}) -> {self.target}"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules(root: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def imported_names(module: str, is_package: bool, tree: ast.AST) -> list[tuple[str, int]]:
    """Every module name the statements of ``tree`` import (absolute), with the line; for
    ``from M import a`` both ``M`` and ``M.a`` (the caller keeps the one that is a module)."""
    here = module.split(".") if is_package else module.split(".")[:-1]
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = here[: len(here) - node.level + 1]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found += [(f"{base}.{alias.name}|{base}", node.lineno) for alias in node.names]
    return found


def import_graph(modules: dict[str, Path]) -> list[Edge]:
    edges: set[Edge] = set()
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for target, line in imported_names(name, path.name == "__init__.py", tree):
            candidates = target.split("|")
            resolved = next((c for c in candidates if c in modules), None)
            if resolved is not None and resolved != name:
                edges.add(Edge(name, resolved, line))
    return sorted(edges, key=lambda e: (e.source, e.line, e.target))


def cycles(modules: list[str], edges: list[Edge]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    graph: dict[str, list[str]] = {m: [] for m in modules}
    for e in edges:
        graph[e.source].append(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in modules:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def describe(components: list[list[str]], edges: list[Edge]) -> str:
    lines = []
    for component in components:
        lines.append("cycle: " + ", ".join(component))
        lines += [f"  {e}" for e in edges if e.source in component and e.target in component]
    return "\n".join(lines)


def process_uses(tree: ast.AST) -> tuple[set[str], list[int]]:
    """(the process-starting modules and GitPython-like libraries ``tree`` imports, the lines of
    argument lists that start with ``git``: ``["git", ...]``, ``("git", ...)`` or ``"git ..."``
    given to a call)."""
    imported: set[str] = set()
    git_lines: list[int] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            imported.add(node.module.split(".")[0])
        elif isinstance(node, (ast.List, ast.Tuple)) and node.elts:
            first = node.elts[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str) and _is_git(first.value):
                git_lines.append(node.lineno)
        elif isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute) and node.func.attr in OS_PROCESS_CALLS \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "os":
                imported.add(f"os.{node.func.attr}")
            for arg in node.args[:1]:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and _is_git(arg.value.split(" ")[0]):
                    git_lines.append(node.lineno)
    wanted = {i for i in imported if i in PROCESS_MODULES or i in GIT_LIBRARIES or i.startswith("os.")}
    return wanted, git_lines


def _is_git(word: str) -> bool:
    return word == "git" or word.endswith("/git")


# the package itself -----------------------------------------------------------------------------

MODULES = package_modules()
EDGES = import_graph(MODULES)


def test_the_graph_is_read() -> None:
    """The walk sees the package (a broken walk would pass every test below)."""
    assert {"gqueue.cli.main", "gqueue.vcs.git", "gqueue.model.patch", "gqueue.ops.stackops"} <= set(MODULES)
    assert any(e.source == "gqueue.ops.stackops" and e.target == "gqueue.vcs.git" for e in EDGES)
    assert len(EDGES) > 100


def test_no_import_cycles() -> None:
    found = cycles(sorted(MODULES), EDGES)
    assert not found, "import cycles in tools/gqueue:\n" + describe(found, EDGES)


@pytest.mark.parametrize("lower", ["gqueue.model", "gqueue.vcs"])
def test_lower_layers_never_import_ops_or_cli(lower: str) -> None:
    upward = [e for e in EDGES if e.source.startswith(lower + ".")
              and e.target.startswith(("gqueue.ops", "gqueue.cli"))]
    assert not upward, "\n".join(map(str, upward))


def _layer(module: str) -> int:
    """0: model/, vcs/, upstream/ and the top-level modules; 1: ops/; 2: cli/; 3: __main__."""
    if module == "gqueue.__main__":
        return 3
    return {"cli": 2, "ops": 1}.get(module.split(".")[1] if "." in module else "", 0)


def test_no_module_imports_a_higher_layer() -> None:
    upward = [e for e in EDGES if _layer(e.source) < _layer(e.target)]
    assert not upward, "\n".join(map(str, upward))


def test_only_the_git_adapter_runs_git() -> None:
    """Only vcs/git.py starts git (or loads a git library); the other modules that start
    processes are the ones PROCESS_RUNNERS names, and none of them names git in an argv."""
    runners: dict[str, set[str]] = {}
    git_calls: list[str] = []
    for name, path in MODULES.items():
        if name == GIT_ADAPTER:
            continue
        used, lines = process_uses(ast.parse(path.read_text(encoding="utf-8")))
        if used:
            runners[name] = used
        git_calls += [f"{name} line {n}" for n in lines]
    libraries = {m: u & set(GIT_LIBRARIES) for m, u in runners.items() if u & set(GIT_LIBRARIES)}
    assert not libraries, f"git libraries loaded outside {GIT_ADAPTER}: {libraries}"
    assert not git_calls, f"git started outside {GIT_ADAPTER}: {git_calls}"
    unlisted = sorted(set(runners) - set(PROCESS_RUNNERS))
    assert not unlisted, f"modules that start processes, not in PROCESS_RUNNERS: {unlisted}"
    stale = sorted(set(PROCESS_RUNNERS) - set(runners))
    assert not stale, f"PROCESS_RUNNERS names modules that start no process: {stale}"


def test_the_git_adapter_is_seen_running_git() -> None:
    used, lines = process_uses(ast.parse((PACKAGE / "vcs" / "git.py").read_text(encoding="utf-8")))
    assert "subprocess" in used and lines


# the checks themselves, on small synthetic packages ---------------------------------------------

def _package(tmp_path: Path, files: dict[str, str]) -> dict[str, Path]:
    root = tmp_path / "pkg"
    for rel, text in {"__init__.py": "", **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    for folder in {p.parent for p in root.rglob("*.py")}:
        (folder / "__init__.py").touch()
    return package_modules(root)


@pytest.mark.parametrize("hidden", [
    "def later():\n    from .a import x\n",
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n",
    "import pkg.a\n",
    "from .. import a\n",
])
def test_a_cycle_is_found_however_the_import_is_written(tmp_path: Path, hidden: str) -> None:
    sub = "sub/b.py" if hidden.startswith("from ..") else "b.py"
    target = "from .sub import b\n" if sub == "sub/b.py" else "from . import b\n"
    modules = _package(tmp_path, {"a.py": target + "x = 1\n", sub: hidden, "c.py": "from . import a\n"})
    edges = import_graph(modules)
    found = cycles(sorted(modules), edges)
    assert found == [sorted(["pkg.a", "pkg." + sub[:-3].replace("/", ".")])], describe(found, edges)


def test_no_cycle_in_a_layered_package(tmp_path: Path) -> None:
    modules = _package(tmp_path, {"a.py": "from .b import y\n", "b.py": "from .c import z\ny = 1\n", "c.py": "z = 1\n"})
    assert cycles(sorted(modules), import_graph(modules)) == []


@pytest.mark.parametrize("source", [
    "import subprocess\nsubprocess.run(['git', 'status'])\n",
    "from subprocess import run\nrun(('git', *ARGS))\n",
    "import subprocess\nsubprocess.call('git status', shell=True)\n",
    "import subprocess\nsubprocess.run(['/usr/bin/git', 'log'])\n",
])
def test_a_git_process_is_seen(source: str) -> None:
    used, lines = process_uses(ast.parse(source))
    assert "subprocess" in used and lines == [2]


@pytest.mark.parametrize("source, used", [
    ("import git\n", {"git"}),
    ("from git import Repo\n", {"git"}),
    ("import os\nos.system('make')\n", {"os.system"}),
    ("import subprocess\nsubprocess.run(['pip', 'wheel'])\n", {"subprocess"}),
])
def test_process_and_git_library_imports_are_seen(source: str, used: set[str]) -> None:
    assert process_uses(ast.parse(source)) == (used, [])


# declared dependencies ----------------------------------------------------------------------------

def _declared_dependencies() -> list[str]:
    import tomllib

    from packaging.requirements import Requirement

    with open(PACKAGE.parents[1] / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    return [Requirement(spec).name for spec in project["dependencies"]]


def test_every_declared_dependency_is_imported() -> None:
    """A dependency in pyproject.toml is imported by some module of the package (GitPython as
    ``git``: the import names come from the installed distributions' metadata)."""
    from importlib.metadata import packages_distributions

    from packaging.utils import canonicalize_name

    provides: dict[str, set[str]] = {}
    for top, dists in packages_distributions().items():
        for dist in dists:
            provides.setdefault(canonicalize_name(dist), set()).add(top)
    imported: set[str] = set()
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                imported.add(node.module.split(".")[0])
    declared = _declared_dependencies()
    assert declared, "no dependencies read from pyproject.toml"
    unused = [name for name in declared if not provides.get(canonicalize_name(name), set()) & imported]
    assert not unused, f"declared in pyproject.toml, imported by no module of gqueue: {unused}"
