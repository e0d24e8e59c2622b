"""The order a test run hands tests to its workers (tests/phases.py) and the shards of the patch
tests run on other trees (tests/patch_runs.py)."""

from __future__ import annotations

import json
from pathlib import Path

import patch_runs
import phases

LIGHT = [f"tests/test_a.py::t{i}" for i in range(40)] + [f"tests/test_b.py::t{i}" for i in range(40)]


def test_worksteal_shares_are_what_xdist_hands_out() -> None:
    assert phases.worksteal_shares(10, 2) == [5, 5]
    assert phases.worksteal_shares(11, 2) == [5, 6]
    assert phases.worksteal_shares(10, 3) == [3, 3, 4]
    assert sum(phases.worksteal_shares(853, 4)) == 853


def test_long_tests_are_dealt_out_first_to_the_least_loaded_worker() -> None:
    seconds = {"tests/x.py::soak": 300.0, "tests/y.py::pristine[a]": 200.0, "tests/y.py::pristine[b]": 190.0,
               "tests/z.py::shard1": 120.0, "tests/a.py::short": 9.0}
    names = LIGHT[:30] + list(seconds) + LIGHT[30:]
    order = phases.deal(names, seconds, 2)
    assert sorted(order) == sorted(names)
    first, second = phases.worksteal_shares(len(order), 2)
    runs = order[:first], order[first:]
    # 300 | 200 -> 300 | 200+190 -> 300+120 | 390: each run starts with its long tests
    assert runs[0][:2] == ["tests/x.py::soak", "tests/z.py::shard1"]
    assert runs[1][:2] == ["tests/y.py::pristine[a]", "tests/y.py::pristine[b]"]
    # a test under the threshold keeps its place among the others
    rest = [n for n in order if n not in seconds or seconds[n] < phases.LONG_S]
    assert rest == [n for n in names if n not in seconds or seconds[n] < phases.LONG_S]


def test_a_modules_long_tests_stay_together_in_a_run() -> None:
    seconds = {"tests/c.py::a": 100.0, "tests/d.py::b": 90.0, "tests/c.py::c": 20.0, "tests/d.py::d": 15.0}
    order = phases.deal(list(seconds) + LIGHT, seconds, 1)
    # one worker: the module with the longest test first, each module's long tests longest first
    assert order[:4] == ["tests/c.py::a", "tests/c.py::c", "tests/d.py::b", "tests/d.py::d"]
    assert order[4:] == LIGHT
    # two: 100 | 90 -> 100 | 90+20 -> 100+15 | 110
    order = phases.deal(list(seconds) + LIGHT, seconds, 2)
    first = phases.worksteal_shares(len(order), 2)[0]
    assert order[:2] == ["tests/c.py::a", "tests/d.py::d"]
    assert order[first:first + 2] == ["tests/d.py::b", "tests/c.py::c"]


def test_without_records_the_order_is_the_phase_order() -> None:
    assert phases.deal(LIGHT, {}, 2) == LIGHT


def test_recorded_seconds_of_a_missing_or_broken_file_are_none(tmp_path: Path) -> None:
    assert phases.recorded_seconds(tmp_path / "none.json") == {}
    (tmp_path / "bad.json").write_text("{")
    assert phases.recorded_seconds(tmp_path / "bad.json") == {}
    (tmp_path / "ok.json").write_text(json.dumps({"tests": {"tests/a.py::t": 12.5}}))
    assert phases.recorded_seconds(tmp_path / "ok.json") == {"tests/a.py::t": 12.5}


def test_patch_shards_cover_every_module_once_and_balance_the_recorded_time() -> None:
    for count in (1, 2, 3):
        groups = patch_runs.shards(count)
        assert len(groups) == count
        flat = [p for g in groups for p in g]
        assert sorted(flat) == patch_runs.modules() and len(set(flat)) == len(flat)
    recorded = phases.recorded_seconds(part="modules")
    loads = [sum(recorded.get(p.relative_to(patch_runs.REPO).as_posix(), 0.0) for p in g) for g in patch_runs.shards(2)]
    assert max(loads) - min(loads) <= max(recorded.values(), default=0.0)


def test_a_junit_report_is_read_into_outcomes(tmp_path: Path) -> None:
    report = tmp_path / "r.xml"
    report.write_text(
        '<testsuites><testsuite>'
        '<testcase classname="tests.patches.test_P1" name="test_fixed_a"/>'
        '<testcase classname="tests.patches.test_P1" name="test_fixed_b"><failure message="assert 1 == 2&#10;more"/></testcase>'
        '<testcase classname="tests.patches.test_P1" name="test_off_c"><skipped message="outside"/></testcase>'
        '<testcase classname="" name="tests.patches.test_P2"><error message="collection failure"/></testcase>'
        '</testsuite></testsuites>')
    every = patch_runs.read_report(report)
    assert every.passed == ["tests.patches.test_P1::test_fixed_a"]
    assert every.failed == {"tests.patches.test_P1::test_fixed_b": "assert 1 == 2",
                            "::tests.patches.test_P2": "collection failure"}
    assert every.skipped == ["tests.patches.test_P1::test_off_c"]
    fixed = patch_runs.read_report(report, only="test_fixed")
    assert list(fixed.failed) == ["tests.patches.test_P1::test_fixed_b"]
