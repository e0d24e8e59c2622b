"""The test suite's time, before and after: make test's phases, pytest's phases, the slowest tests.

Input: the JSON files pytest writes when ``GQUEUE_TEST_TIMES=FILE`` is set (tests/phases.py:
each test's wall and CPU seconds, each phase's sums) and, optionally, the log of ``make test``
(its ``=== make test: phase N/5 ... [HH:MM:SS]`` lines give the wall time of each of its phases).

    python tools/bench/testtimes.py --before B.json [--before-log B.log] --after A.json \\
        [--after-log A.log] [--write docs/BENCHMARKS.md] [--durations tests/durations.json]

With ``--write`` the tables replace the block between the markers in that file; with
``--durations`` the --after run's long tests and patch modules are written for the next runs'
order (tests/phases.py) and shards (tests/patch_runs.py).
"""

from __future__ import annotations

import argparse
import json
import re
from datetime import datetime, timedelta
from pathlib import Path

BEGIN = "<!-- testtimes:begin -->"
END = "<!-- testtimes:end -->"
PHASE_TITLES = {
    "real": "slow tests (real vLLM sdists, crash soak)",
    "patches": "patch tests",
    "reliability": "crash harness and hostile inputs",
    "kernels": "kernel tests (Triton interpreter)",
    "tool": "the tool's tests",
}
_MAKE_PHASE = re.compile(r"^=== make test: (.*) \[(\d\d:\d\d:\d\d)\]$")


def load(paths: list[Path]) -> dict:
    merged: dict = {"wall": {}, "cpu": {}, "phases": {}}
    for path in paths:
        data = json.loads(path.read_text())
        for key in merged:
            merged[key].update(data[key])
    return merged


def make_phases(log: Path | None) -> list[tuple[str, float]]:
    """(title, wall seconds) of each phase make test announced, from its log."""
    if log is None:
        return []
    marks = []
    for line in log.read_text(errors="replace").splitlines():
        found = _MAKE_PHASE.match(line.strip())
        if found:
            marks.append((found.group(1), datetime.strptime(found.group(2), "%H:%M:%S")))
    rows = []
    for (title, start), (_, end) in zip(marks, marks[1:]):
        span = end - start
        if span < timedelta(0):  # past midnight
            span += timedelta(days=1)
        rows.append((title, span.total_seconds()))
    return rows


def _minutes(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds / 60:.1f} min"


def _phase_wall(phase: dict) -> float | None:
    if phase.get("started") is None or phase.get("ended") is None:
        return None
    return phase["ended"] - phase["started"]


def tables(before: dict, after: dict, before_log: Path | None, after_log: Path | None) -> str:
    out = []
    b_make, a_make = make_phases(before_log), make_phases(after_log)
    if b_make or a_make:
        # the two runs may have other phases: each run's own, side by side in their order
        out += ["make test, phase by phase (wall):", "",
                "| before: phase | wall | after: phase | wall |", "|---|---:|---|---:|"]
        for i in range(max(len(b_make), len(a_make))):
            b = b_make[i] if i < len(b_make) else ("", None)
            a = a_make[i] if i < len(a_make) else ("", None)
            out.append(f"| {b[0]} | {_minutes(b[1]) if b[0] else ''} | {a[0]} | {_minutes(a[1]) if a[0] else ''} |")
        out.append(f"| whole make test | {_minutes(sum(s for _, s in b_make) if b_make else None)} "
                   f"| | {_minutes(sum(s for _, s in a_make) if a_make else None)} |")
        out.append("")
    out += ["pytest, phase by phase (tests; CPU seconds of the tests and their child processes, "
            "summed; wall of the phase from its first to its last report):", "",
            "| phase | tests before | tests after | CPU before | CPU after | wall before | wall after |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for key, title in PHASE_TITLES.items():
        b, a = before["phases"].get(key, {}), after["phases"].get(key, {})
        if not (a or b):
            continue
        out.append(f"| {title} | {b.get('done', 0)} | {a.get('done', 0)} | {b.get('cpu', 0):.0f} s | "
                   f"{a.get('cpu', 0):.0f} s | {_minutes(_phase_wall(b))} | {_minutes(_phase_wall(a))} |")
    out.append(f"| all | {len(before['wall'])} | {len(after['wall'])} | {sum(before['cpu'].values()):.0f} s | "
               f"{sum(after['cpu'].values()):.0f} s | | |")
    for label, data, other in (("before", before, after), ("after", after, before)):
        out += ["", f"The 20 slowest tests {label} (wall; CPU; the other run's figures beside them):", "",
                f"| test | wall {label} | CPU {label} | wall {'after' if label == 'before' else 'before'} "
                f"| CPU {'after' if label == 'before' else 'before'} |",
                "|---|---:|---:|---:|---:|"]
        for nodeid, wall in sorted(data["wall"].items(), key=lambda kv: kv[1], reverse=True)[:20]:
            o_wall, o_cpu = other["wall"].get(nodeid), other["cpu"].get(nodeid)
            out.append(f"| `{nodeid}` | {wall:.1f} s | {data['cpu'].get(nodeid, float('nan')):.1f} s | "
                       f"{'—' if o_wall is None else f'{o_wall:.1f} s'} | {'—' if o_cpu is None else f'{o_cpu:.1f} s'} |")
    return "\n".join(out) + "\n"


def write_block(doc: Path, text: str) -> None:
    content = doc.read_text()
    if BEGIN not in content or END not in content:
        raise SystemExit(f"{doc}: no {BEGIN} ... {END} block to replace")
    head, rest = content.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    doc.write_text(f"{head}{BEGIN}\n{text}{END}{tail}")


DURATIONS_MIN_S = 5.0  # tests shorter than this are left out of tests/durations.json


def durations(times: dict) -> dict:
    """What tests/phases.py orders a run by and tests/patch_runs.py shards the patch tests by:
    each test's wall seconds (those of at least DURATIONS_MIN_S) and each patch module's sum."""
    modules: dict[str, float] = {}
    for nodeid, seconds in times["wall"].items():
        path = nodeid.split("::", 1)[0]
        if path.startswith("tests/patches/"):
            modules[path] = modules.get(path, 0.0) + seconds
    return {
        "about": "written by tools/bench/testtimes.py --durations from a run with GQUEUE_TEST_TIMES set",
        "tests": {k: round(v, 1) for k, v in sorted(times["wall"].items()) if v >= DURATIONS_MIN_S},
        "modules": {k: round(v, 1) for k, v in sorted(modules.items())},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, action="append")
    parser.add_argument("--after", type=Path, action="append", required=True)
    parser.add_argument("--before-log", type=Path)
    parser.add_argument("--after-log", type=Path)
    parser.add_argument("--write", type=Path, help="replace the marked block of this file")
    parser.add_argument("--durations", type=Path, help="write the --after run's test times here (tests/durations.json)")
    args = parser.parse_args()
    if args.durations:
        args.durations.write_text(json.dumps(durations(load(args.after)), indent=1) + "\n")
    if not args.before:
        return
    text = tables(load(args.before), load(args.after), args.before_log, args.after_log)
    print(text)
    if args.write:
        write_block(args.write, text)


if __name__ == "__main__":
    main()
