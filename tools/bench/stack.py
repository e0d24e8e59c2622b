#!/usr/bin/env python3
"""Stack benchmark: gqueue beside quilt and git am on the real vLLM tree, in one run.

Generates an N-patch synthetic series (tools/bench/synthseries.py) over the pinned vLLM
sdist, then times, as whole commands: import of the series, push of all patches, refresh
of the top patch, pop of all patches — for gqueue, quilt and (push only) git am, plus one
``git apply`` of the concatenated series as the floor. Prints a table and writes it to
docs/bench/stack.md.

    python tools/bench/stack.py [-n 300] [--out docs/bench/stack.md]
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

from synthseries import generate  # noqa: E402

from gqueue.model.pin import parse_pins  # noqa: E402
from gqueue.upstream.resolve import sdist_path  # noqa: E402

GQ = [sys.executable, "-m", "gqueue"]
ENV = dict(os.environ, GIT_CONFIG_NOSYSTEM="1", QUILT_PC=".pc", LC_ALL="C")


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
    names = [n for n in (gen / "series").read_text().split() if n]
    body = (gen / "queue" / names[-1]).read_text()
    path = next(line[6:] for line in body.splitlines() if line.startswith("+++ b/"))
    with (tree / path).open("a") as handle:
        handle.write("# refreshed by the benchmark\n")
    return path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=300)
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "bench" / "stack.md")
    args = parser.parse_args()
    pins = parse_pins((REPO / "vendor-pin.txt").read_text())
    sdist = sdist_path(pins.main)
    rows: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="gqueue-bench-") as tmp_name:
        tmp = Path(tmp_name)
        with tarfile.open(sdist) as tar:
            tar.extractall(tmp / "x", filter="data")
        tree = next((tmp / "x").iterdir())
        gen = tmp / "gen"
        names = generate(tree, gen, n=args.n, seed=0)

        # gqueue
        gq = tmp / "gq"
        (gq / "queue").mkdir(parents=True)
        (gq / "series").write_text("")
        (gq / "vendor-pin.txt").write_text(f"pin {pins.main.source} {' '.join(f'{k}={v}' for k, v in pins.main.options.items())}\n")
        shutil.copy(gen / "series", gen / "queue" / "series")
        rows["gqueue"] = {"import": timed([*GQ, "-C", str(gq), "import", "--series", str(gen / "queue" / "series")], gq)}
        run([*GQ, "-C", str(gq), "checkout"], gq)
        rows["gqueue"]["push --all"] = timed([*GQ, "-C", str(gq), "push", "--all"], gq)
        touch_top(gq / "work", gen)
        rows["gqueue"]["refresh"] = timed([*GQ, "-C", str(gq), "refresh"], gq)
        rows["gqueue"]["pop --all"] = timed([*GQ, "-C", str(gq), "pop", "--all"], gq)
        floor = timed([sys.executable, "-c", "pass"], gq)

        # quilt
        if shutil.which("quilt"):
            qt = tmp / "quilt"
            shutil.copytree(tree, qt, symlinks=True)
            shutil.copytree(gen / "queue", qt / "patches")
            shutil.copy(gen / "series", qt / "patches" / "series")
            rows["quilt"] = {"push --all": timed(["quilt", "push", "-a", "-q"], qt)}
            touch_top(qt, gen)
            rows["quilt"]["refresh"] = timed(["quilt", "refresh"], qt)
            rows["quilt"]["pop --all"] = timed(["quilt", "pop", "-a", "-q"], qt)

        # git am (of gqueue's own mbox export) and one git apply of everything
        ga = tmp / "gitam"
        shutil.copytree(tree, ga, symlinks=True)
        run(["git", "init", "-q"], ga)
        run(["git", "add", "-A", "-f"], ga)
        run(["git", "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "-m", "base"], ga)
        run([*GQ, "-C", str(gq), "export", "--mbox", str(tmp / "series.mbox")], gq)
        rows["git am"] = {"push --all": timed(["git", "-c", "user.name=b", "-c", "user.email=b@b", "am", "-q", str(tmp / "series.mbox")], ga)}
        run(["git", "reset", "-q", "--hard", "HEAD~%d" % len(names)], ga)
        concat = tmp / "all.diff"
        concat.write_bytes(b"".join((gen / "queue" / n).read_bytes() for n in names))
        rows["git apply (one concatenated diff)"] = {"push --all": timed(["git", "apply", str(concat)], ga)}

    ops = ["import", "push --all", "refresh", "pop --all"]
    lines = [
        f"Series: {args.n} synthetic patches over vllm {pins.main.version} (tools/bench/synthseries.py, seed 0).",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"`python -c pass` floor: {floor:.3f} s. Whole commands, wall time, one run.",
        "",
        "| tool | " + " | ".join(ops) + " |",
        "|---|" + "---|" * len(ops),
    ]
    for tool, values in rows.items():
        cells = [f"{values[o]:.3f} s" if o in values else "—" for o in ops]
        lines.append(f"| {tool} | " + " | ".join(cells) + " |")
    g = rows["gqueue"]
    ratios = []
    for tool in ("quilt", "git am"):
        for op in ops:
            if tool in rows and op in rows[tool] and op in g:
                ratios.append(f"{op}: {tool} takes {rows[tool][op] / g[op]:.1f}× gqueue's time")
    lines += ["", "Ratios (same run): " + "; ".join(ratios) + ".", "",
              f"Command: `python tools/bench/stack.py -n {args.n}`"]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
