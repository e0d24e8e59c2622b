"""End to end on the real sdist of the main pin: checkout, push the project's queue, pop back."""

from __future__ import annotations

import hashlib
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from gqueue.model.pin import parse_pins
from paths import REPO
from synth import Queue

pytestmark = pytest.mark.slow


def test_project_queue_on_real_vllm(tmp_path: Path, real_cache: str) -> None:
    root = tmp_path / "q"
    root.mkdir()
    for name in ("series", "vendor-pin.txt"):
        shutil.copy(REPO / name, root / name)
    shutil.copytree(REPO / "queue", root / "queue")
    q = Queue(root)
    q.run("checkout")
    names = q.run("series").stdout.split()
    assert names, "the project's series is empty"
    pushed = json.loads(q.run("push", "--all", "--json").stdout)["result"]
    not_carried = [entry["name"] for entry in pushed["not_carried"]]  # retired on this pin
    assert sorted([p["name"] for p in pushed["pushed"]] + not_carried) == sorted(names), pushed
    assert q.run("applied").stdout.split() == names
    q.run("pop", "--all")
    # The tree is byte-identical to the sdist's members.
    pin_sha = parse_pins((root / "vendor-pin.txt").read_text()).main.sdist_sha256
    sdist = next(Path(real_cache).glob(f"sha256/*/{pin_sha}/*.tar.gz"))
    with tarfile.open(sdist) as tar:
        for member in tar:
            if not member.isfile():
                continue
            rel = member.name.split("/", 1)[1]
            data = tar.extractfile(member).read()  # type: ignore[union-attr]
            on_disk = (q.work / rel).read_bytes()
            assert hashlib.sha256(on_disk).digest() == hashlib.sha256(data).digest(), rel
    assert q.run("status", "--json").stdout.count('"dirty": []') == 1
