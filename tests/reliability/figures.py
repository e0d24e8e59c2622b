"""Turn a harness run into the figures of docs/RELIABILITY.md: the crash table (trials per
command, bytes lost) and the hostile-input tally (inputs tried, refused, failures).

    GQUEUE_CRASH_REPORT=/tmp/crash.json python -m pytest tests/reliability/test_crash.py \
        tests/reliability/test_hostile.py -m "not slow" -p no:cacheprovider --junitxml=/tmp/reliability.xml
    python tests/reliability/figures.py /tmp/crash.json --junit /tmp/reliability.xml [--write docs/RELIABILITY.md]
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from crashkit import SCENARIOS  # noqa: E402

COLUMNS = ("sweep kills (every effect)", "random kills", "random kills inside the lock",
           "recovered by `repair`", "recovered by the next command", "failures", "bytes lost")
CORPUS = Path(__file__).resolve().parents[1] / "data" / "hostile"


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
            row[COLUMNS[6]] += int(t.get("lost", 0))
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


def hostile(junit: str) -> str:
    """The hostile corpus and what the run of tests/reliability/test_hostile.py made of it."""
    files = {kind: sorted(p.name for p in (CORPUS / kind).iterdir()) for kind in ("patches", "series", "archives")}
    cases = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        if case.get("classname", "").endswith("test_hostile"):
            outcome = "failed" if case.find("failure") is not None or case.find("error") is not None else \
                "skipped" if case.find("skipped") is not None else "passed"
            cases.append((case.get("name", ""), outcome))
    tally = {o: sum(1 for _n, x in cases if x == o) for o in ("passed", "failed", "skipped")}
    corpus = sum(len(v) for v in files.values())
    return (f"Hostile inputs: {corpus} committed files ({len(files['patches'])} patches, {len(files['series'])} series, "
            f"{len(files['archives'])} archives) in {len(cases)} tests of test_hostile.py: "
            f"{tally['passed']} passed, {tally['failed']} failed, {tally['skipped']} skipped.")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report", help="the JSON file GQUEUE_CRASH_REPORT named")
    parser.add_argument("--junit", help="the --junitxml of the same run (for the hostile tally)")
    parser.add_argument("--write", metavar="DOC", help=f"put the figures in DOC between {BEGIN!r} and {END!r}")
    args = parser.parse_args(argv)
    text = figures(json.load(open(args.report)), args.junit)
    if args.write:
        doc = Path(args.write).read_text()
        head, sep, rest = doc.partition(BEGIN)
        _old, sep2, tail = rest.partition(END)
        if not (sep and sep2):
            raise SystemExit(f"{args.write}: no {BEGIN} ... {END} block to replace")
        Path(args.write).write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")
    else:
        print(text)


BEGIN, END = "<!-- figures.py: begin -->", "<!-- figures.py: end -->"


def figures(doc: dict[str, dict[str, object]], junit: str | None) -> str:
    out = [table(doc, ("sweep", "random"))]
    if any(k.startswith(("soak", "random-soak")) for k in doc):
        out += ["", table(doc, ("soak", "random-soak"))]
    for key in ("random", "random-soak"):
        if key in doc:
            trials = doc[key]["trials"]
            group = sum(1 for t in trials if "group" in t["how"])  # type: ignore[union-attr]
            out += ["", f"Random kills ({key}): seed {doc[key].get('seed')}, {doc[key].get('seconds')} s, "
                        f"{group} of {len(trials)} took the whole process group."]  # type: ignore[arg-type]
    if junit:
        out += ["", hostile(junit)]
    return "\n".join(out)


if __name__ == "__main__":
    main(sys.argv[1:])
