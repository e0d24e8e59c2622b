"""gqueue docs: the generated catalogue and the runtime registry, and catching them stale."""

from __future__ import annotations

import json
from pathlib import Path

from gqueue.ops import catalogue
from gqueue.store import Store
from synth import BASE_FILES, Queue, make_queue, unified

CONFIG = BASE_FILES["vllm/config.py"]


def catalogue_queue(tmp: Path) -> Queue:
    q = make_queue(tmp)
    specs = [
        ("C1-first.patch", "C1", "family: scheduler\nlifecycle: stable\ntier: community\ndefault_on: true\n"
         "env_flag: GENESIS_DISABLE_C1_FIRST\nupstream:\n  pr: 40768\n  state: open\n  relationship: backport\n"
         "credit: [alice, bob]\napplies_to:\n  vllm: '>=0.1.0,<0.2'\n  kv_cache_dtype: fp8\n"),
        ("C2-second.patch", "C2", "family: scheduler\nlifecycle: experimental\ntier: engine\n"
         "env_flag: GENESIS_ENABLE_C2_SECOND\ncredit: 'carol | dave'\n"),
        ("C3-third.patch", "C3", "family: attention\nlifecycle: experimental\ntier: community\nenv_flag: null\n"),
    ]
    for i, (name, pid, extra) in enumerate(specs):
        body = unified("vllm/config.py", CONFIG, CONFIG.replace(f"OPTION_{i * 9} = {i * 9}\n", f"OPTION_{i * 9} = 0\n"))
        q.write_patch(name, body, patch_id=pid, extra=extra)
    q.set_series(*(s[0] for s in specs))
    return q


def test_docs_writes_catalogue_and_registry(tmp_path: Path) -> None:
    q = catalogue_queue(tmp_path)
    proc = q.run("docs", "--json")
    doc = json.loads(proc.stdout)
    assert doc["result"]["written"] == [catalogue.CATALOGUE, catalogue.REGISTRY]
    text = (q.root / catalogue.CATALOGUE).read_text()
    assert "| experimental | 2 |" in text and "| stable | 1 |" in text
    assert "| scheduler | 2 |" in text and "| engine | 1 |" in text
    assert "| on | 1 |" in text and "| off | 1 |" in text and "| always | 1 |" in text
    row = next(line for line in text.splitlines() if line.startswith("| C1 |"))
    assert "`GENESIS_DISABLE_C1_FIRST`" in row and "[#40768](https://github.com/vllm-project/vllm/pull/40768)" in row
    assert "alice, bob" in row and "vllm >=0.1.0,<0.2; kv_cache_dtype=fp8" in row and "| stable | on |" in row
    assert "carol \\| dave" in text
    registry = json.loads((q.root / catalogue.REGISTRY).read_text())
    assert registry["schema"] == "vllm_genesis.registry/1"
    assert [p["id"] for p in registry["patches"]] == ["C1", "C2", "C3"]
    assert registry["patches"][0]["default_on"] is True
    again = q.run("docs")
    assert "already current" in again.stdout
    assert q.run("docs", "--check").returncode == 0


def test_stale_catalogue_caught(tmp_path: Path) -> None:
    q = catalogue_queue(tmp_path)
    q.run("docs")
    path = q.root / "queue/C2-second.patch"
    path.write_text(path.read_text().replace("title: C2-second.patch", "title: a new title"))
    proc = q.run("docs", "--check", check=False)
    assert proc.returncode == 3
    assert f"{catalogue.CATALOGUE}: stale" in proc.stdout and f"{catalogue.REGISTRY}: stale" in proc.stdout
    doc = json.loads(q.run("docs", "--check", "--json", check=False).stdout)
    assert doc["ok"] is False and doc["result"]["stale"] == [catalogue.CATALOGUE, catalogue.REGISTRY]
    q.run("docs")
    assert q.run("docs", "--check").returncode == 0


def test_series_order_and_hand_edits_are_stale(tmp_path: Path) -> None:
    q = catalogue_queue(tmp_path)
    q.run("docs")
    q.set_series("C2-second.patch", "C1-first.patch", "C3-third.patch")
    assert catalogue.check(Store(q.root)).changed == (catalogue.CATALOGUE, catalogue.REGISTRY)
    q.run("docs")
    (q.root / catalogue.REGISTRY).write_text("{}\n")
    assert catalogue.check(Store(q.root)).changed == (catalogue.REGISTRY,)
    assert q.run("docs", "--check", "--no-registry").returncode == 0


def test_missing_file_is_stale(tmp_path: Path) -> None:
    q = catalogue_queue(tmp_path)
    assert q.run("docs", "--check", check=False).returncode == 3


def test_project_catalogue_is_current() -> None:
    repo = Path(__file__).resolve().parents[1]
    stale = catalogue.check(Store(repo)).changed
    assert stale == (), f"{', '.join(stale)} stale: run 'gqueue docs'"
