"""What the stack commands say: a failed push names every failing hunk and the ways forward,
status tells of a forced push's .rej files, refresh tells of patches above only when they moved."""

from __future__ import annotations

import json
from pathlib import Path

from synth import BASE_FILES, Queue, make_queue, unified

UTIL = BASE_FILES["vllm/util.py"]
CONFIG = BASE_FILES["vllm/config.py"]


def _edit(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)


def _failing_queue(tmp_path: Path) -> Queue:
    """A1-bad: one hunk of vllm/util.py that applies, two that do not (util.py and config.py)."""
    q = make_queue(tmp_path)
    stale_util = _edit(UTIL, "return x + 30\n", "return x + 31\n")  # the file as the patch expects it
    body = unified("vllm/util.py", stale_util,
                   _edit(_edit(stale_util, "return x + 2\n", "return x + 20\n"), "return x + 31\n", "return x + 310\n"))
    body += unified("vllm/config.py", _edit(CONFIG, "OPTION_50 = 50\n", "OPTION_50 = 51\n"),
                    _edit(CONFIG, "OPTION_50 = 50\n", "OPTION_50 = 500\n"))
    q.write_patch("A1-bad.patch", body)
    q.set_series("A1-bad.patch")
    q.run("checkout")
    return q


def test_failed_push_names_every_failing_hunk_and_the_ways_forward(tmp_path: Path) -> None:
    q = _failing_queue(tmp_path)
    proc = q.run("push", check=False)
    assert proc.returncode == 3
    out = proc.stdout
    assert "A1-bad.patch: 2 hunk(s) do not apply" in out
    assert "vllm/util.py: hunk #2 of 2, expected near line" in out
    assert "vllm/config.py: hunk #1 of 1, expected near line" in out
    assert "gqueue push -f" in out and "gqueue refresh" in out and "gqueue check --pin" in out
    assert "queue/A1-bad.patch" in out
    assert q.run("applied").stdout.strip() == ""


def test_status_after_a_forced_push_lists_the_rej_files_and_what_to_do(tmp_path: Path) -> None:
    q = _failing_queue(tmp_path)
    proc = q.run("push", "-f", check=False)
    assert proc.returncode == 3 and "FORCED" in proc.stdout
    status = q.run("status")
    lines = status.stdout.splitlines()
    assert any("A1-bad.patch was pushed with --force" in line for line in lines), status.stdout
    assert "  work/vllm/config.py.rej" in lines and "  work/vllm/util.py.rej" in lines
    assert "'gqueue refresh'" in status.stdout
    doc = json.loads(q.run("status", "--json").stdout)["result"]
    assert doc["forced_push"] == {"patch": "A1-bad.patch", "rejects": ["vllm/config.py.rej", "vllm/util.py.rej"]}
    q.run("refresh")
    assert "pushed with --force" not in q.run("status").stdout


def _three_patch_queue(tmp_path: Path) -> Queue:
    """A1 (util.py, near the top), A2 (util.py, lower down), A3 (parser.py); A1 applied."""
    q = make_queue(tmp_path)
    parser = BASE_FILES["vllm/parser.py"]
    q.write_patch("A1-a.patch", unified("vllm/util.py", UTIL, _edit(UTIL, "return x + 2\n", "return x + 20\n")))
    q.write_patch("A2-b.patch", unified("vllm/util.py", UTIL, _edit(UTIL, "return x + 30\n", "return x + 300\n")))
    q.write_patch("A3-c.patch", unified("vllm/parser.py", parser, _edit(parser, "import json", "import json  # c")))
    q.set_series("A1-a.patch", "A2-b.patch", "A3-c.patch")
    q.run("checkout")
    q.run("push")
    return q


def test_refresh_says_nothing_of_patches_above_that_did_not_move(tmp_path: Path) -> None:
    q = _three_patch_queue(tmp_path)
    util = q.work / "vllm/util.py"
    util.write_text(_edit(util.read_text(), "return x + 20\n", "return x + 21\n"))  # same lines, same places
    proc = q.run("refresh")
    assert "refreshed A1-a.patch" in proc.stdout
    assert "above" not in proc.stdout and "push --all --refresh" not in proc.stdout
    (q.work / "README.md").write_text("synthetic upstream, edited\n")  # a file no patch above touches
    proc = q.run("refresh", "--json")
    assert json.loads(proc.stdout)["result"]["moved"] == []


