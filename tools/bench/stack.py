#!/usr/bin/env python3
"""Stack benchmark: gqueue beside quilt and git am on the real vLLM tree, in one run.

Makes an N-patch series over the pinned vLLM sdist, of one kind or both (``--kind``):
``synthetic`` (tools/bench/synthseries.py writes gqueue patches directly) and ``real``
(tools/bench/realseries.py: ``git format-patch`` of N small commits on the tree, files
touched by several of them, which ``gqueue import --series`` turns into the queue), then times, as whole commands: import of the series, push of all patches, refresh
of the top patch, pop of all patches — for gqueue, quilt and (push only) git am, plus one
``git apply`` of the concatenated series as the floor — in several rounds (medians and
ranges reported). Prints a table and writes it to docs/bench/stack.md.

    python tools/bench/stack.py [-n 300] [--rounds 3] [--kind synthetic|real|both] [--base vllm==0.24.0] [--out docs/bench/stack.md]
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

from realseries import generate as generate_real  # noqa: E402
from realseries import shape  # noqa: E402
from synthseries import generate  # noqa: E402

from pins import chosen_pin, main_pin_line  # noqa: E402
from gqueue.upstream.resolve import sdist_path  # noqa: E402
from report import emit  # noqa: E402

GQ = [sys.executable, "-m", "gqueue"]
ENV = dict(os.environ, GIT_CONFIG_NOSYSTEM="1", QUILT_PC=".pc", LC_ALL="C")
# Python's bytecode cache on, as in any installed copy (an environment may switch it off; then
# every gqueue command would recompile its modules, ~35 ms)
ENV.pop("PYTHONDONTWRITEBYTECODE", None)


def timed(cmd: list[str], cwd: Path, *, stdin: Path | None = None) -> float:
    start = time.perf_counter()
    with (stdin.open("rb") if stdin else open(os.devnull, "rb")) as handle:
        proc = subprocess.run(cmd, cwd=cwd, stdin=handle, capture_output=True, env=ENV)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed in {cwd}:\n{proc.stdout.decode()[-2000:]}\n{proc.stderr.decode()[-2000:]}")
    return elapsed


def run(cmd: list[str], cwd: Path) -> None:
    subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, env=ENV)


def touch_top(tree: Path, gen: Path) -> str:
    """Append a comment to the first file of the last patch (an edit to refresh)."""
    names = [n for n in (gen / "queue" / "series").read_text().split() if n and not n.startswith("#")]
    body = (gen / "queue" / names[-1]).read_text()
    path = next(line[6:] for line in body.splitlines() if line.startswith("+++ b/"))
    with (tree / path).open("a") as handle:
        handle.write("# refreshed by the benchmark\n")
    return path


def median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def gqueue_round(tmp: Path, gen: Path, pin_line: str) -> dict[str, float]:
    """import, push --all, refresh, pop --all on a fresh queue with a fresh checkout."""
    gq = tmp / "gq"
    shutil.rmtree(gq, ignore_errors=True)
    (gq / "queue").mkdir(parents=True)
    (gq / "series").write_text("")
    (gq / "vendor-pin.txt").write_text(pin_line)
    times = {"import": timed([*GQ, "-C", str(gq), "import", "--series", str(gen / "queue" / "series")], gq)}
    run([*GQ, "-C", str(gq), "checkout"], gq)
    times["push --all"] = timed([*GQ, "-C", str(gq), "push", "--all"], gq)
    touch_top(gq / "work", gen)
    times["refresh"] = timed([*GQ, "-C", str(gq), "refresh"], gq)
    times["pop --all"] = timed([*GQ, "-C", str(gq), "pop", "--all"], gq)
    return times


def quilt_round(tmp: Path, tree: Path, gen: Path) -> dict[str, float]:
    qt = tmp / "quilt"
    shutil.rmtree(qt, ignore_errors=True)
    shutil.copytree(tree, qt, symlinks=True)
    shutil.copytree(gen / "queue", qt / "patches")
    shutil.copy(gen / "queue" / "series", qt / "patches" / "series")
    times = {"push --all": timed(["quilt", "push", "-a", "-q"], qt)}
    touch_top(qt, gen)
    times["refresh"] = timed(["quilt", "refresh"], qt)
    times["pop --all"] = timed(["quilt", "pop", "-a", "-q"], qt)
    return times


def _targets(rows: dict[str, dict[str, float]], kind: str) -> list[str]:
    """The issues' targets (the foundation's for the synthetic series, issue 44's tighter
    ones for the imported one), judged on this run's medians."""
    g, out = rows["gqueue"], []
    limit = {"import": 1.0, "push --all": 1.0, "pop --all": 0.5} if kind == "synthetic" else \
        {"import": 0.5, "push --all": 0.5, "pop --all": 0.3}

    def judge(text: str, ok: bool) -> None:
        out.append(f"{text} ({'met' if ok else 'NOT met'})")

    judge(f"import under {limit['import']:g} s: {g['import']:.3f} s", g["import"] < limit["import"])
    judge(f"push --all under {limit['push --all']:g} s: {g['push --all']:.3f} s", g["push --all"] < limit["push --all"])
    if "quilt" in rows:
        q = rows["quilt"]
        judge(f"push --all at least 9x quilt: {q['push --all'] / g['push --all']:.1f}x", q["push --all"] >= 9 * g["push --all"])
        judge(f"refresh no slower than quilt's: {g['refresh']:.3f} s vs {q['refresh']:.3f} s", g["refresh"] <= q["refresh"])
    ga = rows["git am"]["push --all"]
    judge(f"push --all at least 5x git am: {ga / g['push --all']:.1f}x", ga >= 5 * g["push --all"])
    judge(f"pop --all under {limit['pop --all']:g} s: {g['pop --all']:.3f} s", g["pop --all"] < limit["pop --all"])
    return out


