#!/usr/bin/env python3
"""Benchmark `gqueue build` (overlay) against the naive rebuild of the real vLLM wheel.

Both start from the same queue (this repository's series, queue/, kernels/ and pin, copied
to a scratch folder, checked out and pushed) and the same verified upstream wheel:

- overlay: ``gqueue build`` as users run it (a new process; it verifies the cached
  upstream wheel's sha256, copies unchanged members raw and writes RECORD);
- naive: unzip the whole wheel with ``zipfile``, copy in the patched files and the
  kernels, rewrite METADATA and RECORD (hashing every file), and zip everything again
  with ``zipfile`` (deflate, default level).

    GQUEUE_CACHE=... python tools/bench/build.py [--repeat 3] [--naive-repeat 1] [--keep DIR]

It prints a table and writes it to docs/bench/build.md. The pinned sdist and wheel come
from the gqueue download cache (downloaded once if missing).
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))


def gqueue(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "gqueue", "-C", str(root), *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise SystemExit(f"gqueue {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def prepare(root: Path) -> list[str]:
    root.mkdir(parents=True)
    for name in ("series", "vendor-pin.txt"):
        shutil.copy2(REPO / name, root / name)
    for name in ("queue", "kernels"):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    gqueue(root, "checkout")
    if gqueue(root, "series").stdout.split():
        gqueue(root, "push", "--all")
    else:  # an empty series: what the queue holds, in name order, as far as it applies
        (root / "series").write_text("".join(p.name + "\n" for p in sorted((root / "queue").glob("*.patch"))))
        gqueue(root, "push", "--all", check=False)
    return gqueue(root, "applied").stdout.split()


def overlay(root: Path, out: Path) -> tuple[float, dict]:
    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    proc = gqueue(root, "build", "--json", "-o", str(out))
    seconds = time.perf_counter() - start
    return seconds, json.loads(proc.stdout)["result"]


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def naive(upstream: Path, root: Path, result: dict, out: Path) -> float:
    """Unzip, patch, re-zip everything with Python's zipfile."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    version = result["version"]
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="naive-", dir=out) as tmp:
        tree = Path(tmp) / "tree"
        with zipfile.ZipFile(upstream) as zf:
            zf.extractall(tree)
        for path in result["replaced"] + result["added"]:
            source = root / "work" / path if path.startswith("vllm/") else None
            if source is None:  # the kernels package and the manifest: take them from the overlay wheel
                continue
            (tree / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, tree / path)
        with zipfile.ZipFile(root / result["wheel"]) as built:
            for path in result["added"]:
                if path.startswith("vllm_genesis/"):
                    (tree / path).parent.mkdir(parents=True, exist_ok=True)
                    (tree / path).write_bytes(built.read(path))
        old_info = next(tree.glob("vllm-*.dist-info"))
        new_info = tree / f"vllm-{version}.dist-info"
        old_info.rename(new_info)
        meta = (new_info / "METADATA").read_text()
        (new_info / "METADATA").write_text(meta.replace(f"Version: {version.split('+')[0]}\n", f"Version: {version}\n", 1))
        files = sorted(p for p in tree.rglob("*") if p.is_file() and p.name != "RECORD")
        rows = []
        for p in files:
            data = p.read_bytes()
            rows.append((p.relative_to(tree).as_posix(), _record_hash(data), str(len(data))))
        rows.append((f"{new_info.name}/RECORD", "", ""))
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(rows)
        (new_info / "RECORD").write_text(buf.getvalue())
        target = out / result["filename"]
        with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
            for p in [*files, new_info / "RECORD"]:
                zf.write(p, p.relative_to(tree).as_posix())
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3, help="overlay builds to time (median reported)")
    ap.add_argument("--naive-repeat", type=int, default=1, help="naive rebuilds to time (median reported)")
    ap.add_argument("--keep", type=Path, help="work in this folder and keep it (default: a temporary one)")
    ap.add_argument("--markdown", type=Path, default=REPO / "docs" / "bench" / "build.md")
    args = ap.parse_args()

    from gqueue.model.pin import parse_pins
    from gqueue.upstream.resolve import wheel_path

    scratch = args.keep or Path(tempfile.mkdtemp(prefix="gqueue-bench-build-"))
    try:
        root = scratch / "q"
        applied = prepare(root)
        upstream = wheel_path(parse_pins((root / "vendor-pin.txt").read_text()).main)
        overlay_times = []
        for _ in range(args.repeat):
            seconds, result = overlay(root, scratch / "overlay")
            overlay_times.append(seconds)
        naive_times = [naive(upstream, root, result, scratch / "naive") for _ in range(args.naive_repeat)]
        naive_size = (scratch / "naive" / result["filename"]).stat().st_size
    finally:
        if args.keep is None:
            shutil.rmtree(scratch, ignore_errors=True)

    o, n = statistics.median(overlay_times), statistics.median(naive_times)
    table = [
        "| method | seconds (median) | runs | wheel size | speed-up |",
        "|---|---:|---:|---:|---:|",
        f"| naive: unzip, patch, re-zip with zipfile | {n:.2f} | {len(naive_times)} | {naive_size / 1e6:.1f} MB | 1.0x |",
        f"| `gqueue build` (overlay, raw member copy) | {o:.2f} | {len(overlay_times)} | {result['size'] / 1e6:.1f} MB | {n / o:.1f}x |",
    ]
    context = (
        f"vLLM {result['version']} from {upstream.name} ({upstream.stat().st_size / 1e6:.0f} MB): "
        f"{len(applied)} patch(es) applied, {len(result['replaced'])} file(s) replaced, {len(result['added'])} added, "
        f"{result['copied']} members copied unchanged. Machine: {platform.machine()}, {os.cpu_count()} CPU(s), "
        f"Python {platform.python_version()}. The overlay time is the whole `gqueue build` process: start-up, "
        f"the sha256 check of the cached upstream wheel, and hashing the output; the naive rebuild skips both checks. "
        f"Target: >= 5x faster than the naive rebuild."
    )
    text = "\n".join(table)
    print(text)
    print()
    print(context)
    args.markdown.parent.mkdir(parents=True, exist_ok=True)
    args.markdown.write_text(
        "# Benchmark: overlay wheel build\n\n"
        "`python tools/bench/build.py` builds this repository's queue on the real pinned vLLM wheel both ways, in one run.\n\n"
        + text + "\n\n" + context + "\n"
    )


if __name__ == "__main__":
    main()
