"""Phases of a test run: what is running now, and how long each part of the suite took.

A run is split into phases by where a test lives and how it is marked (real vLLM sdists, the
patches' tests, the crash and hostile-input harness, the kernels under Triton's interpreter,
the tool's own tests). The terminal shows a line when a phase starts and when its last test is
done, and the summary lists each phase's test count, summed test time and wall time.

Order: the tests that took long in the last recorded run (tests/durations.json, written by
``tools/bench/testtimes.py --durations``) start first, dealt out over the workers, longest first,
each to the worker with the least so far; the rest follow phase by phase. Under xdist's
``worksteal`` each worker is first handed a contiguous run of the list, so the list is laid out
as those runs: a worker starts with its long tests and ends with short ones, and a worker that
runs dry takes short tests from the end of another's run instead of waiting on a long one.

Works with and without pytest-xdist: under xdist the hooks below run in the controller, which
sees every worker's reports.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# (key, title), in the order the phases run
PHASES: tuple[tuple[str, str], ...] = (
    ("real", "slow tests (real vLLM sdists, crash soak)"),
    ("patches", "patch tests on the patched vLLM tree"),
    ("reliability", "crash harness and hostile inputs"),
    ("kernels", "kernels under the Triton interpreter"),
    ("tool", "the tool's own tests"),
)
TITLES = dict(PHASES)
ORDER = {key: i for i, (key, _) in enumerate(PHASES)}


def phase_of(nodeid: str, keywords) -> str:
    """The phase a test belongs to, from its node id and marks."""
    path = nodeid.split("::", 1)[0].replace("\\", "/")
    if "/kernels/" in f"/{path}":
        return "kernels"
    if "slow" in keywords:
        return "real"
    if "/patches/" in f"/{path}":
        return "patches"
    if "/reliability/" in f"/{path}":
        return "reliability"
    return "tool"


@dataclass
class _Phase:
    total: int = 0
    done: int = 0
    seconds: float = 0.0
    cpu: float = 0.0
    started: float | None = None
    ended: float | None = None


@dataclass
class PhaseLog:
    """Controller-side bookkeeping of the phases of one run."""

    phases: dict[str, _Phase] = field(default_factory=dict)
    of_test: dict[str, str] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    wall: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)

    def expect(self, nodeid: str, key: str) -> None:
        if nodeid not in self.of_test:
            self.of_test[nodeid] = key
            self.phases.setdefault(key, _Phase()).total += 1

    def report(self, report: pytest.TestReport) -> list[str]:
        """Account one report; return the lines to show (a phase starting or ending)."""
        key = self.of_test.get(report.nodeid)
        if key is None:
            return []
        phase = self.phases[key]
        lines = []
        now = time.monotonic()
        if phase.started is None:
            phase.started = now
            lines.append(f"phase started: {TITLES[key]} ({phase.total} tests)")
        phase.seconds += report.duration
        self.wall[report.nodeid] = self.wall.get(report.nodeid, 0.0) + report.duration
        cpu = dict(report.user_properties).get("cpu_s")
        if cpu is not None:
            self.cpu[report.nodeid] = float(cpu)
            phase.cpu += float(cpu)
        if report.when == "teardown":
            phase.done += 1
            if phase.done == phase.total:
                phase.ended = now
                lines.append(f"phase done: {TITLES[key]} in {phase.ended - phase.started:.0f} s wall")
        return lines

    def slowest(self, count: int = 20) -> list[str]:
        """The tests that took longest (setup, call and teardown), with their CPU seconds."""
        top = sorted(self.wall.items(), key=lambda kv: kv[1], reverse=True)[:count]
        return [f"{wall:8.1f} s wall {self.cpu.get(nodeid, float('nan')):8.1f} s cpu  {nodeid}"
                for nodeid, wall in top]

    def summary(self) -> list[str]:
        rows = []
        for key, title in PHASES:
            phase = self.phases.get(key)
            if not phase:
                continue
            wall = ((phase.ended or time.monotonic()) - phase.started) if phase.started else 0.0
            rows.append(f"{title:<42} {phase.done:>4}/{phase.total:<4} tests {phase.seconds:8.1f} s summed"
                        f" {phase.cpu:8.1f} s cpu {wall:8.1f} s wall")
        rows.append(f"{'whole run':<42} {sum(p.done for p in self.phases.values()):>4} tests"
                    f" {time.monotonic() - self.started:>24.1f} s wall")
        return rows


_LOG = PhaseLog()


def _say(config: pytest.Config, lines: list[str]) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    for line in lines:
        if getattr(reporter._tw, "width_of_current_line", 0):  # mid-way through a line of dots
            reporter._tw.line()
        reporter.write_line(f"--- {line} [{time.strftime('%H:%M:%S')}]", bold=True)


DURATIONS = Path(__file__).resolve().parent / "durations.json"
LONG_S = 10.0  # a test at least this long in the last recorded run is dealt out first


def recorded_seconds(path: Path = DURATIONS, *, part: str = "tests") -> dict[str, float]:
    """Seconds of the last recorded run: each long test's (``part="tests"``) or each patch test
    module's (``"modules"``); none where the file is missing or unreadable."""
    try:
        return {str(k): float(v) for k, v in json.loads(path.read_text())[part].items()}
    except (OSError, ValueError, KeyError):
        return {}


