#!/usr/bin/env python3
"""Real quilt series from elsewhere: Debian source packages' debian/patches on their own trees.

For each package (bookworm's, by default curl and openssh): the .orig tarball and the
.debian tarball, fetched from deb.debian.org and checked against the sha256 of the release's
Sources index (cached under bench-out/debian/); then, timed as whole commands, in turns over
several rounds: ``gqueue import --series debian/patches/series`` into a fresh queue pinned to
the .orig tarball (file:// URL with its sha256), ``gqueue push --all`` after a checkout, and
``quilt push -a`` of the same series on the unpacked tree. The trees are compared at the end
of each round (identical or not), and with the tree ``git apply`` makes of the same series
(once, not timed); the imported series is compared with the package's.

    python tools/bench/debian.py [--packages curl,openssh] [--rounds 3] [--suite bookworm] [--out docs/bench/debian.md]

Needs quilt (apt-get install quilt) and a reachable Debian mirror.
"""

from __future__ import annotations

import argparse
import hashlib
import lzma
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from report import emit  # noqa: E402
REPO = HERE.parents[1]
MIRROR = "http://deb.debian.org/debian"
GQ = [sys.executable, "-m", "gqueue"]
ENV = {**os.environ, "QUILT_PATCHES": "debian/patches"}
ENV.pop("PYTHONDONTWRITEBYTECODE", None)


class Unavailable(Exception):
    """A file the mirror does not serve (a package updated since the index was made)."""


def fetch(url: str, dest: Path, sha256: str | None = None) -> Path:
    """``url`` at ``dest`` (kept between runs), its sha256 checked when one is given."""
    if not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_suffix(dest.suffix + ".part")
        try:
            with urllib.request.urlopen(url, timeout=120) as response, tmp.open("wb") as out:
                shutil.copyfileobj(response, out)
        except OSError as exc:
            raise Unavailable(f"{url}: {exc}") from None
        tmp.rename(dest)
    if sha256 is not None and hashlib.sha256(dest.read_bytes()).hexdigest() != sha256:
        dest.unlink()
        raise SystemExit(f"{url}: sha256 does not match the Sources index")
    return dest


def source_files(sources: str, package: str) -> tuple[str, dict[str, str]]:
    """The package's pool folder and its files' sha256 (name -> hash) from a Sources index."""
    match = re.search(rf"^Package: {re.escape(package)}\n(.*?)(?:\n\n|\Z)", sources, re.S | re.M)
    if match is None:
        raise SystemExit(f"no source package {package} in the Sources index")
    stanza = match.group(1)
    folder = re.search(r"^Directory: (\S+)$", stanza, re.M)
    sums = stanza.split("Checksums-Sha256:", 1)[1].split("\n", 1)[1] if "Checksums-Sha256:" in stanza else ""
    files = dict((name, digest) for digest, _size, name in re.findall(r"^ ([0-9a-f]{64}) (\d+) (\S+)$", sums, re.M))
    if folder is None or not files:
        raise SystemExit(f"the Sources stanza of {package} has no folder or checksums")
    return folder.group(1), files


def timed(cmd: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, env=ENV)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed in {cwd}:\n{proc.stdout.decode()[-2000:]}\n{proc.stderr.decode()[-2000:]}")
    return elapsed


