"""Turn a crash campaign's report into the table of docs/RELIABILITY.md.

    GQUEUE_CRASH_REPORT=/tmp/crash.json python -m pytest tests/reliability/test_crash.py [-m slow]
    python tests/reliability/figures.py /tmp/crash.json
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from crashkit import SCENARIOS  # noqa: E402

COLUMNS = ("sweep kills (every effect)", "random kills", "random kills inside the lock",
           "recovered by `repair`", "recovered by the next command", "failures")


def table(doc: dict[str, dict[str, object]], kinds: tuple[str, ...]) -> str:
    rows: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    scenarios: dict[str, list[str]] = defaultdict(list)
    for key, entry in doc.items():
        kind = key.split(":", 1)[0]
        if kind not in kinds:
            continue
        for t in entry["trials"]:  # type: ignore[attr-defined]
            command = SCENARIOS[t["scenario"]].command
            if t["scenario"] not in scenarios[command]:
                scenarios[command].append(t["scenario"])
            row = rows[command]
            if kind in ("sweep", "soak"):
                row[COLUMNS[0]] += 1
            else:
                row[COLUMNS[1]] += 1
                row[COLUMNS[2]] += bool(t["inside"])
            row[COLUMNS[3]] += t["recovery"] == "repair"
            row[COLUMNS[4]] += t["recovery"] == "rerun"
            row[COLUMNS[5]] += bool(t["failure"])
    lines = ["| command | scenarios | " + " | ".join(COLUMNS) + " |", "|---|---|" + "---:|" * len(COLUMNS)]
    total: dict[str, int] = defaultdict(int)
    for command in sorted(rows, key=lambda c: -sum(rows[c].values())):
        lines.append(f"| {command} | {', '.join(sorted(scenarios[command]))} | "
                     + " | ".join(str(rows[command][c]) for c in COLUMNS) + " |")
        for c in COLUMNS:
            total[c] += rows[command][c]
    lines.append(f"| **all** | {sum(len(v) for v in scenarios.values())} scenarios | "
                 + " | ".join(f"**{total[c]}**" for c in COLUMNS) + " |")
    return "\n".join(lines)


def main(path: str) -> None:
    doc = json.load(open(path))
    print(table(doc, ("sweep", "random")))
    if any(k.startswith(("soak", "random-soak")) for k in doc):
        print()
        print(table(doc, ("soak", "random-soak")))
    for key in ("random", "random-soak"):
        if key in doc:
            print(f"\n{key}: seed {doc[key].get('seed')}, {doc[key].get('seconds')} s")


if __name__ == "__main__":
    main(sys.argv[1])
