#!/usr/bin/env python3
"""How each stack command's cost grows with the series' length, beside its anchors, in one run.

For each length N (default 33, 300, 1000) a synthetic series (tools/bench/synthseries.py,
seed 0, every edit where vllm 0.25.0 left the lines around it alone) over the pinned vLLM
tree, and times, as whole commands, in turns over ``--rounds`` rounds:

- ``gqueue push --all``, ``gqueue check --pin vllm==0.25.0`` (the pin already fetched and
  imported, so a cached-pin check), ``gqueue pop --all``, and ``gqueue --version`` (the floor
  of any gqueue command) in each round;
- then, with the series pushed, the top patch's first file touched and refreshed, by
  ``gqueue refresh`` and by ``quilt refresh`` on a copy of the tree with the same series
  pushed by quilt, in turns;
- with the series pushed, ``gqueue move P --last`` and back, P the first patch that shares no file
  with another (each move pops the applied patches from P up and pushes them again in the new order);
- with the series pushed, ``gqueue bisect run`` and ``git bisect run`` of the same stack with the
  same test command (a grep for a line the middle patch adds), with the tests each ran;
- ``gqueue rebase --abort`` of a rebase to 0.25.0 stopped at its last patch (the diff of one
  patch that conflicts there appended to the series), beside its floor: ``git read-tree --reset -u`` of
  the same two trees in work/ (the files --abort must put back).

Prints a table and writes it to docs/bench/growth.md.

    python tools/bench/growth.py [--sizes 33,300,1000] [--rounds 3] [--base vllm==0.24.0] [--out docs/bench/growth.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tools"))

from bisect_run import marker  # noqa: E402
from synthseries import generate  # noqa: E402

from gqueue.model.patch import split_header  # noqa: E402
from pins import chosen_pin, main_pin_line  # noqa: E402
from gqueue.upstream.resolve import sdist_path  # noqa: E402
from report import emit  # noqa: E402

GQ = [sys.executable, "-m", "gqueue"]
ENV = dict(os.environ, GIT_CONFIG_NOSYSTEM="1", QUILT_PC=".pc", LC_ALL="C", GIT_AUTHOR_NAME="b",
           GIT_AUTHOR_EMAIL="b@x", GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@x")
ENV.pop("PYTHONDONTWRITEBYTECODE", None)  # as in an installed copy (see stack.py)
NEW_PIN = "vllm==0.25.0"
# A patch of the project's queue whose diff conflicts on 0.25.0: its diff, under a header of its
# own (the queue's header may say more than the 0.24.0 -> 0.25.0 move needs), is appended to
# each series, the rebase stops there, so --abort has every other patch's move to take back.
CONFLICTING = "P62-struct-out-spec-reasoning-timing.patch"


def run(cmd: list[str], cwd: Path, *, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, env=ENV, stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed in {cwd}:\n{proc.stdout.decode()[-2000:]}\n{proc.stderr.decode()[-2000:]}")
    return proc


def timed(cmd: list[str], cwd: Path, *, check: bool = True) -> float:
    start = time.perf_counter()
    run(cmd, cwd, check=check)
    return time.perf_counter() - start


def median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def touch_top(tree: Path, queue: Path, series: Path) -> None:
    names = [line.split()[0] for line in series.read_text().splitlines() if line.strip() and not line.startswith("#")]
    body = (queue / names[-1]).read_text()
    path = next(line[6:] for line in body.splitlines() if line.startswith("+++ b/"))
    with (tree / path).open("a") as handle:
        handle.write("# refreshed by the benchmark\n")


def one_size(n: int, tmp: Path, tree: Path, pin_text: str, rounds: int) -> dict[str, list[float]]:
    q = tmp / f"q{n}"
    (q / "queue").mkdir(parents=True)
    (q / "vendor-pin.txt").write_text(pin_text)
    (q / "series").write_text("# empty\n")
    run([*GQ, "checkout"], q)
    run([*GQ, "check", "--pin", NEW_PIN], q)  # fetches and imports the new pin's tree: later checks are cached
    work = q / "work"
    tags = run(["git", "tag", "-l", "gqueue/pin/*"], work).stdout.decode().split()
    new_tag = next(t for t in tags if t.endswith("0.25.0"))
    new_tree = tmp / f"new{n}"
    new_tree.mkdir()
    archive = run(["git", "archive", new_tag], work).stdout
    subprocess.run(["tar", "-x", "-C", str(new_tree)], input=archive, check=True)
    names = generate(work, q, n=n, seed=0, stable_against=new_tree)
    shutil.rmtree(new_tree)
    qt = tmp / f"quilt{n}"
    shutil.copytree(tree, qt, symlinks=True)
    shutil.copytree(q / "queue", qt / "patches")
    (qt / "patches" / "series").write_text("".join(f"{name}\n" for name in names))
    run(["quilt", "push", "-a", "-q"], qt)
    samples: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        samples.setdefault(key, []).append(value)

    for _ in range(rounds):  # in turns, so that a slow spell of the machine hits every command
        add("push --all", timed([*GQ, "push", "--all"], q))
        add("check (cached pin)", timed([*GQ, "check", "--pin", NEW_PIN], q, check=False))  # timed whatever it finds
        add("pop --all", timed([*GQ, "pop", "--all"], q))
        add("gqueue --version", timed([*GQ, "--version"], q))
    run([*GQ, "push", "--all"], q)
    for _ in range(rounds):
        touch_top(work, q / "queue", q / "series")
        add("refresh", timed([*GQ, "refresh"], q))
        touch_top(qt, q / "queue", q / "series")  # quilt rewrites its copy with its own labels
        add("quilt refresh", timed(["quilt", "refresh"], qt))
    shutil.rmtree(qt)
    first = _movable(q / "queue", names)
    for _ in range(rounds):  # every applied patch from it up popped and pushed again in the new order
        add("move (first to last)", timed([*GQ, "move", first, "--last"], q))
        add("move (first to last)", timed([*GQ, "move", first, "--first" if first == names[0] else f"--before={names[names.index(first) + 1]}"], q))
    _bisect_rounds(q, names, rounds, add)
    run([*GQ, "pop", "--all"], q)
    _abort_rounds(q, rounds, add)
    shutil.rmtree(q)
    return samples


def _movable(queue: Path, names: list[str]) -> str:
    """The first patch no other patch shares a file with: it applies anywhere in the series, so
    moving it last (and back) always re-applies the stack instead of being refused."""
    paths = {n: {line[6:] for line in (queue / n).read_text(encoding="utf-8", errors="surrogateescape").splitlines()
                 if line.startswith("+++ b/")} for n in names}
    count: dict[str, int] = {}
    for touched in paths.values():
        for path in touched:
            count[path] = count.get(path, 0) + 1
    return next(n for n in names if all(count[p] == 1 for p in paths[n]))


def _bisect_rounds(q: Path, names: list[str], rounds: int, add) -> None:  # type: ignore[no-untyped-def]
    """gqueue bisect run and git bisect run of the pushed series, the culprit in the middle, the
    same test command (a grep for a line the culprit adds); the tests each ran are counted."""
    path, line = marker(q / "queue" / names[len(names) // 2])
    quoted = "'" + line.replace("'", "'\"'\"'") + "'"
    check = ["sh", "-c", f"! grep -qF -- {quoted} {path}"]
    work = q / "work"
    base = next(t for t in run(["git", "tag", "-l", "gqueue/pin/*"], work).stdout.decode().split()
                if not t.endswith(NEW_PIN.split("==")[1]))
    for _ in range(rounds):
        start = time.perf_counter()
        out = run([*GQ, "bisect", "run", "--json", "--", *check], q).stdout.decode()
        add("bisect run (culprit in the middle)", time.perf_counter() - start)
        add("bisect run: tests", float(out.count('"verdict"')))
        start = time.perf_counter()
        run(["git", "bisect", "start", "gqueue", base], work)
        out = run(["git", "bisect", "run", *check], work).stdout.decode()
        run(["git", "bisect", "reset"], work)
        add("git bisect run (the same)", time.perf_counter() - start)
        add("git bisect run: tests", float(out.count("running ")))


def _abort_rounds(q: Path, rounds: int, add) -> None:  # type: ignore[no-untyped-def]
    """--abort of a rebase stopped at the appended conflicting patch, and its floor."""
    _header, diff = split_header((REPO / "queue" / CONFLICTING).read_bytes())
    (q / "queue" / CONFLICTING).write_bytes(b"---\nid: P62\ntitle: conflicts on 0.25.0\n...\n" + diff)
    with (q / "series").open("a") as handle:
        handle.write(f"{CONFLICTING}\n")
    if run([*GQ, "push", "--all"], q, check=False).returncode != 0:
        print(f"  {q.name}: {CONFLICTING} does not apply on this series; --abort not measured", file=sys.stderr)
        return
    work = q / "work"
    old = run(["git", "rev-parse", "HEAD"], work).stdout.decode().strip()
    for _ in range(rounds):
        stop = run([*GQ, "rebase", "--pin", NEW_PIN], q, check=False)
        if stop.returncode == 0:
            print(f"  {q.name}: the rebase did not stop; --abort not measured", file=sys.stderr)
            return
        stopped = run(["git", "rev-parse", "HEAD"], work).stdout.decode().strip()
        time.sleep(1.1)  # as a hand would: the stop's files are a second old (git's racy-clean check)
        add("rebase --abort", timed([*GQ, "rebase", "--abort"], q))
        run(["git", "read-tree", "--reset", "-u", stopped], work)
        time.sleep(1.1)
        add("git read-tree (the same trees)", timed(["git", "read-tree", "--reset", "-u", old], work))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="33,300,1000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "bench" / "growth.md")
    parser.add_argument("--base", default="vllm==0.24.0", help="the pin of vendor-pin.txt (any label) the series is on")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    base = chosen_pin(args.base)
    pin_text = main_pin_line(base)
    results: dict[int, dict[str, list[float]]] = {}
    loads = []
    with tempfile.TemporaryDirectory(prefix="gqueue-bench-growth-") as tmp_name:
        tmp = Path(tmp_name)
        with tarfile.open(sdist_path(base)) as tar:
            tar.extractall(tmp / "x", filter="data")
        tree = next((tmp / "x").iterdir())
        for n in sizes:
            results[n] = one_size(n, tmp, tree, pin_text, args.rounds)
            loads.append(os.getloadavg()[0])
            print(f"{n}: " + ", ".join(f"{k} {median(v):.3f}" for k, v in results[n].items()), file=sys.stderr)
    keys = ["gqueue --version", "push --all", "pop --all", "refresh", "quilt refresh", "check (cached pin)",
            "move (first to last)", "bisect run (culprit in the middle)", "git bisect run (the same)",
            "rebase --abort", "git read-tree (the same trees)"]
    counts = ["bisect run: tests", "git bisect run: tests"]
    lines = [
        f"Series: synthetic (tools/bench/synthseries.py, seed 0, edits where vllm 0.25.0 left the lines alone) "
        f"over vllm {base.version}, of {', '.join(map(str, sizes))} patches; for --abort, the project's "
        f"{CONFLICTING} appended, on which the rebase to {NEW_PIN} stops.",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, shared: "
        f"load average {', '.join(f'{x:.1f}' for x in loads)} after each length. Whole commands, wall time, "
        f"median of {args.rounds} rounds (range in brackets), the commands of a length taken in turns.",
        "",
        "| command | " + " | ".join(f"{n} patches" for n in sizes) + " |",
        "|---|" + "---|" * len(sizes),
    ]
    for key in keys:
        cells = []
        for n in sizes:
            values = results[n].get(key)
            cells.append(f"{median(values):.3f} s ({min(values):.3f}–{max(values):.3f})" if values else "not measured")
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    for key in counts:
        cells = [f"{median(results[n][key]):.0f}" if results[n].get(key) else "not measured" for n in sizes]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    lines.append("")
    ratios = []
    for n in sizes:
        r = results[n]
        if r.get("quilt refresh"):
            ratios.append(f"{n}: refresh {median(r['refresh']) / median(r['quilt refresh']):.2f}x quilt's")
        if r.get("bisect run (culprit in the middle)"):
            ratios.append(f"{n}: bisect run {median(r['bisect run (culprit in the middle)']) / median(r['git bisect run (the same)']):.2f}x "
                          "git bisect run's")
        if r.get("rebase --abort"):
            ratios.append(f"{n}: rebase --abort {median(r['rebase --abort']) / median(r['git read-tree (the same trees)']):.1f}x "
                          "its read-tree floor")
    lines += ["Ratios (medians of the same run): " + "; ".join(ratios) + ".", "",
              f"Command: `python tools/bench/growth.py --sizes {args.sizes} --rounds {args.rounds} --base {args.base}`"]
    emit(lines, args.out)


if __name__ == "__main__":
    main()