def same_trees(a: Path, b: Path) -> bool:
    """Every file of one is in the other with the same bytes and executable bit (.git, .pc and
    debian/ left out)."""
    def files(root: Path) -> dict[str, tuple[bytes, bool]]:
        out = {}
        for path in root.rglob("*"):
            rel = path.relative_to(root).as_posix()
            if rel.split("/", 1)[0] in (".git", ".pc", "debian") or not path.is_file() or path.is_symlink():
                continue
            out[rel] = (path.read_bytes(), os.access(path, os.X_OK))
        return out
    return files(a) == files(b)


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def bench(package: str, cache: Path, sources: str, rounds: int, tmp: Path) -> str:
    folder, files = source_files(sources, package)
    orig = next((n for n in files if re.search(r"\.orig\.tar\.[a-z0-9]+$", n)), None)
    if orig is None:  # a native package: no upstream tree, no patches
        raise Unavailable("a native package (no .orig tarball, no patch series)")
    components = [n for n in files if re.search(r"\.orig-[^.]+\.tar\.[a-z0-9]+$", n)]
    if components:  # more than one tree to unpack: one pin archive cannot stand for them
        raise Unavailable(f"its source has component tarballs ({', '.join(components)})")
    debian = next(n for n in files if re.search(r"\.debian\.tar\.[a-z0-9]+$", n))
    orig_path = fetch(f"{MIRROR}/{folder}/{orig}", cache / orig, files[orig])
    debian_path = fetch(f"{MIRROR}/{folder}/{debian}", cache / debian, files[debian])
    unpacked = tmp / f"{package}-debian"
    with tarfile.open(debian_path) as tar:
        tar.extractall(unpacked, filter="data")
    series = unpacked / "debian" / "patches" / "series"
    entries = [line.split()[0] for line in series.read_text().splitlines() if line.strip() and not line.lstrip().startswith("#")]
    times: dict[str, list[float]] = {"import": [], "push --all": [], "quilt push -a": []}
    identical = []
    for _ in range(rounds):
        q = tmp / f"{package}-q"
        shutil.rmtree(q, ignore_errors=True)
        (q / "queue").mkdir(parents=True)
        (q / "series").write_text("")
        (q / "vendor-pin.txt").write_text(f"pin {orig_path.as_uri()}#sha256={files[orig]}\n")
        times["import"].append(timed([*GQ, "-C", str(q), "import", "--series", str(series)], q))
        timed([*GQ, "-C", str(q), "checkout"], q)
        times["push --all"].append(timed([*GQ, "-C", str(q), "push", "--all"], q))
        qt = tmp / f"{package}-quilt"
        shutil.rmtree(qt, ignore_errors=True)
        with tarfile.open(orig_path) as tar:
            tar.extractall(qt, filter="data")
        tree = next(p for p in qt.iterdir() if p.is_dir())
        shutil.copytree(unpacked / "debian", tree / "debian")
        times["quilt push -a"].append(timed(["quilt", "push", "-a", "-q"], tree))
        identical.append(same_trees(tree, q / "work"))
    kept = (q / "series").read_text() == series.read_text()
    with tarfile.open(orig_path) as tar:  # the same series with git apply, patch by patch (not timed)
        tar.extractall(tmp / f"{package}-git", filter="data")
    by_git = next(p for p in (tmp / f"{package}-git").iterdir() if p.is_dir())
    stopped = None
    for line in series.read_text().splitlines():
        words = line.split("#", 1)[0].split()
        if words and stopped is None:
            strip = next((w[2:] for w in words[1:] if w.startswith("-p")), "1")
            proc = subprocess.run(["git", "apply", f"-p{strip}", "--whitespace=nowarn", str(series.parent / words[0])],
                                  cwd=by_git, capture_output=True)
            stopped = words[0] if proc.returncode else None
    as_git = f"git apply refuses {stopped}" if stopped else "yes" if same_trees(by_git, q / "work") else "NO"
    push, quilt = median(times["push --all"]), median(times["quilt push -a"])
    return (f"| {package} ({debian.split('_', 1)[1].rsplit('.debian', 1)[0]}) | {len(entries)} | "
            f"{median(times['import']):.3f} s | {push:.3f} s | {quilt:.3f} s | {quilt / push:.1f}x | "
            f"{'yes' if all(identical) else 'NO'} | {as_git} | {'yes' if kept else 'no'} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--packages", default="curl,openssh")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--suite", default="bookworm")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "bench" / "debian.md")
    args = parser.parse_args()
    cache = REPO / "bench-out" / "debian"
    index = fetch(f"{MIRROR}/dists/{args.suite}/main/source/Sources.xz", cache / f"{args.suite}-Sources.xz")
    sources = lzma.decompress(index.read_bytes()).decode("utf-8", "replace")
    rows = []
    with tempfile.TemporaryDirectory(prefix="gqueue-bench-debian-") as tmp_name:
        for package in args.packages.split(","):
            try:
                rows.append(bench(package, cache, sources, args.rounds, Path(tmp_name)))
            except Unavailable as exc:
                rows.append(f"| {package} | not measured: {exc} | | | | | | | |")
            print(rows[-1], file=sys.stderr)
    lines = [
        f"Debian {args.suite} source packages: the .orig tarball (the queue's pin, file:// with its sha256) and "
        "debian/patches/series, fetched from deb.debian.org and checked against the Sources index.",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, load average "
        f"{os.getloadavg()[0]:.1f} at the end. Whole commands, wall time, median of {args.rounds} rounds, taken in turns.",
        "",
        "| package (version) | patches | gqueue import | gqueue push --all | quilt push -a | quilt / gqueue | same tree as quilt | as git apply | series kept as written |",
        "|---|---:|---:|---:|---:|---:|---|---|---|",
        *rows,
        "",
        f"Command: `python tools/bench/debian.py --packages {args.packages} --rounds {args.rounds} --suite {args.suite}`",
    ]
    emit(lines, args.out)


if __name__ == "__main__":
    main()
