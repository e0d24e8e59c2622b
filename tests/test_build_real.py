"""The real vllm overlay wheel of this repository's queue (slow: ~280 MB download, cached per machine).

The download cache is GQUEUE_TEST_CACHE, else the user's gqueue cache (~/.cache/gqueue),
so it survives between runs. GQUEUE_TEST_SEED may name a folder that already holds the
pinned sdist and wheel under their index file names: they are copied in (and verified)
instead of downloaded.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from synth import Queue
from test_build import fresh_venv, pip_install, verify_record

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def real_cache(monkeypatch: pytest.MonkeyPatch) -> Path:
    from gqueue.model.pin import parse_pins
    from gqueue.upstream import cache

    home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    path = Path(os.environ.get("GQUEUE_TEST_CACHE") or home / ".cache" / "gqueue")
    monkeypatch.setenv("GQUEUE_CACHE", str(path))
    pin = parse_pins((REPO / "vendor-pin.txt").read_text()).main
    seed = os.environ.get("GQUEUE_TEST_SEED")
    wanted = [(pin.sdist_sha256, f"{pin.project}-{pin.version}.tar.gz"), (pin.wheel_sha256, pin.options.get("wheel-file"))]
    for sha, name in wanted:
        if seed and sha and name and cache.cached(sha, name) is None and (Path(seed) / name).is_file():
            cache.fetch(str(Path(seed) / name), sha, name, where="GQUEUE_TEST_SEED")
    return path


def _real_queue(tmp: Path) -> Queue:
    root = tmp / "q"
    root.mkdir()
    for name in ("series", "vendor-pin.txt"):
        shutil.copy2(REPO / name, root / name)
    for name in ("queue", "kernels"):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return Queue(root)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_real_overlay_wheel(tmp_path: Path, real_cache: Path) -> None:
    from gqueue.model.pin import parse_pins

    main = parse_pins((REPO / "vendor-pin.txt").read_text()).main
    q = _real_queue(tmp_path)
    q.run("checkout")
    not_carried: set[str] = set()
    if q.run("series").stdout.split():
        pushed = json.loads(q.run("push", "--all", "--json").stdout)["result"]
        # a patch retired on this pin keeps its place with an empty commit; the wheel has no change of it
        not_carried = {entry["name"] for entry in pushed["not_carried"]}
    else:  # an empty series: carry what the queue holds, in name order, as far as it applies
        q.set_series(*sorted(p.name for p in (q.root / "queue").glob("*.patch")))
        q.run("push", "--all", check=False)
    applied = [name for name in q.run("applied").stdout.split() if name not in not_carried]
    doc = json.loads(q.run("build", "--json").stdout)
    assert doc["ok"], doc
    result = doc["result"]
    wheel = q.root / result["wheel"]
    assert wheel.name.startswith(f"vllm-{main.version}+gq.") and result["patches"] == applied
    verify_record(wheel)

    python = fresh_venv(tmp_path / "venv")
    pip_install(python, wheel)
    purelib = next((tmp_path / "venv" / "lib").glob("python*/site-packages"))
    patched = result["replaced"] + result["added"]
    assert all(p.startswith(("vllm/", "vllm_genesis/")) for p in patched)
    with zipfile.ZipFile(wheel) as zf:
        for path in patched:
            if path.startswith("vllm/"):
                expected = (q.work / path).read_bytes()
                assert zf.read(path) == expected, path
                assert (purelib / path).read_bytes() == expected, path
    out = subprocess.run([str(python), "-c", "import json; from vllm_genesis.manifest import manifest; print(json.dumps(manifest()))"],
                         check=True, capture_output=True, text=True, cwd=tmp_path)
    manifest = json.loads(out.stdout)
    assert manifest["version"] == result["version"] and manifest["upstream_version"] == main.version
    assert [p["name"] for p in manifest["patches"]] == applied
    assert all(p["id"] and p["title"] and p["lifecycle"] for p in manifest["patches"])
    assert manifest["pin"]["wheel_sha256"] and manifest["digests"]["queue"].startswith(result["label"][3:])
