"""Started with every script the patch tests run under Triton's CPU interpreter (this folder is
on their PYTHONPATH; see tests/patches/_interpreted.py): once the ``triton`` package has been
imported, whoever imports it and whenever, the faster interpreter paths of
tests/fast_interpreter.py go in, as in the kernel tests. Nothing is imported earlier or in
another order than the script itself does."""

from __future__ import annotations

import os
import sys
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _install() -> None:
    sys.path.insert(0, str(TESTS))
    try:
        import fast_interpreter
    finally:
        sys.path.remove(str(TESTS))
    fast_interpreter.install()


class _AfterTriton(MetaPathFinder):
    """Finds nothing itself: wraps the real loader of ``triton`` so that _install runs once
    the package's own code has run (it imports triton.language and the interpreter)."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> ModuleSpec | None:
        if name != "triton":
            return None
        # asked for every spec lookup (torch looks triton up without importing it); only the
        # import itself, which runs the loader, takes this finder out
        others = [f for f in sys.meta_path if f is not self]
        spec = next((s for f in others if (s := f.find_spec(name, path, target)) is not None), None)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader, exec_module = spec.loader, spec.loader.exec_module

        def exec_then_install(module: object) -> None:
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            exec_module(module)
            _install()

        loader.exec_module = exec_then_install  # type: ignore[method-assign]
        return spec


if os.environ.get("TRITON_INTERPRET") == "1" and "triton" not in sys.modules:
    sys.meta_path.insert(0, _AfterTriton())
