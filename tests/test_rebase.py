"""gqueue rebase on the synthetic upstream of test_drift: clean moves, merges, retirement, a stop
with conflict markers, and --continue / --skip / --abort."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from synth import Queue
from test_drift import build_queue, two_pins

LANDING = ["A1-clean.patch", "B1-offset.patch", "C1-merged3.patch", "G1-upstream.patch", "H1-partial.patch",
           "J1-renamed.patch", "M1-drift.patch"]


def snapshot(q: Queue) -> dict[str, object]:
    """Everything --abort must put back: queue files, series, pin, HEAD, work tree."""
    git = lambda *a: subprocess.run(["git", *a], cwd=q.work, capture_output=True, text=True).stdout  # noqa: E731
    files = {str(p.relative_to(q.root)): p.read_bytes() for p in q.root.rglob("*")
             if p.is_file() and ".git" not in p.parts and ".gqueue" not in p.parts}
    return {"files": files, "head": git("rev-parse", "HEAD"), "branch": git("symbolic-ref", "HEAD"),
            "status": git("status", "--porcelain", "--untracked-files=all")}


def test_rebase_without_conflicts(tmp_path: Path) -> None:
    q = build_queue(tmp_path, LANDING)
    q.run("push", "--all")
    before_header = (q.root / "queue/B1-offset.patch").read_text().split("...\n", 1)[0]
    proc = q.run("rebase", "--pin", "next", "--json")
    doc = json.loads(proc.stdout)
    assert doc["ok"] and doc["result"]["done"]
    summary = doc["result"]["summary"]
    assert summary["moved"] == ["A1-clean.patch", "B1-offset.patch", "M1-drift.patch"]
    assert summary["merged"] == ["C1-merged3.patch", "H1-partial.patch", "J1-renamed.patch"]
    assert summary["retired"] == ["G1-upstream.patch"] and summary["by_hand"] == []
    pin_text = (q.root / "vendor-pin.txt").read_text()
    assert "vllm-0.2.0.tar.gz" in pin_text.split("pin ", 1)[1].splitlines()[0] and "next " not in pin_text
    series = (q.root / "series").read_text()
    assert "# merged upstream in" in series and "G1-upstream.patch" in series
    assert "G1-upstream.patch" not in q.run("series").stdout.split()
    retired = (q.root / "queue/G1-upstream.patch").read_text()
    assert "lifecycle: merged_upstream" in retired and "merged_upstream_in: " in retired
    offset = (q.root / "queue/B1-offset.patch").read_text()
    assert offset.startswith(before_header) and "@@ -34,7 +34,7 @@" in offset
    partial = (q.root / "queue/H1-partial.patch").read_text()
    assert "return y + 150" in partial and "return y + 22" not in partial
    assert q.run("applied").stdout.split() == ["A1-clean.patch", "B1-offset.patch", "C1-merged3.patch",
                                               "H1-partial.patch", "J1-renamed.patch", "M1-drift.patch"]
    renamed = (q.root / "queue/J1-renamed.patch").read_text()  # carried to where the file went
    assert "+++ b/vllm/moved/new_name.py" in renamed and "old_name" not in renamed.split("...\n", 1)[1]
    assert "x * 33" in (q.work / "vllm/clean.py").read_text()
    assert "def m4(x, scale=1):" in (q.work / "vllm/merge.py").read_text()
    # the refreshed queue is exactly what refresh would write, and the new pin checks clean
    q.run("refresh")
    assert q.run("check", "--json").returncode == 0
    q.run("pop", "--all")
    q.run("push", "--all")


def test_rebase_stops_and_abort_restores_everything(tmp_path: Path) -> None:
    q = build_queue(tmp_path, ["A1-clean.patch", "G1-upstream.patch", "E1-conflict.patch", "M1-drift.patch"])
    q.run("push", "--all")
    before = snapshot(q)
    proc = q.run("rebase", "--pin", "next", check=False)
    assert proc.returncode == 3, proc.stderr
    assert "stopped at E1-conflict.patch" in proc.stdout and "gqueue rebase --continue" in proc.stdout
    text = (q.work / "vllm/conflict.py").read_text()
    assert "<<<<<<< " in text and ">>>>>>> E1-conflict.patch" in text
    assert (q.root / "vendor-pin.txt").read_bytes() == before["files"]["vendor-pin.txt"]
    assert q.run("applied").stdout.split() == ["A1-clean.patch", "E1-conflict.patch"]
    assert q.run("rebase", "--continue", check=False).returncode == 1  # not refreshed yet
    q.run("rebase", "--abort")
    assert snapshot(q) == before
    assert not (q.root / ".gqueue/rebase").exists()
    q.run("pop", "--all")


def test_rebase_continue_after_fix(tmp_path: Path) -> None:
    q = build_queue(tmp_path, ["A1-clean.patch", "E1-conflict.patch", "K1-blocked.patch", "M1-drift.patch"])
    q.run("push", "--all")
    q.run("rebase", "--pin", "next", check=False)
    target = q.work / "vllm/conflict.py"
    lines = target.read_text().splitlines(keepends=True)
    start = next(i for i, x in enumerate(lines) if x.startswith("<<<<<<<"))
    end = next(i for i, x in enumerate(lines) if x.startswith(">>>>>>>"))
    lines[start : end + 1] = ["    y = x * 4 + 0\n", "    y = clamp(y)  # guard E1\n"]
    target.write_text("".join(lines))
    q.run("refresh")
    proc = q.run("rebase", "--continue", "--json", check=False)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0 and doc["result"]["done"], proc.stdout
    assert doc["result"]["summary"]["by_hand"] == ["E1-conflict.patch"]
    assert doc["result"]["summary"]["moved"] == ["A1-clean.patch", "M1-drift.patch"]
    assert doc["result"]["summary"]["merged"] == ["K1-blocked.patch"]
    assert "return y + 4 if y else 0" in target.read_text()
    assert "vllm-0.2.0" in (q.root / "vendor-pin.txt").read_text()
    assert q.run("check", "--json").returncode == 0


def test_rebase_skip_parks_the_patch(tmp_path: Path) -> None:
    q = build_queue(tmp_path, ["A1-clean.patch", "I1-missing.patch", "M1-drift.patch"])
    q.run("push", "--all")
    proc = q.run("rebase", "--pin", "next", check=False)
    assert proc.returncode == 3 and "file-missing" in proc.stdout
    assert (q.work / "vllm/gone.py.rej").exists()
    doc = json.loads(q.run("rebase", "--skip", "--json").stdout)
    assert doc["result"]["done"] and doc["result"]["summary"]["skipped"] == ["I1-missing.patch"]
    assert "# parked: I1-missing.patch" in (q.root / "series").read_text()
    assert not (q.work / "vllm/gone.py.rej").exists()
    assert q.run("applied").stdout.split() == ["A1-clean.patch", "M1-drift.patch"]


def test_skip_saves_a_resolution_begun_in_work(tmp_path: Path) -> None:
    """--skip drops the stopped patch's commit and what was begun in work/ to fix it: the
    begun work is saved under .gqueue/saved/ first."""
    q = build_queue(tmp_path, ["A1-clean.patch", "E1-conflict.patch", "M1-drift.patch"])
    q.run("push", "--all")
    assert q.run("rebase", "--pin", "next", check=False).returncode == 3
    resolved = (q.work / "vllm/conflict.py").read_text().replace("<<<<<<< ", "RESOLVED ")
    (q.work / "vllm/conflict.py").write_text(resolved)
    (q.work / "vllm/notes.txt").write_text("a new file begun for the fix\n")
    proc = q.run("rebase", "--skip")
    assert ".gqueue/saved/" in proc.stderr
    saved = list((q.root / ".gqueue/saved").glob("*rebase-skip*.diff"))
    assert len(saved) == 1
    body = saved[0].read_text()
    assert "+RESOLVED " in body and "+a new file begun for the fix" in body
    assert "RESOLVED " not in (q.work / "vllm/conflict.py").read_text()


def test_abort_keeps_copies_of_what_it_puts_back(tmp_path: Path) -> None:
    """--abort restores the queue and the work tree; what was written meanwhile by hand (a fix
    begun in work/, an edit of another patch file) is saved under .gqueue/saved/ first."""
    q = build_queue(tmp_path, ["A1-clean.patch", "E1-conflict.patch", "M1-drift.patch"])
    q.run("push", "--all")
    before = snapshot(q)
    assert q.run("rebase", "--pin", "next", check=False).returncode == 3
    (q.work / "vllm/conflict.py").write_text((q.work / "vllm/conflict.py").read_text().replace("<<<<<<< ", "BEGUN "))
    edited = (q.root / "queue/M1-drift.patch").read_text() + "# a note written while stopped\n"
    (q.root / "queue/M1-drift.patch").write_text(edited)
    q.run("rebase", "--abort")
    assert snapshot(q) == before
    saved = q.root / ".gqueue/saved"
    diffs = list(saved.glob("*rebase-abort*.diff"))
    assert len(diffs) == 1 and "+BEGUN " in diffs[0].read_text()
    copies = list(saved.glob("*rebase-abort/queue/M1-drift.patch"))
    assert len(copies) == 1 and copies[0].read_text() == edited


def test_rebase_refuses_dirty_tree_and_bad_usage(tmp_path: Path) -> None:
    q = build_queue(tmp_path, ["A1-clean.patch"])
    q.run("push", "--all")
    (q.work / "vllm/clean.py").write_text("changed\n")
    assert q.run("rebase", "--pin", "next", check=False).returncode == 1
    assert q.run("rebase", check=False).returncode == 2
    assert q.run("rebase", "--continue", check=False).returncode == 1


def test_rebase_stops_at_fuzz_and_abort(tmp_path: Path) -> None:
    q = build_queue(tmp_path, ["A1-clean.patch", "D1-fuzz.patch"])
    q.run("push", "--all")
    before = snapshot(q)
    proc = q.run("rebase", "--pin", "next", "--json", check=False)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 3 and doc["result"]["stopped"] == "D1-fuzz.patch"
    assert doc["result"]["stopped_report"]["status"] == "fuzz"
    assert q.run("status").returncode == 0
    q.run("rebase", "--abort")
    assert snapshot(q) == before


def test_stop_at_fuzz_commits_no_fuzzed_hunk(tmp_path: Path) -> None:
    """A hunk that would land only with fuzz is the hand's to place: the stopped patch's commit
    leaves it out and the work tree shows it once, as a conflict, not also where fuzz put it."""
    q = build_queue(tmp_path, ["A1-clean.patch", "D1-fuzz.patch"])
    q.run("push", "--all")
    assert q.run("rebase", "--pin", "next", check=False).returncode == 3
    git = lambda *a: subprocess.run(["git", *a], cwd=q.work, capture_output=True, text=True, check=True).stdout  # noqa: E731
    assert "y + 44" not in git("show", "HEAD:vllm/fuzzy.py")
    text = (q.work / "vllm/fuzzy.py").read_text()
    assert text.count("y + 44") == 1 and "<<<<<<< " in text and ">>>>>>> D1-fuzz.patch" in text


def test_skip_blocks_the_patches_that_require_it(tmp_path: Path) -> None:
    q = build_queue(tmp_path, ["A1-clean.patch", "E1-conflict.patch", "L1-requires.patch"])
    q.run("push", "--all")
    assert q.run("rebase", "--pin", "next", check=False).returncode == 3
    proc = q.run("rebase", "--skip", "--json", check=False)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 3 and doc["result"]["stopped"] == "L1-requires.patch", proc.stdout
    assert doc["result"]["stopped_report"]["status"] == "blocked"
    assert doc["result"]["stopped_report"]["blocked_by"] == "E1-conflict.patch"
    assert doc["result"]["summary"]["moved"] == ["A1-clean.patch"]
    doc = json.loads(q.run("rebase", "--skip", "--json").stdout)
    assert doc["result"]["done"] and doc["result"]["summary"]["skipped"] == ["E1-conflict.patch", "L1-requires.patch"]
    assert q.run("applied").stdout.split() == ["A1-clean.patch"]
    assert q.run("lint").returncode == 0


def test_retire_takes_a_stopped_patch_as_fixed_upstream(tmp_path: Path) -> None:
    """A patch whose fix the new pin makes in its own way stops as a conflict; --retire takes it
    out of the series as merged upstream (header and series line say where), keeps its diff, saves
    what was begun in work/, and goes on with the rest."""
    q = build_queue(tmp_path, ["A1-clean.patch", "E1-conflict.patch", "M1-drift.patch"])
    q.run("push", "--all")
    stopped = q.run("rebase", "--pin", "next", check=False)
    assert stopped.returncode == 3 and "gqueue rebase --retire" in stopped.stdout
    diff_before = (q.root / "queue/E1-conflict.patch").read_text().split("...\n", 1)[1]
    target = q.work / "vllm/conflict.py"
    target.write_text(target.read_text().replace("<<<<<<< ", "BEGUN "))
    proc = q.run("rebase", "--retire", "--json", check=False)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0 and doc["result"]["done"], proc.stdout
    summary = doc["result"]["summary"]
    assert summary["retired"] == ["E1-conflict.patch"] and summary["skipped"] == [] and summary["by_hand"] == []
    assert summary["moved"] == ["A1-clean.patch", "M1-drift.patch"]
    series = (q.root / "series").read_text().splitlines()
    assert any(x.startswith("# merged upstream in ") and x.endswith(": E1-conflict.patch") for x in series)
    retired = (q.root / "queue/E1-conflict.patch").read_text()
    assert "lifecycle: merged_upstream" in retired and "merged_upstream_in: " in retired
    assert retired.split("...\n", 1)[1] == diff_before
    assert q.run("applied").stdout.split() == ["A1-clean.patch", "M1-drift.patch"]
    assert "BEGUN" not in target.read_text() and "<<<<<<<" not in target.read_text()
    saved = list((q.root / ".gqueue/saved").rglob("*"))
    assert any(p.is_file() and "BEGUN" in p.read_text(errors="replace") for p in saved)
    assert "vllm-0.2.0" in (q.root / "vendor-pin.txt").read_text()
    assert q.run("check", "--json").returncode == 0


def test_retire_needs_a_stopped_patch(tmp_path: Path) -> None:
    q = build_queue(tmp_path, ["A1-clean.patch"])
    q.run("push", "--all")
    assert "--retire" in q.run("rebase", "--continue", "--retire", check=False).stderr
    proc = q.run("rebase", "--retire", check=False)
    assert proc.returncode == 1 and "no rebase in progress" in proc.stderr


def test_retired_and_parked_lines_keep_guards_and_comments(tmp_path: Path) -> None:
    q = build_queue(tmp_path, ["A1-clean.patch", "G1-upstream.patch", "I1-missing.patch"], checkout=False)
    (q.root / "series").write_text("# header\nA1-clean.patch  # first\n"
                                   "G1-upstream.patch #+cuda  # fixed by vllm#123\nI1-missing.patch #+rocm # keep for MI300\n")
    q.run("checkout")
    q.run("push", "--all")
    assert q.run("rebase", "--pin", "next", check=False).returncode == 3
    q.run("rebase", "--skip")
    lines = (q.root / "series").read_text().splitlines()
    assert lines[:2] == ["# header", "A1-clean.patch  # first"]
    assert lines[2].startswith("# merged upstream in ") and lines[2].endswith(": G1-upstream.patch  #+cuda  # fixed by vllm#123")
    assert lines[3] == "# parked: I1-missing.patch  #+rocm # keep for MI300"
    assert q.run("series").stdout.split() == ["A1-clean.patch"]
    assert q.run("lint").returncode == 0  # the parked line still parks the file


def test_refused_continue_leaves_the_rejects(tmp_path: Path) -> None:
    q = build_queue(tmp_path, ["A1-clean.patch", "I1-missing.patch"])
    q.run("push", "--all")
    assert q.run("rebase", "--pin", "next", check=False).returncode == 3
    rej = q.work / "vllm/gone.py.rej"
    assert rej.exists()
    proc = q.run("rebase", "--continue", check=False)
    assert proc.returncode == 1 and "has not been refreshed" in proc.stderr
    assert rej.exists()  # still there to work from
    q.run("rebase", "--abort")
    assert not rej.exists()




def _pushed_p0_patch(tmp_path: Path, name: str, path: str, old: str, new: str) -> Queue:
    """A queue of one patch the series applies with -p0 (no a/ b/ in its names), pushed."""
    from test_drift import edit, new_files

    q = two_pins(tmp_path, new_files())
    body = edit(path, old, new)
    q.write_patch(name, body.replace(" a/vllm/", " vllm/").replace(" b/vllm/", " vllm/"))
    (q.root / "series").write_text(f"{name} -p0\n")
    q.run("checkout")
    q.run("push", "--all")
    return q


def _renamed_file_stack(tmp_path: Path):
    """A pushed patch of two hunks on a file the next pin renames, where its first hunk's
    context changed: rebasing to 'next' stops at the renamed file."""
    from test_drift import edit, new_files

    new = new_files()
    new["vllm/moved/new_name.py"] = new["vllm/moved/new_name.py"].replace("    y = x * 3\n", "    y = x * 3 + 1\n")
    q = two_pins(tmp_path, new)
    second = edit("vllm/old_name.py", "    y = x * 7\n", "    y = x * 77\n").split("\n", 3)[3]
    q.write_patch("J2-renamed.patch", edit("vllm/old_name.py", "    y = x * 3\n", "    y = x * 33\n") + second)
    q.set_series("J2-renamed.patch")
    q.run("checkout")
    q.run("push", "--all")
    return q


def test_stop_at_a_renamed_file_leaves_only_its_failing_hunk(tmp_path: Path) -> None:
    q = _renamed_file_stack(tmp_path)
    doc = json.loads(q.run("rebase", "--pin", "next", "--json", check=False).stdout)
    assert doc["result"]["conflict_files"] == ["vllm/moved/new_name.py"]
    assert not list(q.work.rglob("*.rej"))
    text = (q.work / "vllm/moved/new_name.py").read_text()
    assert "<<<<<<< " in text and "    y = x * 77\n" in text


def test_stop_report_names_only_the_renamed_hunks_that_fail(tmp_path: Path) -> None:
    """The stop's report lists the hunks that need a hand: a renamed file's hunk that failed at
    its new place says where it went and how it fared there; one that landed there is not listed."""
    q = _renamed_file_stack(tmp_path)
    out = q.run("rebase", "--pin", "next", check=False).stdout
    listed = [line.strip() for line in out.splitlines() if " hunk #" in line]
    assert listed == ["vllm/old_name.py hunk #1: renamed to vllm/moved/new_name.py, conflict there"
                      " (closest match line 14)"], out


def test_stop_of_a_p0_patch_leaves_its_rejects(tmp_path: Path) -> None:
    q = _pushed_p0_patch(tmp_path, "I2-p0.patch", "vllm/gone.py", "    return str(x) * 2\n", "    return repr(x) * 2\n")
    doc = json.loads(q.run("rebase", "--pin", "next", "--json", check=False).stdout)
    assert doc["result"]["stopped_report"]["status"] == "file-missing"
    assert doc["result"]["conflict_files"] == ["vllm/gone.py.rej"]
    assert "+    return repr(x) * 2" in (q.work / "vllm/gone.py.rej").read_text()


def test_malformed_patch_is_reported_before_the_rebase_starts_or_goes_on(tmp_path: Path) -> None:
    q = build_queue(tmp_path, ["A1-clean.patch", "E1-conflict.patch", "M1-drift.patch"])
    q.run("push", "--all")
    before = snapshot(q)
    later = q.root / "queue/M1-drift.patch"
    good = later.read_text()
    later.write_text(good.replace("@@ -", "@@ -x", 1))
    proc = q.run("rebase", "--pin", "next", check=False)
    assert proc.returncode == 1 and "queue/M1-drift.patch:" in proc.stderr
    assert not (q.root / ".gqueue/rebase").exists() and not (q.root / ".gqueue/rebase-pin").exists()
    assert q.run("applied").stdout.split() == ["A1-clean.patch", "E1-conflict.patch", "M1-drift.patch"]
    later.write_text(good)
    assert snapshot(q) == before
    # stopped at E1; a later patch broken meanwhile: --skip refuses and the rebase stays stopped
    assert q.run("rebase", "--pin", "next", check=False).returncode == 3
    later.write_text(good.replace("@@ -", "@@ -x", 1))
    proc = q.run("rebase", "--skip", check=False)
    assert proc.returncode == 1 and "queue/M1-drift.patch:" in proc.stderr
    later.write_text(good)
    doc = json.loads(q.run("rebase", "--skip", "--json").stdout)
    assert doc["result"]["done"] and doc["result"]["summary"]["skipped"] == ["E1-conflict.patch"]


def test_empty_patch_moves_without_stopping(tmp_path: Path) -> None:
    q = build_queue(tmp_path, ["A1-clean.patch", "M1-drift.patch"], checkout=False)
    empty = q.write_patch("Z1-empty.patch", "")
    before = empty.read_bytes()
    q.set_series("A1-clean.patch", "Z1-empty.patch", "M1-drift.patch")
    q.run("checkout")
    q.run("push", "--all")
    proc = q.run("rebase", "--pin", "next", "--json", check=False)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0 and doc["result"]["done"], proc.stdout
    assert doc["result"]["summary"]["moved"] == ["A1-clean.patch", "Z1-empty.patch", "M1-drift.patch"]
    assert q.run("applied").stdout.split() == ["A1-clean.patch", "Z1-empty.patch", "M1-drift.patch"]
    assert empty.read_bytes() == before


def test_patch_upstream_in_a_renamed_file_is_retired(tmp_path: Path) -> None:
    from test_drift import _sub, edit, new_files

    new = new_files()
    new["vllm/moved/new_name.py"] = _sub(new["vllm/moved/new_name.py"], "    y = x * 3\n", "    y = x * 33\n")
    q = two_pins(tmp_path, new)
    q.write_patch("J3-renamed-upstream.patch", edit("vllm/old_name.py", "    y = x * 3\n", "    y = x * 33\n"))
    q.set_series("J3-renamed-upstream.patch")
    q.run("checkout")
    q.run("push", "--all")
    proc = q.run("rebase", "--pin", "next", "--json", check=False)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0 and doc["result"]["done"], proc.stdout
    assert doc["result"]["summary"]["retired"] == ["J3-renamed-upstream.patch"]
    assert "lifecycle: merged_upstream" in (q.root / "queue/J3-renamed-upstream.patch").read_text()


def test_p0_entry_stays_p0_through_rebase_and_refresh(tmp_path: Path) -> None:
    q = _pushed_p0_patch(tmp_path, "B2-p0.patch", "vllm/shift.py", "    y = x * 5\n", "    y = x * 55\n")
    assert json.loads(q.run("rebase", "--pin", "next", "--json").stdout)["result"]["summary"]["moved"] == ["B2-p0.patch"]
    moved = (q.root / "queue/B2-p0.patch").read_text()
    assert "--- vllm/shift.py\n+++ vllm/shift.py\n@@ -34,7 +34,7 @@" in moved and " b/" not in moved
    target = q.work / "vllm/shift.py"
    target.write_text(target.read_text().replace("x * 55", "x * 56"))
    q.run("refresh")
    refreshed = (q.root / "queue/B2-p0.patch").read_text()
    assert "+    y = x * 56" in refreshed and "+++ vllm/shift.py" in refreshed and " b/" not in refreshed
    q.run("pop", "--all")
    q.run("push", "--all")  # still applies with -p0
    assert "x * 56" in target.read_text()


def test_keep_old_leaves_the_old_pin_checked_under_its_label(tmp_path: Path) -> None:
    q = build_queue(tmp_path, ["A1-clean.patch", "M1-drift.patch"])
    q.run("push", "--all")
    old_line = (q.root / "vendor-pin.txt").read_text().splitlines()[0]
    assert old_line.startswith("pin ")
    assert q.run("rebase", "--pin", "next", "--keep-old", "pin", check=False).returncode == 2
    assert q.run("rebase", "--continue", "--keep-old", "rollback", check=False).returncode == 2
    assert not (q.root / ".gqueue/rebase").exists()
    doc = json.loads(q.run("rebase", "--pin", "next", "--keep-old", "rollback", "--json").stdout)
    assert doc["result"]["done"]
    lines = (q.root / "vendor-pin.txt").read_text().splitlines()
    assert lines[0].startswith("pin ") and "vllm-0.2.0.tar.gz" in lines[0]
    assert lines[1] == "rollback " + old_line[len("pin "):]
    assert not any(x.startswith("next ") for x in lines)
    checked = json.loads(q.run("check", "--json").stdout)
    assert [(p["label"], p["version"]) for p in checked["pins"]] == [("pin", "0.2.0"), ("rollback", "0.1.0")]


def test_keep_old_refuses_a_label_another_line_holds(tmp_path: Path) -> None:
    q = build_queue(tmp_path, ["A1-clean.patch"])
    with (q.root / "vendor-pin.txt").open("a") as handle:
        handle.write((q.root / "vendor-pin.txt").read_text().splitlines()[0].replace("pin ", "stable ", 1) + "\n")
    q.run("push", "--all")
    before = (q.root / "vendor-pin.txt").read_bytes()
    proc = q.run("rebase", "--pin", "next", "--keep-old", "stable", check=False)
    assert proc.returncode == 2 and "already has that label" in proc.stderr
    assert (q.root / "vendor-pin.txt").read_bytes() == before and not (q.root / ".gqueue/rebase").exists()


SLOW_FSYNC = '''
import os, threading, time
_real, _log = os.fsync, os.environ["GQ_TEST_FSYNC_LOG"]

def _fsync(fd):
    start = time.monotonic()
    time.sleep(0.05)  # a sync that waits on the disk
    _real(fd)
    line = "%d %f %f\\n" % (threading.get_ident(), start, time.monotonic())
    with open(_log, "a") as handle:
        handle.write(line)

os.fsync = _fsync
'''


def test_abort_syncs_the_files_it_puts_back_together(tmp_path: Path) -> None:
    """The copies --abort saves and the patch files it puts back are synced as one batch each
    (fsutil.atomic_write_many), not one after the other: a rebase of 300 patches rewrites most
    of their files, and 600 syncs in a row took seconds."""
    import os

    q = build_queue(tmp_path, ["A1-clean.patch", "E1-conflict.patch", "M1-drift.patch"])
    q.run("push", "--all")
    before = snapshot(q)
    assert q.run("rebase", "--pin", "next", check=False).returncode == 3
    for name in ("A1-clean.patch", "M1-drift.patch"):  # edited while stopped: saved, then put back
        path = q.root / "queue" / name
        path.write_text(path.read_text() + "# a note written while stopped\n")
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SLOW_FSYNC)
    log = tmp_path / "fsync.log"
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH", "")])),
           "GQ_TEST_FSYNC_LOG": str(log)}
    q.run("rebase", "--abort", env=env)
    assert snapshot(q) == before
    calls = sorted((float(a), float(b)) for _t, a, b in (line.split() for line in log.read_text().splitlines()))
    overlapping = sum(1 for (_s0, end), (start, _e1) in zip(calls, calls[1:]) if start < end)
    assert overlapping >= 2  # the two saved copies, then the two files put back
