"""The journals (model/journal.py): what is written is read back, a journal of the format on
disk (and of the shape earlier releases wrote, without a version) is read, one of a later
format is told apart, and one that says nothing usable is unreadable."""

from __future__ import annotations

import hashlib
import json

import pytest

from gqueue.model.journal import (FORMAT, QueueEdit, Record, Reorder, StackMove, Unreadable, parse_journal,
                                  parse_record)

A, B = "a" * 40, "b" * 40
OLD_SERIES, NEW_SERIES = "A.patch\n", "A.patch\nN.patch\n"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.parametrize("move", [
    StackMove("push", A, B),
    StackMove("pop", A, B, force=True),
    StackMove("rebase-abort", None, B),
    StackMove("refresh", A, B, patch="P1-x.patch", sha256="c" * 64),
])
def test_a_journal_reads_back_as_written(move: StackMove) -> None:
    assert parse_journal(move.to_bytes()) == move


@pytest.mark.parametrize("record", [
    QueueEdit.between("new", OLD_SERIES, NEW_SERIES, create=("N.patch",)),
    QueueEdit.between("rename", OLD_SERIES, "B.patch\n", create=("B.patch",), delete=("A.patch",)),
    Reorder.between("C.patch", "A.patch\nC.patch\n", "C.patch\nA.patch\n", ["A.patch", "C.patch"],
                    ["C.patch", "A.patch"]),
    Reorder.between("C.patch", "A.patch\nC.patch\n", "C.patch\nA.patch\n", [], []),
])
def test_the_queue_records_read_back_as_written(record: Record) -> None:
    assert parse_record(type(record), record.to_bytes()) == record
    assert json.loads(record.to_bytes())["version"] == FORMAT


def test_the_format_on_disk_is_read() -> None:
    """What earlier releases wrote (the same keys, no version) is a move, not an unreadable journal."""
    doc = {"op": "refresh", "old": A, "new": B, "patch": "P1-x.patch", "sha256": "c" * 64}
    assert parse_journal(json.dumps(doc).encode()) == StackMove("refresh", A, B, patch="P1-x.patch", sha256="c" * 64)
    assert json.loads(StackMove("goto", A, B, force=True).to_bytes()) == {"op": "goto", "old": A, "new": B,
                                                                         "force": True, "version": 1}


def test_the_queue_records_of_earlier_releases_are_read() -> None:
    """queue-edit.json and move.json as transaction.queue_edit and reorder.move_patch wrote them
    before the records were typed: plain dicts, lists, no version."""
    edit = {"op": "new", "series_before": _sha(OLD_SERIES), "series_after": _sha(NEW_SERIES),
            "create": ["N.patch"], "delete": []}
    assert parse_record(QueueEdit, json.dumps(edit, sort_keys=True).encode()) == QueueEdit(
        "new", _sha(OLD_SERIES), _sha(NEW_SERIES), ("N.patch",), ())
    move = {"name": "C.patch", "series_before": _sha(OLD_SERIES), "series_after": _sha(NEW_SERIES),
            "stack_before": ["A.patch"], "stack_after": []}
    assert parse_record(Reorder, json.dumps(move, sort_keys=True).encode()) == Reorder(
        "C.patch", _sha(OLD_SERIES), _sha(NEW_SERIES), ("A.patch",), ())


def test_the_series_on_disk_says_which_way() -> None:
    edit = QueueEdit.between("delete", OLD_SERIES, NEW_SERIES, delete=("B.patch",))
    assert edit.way(NEW_SERIES.encode()) == "forward"
    assert edit.way(OLD_SERIES.encode()) == "back"
    assert edit.way(b"edited by hand\n") is None
    move = Reorder.between("N.patch", OLD_SERIES, NEW_SERIES, ["A.patch"], ["N.patch", "A.patch"])
    assert move.wanted(NEW_SERIES.encode()) == ("forward", ("N.patch", "A.patch"))
    assert move.wanted(OLD_SERIES.encode()) == ("back", ("A.patch",))
    assert move.wanted(None) is None


@pytest.mark.parametrize("kind", [StackMove, QueueEdit, Reorder])
def test_a_record_of_a_later_format_is_not_taken_for_this_one(kind: type[Record]) -> None:
    doc = {"op": "push", "old": A, "new": B, "name": "C.patch", "series_before": "x", "series_after": "y",
           "create": [], "delete": [], "stack_before": [], "stack_after": [], "version": FORMAT + 1}
    found = parse_record(kind, json.dumps(doc).encode())
    assert isinstance(found, Unreadable) and found.newer
    assert f"format {FORMAT + 1}" in found.reason


@pytest.mark.parametrize("data", [
    b"", b"{\"op\": \"pu", b"[]", b"{}", b'{"op": "push", "old": 1, "new": "x"}',
    b'{"op": "push", "old": "x"}', b'{"op": "refresh", "old": "x", "new": "y"}',
    b'{"op": "push", "old": "x", "new": "y", "version": "1"}', b'{"op": "push", "old": "x", "new": "y", "version": 0}',
])
def test_a_journal_that_says_nothing_usable_is_unreadable(data: bytes) -> None:
    found = parse_journal(data)
    assert isinstance(found, Unreadable) and not found.newer


@pytest.mark.parametrize(("kind", "doc"), [
    (QueueEdit, {"op": "new", "series_before": "x"}),
    (QueueEdit, {"op": "new", "series_before": "x", "series_after": "y", "create": "N.patch"}),
    (QueueEdit, {"op": 3, "series_before": "x", "series_after": "y"}),
    (Reorder, {"name": "C.patch", "series_after": "y"}),
    (Reorder, {"name": "C.patch", "series_before": "x", "series_after": "y", "stack_after": [1]}),
])
def test_a_queue_record_that_says_nothing_usable_is_unreadable(kind: type[Record], doc: dict[str, object]) -> None:
    assert isinstance(parse_record(kind, json.dumps(doc).encode()), Unreadable)