def test_refresh_names_the_patches_above_that_now_land_elsewhere(tmp_path: Path) -> None:
    q = _three_patch_queue(tmp_path)
    util = q.work / "vllm/util.py"
    util.write_text(_edit(util.read_text(), "return x + 20\n", "return x + 20\n    # grown\n    # twice\n"))
    proc = q.run("refresh")
    assert "1 patch(es) above it now land elsewhere in its files (A2-b.patch)" in proc.stdout
    assert "A3-c.patch" not in proc.stdout
    assert "gqueue push --all --refresh" in proc.stdout


def test_header_edit_refuses_what_lint_would_refuse_and_keeps_the_edit(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    path = q.write_patch("A1-a.patch", unified("vllm/util.py", UTIL, _edit(UTIL, "return x + 7\n", "return x + 70\n")),
                         extra="lifecycle: experimental\n")
    q.set_series("A1-a.patch")
    before = path.read_bytes()
    for editor, rule in (("sed -i 's/^lifecycle: .*/lifecycle: bogus/'", "header-value"),
                         ("sed -i 's/^title: .*/title: t\\nrequires: [ZZ9]/'", "requires-unknown"),
                         ("sed -i 's/^id: A1/id: B7/'", "file-name-id")):
        proc = q.run("header", "A1-a.patch", "--edit", check=False, env={"GQUEUE_EDITOR": editor})
        assert proc.returncode == 1, proc.stdout + proc.stderr
        first = proc.stderr.splitlines()[0]
        assert first.startswith("error[header-invalid]: queue/A1-a.patch:") and f"[{rule}]" in first, proc.stderr
        assert "the header is unchanged" in first
        assert "hint: " in proc.stderr and "your edit is kept in .gqueue/saved/last-header-edit.yaml" in proc.stderr
        assert path.read_bytes() == before
    assert "id: B7" in (q.root / ".gqueue/saved/last-header-edit.yaml").read_text()
    q.run("header", "A1-a.patch", "--edit", env={"GQUEUE_EDITOR": "sed -i 's/^lifecycle: .*/lifecycle: stable/'"})
    assert b"lifecycle: stable" in path.read_bytes()


def test_check_leads_with_its_verdict(tmp_path: Path) -> None:
    """With lint errors the first line is the FAILING verdict (it was the pin's 'ok'), and
    no line of the table reads as a pass; without them the first line is the pass."""
    q = make_queue(tmp_path)
    q.write_patch("P2-util.patch", unified("vllm/util.py", UTIL, _edit(UTIL, "return x + 7\n", "return x + 70\n")),
                  extra="lifecycle: sometimes\n")
    q.set_series("P2-util.patch")
    proc = q.run("check", check=False)
    assert proc.returncode == 3
    lines = proc.stdout.splitlines()
    assert lines[0] == "check: FAILING -- lint found 1 error(s)", proc.stdout
    assert lines[-1].startswith("FAILING: lint found 1 error(s)")
    assert not any(line.endswith("-- ok") for line in lines)
    clean = q.run("check", "--no-lint").stdout.splitlines()
    assert clean[0] == "check: ok -- every patch is acceptable on 1 pin(s)" and clean[-1] == "ok: every patch is acceptable"


def test_bisect_reports_the_stack_by_its_patches(tmp_path: Path) -> None:
    q = _three_patch_queue(tmp_path)  # A1 applied
    script = "import sys; sys.exit(1 if 'x + 300' in open('vllm/util.py').read() else 0)"
    proc = q.run("bisect", "run", "--good", "base", "--", "python3", "-c", script)
    lines = proc.stdout.splitlines()
    assert lines[1].startswith("first bad patch: A2-b.patch"), proc.stdout
    assert lines[-1] == "the stack is back as it was: A1-a.patch on top (1 patch(es) applied)"
    doc = json.loads(q.run("bisect", "run", "--json", "--good", "A1", "--", "python3", "-c", script).stdout)
    assert doc["result"]["top"] == "A1-a.patch" and doc["result"]["applied"] == ["A1-a.patch"]
