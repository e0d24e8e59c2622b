"""gqueue bisect run on the real pinned vLLM with this repository's queue (slow).

The download cache is GQUEUE_TEST_CACHE, else the user's gqueue cache; GQUEUE_TEST_SEED may
name a folder holding the pinned sdist under its index file name (copied in and verified).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import sys
import time
from pathlib import Path

import pytest

from gqueue.model.diff import parse_diff
from gqueue.model.patch import parse_patch
from synth import Queue

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def real_queue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Queue:
    from gqueue.model.pin import parse_pins
    from gqueue.upstream import cache

    home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    monkeypatch.setenv("GQUEUE_CACHE", str(Path(os.environ.get("GQUEUE_TEST_CACHE") or home / ".cache" / "gqueue")))
    pin = parse_pins((REPO / "vendor-pin.txt").read_text()).main
    name, seed = f"{pin.project}-{pin.version}.tar.gz", os.environ.get("GQUEUE_TEST_SEED")
    if seed and pin.sdist_sha256 and cache.cached(pin.sdist_sha256, name) is None and (Path(seed) / name).is_file():
        cache.fetch(str(Path(seed) / name), pin.sdist_sha256, name, where="GQUEUE_TEST_SEED")
    root = tmp_path / "q"
    root.mkdir()
    for item in ("series", "vendor-pin.txt"):
        shutil.copy2(REPO / item, root / item)
    shutil.copytree(REPO / "queue", root / "queue")
    return Queue(root)


def marker(queue: Path, name: str) -> tuple[str, str]:
    """(file, an added line) that only patch ``name`` brings."""
    patch = parse_patch((queue / name).read_bytes(), name=name)
    for fd in parse_diff(patch.body, first_line=patch.body_offset_line):
        for tag, text in (line for hunk in fd.hunks for line in hunk.lines):
            line = text.decode().strip()
            if tag == b"+" and len(line) > 20:
                return fd.path, line
    raise AssertionError(f"no marker line in {name}")


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_real_bisect_finds_each_sampled_patch(real_queue: Queue) -> None:
    q = real_queue
    q.run("checkout")
    names = q.run("series").stdout.split()
    if len(names) < 2:
        pytest.skip("the series has fewer than two patches")
    q.run("push", "-n", str(len(names) // 2))
    before = q.run("applied").stdout
    for name in {names[0], names[len(names) // 2], names[-1]}:
        path, line = marker(q.root / "queue", name)
        check = f"import sys; sys.exit(1 if {line!r} in open({path!r}, encoding='utf-8').read() else 0)"
        start = time.monotonic()
        doc = json.loads(q.run("bisect", "run", "--json", "--", sys.executable, "-c", check).stdout)
        seconds = time.monotonic() - start
        print(f"bisect over {len(names)} patches, culprit {name}: {doc['result']['tests']} tests, {seconds:.1f}s")
        assert doc["result"]["culprit"]["name"] == name
        assert q.run("applied").stdout == before
    assert json.loads(q.run("status", "--json").stdout)["result"]["dirty"] == []
