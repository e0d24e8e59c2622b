#!/usr/bin/env python3
"""Benchmark ``gqueue bisect run`` against ``git bisect run`` on a synthetic series over the real
vLLM tree, with the culprit planted at several positions.

Setup (not timed): a queue on this repository's pin, checked out; tools/bench/synthseries.py
writes N patches over the tree. The command tested is ``sh -c "! grep -qF MARK FILE"`` where
MARK is a line the culprit patch adds. Timed, per culprit position:

- gqueue bisect run, nothing applied (the unapplied positions are first written as commits
  in memory, then each step is a checkout);
- gqueue bisect run, the whole series pushed (each step a checkout of a stack commit), and the
  same with --trust-ends (neither end tested, as git bisect trusts the ends it is given);
- git bisect run on the pushed stack (plain git, for comparison).

    GQUEUE_CACHE=... python tools/bench/bisect_run.py [-n 300]

It prints a table and writes it to docs/bench/bisect.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
sys.path.insert(0, str(REPO / "tools" / "bench"))

from synthseries import generate  # noqa: E402

from pins import chosen_pin, main_pin_line  # noqa: E402


def gq(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gqueue", "-q", "-C", str(root), *args],
                          capture_output=True, text=True, check=True)


def marker(patch: Path) -> tuple[str, str]:
    path = ""
    for line in patch.read_text(encoding="utf-8", errors="surrogateescape").splitlines():
        if line.startswith("+++ b/"):
            path = line[6:]
        elif line.startswith("+") and not line.startswith("+++") and "# S" in line:
            return path, line[1:]
    raise SystemExit(f"no marker in {patch}")


def timed(func) -> tuple[float, object]:  # noqa: ANN001
    start = time.perf_counter()
    value = func()
    return time.perf_counter() - start, value


def git_bisect(work: Path, base: str, check: list[str]) -> tuple[int, str]:
    git = ["git", "-C", str(work)]
    subprocess.run([*git, "bisect", "start", "gqueue", base], check=True, capture_output=True)
    try:
        out = subprocess.run([*git, "bisect", "run", *check], check=True, capture_output=True, text=True).stdout
    finally:
        subprocess.run([*git, "bisect", "reset"], check=True, capture_output=True)
    return out.count("running "), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=300)
    parser.add_argument("--base", help="the pin of vendor-pin.txt (any label) the series is on (default: the main pin)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gqueue-bench-bisect-"))
    try:
        root = tmp / "q"
        (root / "queue").mkdir(parents=True)
        chosen = chosen_pin(args.base)
        (root / "vendor-pin.txt").write_text(main_pin_line(chosen))
        (root / "series").write_text("")
        gq(root, "checkout")
        names = generate(root / "work", root, args.n)
        base = gq(root, "status", "--json").stdout
        tag = next(line for line in (root / "vendor-pin.txt").read_text().split() if "==" in line).replace("==", "-")
        rows = []
        for position in sorted({1, len(names) // 4, len(names) // 2, len(names)}):
            name = names[position - 1]
            path, line = marker(root / "queue" / name)
            check = ["sh", "-c", f"! grep -qF -- {shell_quote(line)} {shell_quote(path)}"]
            gq(root, "pop", "--all") if gq(root, "applied").stdout.strip() else None
            seconds, out = timed(lambda: gq(root, "bisect", "run", "--json", "--", *check))
            tests = out.stdout.count('"verdict"')  # type: ignore[attr-defined]
            rows.append(("gqueue bisect run, nothing applied", len(names), position, tests, seconds))
            gq(root, "push", "--all")
            seconds, out = timed(lambda: gq(root, "bisect", "run", "--json", "--", *check))
            tests = out.stdout.count('"verdict"')  # type: ignore[attr-defined]
            rows.append(("gqueue bisect run, series pushed", len(names), position, tests, seconds))
            seconds, out = timed(lambda: gq(root, "bisect", "run", "--trust-ends", "--json", "--", *check))
            tests = out.stdout.count('"verdict"')  # type: ignore[attr-defined]
            rows.append(("gqueue bisect run --trust-ends, series pushed", len(names), position, tests, seconds))
            seconds, (tests, _text) = timed(lambda: git_bisect(root / "work", f"gqueue/pin/{tag}", check))  # type: ignore[misc]
            rows.append(("git bisect run, series pushed", len(names), position, tests, seconds))
        del base
        table = ["| scenario | patches | culprit at | tests | seconds |", "|---|---:|---:|---:|---:|"]
        table += [f"| {s} | {n} | {p} | {t} | {sec:.2f} |" for s, n, p, t, sec in rows]
        text = "\n".join(table)
        print(text)
        out_dir = REPO / "docs" / "bench"
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "bisect.md").write_text(
            f"# Bisect\n\n`python tools/bench/bisect_run.py -n {args.n}{f' --base {args.base}' if args.base else ''}` "
            f"on {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, tree of "
            f"{chosen.source}, load average {os.getloadavg()[0]:.1f} at the end (the machine is shared). "
            "'tests' counts the command's runs (git bisect trusts both ends; gqueue tests an end too "
            "when the culprit it finds is next to it, unless --trust-ends).\n\n" + text + "\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


if __name__ == "__main__":
    main()
