"""Hermetic test environment: a temporary HOME, no system or global git config, fixed dates,
a private download cache, and no editor or pager that could block."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Iterator

import pytest

# Real sdists and wheels are cached across runs on one machine (slow tests only).
REAL_CACHE = os.environ.get("GQUEUE_CACHE") or str(Path.home() / ".cache" / "gqueue")


@pytest.fixture(autouse=True)
def hermetic(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    monkeypatch.setenv("GIT_AUTHOR_DATE", "1000000000 +0000")
    monkeypatch.setenv("GIT_COMMITTER_DATE", "1000000000 +0000")
    monkeypatch.setenv("GIT_EDITOR", "false")
    monkeypatch.setenv("GIT_PAGER", "cat")
    monkeypatch.setenv("GQUEUE_LOCK_WAIT", "0")
    if "GQUEUE_TEST_SHARED_CACHE" not in os.environ:
        monkeypatch.setenv("GQUEUE_CACHE", str(home / "cache"))
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GQUEUE_TEST_CRASH_AFTER"):
        monkeypatch.delenv(name, raising=False)
    yield home


@pytest.fixture
def real_cache(monkeypatch: pytest.MonkeyPatch) -> str:
    """The machine's persistent gqueue cache, for tests that download real vLLM releases."""
    monkeypatch.setenv("GQUEUE_CACHE", REAL_CACHE)
    return REAL_CACHE


sys.path.insert(0, str(Path(__file__).resolve().parent))

# which phase of the suite is running, each phase's time and the slowest tests in the summary
import phases  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.is_registered(phases):
        config.pluginmanager.register(phases, "gqueue-phases")
    if not hasattr(config, "workerinput"):
        _bytecode_cache(config)


def _bytecode_cache(config: pytest.Config) -> None:
    """The Python processes the tests start (thousands of gqueue command lines, vLLM imports in
    the patch tests) keep their compiled modules in one folder of this run's own, so each source
    file is compiled once a run instead of once a process (an environment with
    PYTHONDONTWRITEBYTECODE recompiled the whole tool for every command). The folder is new each
    run, so a compiled file never outlives the run that wrote it, and no __pycache__ lands in the
    repository, the work tree or a tree a test builds a wheel from. xdist's workers inherit it."""
    import shutil
    import tempfile

    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    if "PYTHONPYCACHEPREFIX" in os.environ:  # make test's, shared by its phases
        return
    folder = tempfile.mkdtemp(prefix="gqueue-test-pyc-")
    os.environ["PYTHONPYCACHEPREFIX"] = folder
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