def bench(kind: str, tmp: Path, tree: Path, args: argparse.Namespace, pin_line: str, version: str) -> list[str]:
    """One series of ``kind``, every tool in turns over ``args.rounds`` rounds; the section's lines."""
    samples: dict[str, dict[str, list[float]]] = {}

    def add(tool: str, times: dict[str, float]) -> None:
        for op, value in times.items():
            samples.setdefault(tool, {}).setdefault(op, []).append(value)

    gen = tmp / f"gen-{kind}"
    if kind == "synthetic":
        names = generate(tree, gen, n=args.n, seed=0)
        shutil.copy(gen / "series", gen / "queue" / "series")
        about = f"{args.n} synthetic patches over vllm {version} (tools/bench/synthseries.py, seed 0)"
    else:
        names = generate_real(tree, gen, n=args.n, seed=0)
        facts = shape(gen / "queue")
        about = (f"{args.n} patches over vllm {version} made by `git format-patch` of {args.n} small commits "
                 f"(tools/bench/realseries.py, seed 0: {facts['file diffs']} file diffs, {facts['hunks']} hunks, "
                 f"{facts['shared']:g}% of the {facts['files']} files touched by more than one patch), "
                 f"imported with `gqueue import --series`")
        shutil.rmtree(gen / "repo")
    concat = tmp / "all.diff"
    concat.write_bytes(b"".join((gen / "queue" / n).read_bytes() for n in names))
    ga = tmp / f"gitam-{kind}"
    shutil.copytree(tree, ga, symlinks=True)
    run(["git", "init", "-q"], ga)
    run(["git", "add", "-A", "-f"], ga)
    run(["git", "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "-m", "base"], ga)
    floors = []
    for number in range(args.rounds):  # the tools take turns, so a slow spell hits all of them
        add("gqueue", gqueue_round(tmp, gen, pin_line))
        if number == 0:
            run([*GQ, "-C", str(tmp / "gq"), "export", "--mbox", str(tmp / "series.mbox")], tmp / "gq")
        if shutil.which("quilt"):
            add("quilt", quilt_round(tmp, tree, gen))
        add("git am", {"push --all": timed(["git", "-c", "user.name=b", "-c", "user.email=b@b", "am", "-q",
                                             str(tmp / "series.mbox")], ga)})
        run(["git", "reset", "-q", "--hard", "HEAD~%d" % len(names)], ga)
        add("git apply (one concatenated diff)", {"push --all": timed(["git", "apply", str(concat)], ga)})
        run(["git", "checkout", "-q", "--", "."], ga)
        floors.append(timed([sys.executable, "-c", "pass"], tmp))
        floors.append(timed([*GQ, "--version"], tmp))
    shutil.rmtree(ga)

    rows = {tool: {op: median(v) for op, v in ops.items()} for tool, ops in samples.items()}
    ops = ["import", "push --all", "refresh", "pop --all"]
    lines = [
        f"### {'Synthetic' if kind == 'synthetic' else 'Imported (format-patch)'} series",
        "",
        f"Series: {about}.",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load average {os.getloadavg()[0]:.1f} at the end (the machine is shared). "
        f"Whole commands, wall time, median of {args.rounds} rounds; each round starts from a fresh queue, "
        f"a fresh `gqueue checkout` or a fresh copy of the tree (quilt), and the tools take turns within a round. "
        f"Start-up floors: `python -c pass` {median(floors[0::2]):.3f} s, `gqueue --version` {median(floors[1::2]):.3f} s.",
        "",
        "| tool | " + " | ".join(ops) + " |",
        "|---|" + "---|" * len(ops),
    ]
    for tool, values in rows.items():
        cells = []
        for o in ops:
            if o in values:
                spread = samples[tool][o]
                cells.append(f"{values[o]:.3f} s ({min(spread):.3f}–{max(spread):.3f})")
            else:
                cells.append("—")
        lines.append(f"| {tool} | " + " | ".join(cells) + " |")
    g = rows["gqueue"]
    ratios = []
    for tool in ("quilt", "git am"):
        for op in ops:
            if tool in rows and op in rows[tool] and op in g:
                ratios.append(f"{op}: {tool} takes {rows[tool][op] / g[op]:.1f}× gqueue's time")
    lines += ["", "Ratios (medians of the same run): " + "; ".join(ratios) + ".", ""]
    lines += ["Targets: " + "; ".join(_targets(rows, kind)) + ".", ""]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3, help="fresh rounds per tool; the table shows medians")
    parser.add_argument("--kind", choices=("synthetic", "real", "both"), default="both")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "bench" / "stack.md")
    parser.add_argument("--base", help="the pin of vendor-pin.txt (any label) the series is on (default: the main pin)")
    args = parser.parse_args()
    base = chosen_pin(args.base)
    sdist = sdist_path(base)
    pin_line = main_pin_line(base)
    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="gqueue-bench-") as tmp_name:
        tmp = Path(tmp_name)
        with tarfile.open(sdist) as tar:
            tar.extractall(tmp / "x", filter="data")
        tree = next((tmp / "x").iterdir())
        for kind in ("synthetic", "real") if args.kind == "both" else (args.kind,):
            lines += bench(kind, tmp, tree, args, pin_line, base.version)
    on = f" --base {args.base}" if args.base else ""
    lines.append(f"Command: `python tools/bench/stack.py -n {args.n} --rounds {args.rounds} --kind {args.kind}{on}`")
    emit(lines, args.out)


if __name__ == "__main__":
    main()
