"""The crash harness's forked gqueue (forked_gqueue.py) against gqueue as a process of its own:
the same exit codes, output and queue afterwards, for whole runs, for runs killed at a counted
effect and for the recoveries after them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import crashkit as ck


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> ck.Templates:
    return ck.Templates(tmp_path_factory.mktemp("forked"))


def _said(text: str) -> str:
    """What a run printed, its timings, pids, object and commit ids and temporary names aside."""
    text = re.sub(r"\.[A-Za-z0-9_]{8}\.tmp\b", ".X.tmp", text)
    text = re.sub(r"\bpid \d+", "pid P", text)
    text = re.sub(r"\b[0-9a-f]{7,64}\b", "H", text)
    text = re.sub(r"\d+(\.\d+)?\s?(ms|s)\b", "T", text)
    return re.sub(r"/\S*/(fork|own)/", "/ROOT/", text)


def _same_state(a: ck.State, b: ck.State) -> None:
    assert (a.series, a.pin, a.queue, a.work, a.applied, a.journal, a.temporaries) == \
        (b.series, b.pin, b.queue, b.work, b.applied, b.journal, b.temporaries)
    assert len(a.saved) == len(b.saved)


@pytest.mark.parametrize("name", ["push-all", "refresh", "new", "rebase"])
def test_a_fork_runs_as_a_process_of_its_own(name: str, templates: ck.Templates, tmp_path: Path) -> None:
    scenario = ck.SCENARIOS[name]
    runs = {}
    for way in ("fork", "own"):
        root = templates.copy(scenario, tmp_path / way)
        fork = way == "fork"
        steps = [ck.run(root, scenario.args, fork=fork), ck.run(root, ("status", "--json"), fork=fork),
                 ck.run(root, ("nosuchcommand",), fork=fork), ck.run(root, ("pop", "--all", "--json"), fork=fork)]
        runs[way] = ([(r.code, _said(r.stdout), _said(r.stderr)) for r in steps], ck.snapshot(root))
    assert runs["fork"][0] == runs["own"][0]
    _same_state(runs["fork"][1], runs["own"][1])


@pytest.mark.parametrize("name,after", [("push-all", 3), ("move", 5), ("delete", 4)])
def test_a_fork_killed_at_an_effect_leaves_what_a_process_leaves(name: str, after: int, templates: ck.Templates,
                                                                 tmp_path: Path) -> None:
    scenario = ck.SCENARIOS[name]
    left = {}
    for way in ("fork", "own"):
        root = templates.copy(scenario, tmp_path / way)
        killed = ck.run(root, scenario.args, crash_after=after, fork=way == "fork")
        assert killed.killed, (way, killed.code, killed.stderr)
        after_kill = ck.snapshot(root)
        repair = ck.run(root, ("repair", "--json"), fork=way == "fork")
        left[way] = (after_kill, (repair.code, _said(repair.stdout)), ck.snapshot(root))
    _same_state(left["fork"][0], left["own"][0])
    assert left["fork"][1] == left["own"][1]
    _same_state(left["fork"][2], left["own"][2])
