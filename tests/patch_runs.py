"""Running the patch tests (tests/patches) on another vLLM tree, in a pytest of its own.

The patch tests pick their tree when they are imported (``GQUEUE_VLLM_TREE``), so a run on the
tree of another pin, or on a pin's pristine tree, is a new pytest process. The modules are split
into a few shards of about equal time (``shards``), each run by one test, so that the workers of
the surrounding run share them like any other test. A shard's outcome is read from its JUnit
report: which tests passed, failed or were skipped, and why each one failed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from gqueue.model.pin import Pin, parse_pins
from paths import REPO
from phases import recorded_seconds

PATCH_TESTS = REPO / "tests" / "patches"
TIMEOUT_S = 1800


def gated_pins() -> list[Pin]:
    path = REPO / "vendor-pin.txt"
    return list(parse_pins(path.read_text(encoding="utf-8"), path=str(path)).pins)


def modules() -> list[Path]:
    return sorted(PATCH_TESTS.glob("test_*.py"))


def shards(count: int) -> list[list[Path]]:
    """The patch test modules in ``count`` groups of about equal recorded time (longest module
    first, each to the group with the least so far; a module with no record weighs its size)."""
    seconds = recorded_seconds(part="modules")

    def weight(path: Path) -> float:
        rel = path.relative_to(REPO).as_posix()
        return seconds.get(rel, path.stat().st_size / 10_000)

    groups: list[list[Path]] = [[] for _ in range(count)]
    loads = [0.0] * count
    for path in sorted(modules(), key=lambda p: (-weight(p), p.name)):
        least = loads.index(min(loads))
        groups[least].append(path)
        loads[least] += weight(path)
    return [sorted(group) for group in groups]


@dataclass
class Outcomes:
    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # test -> the first line of why
    skipped: list[str] = field(default_factory=list)
    output: str = ""  # the tail of what the run printed

    def failures(self, limit: int = 20) -> str:
        lines = [f"{test}: {why}" for test, why in list(self.failed.items())[:limit]]
        if len(self.failed) > limit:
            lines.append(f"... and {len(self.failed) - limit} more")
        return "\n".join(lines)


def _why(case: ET.Element) -> str:
    for child in case:
        if child.tag in ("failure", "error"):
            message = (child.get("message") or child.text or child.tag).strip()
            return message.splitlines()[0][:300] if message else child.tag
    return ""


def read_report(report: Path, *, only: str = "") -> Outcomes:
    """The outcome of each test case of a JUnit report (only those whose name starts with ``only``)."""
    outcomes = Outcomes()
    for case in ET.parse(report).getroot().iter("testcase"):
        name = case.get("name", "")
        if not name.startswith(only):
            continue
        test = f"{case.get('classname')}::{name}"
        tags = {child.tag for child in case}
        if "skipped" in tags:
            outcomes.skipped.append(test)
        elif tags & {"failure", "error"}:
            outcomes.failed[test] = _why(case)
        else:
            outcomes.passed.append(test)
    return outcomes


def run_patch_tests(tree: Path, paths: list[Path], report: Path, *, select: str = "", only: str = "") -> Outcomes:
    """Run the given patch test modules on ``tree`` in a new pytest; ``select`` is its -k."""
    env = dict(os.environ, GQUEUE_VLLM_TREE=str(tree))
    times = env.pop("GQUEUE_TEST_TIMES", None)
    if times:  # each sub-run's test times in a file of its own beside the run's
        env["GQUEUE_TEST_TIMES"] = str(Path(times).with_suffix(f".{report.stem}.json"))
    argv = [sys.executable, "-m", "pytest", *map(str, paths), "-m", "not gpu", "-q", "-p", "no:cacheprovider",
            f"--junitxml={report}"]
    if select:
        argv += ["-k", select]
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    output = (proc.stdout + proc.stderr)[-4000:]
    if not report.is_file():
        raise AssertionError(f"the patch tests on {tree} wrote no report (exit {proc.returncode}):\n{output}")
    outcomes = read_report(report, only=only)
    outcomes.output = output
    return outcomes
