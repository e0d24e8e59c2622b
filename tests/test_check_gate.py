"""check runs lint first, and takes a profile."""

from __future__ import annotations

from pathlib import Path

from synth import BASE_FILES, make_queue, unified

PARSER = BASE_FILES["vllm/parser.py"]


def _queue(tmp_path: Path, lifecycle: str):  # noqa: ANN202
    q = make_queue(tmp_path)
    q.write_patch("P15-none.patch", unified("vllm/parser.py", PARSER, PARSER.replace("== 'null'", "in ('null', 'None')")),
                  extra=f"lifecycle: {lifecycle}\n")
    util = BASE_FILES["vllm/util.py"]
    q.write_patch("P2-util.patch", unified("vllm/util.py", util, util.replace("return x + 7\n", "return x + 70\n")))
    q.set_series("P15-none.patch", "P2-util.patch")
    return q


def test_lint_errors_fail_the_check(tmp_path: Path) -> None:
    q = _queue(tmp_path, "sometimes")
    proc = q.run("check", check=False)
    assert proc.returncode == 3
    assert "lint:" in proc.stderr and "lifecycle" in proc.stderr
    assert q.run("check", "--no-lint").returncode == 0


def test_check_with_a_profile_checks_only_its_patches(tmp_path: Path) -> None:
    q = _queue(tmp_path, "stable")
    (q.root / "profiles").mkdir()
    (q.root / "profiles" / "one.yaml").write_text("name: one\npolicy: compat\npatches: [P2]\n")
    proc = q.run("check", "--no-lint", "--profile", "one", "--json")
    assert '"P2-util.patch"' in proc.stdout and '"P15-none.patch"' not in proc.stdout


def test_lint_errors_show_in_the_json_and_junit_reports(tmp_path: Path) -> None:
    import json
    import xml.etree.ElementTree as ET

    q = _queue(tmp_path, "sometimes")
    report = tmp_path / "check.xml"
    proc = q.run("check", "--json", "--junit", str(report), check=False)
    assert proc.returncode == 3
    doc = json.loads(proc.stdout)
    assert doc["ok"] is False and all(pin["ok"] for pin in doc["pins"])
    assert any("error[header-value]" in note for note in doc["notes"])
    suites = {s.get("name"): s for s in ET.parse(report).getroot().findall("testsuite")}
    lint = suites["gqueue lint"]
    assert lint.get("failures") == "1"
    failure = lint.find("testcase/failure")
    assert failure is not None and "queue/P15-none.patch:4: error[header-value]" in (failure.text or "")
    human = q.run("check", check=False)
    assert human.returncode == 3 and "FAILING: lint found 1 error(s)" in human.stdout
    assert "ok: every patch is acceptable" not in human.stdout  # nothing that reads as a pass
    clean = q.run("check", "--json", "--no-lint", "--junit", str(report))
    assert json.loads(clean.stdout)["ok"] is True
    assert "gqueue lint" not in report.read_text()
