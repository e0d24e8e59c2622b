"""Naming patches on the command line (the id, the name without .patch, a unique prefix,
quilt's ``push N`` / ``pop N``), and ``push --all`` / ``pop --all`` with nothing to do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gqueue.errors import UsageError
from gqueue.model.names import AmbiguousName, UnknownName, matches, resolve, resolve_target
from synth import BASE_FILES, Queue, make_queue, unified

NAMES = ["P58-async-placeholder-fix.patch", "P62-struct-out.patch", "P66-cudagraph.patch",
         "P67-tq-verify.patch", "P67b-tq-forward.patch", "PN14-clamp.patch"]
IDS = {n: n.split("-", 1)[0] for n in NAMES}


def test_resolve_by_file_name_stem_id_and_unique_prefix() -> None:
    for query in ("P58-async-placeholder-fix.patch", "P58-async-placeholder-fix", "P58", "P58-as",
                  "queue/P58-async-placeholder-fix.patch", "patches/P58"):
        assert resolve(query, NAMES, IDS) == "P58-async-placeholder-fix.patch", query
    assert resolve("P67", NAMES, IDS) == "P67-tq-verify.patch"  # the id wins over the prefix P67b shares
    assert resolve("P67b", NAMES, IDS) == "P67b-tq-forward.patch"


def test_resolve_refuses_an_ambiguous_prefix_naming_the_candidates() -> None:
    with pytest.raises(AmbiguousName) as info:
        resolve("P6", NAMES, IDS)
    assert "4 patches" in info.value.message
    for name in ("P62-struct-out.patch", "P66-cudagraph.patch", "P67-tq-verify.patch", "P67b-tq-forward.patch"):
        assert name in info.value.message
    assert matches("P6", NAMES, IDS) == NAMES[1:5]


def test_resolve_suggests_the_nearest_names() -> None:
    with pytest.raises(UnknownName) as info:
        resolve("P58-async-placeholder-fx", NAMES, IDS)
    assert info.value.hint is not None and "P58-async-placeholder-fix.patch" in info.value.hint
    with pytest.raises(UnknownName) as info:
        resolve("pn14", NAMES, IDS)  # no case-blind match, but the suggestion finds it
    assert info.value.hint is not None and "PN14-clamp.patch" in info.value.hint


def test_numbers_count_patches_unless_a_patch_is_named_so() -> None:
    assert resolve_target("3", NAMES, IDS) == 3
    assert resolve_target("P58", NAMES, IDS) == "P58-async-placeholder-fix.patch"
    named = [*NAMES, "3-three.patch"]
    assert resolve_target("3", named, {**IDS, "3-three.patch": "3"}) == "3-three.patch"
    with pytest.raises(UsageError):
        resolve_target("0", NAMES, IDS)


def _queue(tmp_path: Path) -> Queue:
    """Three patches on vllm/util.py: P58-async-placeholder-fix, P62-a and P66-b; checked out."""
    q = make_queue(tmp_path)
    util = BASE_FILES["vllm/util.py"]
    for name, old, new in (("P58-async-placeholder-fix.patch", "return x + 7\n", "return x + 70\n"),
                           ("P62-a.patch", "return x + 20\n", "return x + 200\n"),
                           ("P66-b.patch", "return x + 30\n", "return x + 300\n")):
        q.write_patch(name, unified("vllm/util.py", util, util.replace(old, new, 1)))
    q.set_series("P58-async-placeholder-fix.patch", "P62-a.patch", "P66-b.patch")
    q.run("checkout")
    return q


def test_cli_goto_push_and_pop_take_ids_prefixes_and_numbers(tmp_path: Path) -> None:
    q = _queue(tmp_path)
    q.run("goto", "P58")
    assert q.run("top").stdout.strip() == "P58-async-placeholder-fix.patch"
    q.run("pop", "-a")
    q.run("goto", "P58-async-placeholder-fix")
    q.run("pop", "-a")
    q.run("push", "2")  # quilt: push two patches
    assert q.run("applied").stdout.split() == ["P58-async-placeholder-fix.patch", "P62-a.patch"]
    q.run("pop", "1")
    assert q.run("top").stdout.strip() == "P58-async-placeholder-fix.patch"
    q.run("push", "P66-")
    assert q.run("top").stdout.strip() == "P66-b.patch"
    q.run("pop", "P58")
    assert q.run("top").stdout.strip() == "P58-async-placeholder-fix.patch"


def test_cli_files_diff_and_header_take_ids(tmp_path: Path) -> None:
    q = _queue(tmp_path)
    assert q.run("files", "P62").stdout.strip() == "vllm/util.py"
    assert "return x + 300" in q.run("diff", "P66").stdout
    assert "id: P62" in q.run("header", "P62").stdout


def test_cli_ambiguous_and_unknown_names_exit_2_with_candidates(tmp_path: Path) -> None:
    q = _queue(tmp_path)
    proc = q.run("goto", "P6", check=False)
    assert proc.returncode == 2
    assert "error[ambiguous-patch]" in proc.stderr and "P62-a.patch" in proc.stderr and "P66-b.patch" in proc.stderr
    proc = q.run("push", "P58-async-placeholder-fx", check=False)
    assert proc.returncode == 2 and "error[unknown-patch]" in proc.stderr
    assert "did you mean P58-async-placeholder-fix.patch" in proc.stderr
    assert q.run("applied").stdout.strip() == ""


def test_cli_rename_move_delete_take_short_names(tmp_path: Path) -> None:
    q = _queue(tmp_path)
    q.run("move", "P66", "--before", "P62")
    assert q.run("series").stdout.split() == ["P58-async-placeholder-fix.patch", "P66-b.patch", "P62-a.patch"]
    q.run("rename", "P62", "P62-renamed.patch")
    assert (q.root / "queue/P62-renamed.patch").exists()
    q.run("delete", "P62-ren")
    assert q.run("series").stdout.split() == ["P58-async-placeholder-fix.patch", "P66-b.patch"]


def test_push_all_and_pop_all_with_nothing_to_do_exit_0(tmp_path: Path) -> None:
    q = _queue(tmp_path)
    proc = q.run("pop", "--all", check=False)
    assert proc.returncode == 0 and "nothing to pop" in proc.stdout
    q.run("push", "--all")
    head = (q.work / "vllm/util.py").read_text()
    proc = q.run("push", "--all", check=False)
    assert proc.returncode == 0 and "nothing to push" in proc.stdout
    doc = json.loads(q.run("push", "--all", "--json").stdout)
    assert doc["ok"] and doc["result"]["pushed"] == [] and doc["result"]["top"] == "P66-b.patch"
    assert q.run("push", "--all", "--refresh").returncode == 0
    assert (q.work / "vllm/util.py").read_text() == head
    proc = q.run("push", check=False)  # one more patch than there is stays an error, as in quilt
    assert proc.returncode == 1 and "already applied" in proc.stderr
