#!/usr/bin/env python3
"""Benchmark ``gqueue check`` and ``gqueue rebase`` against git, quilt (and StGit if installed)
on a series over the real vLLM tree, moving 0.24.0 -> 0.25.0: a synthetic one
(tools/bench/synthseries.py) or one imported from ``git format-patch`` of small commits
(tools/bench/realseries.py), ``--kind``.

Setup (not timed): a queue pinned on this repository's vendor-pin.txt ('pin' and 'next'),
checked out; tools/bench/synthseries.py writes N patches over the 0.24.0 tree whose edits
sit where 0.25.0 did not change the lines around them (so nothing conflicts); the series is
pushed. Timed, each from a fresh copy, in one run:

- git apply --3way loop: ``git apply --3way`` of each patch in turn, on 0.25.0 (a clone of work/,
  so the 0.24.0 preimage blobs are there);
- git rebase --onto: the stack's commits rebased from the 0.24.0 commit onto the 0.25.0 one;
- quilt push -f loop: ``quilt push -f`` of each patch on an extracted 0.25.0 tree;
- gqueue check --pin PIN (a new process; every hunk classified, JSON written; the pin's
  tree already fetched);
- gqueue rebase --pin PIN (the whole move: commits, refreshed patches, work tree, pin).

The series is on vllm 0.24.0 (``--base``: another pin of vendor-pin.txt) and PIN is
vllm==0.25.0, the next release (the queue's own pins are far apart: 0.24.0 and 0.34.0).

    GQUEUE_CACHE=... python tools/bench/drift.py [-n 300] [--repeat 3] [--kind synthetic|real] [--base vllm==0.24.0] [--keep DIR]

It prints a table and writes it to docs/bench/drift.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
sys.path.insert(0, str(REPO / "tools" / "bench"))

from realseries import generate as generate_real  # noqa: E402
from realseries import shape  # noqa: E402
from synthseries import generate  # noqa: E402

from pins import chosen_pin, main_pin_line  # noqa: E402
from report import emit  # noqa: E402

BASE = "vllm==0.24.0"  # the series' pin (--base: any pin vendor-pin.txt names)
PIN = "vllm==0.25.0"  # the release it is checked and rebased onto


def sh(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None, check: bool = True) -> str:
    full = dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@x", GIT_COMMITTER_NAME="b",
                GIT_COMMITTER_EMAIL="b@x", **(env or {}))
    proc = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, env=full)
    if check and proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return proc.stdout


def gqueue(root: Path, *args: str, check: bool = True) -> str:
    return sh(sys.executable, "-m", "gqueue", "-C", str(root), *args, check=check)


def timed(setup: Callable[[], object], action: Callable[[object], object], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        state = setup()
        start = time.perf_counter()
        action(state)
        times.append(time.perf_counter() - start)
    return times


def prepare(root: Path, n: int, seed: int, kind: str = "synthetic",
            base: str = BASE) -> tuple[Path, list[str], str, str, str, Path]:
    q = root / "q"
    (q / "queue").mkdir(parents=True)
    (q / "vendor-pin.txt").write_text(main_pin_line(chosen_pin(base)))
    (q / "series").write_text("# empty\n")
    gqueue(q, "checkout")
    gqueue(q, "check", "--pin", PIN)  # imports the new pin's tree into work/.git
    work = q / "work"
    tags = sh("git", "tag", "-l", "gqueue/pin/*", cwd=work).split()
    old_tag = next(t for t in tags if t.endswith(base.split("==")[1]))
    new_tag = next(t for t in tags if t.endswith(PIN.split("==")[1]))
    new_tree = root / "new-tree"
    new_tree.mkdir()
    archive = subprocess.run(["git", "archive", new_tag], cwd=work, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(new_tree)], input=archive, check=True)
    if kind == "synthetic":
        names = generate(work, q, n=n, seed=seed, stable_against=new_tree)
    else:
        old_tree = root / "old-tree"
        old_tree.mkdir()
        archive = subprocess.run(["git", "archive", old_tag], cwd=work, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(old_tree)], input=archive, check=True)
        generate_real(old_tree, root / "gen", n=n, seed=seed, stable_against=new_tree)
        shutil.rmtree(old_tree)
        shutil.rmtree(root / "gen" / "repo")
        gqueue(q, "import", "--series", str(root / "gen" / "queue" / "series"))
        names = [line.split()[0] for line in (q / "series").read_text().splitlines()
                 if line.strip() and not line.lstrip().startswith("#")]
    gqueue(q, "push", "--all")
    head = sh("git", "rev-parse", "HEAD", cwd=work).strip()
    changed = len(sh("git", "diff", "--name-only", old_tag, new_tag, cwd=work).split())
    return q, names, old_tag, new_tag, head, new_tree, changed  # type: ignore[return-value]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path)
    parser.add_argument("--kind", choices=("synthetic", "real"), default="synthetic")
    parser.add_argument("--base", default=BASE, help="the pin of vendor-pin.txt the series is on")
    parser.add_argument("--out", type=Path, help="default: docs/bench/drift.md (drift-real.md for --kind real)")
    args = parser.parse_args()
    args.out = args.out or REPO / "docs" / "bench" / ("drift.md" if args.kind == "synthetic" else "drift-real.md")
    root = args.keep or Path(tempfile.mkdtemp(prefix="gqueue-bench-drift-"))
    root.mkdir(parents=True, exist_ok=True)
    q, names, old_tag, new_tag, head, new_tree, changed = prepare(root / "setup", args.n, args.seed, args.kind, args.base)  # type: ignore[misc]
    work = q / "work"
    rows: list[tuple[str, list[float]]] = []
    counter = iter(range(10**6))

    def clone() -> Path:
        target = root / f"clone-{next(counter)}"
        sh("git", "clone", "-q", "--shared", "--no-checkout", str(work), str(target))
        return target

    def setup_apply() -> Path:
        target = clone()
        sh("git", "checkout", "-q", "--detach", new_tag, cwd=target)
        return target

    def run_apply(target: object) -> None:
        for name in names:
            sh("git", "apply", "--3way", str(q / "queue" / name), cwd=target)  # type: ignore[arg-type]

    rows.append(("git apply --3way loop (per patch)", timed(setup_apply, run_apply, args.repeat)))

    def setup_rebase() -> Path:
        target = clone()
        sh("git", "checkout", "-q", "-B", "bench", head, cwd=target)
        return target

    def run_rebase(target: object) -> None:
        sh("git", "rebase", "-q", "--onto", new_tag, old_tag, "bench", cwd=target)  # type: ignore[arg-type]

    rows.append(("git rebase --onto", timed(setup_rebase, run_rebase, args.repeat)))

    if shutil.which("quilt"):
        def setup_quilt() -> Path:
            target = root / f"quilt-{next(counter)}"
            shutil.copytree(new_tree, target, symlinks=True)
            return target

        def run_quilt(target: object) -> None:
            env = {"QUILT_PATCHES": str(q / "queue"), "QUILT_SERIES": str(q / "series"), "QUILTRC": "/dev/null"}
            for _ in names:
                sh("quilt", "push", "-f", "-q", cwd=target, env=env, check=False)  # type: ignore[arg-type]

        rows.append(("quilt push -f loop", timed(setup_quilt, run_quilt, args.repeat)))

    rows.append((f"gqueue check --pin {PIN} (per hunk)",
                 timed(lambda: None, lambda _: gqueue(q, "check", "--pin", PIN, "--json", check=False), args.repeat)))

    def setup_gq() -> Path:
        target = root / f"gq-{next(counter)}"
        shutil.copytree(q, target, symlinks=True)
        return target

    def run_gq(target: object) -> None:
        gqueue(target, "rebase", "--pin", PIN)  # type: ignore[arg-type]

    rows.append((f"gqueue rebase --pin {PIN} (whole series)", timed(setup_gq, run_gq, args.repeat)))
    check_doc = gqueue(q, "check", "--pin", PIN, check=False)
    summary = check_doc.strip().splitlines()[0] if check_doc.strip() else ""

    git_loop = statistics.median(rows[0][1])
    lines = [
        f"### gqueue check / rebase vs git, quilt: {len(names)} {args.kind} patches, vllm {args.base.split('==')[1]} -> {PIN.split('==')[1]}",
        "",
        (f"Synthetic series: tools/bench/synthseries.py (n={args.n}, seed={args.seed}, edits where 0.25.0 left the "
         f"surrounding lines alone)" if args.kind == "synthetic" else
         f"Imported series: tools/bench/realseries.py (`git format-patch` of {args.n} small commits, seed={args.seed}, "
         f"edits where 0.25.0 left the surrounding lines alone; {shape(q / 'queue', q / 'series')['file diffs']} file diffs, "
         f"{shape(q / 'queue', q / 'series')['hunks']} hunks), imported with `gqueue import --series`") +
        f"; {changed} files changed upstream between the two pins. "
        f"Median of {args.repeat} runs, seconds; each run from a fresh copy. Machine: {platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"{sh('git', '--version').strip()}.",
        "",
        f"`gqueue check` said: {summary}. StGit is not measured (optional; not installed). "
        f"Load average during the run: {os.getloadavg()[0]:.1f} (the machine is shared).",
        "",
        "| tool | median s | min s | vs git apply --3way loop |",
        "|---|---:|---:|---:|",
    ]
    for label, times in rows:
        median = statistics.median(times)
        lines.append(f"| {label} | {median:.2f} | {min(times):.2f} | {git_loop / median:.1f}x |")
    check_s = statistics.median(rows[-2][1])
    rebase_s = statistics.median(rows[-1][1])
    limit, factor = (2.0, 3.0) if args.kind == "synthetic" else (1.5, 4.0)
    lines += [
        "",
        f"Targets: `gqueue check` of one pin under {limit:g} s and at least {factor:g}x the git apply loop: "
        f"{check_s:.2f} s, {git_loop / check_s:.1f}x "
        f"({'met' if check_s < limit and git_loop / check_s >= factor else 'NOT met'}); "
        f"`gqueue rebase` of the whole series under 5 s when nothing conflicts: {rebase_s:.2f} s "
        f"({'met' if rebase_s < 5 else 'NOT met'}).",
    ]
    emit(lines, args.out)
    if args.keep is None:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
