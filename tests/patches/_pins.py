"""Which vLLM release the patch tests run on.

The tree is GQUEUE_VLLM_TREE, or else the queue's own work tree (work/). A patch test that
holds for one range of releases only (the patch has a variant per pin, or is not carried on
every pin) says so with ``only_on(">=0.34")``: on any other release it is reported as
skipped, with the release and the reason, never as passed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
TREE = Path(os.environ.get("GQUEUE_VLLM_TREE") or REPO / "work").resolve()
_ASSIGNED = re.compile(r"""^__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", re.M)
_PKG_INFO = re.compile(r"^Version:\s*(\S+)", re.M)


def tree_version(tree: Path = TREE) -> Version | None:
    """The release of a vLLM source tree: vllm/_version.py as the sdist writes it, else PKG-INFO."""
    for path, pattern in ((tree / "vllm" / "_version.py", _ASSIGNED), (tree / "PKG-INFO", _PKG_INFO)):
        try:
            found = pattern.search(path.read_text(encoding="utf-8"))
        except OSError:
            continue
        if found:
            return Version(found.group(1))
    return None


VERSION = tree_version()


def on(spec: str) -> bool:
    """Whether the tree under test is a release that ``spec`` (a PEP 440 specifier) admits."""
    if VERSION is None:
        raise pytest.UsageError(f"the vLLM tree at {TREE} does not say its release (vllm/_version.py, PKG-INFO)")
    return SpecifierSet(spec).contains(VERSION, prereleases=True)


def only_on(spec: str, why: str = "") -> pytest.MarkDecorator:
    """Mark a test (or a module, as ``pytestmark``) that runs only on the releases ``spec`` admits."""
    reason = f"vllm {VERSION} is outside {spec}" + (f": {why}" if why else "")
    return pytest.mark.skipif(not on(spec), reason=reason)
