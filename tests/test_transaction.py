"""ops/transaction.py: the one way a patch file leaves the queue."""

from __future__ import annotations

from pathlib import Path

import pytest
from synth import make_queue

from gqueue.ops import transaction
from gqueue.ops.workspace import Workspace
from gqueue.store import Store


def test_a_file_trashed_twice_in_one_second_keeps_both_copies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """delete, new, delete of one name within a second: the second copy went over the first."""
    q = make_queue(tmp_path)
    ws = Workspace(Store(q.root))
    monkeypatch.setattr(transaction.time, "strftime", lambda _format: "20260101-000000")
    first = q.write_patch("X1-x.patch", "first\n")
    one = transaction.trash(ws, "X1-x.patch")
    assert not first.exists()
    q.write_patch("X1-x.patch", "second\n")
    two = transaction.trash(ws, "X1-x.patch")
    assert one != two and one.parent == two.parent == q.root / ".gqueue" / "deleted"
    assert sorted(p.read_text().splitlines()[-1] for p in one.parent.iterdir()) == ["first", "second"]
    assert two.name.endswith("-X1-x.patch")
