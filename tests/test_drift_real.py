"""End to end on the real sdists: check and rebase the project's queue from vLLM 0.24.0 to 0.25.0.

The main pin is the newest release, so the real jump measured here starts from the rollback pin:
the copy of the project has 0.24.0 as its only pin, and each patch's file there is the one that
serves 0.24.0 (its variant under queue/variants/0.24.0/ where it has one).

The class of each patch (check's status and what rebase did with it) is compared with
tests/data/drift-0.25.0.json; GQUEUE_UPDATE_GOLDEN=1 rewrites that file from this run.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from paths import REPO
from synth import Queue

pytestmark = pytest.mark.slow

EXPECTED = REPO / "tests" / "data" / "drift-0.25.0.json"
TARGET = "vllm==0.25.0"
REBASE_CLASS = {"clean": "moved", "offset": "moved", "merged3": "merged", "partial-upstream": "merged",
                "upstream": "retired"}


def _queue(tmp: Path) -> Queue:
    root = tmp / "q"
    root.mkdir()
    shutil.copy(REPO / "series", root / "series")
    (root / "vendor-pin.txt").write_text(_rollback_as_main((REPO / "vendor-pin.txt").read_text()))
    shutil.copytree(REPO / "queue", root / "queue", ignore=shutil.ignore_patterns("variants"))
    for variant in (REPO / "queue" / "variants" / "0.24.0").glob("*.patch"):
        shutil.copy(variant, root / "queue" / variant.name)
    return Queue(root)


def _rollback_as_main(text: str) -> str:
    """vendor-pin.txt with its rollback line as the only pin."""
    lines = [line for line in text.splitlines() if line.startswith("rollback ")]
    assert len(lines) == 1, "vendor-pin.txt has no single rollback pin"
    return "pin " + lines[0].split(" ", 1)[1] + "\n"


def _snapshot(q: Queue) -> dict[str, bytes]:
    return {str(p.relative_to(q.root)): p.read_bytes() for p in q.root.rglob("*")
            if p.is_file() and ".git" not in p.parts and ".gqueue" not in p.parts}


def test_check_and_rebase_project_queue_to_0_25(tmp_path: Path, real_cache: str) -> None:
    q = _queue(tmp_path)
    q.run("checkout")
    names = q.run("series").stdout.split()
    assert names, "the project's series is empty"
    proc = q.run("check", "--pin", TARGET, "--json", check=False)
    assert proc.returncode in (0, 3), proc.stderr
    pin = json.loads(proc.stdout)["pins"][0]
    check = {p["name"]: p["status"] for p in pin["patches"]}
    hunks = {p["name"]: [f"{h['file']}#{h['hunk']}:{h['status']}" for h in p["hunks"]] for p in pin["patches"]}
    assert list(check) == names
    assert (proc.returncode == 0) == pin["ok"]

    q.run("push", "--all")
    before = _snapshot(q)
    proc = q.run("rebase", "--pin", TARGET, "--json", check=False)
    assert proc.returncode in (0, 3), proc.stderr
    result = json.loads(proc.stdout)["result"]
    rebase = {name: kind for kind, members in result["summary"].items() for name in members}
    if result["stopped"]:
        rebase[result["stopped"]] = "stopped"
        assert (q.root / "vendor-pin.txt").read_bytes() == before["vendor-pin.txt"]
        q.run("rebase", "--abort")
        assert _snapshot(q) == before
    else:
        assert TARGET.split("==")[1] in (q.root / "vendor-pin.txt").read_text().split("pin ", 1)[1].splitlines()[0]
        after = json.loads(q.run("check", "--json").stdout)
        assert after["ok"] and all(p["status"] == "clean" for p in after["pins"][0]["patches"])
    for name, kind in rebase.items():  # rebase does what check predicted
        if kind != "stopped":
            assert REBASE_CLASS.get(check[name]) == kind, (name, check[name], kind)

    doc = {"pin": TARGET, "check": check, "hunks": hunks, "rebase": rebase}
    if os.environ.get("GQUEUE_UPDATE_GOLDEN") == "1" or not EXPECTED.exists():
        EXPECTED.parent.mkdir(parents=True, exist_ok=True)
        EXPECTED.write_text(json.dumps(doc, indent=2) + "\n")
    expected = json.loads(EXPECTED.read_text())
    assert doc["check"] == expected["check"], "patch classes changed (GQUEUE_UPDATE_GOLDEN=1 rewrites the file)"
    assert doc["hunks"] == expected["hunks"]
    assert doc["rebase"] == expected["rebase"]