def worksteal_shares(total: int, workers: int) -> list[int]:
    """How many tests xdist's worksteal scheduler first hands each worker, in order."""
    shares, left = [], total
    for i in range(workers):
        shares.append(left // (workers - i))
        left -= shares[-1]
    return shares


def deal(names: list[str], seconds: dict[str, float], workers: int) -> list[str]:
    """``names`` (in phase order) laid out for ``workers`` worksteal workers: each worker's run
    is its long tests (longest first, each given to the least loaded worker) then a contiguous
    slice of the others, the run's length what worksteal hands that worker."""
    long = sorted((n for n in names if seconds.get(n, 0.0) >= LONG_S), key=lambda n: (-seconds[n], n))
    if not long:
        return list(names)
    workers = max(1, workers)
    runs: list[list[str]] = [[] for _ in range(workers)]
    loads = [0.0] * workers
    shares = worksteal_shares(len(names), workers)
    for name in long:
        # the least loaded worker that still has room in its run (the shares add up to len(names))
        least = min((i for i in range(workers) if len(runs[i]) < shares[i]), key=lambda i: loads[i])
        runs[least].append(name)
        loads[least] += seconds[name]
    for run in runs:  # a module's long tests side by side, so its module-scoped fixtures are made once
        first = {}
        for name in run:
            first.setdefault(name.split("::", 1)[0], len(first))
        run.sort(key=lambda name: first[name.split("::", 1)[0]])
    chosen = set(long)
    rest = iter([n for n in names if n not in chosen])
    for i in range(workers):
        runs[i].extend(next(rest) for _ in range(max(0, shares[i] - len(runs[i]))))
    runs[-1].extend(rest)
    return [name for run in runs for name in run]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # stable: within a phase the collection order stays
    items.sort(key=lambda item: ORDER[phase_of(item.nodeid, item.keywords)])
    workerinput = getattr(config, "workerinput", None)
    # a worker's own options say dist=no (xdist resets them); the layout is worksteal's, make test's
    workers = int(workerinput.get("workercount", 1)) if workerinput is not None else 1
    by_name = {item.nodeid: item for item in items}
    if len(by_name) == len(items):
        items[:] = [by_name[name] for name in deal(list(by_name), recorded_seconds(), workers)]
    mapping = {item.nodeid: phase_of(item.nodeid, item.keywords) for item in items}
    if workerinput is None:  # plain run: this process is the controller
        for nodeid, key in mapping.items():
            _LOG.expect(nodeid, key)
    elif workerinput.get("workerid") == "gw0" and workerinput.get("gqueue_phases"):
        # every worker collects the same tests; one of them tells the controller their phases
        target = Path(workerinput["gqueue_phases"])
        partial = target.with_suffix(".part")
        partial.write_text(json.dumps(mapping))
        partial.replace(target)


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_XdistController(config), "gqueue-phases-xdist")


class _XdistController:
    """Under xdist the controller collects nothing: it learns each test's phase from a file
    the first worker writes after its collection."""

    def __init__(self, config: pytest.Config) -> None:
        folder = Path(tempfile.mkdtemp(prefix="gqueue-phases-"))
        self.path = folder / "phases.json"

    @pytest.hookimpl
    def pytest_configure_node(self, node) -> None:
        node.workerinput["gqueue_phases"] = str(self.path)

    @pytest.hookimpl
    def pytest_xdist_node_collection_finished(self, node, ids) -> None:
        if _LOG.of_test or not self.path.is_file():
            return
        for nodeid, key in json.loads(self.path.read_text()).items():
            _LOG.expect(nodeid, key)

    @pytest.hookimpl
    def pytest_unconfigure(self) -> None:
        shutil.rmtree(self.path.parent, ignore_errors=True)


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    """CPU seconds of the test and the processes it waited for: a cost that, unlike wall time,
    does not grow when the machine is busy with other work."""
    item.stash[_CPU_START] = _cpu_seconds()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    outcome = yield
    report = outcome.get_result()
    if call.when == "teardown" and _CPU_START in item.stash:
        report.user_properties.append(("cpu_s", round(_cpu_seconds() - item.stash[_CPU_START], 3)))


_CPU_START = pytest.StashKey[float]()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    config = getattr(pytest_runtest_logreport, "config", None)
    lines = _LOG.report(report)
    if lines and config is not None:
        _say(config, lines)


def pytest_sessionstart(session: pytest.Session) -> None:
    pytest_runtest_logreport.config = session.config  # type: ignore[attr-defined]


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or not any(p.started for p in _LOG.phases.values()):
        return  # a worker, or nothing ran (--collect-only)
    terminalreporter.section("phase times")
    for row in _LOG.summary():
        terminalreporter.write_line(row)
    terminalreporter.section("slowest tests")
    for row in _LOG.slowest():
        terminalreporter.write_line(row)
    target = os.environ.get("GQUEUE_TEST_TIMES")
    if target:  # every test's wall and CPU seconds, for docs/BENCHMARKS.md
        # make test runs pytest twice (kernels, the rest): a second run adds to the first's file
        path = Path(target)
        times = json.loads(path.read_text()) if path.is_file() else {"wall": {}, "cpu": {}, "phases": {}}
        times["wall"].update(_LOG.wall)
        times["cpu"].update(_LOG.cpu)
        times["phases"].update({k: vars(v) for k, v in _LOG.phases.items() if v.started})
        path.write_text(json.dumps(times, indent=1))
