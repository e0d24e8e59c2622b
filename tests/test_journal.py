"""The stack journal (model/journal.py): what is written is read back, a journal of the format
on disk is read, and one that says nothing usable is told apart from a move."""

from __future__ import annotations

import json

import pytest

from gqueue.model.journal import StackMove, Unreadable, parse_journal

A, B = "a" * 40, "b" * 40


@pytest.mark.parametrize("move", [
    StackMove("push", A, B),
    StackMove("pop", A, B, force=True),
    StackMove("rebase-abort", None, B),
    StackMove("refresh", A, B, patch="P1-x.patch", sha256="c" * 64),
])
def test_a_journal_reads_back_as_written(move: StackMove) -> None:
    assert parse_journal(move.to_bytes()) == move


def test_the_format_on_disk_is_read() -> None:
    """What earlier releases wrote (the same keys) is a move, not an unreadable journal."""
    doc = {"op": "refresh", "old": A, "new": B, "patch": "P1-x.patch", "sha256": "c" * 64}
    assert parse_journal(json.dumps(doc).encode()) == StackMove("refresh", A, B, patch="P1-x.patch", sha256="c" * 64)
    assert json.loads(StackMove("goto", A, B, force=True).to_bytes()) == {"op": "goto", "old": A, "new": B, "force": True}


@pytest.mark.parametrize("data", [
    b"", b"{\"op\": \"pu", b"[]", b"{}", b'{"op": "push", "old": 1, "new": "x"}',
    b'{"op": "push", "old": "x"}', b'{"op": "refresh", "old": "x", "new": "y"}',
])
def test_a_journal_that_says_nothing_usable_is_unreadable(data: bytes) -> None:
    assert isinstance(parse_journal(data), Unreadable)
