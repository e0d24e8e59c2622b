#!/usr/bin/env python3
"""Gather the tables the benchmark scripts wrote under docs/bench/ into docs/BENCHMARKS.md."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SECTIONS = [
    ("stack", "Stack: import, push, refresh, pop (issue: foundation)", "tools/bench/stack.py"),
    ("drift", "Drift: check and rebase across pins", "tools/bench/drift.py"),
    ("drift-real", "Drift on an imported (format-patch) series", "tools/bench/drift.py --kind real"),
    ("build", "Build: overlay wheel", "tools/bench/build.py"),
    ("bisect", "Bisect", "tools/bench/bisect_run.py"),
    ("kernels", "Kernels: TurboQuant decode and verify on an H200", "tools/bench/kernels.py"),
    ("tq_vllm", "Kernels inside vLLM's TurboQuant backend (routing patches) on an H200", "tools/bench/tq_vllm.py"),
]


def main() -> None:
    out = [
        "# Benchmarks",
        "",
        "Each table is written by the script named under it, which measures gqueue and its anchor",
        "(quilt, git am, git's own loops, upstream vLLM's kernel) in the same run; ratios are only",
        "quoted within one run. These machines are shared: absolute seconds move with the load.",
        "Regenerate a section by running its script, then `python tools/bench/collect.py`.",
        "",
    ]
    for stem, title, script in SECTIONS:
        path = REPO / "docs" / "bench" / f"{stem}.md"
        out += [f"## {title}", "", f"Script: `{script}`", ""]
        out += [path.read_text().rstrip("\n") if path.exists() else "_Not measured yet._", ""]
    (REPO / "docs" / "BENCHMARKS.md").write_text("\n".join(out))
    print("wrote docs/BENCHMARKS.md")


if __name__ == "__main__":
    main()
