"""The thin CLI: shared options defined once, no import proxy, no raw git in ops/, and push
starting without the modules only other commands need."""

from __future__ import annotations

import ast
import subprocess
import sys

from test_import_layers import MODULES

SHARED_FLAGS = {"-f", "--force", "-a", "--all", "-n", "--profile", "--policy"}


def _calls(tree: ast.AST) -> list[ast.Call]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)]


def test_the_shared_options_are_defined_only_in_options_py() -> None:
    found = []
    for name, path in MODULES.items():
        if not name.startswith("gqueue.cli.") or name == "gqueue.cli.options":
            continue
        for call in _calls(ast.parse(path.read_text(encoding="utf-8"))):
            func = call.func
            if isinstance(func, ast.Attribute) and func.attr == "option":
                flags = {a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
                if flags & SHARED_FLAGS:
                    found.append(f"{name} line {call.lineno}: {sorted(flags & SHARED_FLAGS)}")
    assert not found, "defined again outside cli/options.py:\n" + "\n".join(found)


def test_no_command_module_imports_through_importlib_but_main() -> None:
    """Only main.py's group loads the cmd_*.py modules by name; commands import operations
    with import statements that mypy and a reader can follow."""
    found = []
    for name, path in MODULES.items():
        if name.startswith("gqueue.cli.") and name != "gqueue.cli.main":
            source = path.read_text(encoding="utf-8")
            if "importlib" in source or "__getattr__" in source:
                found.append(name)
    assert not found


def test_ops_run_git_only_through_named_methods() -> None:
    """No ``ws.repo.run("subcommand", ...)`` outside vcs/: each git call has a named method there."""
    found = []
    for name, path in MODULES.items():
        if not name.startswith("gqueue.ops."):
            continue
        for call in _calls(ast.parse(path.read_text(encoding="utf-8"))):
            func = call.func
            on_repo = isinstance(func, ast.Attribute) and func.attr in ("run", "ok", "start") and (
                (isinstance(func.value, ast.Attribute) and func.value.attr in ("repo", "mirror"))
                or (isinstance(func.value, ast.Name) and func.value.id in ("repo", "mirror")))
            if on_repo and call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
                found.append(f"{name} line {call.lineno}: git {call.args[0].value}")
    assert not found, "\n".join(found)


def test_push_starts_without_the_queries_and_the_editing_operations() -> None:
    script = ("import sys\nfrom gqueue.cli.main import cli\nimport click\n"
              "assert cli.get_command(click.Context(cli), 'push') is not None\n"
              "print('\\n'.join(m for m in sys.modules if m.startswith('gqueue.')))\n")
    loaded = set(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                                check=True).stdout.split())
    assert "gqueue.ops.stackops" in loaded and "gqueue.cli.options" in loaded
    unwanted = {"gqueue.ops.queries", "gqueue.ops.queueops", "gqueue.ops.recovery", "gqueue.ops.reorder",
                "gqueue.ops.plan", "gqueue.ops.pins", "gqueue.upstream.resolve", "gqueue.cli.cmd_show"}
    assert not loaded & unwanted
