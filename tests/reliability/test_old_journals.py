"""Journals left by a killed gqueue of the previous release (plain dicts, no version: the shape
transaction.queue_edit, reorder.move_patch and transaction.move wrote) are recovered after an
upgrade; a journal of a later format is refused, not dropped."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from synth import Queue, make_queue

import crashkit as ck

A1, A2, A3 = ck.PATCHES


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _queue(tmp_path: Path, *push: str) -> Queue:
    q = make_queue(tmp_path)
    for name, body in ck.PATCHES.items():
        q.write_patch(name, body)
    q.set_series(*ck.PATCHES)
    q.run("checkout")
    if push:
        q.run(*push)
    return q


def _old_journal(q: Queue, name: str, doc: dict[str, object]) -> None:
    """The file as the previous release wrote it: json.dumps(entry, sort_keys=True), no version."""
    (q.root / ".gqueue" / name).write_bytes(json.dumps(doc, sort_keys=True).encode())


def _repair(q: Queue) -> str:
    proc = q.run("repair", "--json")
    doc = json.loads(proc.stdout)
    return "; ".join([*doc["notes"], *doc["result"]["actions"]])


def _deleted(q: Queue, name: str) -> list[bytes]:
    return [p.read_bytes() for p in (q.root / ".gqueue" / "deleted").glob(f"*-{name}")]


def test_an_old_queue_edit_of_a_new_killed_before_the_series_is_undone(tmp_path: Path) -> None:
    q = _queue(tmp_path, "push")
    series = (q.root / "series").read_bytes()
    created = q.write_patch("PN1-fresh.patch", "")
    text = created.read_bytes()
    _old_journal(q, "queue-edit.json", {"op": "new", "series_before": _sha(series),
                                        "series_after": _sha(series + b"PN1-fresh.patch\n"),
                                        "create": ["PN1-fresh.patch"], "delete": []})
    said = _repair(q)
    assert "undid an interrupted new (moved PN1-fresh.patch to .gqueue/deleted/)" in said
    assert not created.exists() and _deleted(q, "PN1-fresh.patch") == [text]
    assert (q.root / "series").read_bytes() == series
    assert not (q.root / ".gqueue" / "queue-edit.json").exists()
    assert ck.applied_names(q.work) == (A1,)


def test_an_old_queue_edit_of_a_delete_killed_after_the_series_is_finished(tmp_path: Path) -> None:
    q = _queue(tmp_path, "push")
    before = (q.root / "series").read_bytes()
    q.set_series(A1, A2)
    after = (q.root / "series").read_bytes()
    text = (q.root / "queue" / A3).read_bytes()
    _old_journal(q, "queue-edit.json", {"op": "delete", "series_before": _sha(before), "series_after": _sha(after),
                                        "create": [], "delete": [A3]})
    said = _repair(q)
    assert f"finished an interrupted delete (moved {A3} to .gqueue/deleted/)" in said
    assert not (q.root / "queue" / A3).exists() and _deleted(q, A3) == [text]
    assert not (q.root / ".gqueue" / "queue-edit.json").exists()


def test_an_old_move_journal_killed_after_the_series_is_finished(tmp_path: Path) -> None:
    """move A3 --first killed after it popped the stack and wrote the series."""
    q = _queue(tmp_path, "push", "--all")
    before = (q.root / "series").read_bytes()
    q.run("pop", "--all")
    q.set_series(A3, A1, A2)
    after = (q.root / "series").read_bytes()
    _old_journal(q, "move.json", {"name": A3, "series_before": _sha(before), "series_after": _sha(after),
                                  "stack_before": [A1, A2, A3], "stack_after": [A3, A1, A2]})
    said = _repair(q)
    assert f"finished an interrupted move of {A3}" in said
    assert ck.applied_names(q.work) == (A3, A1, A2)
    assert not (q.root / ".gqueue" / "move.json").exists()


def test_an_old_stack_journal_is_finished(tmp_path: Path) -> None:
    """pop --all killed after it wrote its journal, before it moved anything."""
    q = _queue(tmp_path, "push", "--all")
    head = ck.git(q.work, "rev-parse", "HEAD").strip()
    base = ck.git(q.work, "rev-parse", "gqueue/pin/vllm-0.1.0^{commit}").strip()
    _old_journal(q, "journal.json", {"op": "pop", "old": head, "new": base})
    said = _repair(q)
    assert "finished an interrupted pop" in said
    assert ck.applied_names(q.work) == ()
    assert ck.git(q.work, "status", "--porcelain") == ""
    assert not (q.root / ".gqueue" / "journal.json").exists()


def test_an_old_undo_journal_is_finished(tmp_path: Path) -> None:
    """undo of a push killed after it wrote its journal, before it moved the stack."""
    q = _queue(tmp_path, "push")
    base = ck.git(q.work, "rev-parse", "gqueue/pin/vllm-0.1.0^{commit}").strip()
    _old_journal(q, "undo-journal.json", {"action": "undo", "op": "push", "files": {}, "head": base, "top": None,
                                          "mixed": False, "pos": 0, "force": False})
    said = _repair(q)
    assert "finished an interrupted undo of push" in said
    assert ck.applied_names(q.work) == ()
    assert ck.git(q.work, "status", "--porcelain") == ""
    assert not (q.root / ".gqueue" / "undo-journal.json").exists()
    redone = json.loads(q.run("redo", "--json").stdout)["result"]  # the log is at the undone step
    assert [s["op"] for s in redone["steps"]] == ["push"] and ck.applied_names(q.work) == (A1,)


def test_an_undo_journal_cut_short_is_dropped(tmp_path: Path) -> None:
    q = _queue(tmp_path, "push")
    (q.root / ".gqueue" / "undo-journal.json").write_bytes(b'{"action": "undo", "op": "pu')
    said = _repair(q)
    assert "dropped an unreadable undo journal (not JSON)" in said
    assert not (q.root / ".gqueue" / "undo-journal.json").exists()
    assert ck.applied_names(q.work) == (A1,)


@pytest.mark.parametrize("name", ["journal.json", "queue-edit.json", "move.json", "undo-journal.json"])
def test_a_journal_of_a_later_format_is_refused_and_kept(name: str, tmp_path: Path) -> None:
    """A later gqueue's journal is for that gqueue to finish: this one must not drop it (nor act
    on keys it may no longer mean the same way)."""
    q = _queue(tmp_path, "push")
    series = (q.root / "series").read_bytes()
    head = ck.git(q.work, "rev-parse", "HEAD").strip()
    doc = {"op": "pop", "old": head, "new": head, "name": A1, "series_before": _sha(series),
           "series_after": _sha(b""), "create": [], "delete": [A1], "stack_before": [A1], "stack_after": [],
           "version": 2}
    journal = q.root / ".gqueue" / name
    journal.write_text(json.dumps(doc))
    for args in (("push",), ("repair",)):
        proc = q.run(*args, "--json", check=False)
        error = json.loads(proc.stdout)["error"]
        assert proc.returncode == 1 and error["ref"] == "journal-format", proc.stdout
        assert error["path"] == f".gqueue/{name}" and "format 2" in error["message"]
    assert journal.exists()
    assert json.loads((q.root / ".gqueue" / "lock").read_text() or "{}").get("pid") is None
    assert (q.root / "series").read_bytes() == series and (q.root / "queue" / A1).exists()
    assert ck.applied_names(q.work) == (A1,)
