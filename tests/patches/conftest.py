"""Test environment for the queue's patches: the patched vLLM tree plus the runtime package.

The tree comes from GQUEUE_VLLM_TREE, or else the queue's own work tree (work/ after
``gqueue checkout && gqueue push --all``). Both go first on sys.path so ``import vllm...``
imports the patched sources and ``import vllm_genesis`` the runtime shipped beside them.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, Iterator

import pytest

from _pins import REPO, TREE

KERNELS = REPO / "kernels"

if not (TREE / "vllm" / "__init__.py").is_file():
    raise pytest.UsageError(
        f"no vLLM tree at {TREE}: run 'gqueue checkout && gqueue push --all' or set GQUEUE_VLLM_TREE"
    )
for entry in (str(KERNELS), str(TREE)):
    if entry not in sys.path:
        sys.path.insert(0, entry)

SWITCH_PREFIXES = ("GENESIS_", "SNDR_")


@pytest.fixture(autouse=True, scope="module")
def _subprocess_path() -> Iterator[None]:
    """vLLM inspects models in subprocesses (python -m vllm...), and some tests start their own:
    they need the same two folders. Set for the modules of this folder only (module scope, so
    module fixtures that start subprocesses see it too), so no other test imports this tree.
    """
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    with pytest.MonkeyPatch.context() as patcher:
        patcher.setenv("PYTHONPATH", os.pathsep.join([str(TREE), str(KERNELS), *extra]))
        yield


@pytest.fixture(autouse=True)
def _clean_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts with no Genesis switch in the environment."""
    for name in list(os.environ):
        if name.startswith(SWITCH_PREFIXES):
            monkeypatch.delenv(name)


@pytest.fixture
def switch(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str, bool], None]]:
    """``switch("PN14", True)`` turns a patch on (or off) through its registered env flag."""
    from vllm_genesis import runtime

    def set_switch(patch_id: str, on: bool) -> None:
        entry = runtime.registry()[patch_id]
        names = entry.spellings("ENABLE")
        if not names:
            if not on:
                raise AssertionError(f"{patch_id} has no env flag and cannot be switched off")
            return
        monkeypatch.setenv(names[0], "1" if on else "0")
        assert runtime.enabled(patch_id) is on

    yield set_switch
