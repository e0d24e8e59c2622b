#!/usr/bin/env python3
"""kernels.py JSON files of one folder (before*.json, after*.json, as kernels_before_after.sh
writes them) side by side, per row: the stage-1 kernel and split count each side chose, the
medians of ours per replay and in a graph with their ratio, and upstream's per replay (the
noise floor of the run).

    python tools/bench/kernels_compare.py DIR
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def row_key(row: dict) -> str:
    return (f"{row['kind']} B={row['B']} L={row['context']} Hq={row['Hq']} Hk={row['Hk']} D={row['D']} "
            f"q={row['query_len']}")


def median(rows: list[dict], name: str) -> float:
    return statistics.median(r[name] for r in rows)


def main() -> None:
    folder = Path(sys.argv[1])
    sides: dict[str, dict[str, list[dict]]] = {}
    for path in sorted(folder.glob("*.json")):
        doc = json.loads(path.read_text())
        failed = [c for c in doc.get("checks", []) if not c.get("ok", True)]
        print(f"{path.stem}: {doc['device']}, copy {doc['copy_rate_GBps']:.0f} GB/s, "
              f"{len(doc.get('checks', []))} checks, {len(failed)} failed")
        side = "before" if path.stem.startswith("before") else "after"
        for row in doc["rows"]:
            sides.setdefault(row_key(row), {}).setdefault(side, []).append(row)
    print("| row | kernel/splits before | after | ours ms before | after | ratio | in a graph before | after | ratio "
          "| upstream ms before | after |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for key, found in sides.items():
        before, after = found.get("before", []), found.get("after", [])
        if not before or not after:
            continue
        cells = [key, f"{before[0]['kernel']}/S{before[0]['splits']}", f"{after[0]['kernel']}/S{after[0]['splits']}"]
        for name in ("ours_ms", "ours_in_graph_ms"):
            b, a = median(before, name), median(after, name)
            cells += [f"{b:.4f}", f"{a:.4f}", f"{a / b:.3f}"]
        cells += [f"{median(before, 'upstream_ms'):.4f}", f"{median(after, 'upstream_ms'):.4f}"]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
