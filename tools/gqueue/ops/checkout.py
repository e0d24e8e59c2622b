"""checkout: the pinned release as a git work tree at work/, its base commit tagged."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ..errors import StateError
from ..model.pin import Pin
from ..progress import Meter
from ..upstream.archive import Member
from ..upstream.resolve import base_tree, fetch_base
from ..vcs.git import BRANCH
from .transaction import move
from .workspace import Workspace, base_ref

SETTLE_FROM = 1000  # files; re-reading a smaller tree's racy entries costs less than the wait
EXCLUDES = "# gqueue\n__pycache__/\n*.py[cod]\n*.so\n*.egg-info/\n/build/\n"
# the files are the pin's bytes: no .gitattributes of the tree converts them on checkout, add or
# status (a git source's '*.bat eol=crlf' with CRLF blobs read as changed once git re-read them)
ATTRIBUTES = "# gqueue\n* -text -eol -crlf -filter -ident -working-tree-encoding\n"


def set_up_info(git_dir: Path) -> None:
    """The work tree's own ignores and attributes (.git/info/exclude and attributes)."""
    (git_dir / "info").mkdir(parents=True, exist_ok=True)
    (git_dir / "info" / "exclude").write_text(EXCLUDES)
    (git_dir / "info" / "attributes").write_text(ATTRIBUTES)


@dataclass(frozen=True)
class CheckoutResult:
    pin: str
    base: str
    files: int
    created: bool
    seconds: float

    def to_json(self) -> dict[str, object]:
        return {"pin": self.pin, "base": self.base, "files": self.files, "created": self.created, "seconds": round(self.seconds, 3)}


def import_pin(ws: Workspace, pin: Pin) -> tuple[str, int]:
    """Make sure the pin's tree is in the work repository (tagged); return (commit, files)."""
    key = base_ref(pin)
    existing = ws.repo.rev(key)
    if existing is not None:
        return existing, len(ws.repo.tree_entries(existing))
    members, left_out = base_tree(pin, meter=ws.reporter.meter, live=ws.reporter.live)
    for path in left_out:
        ws.reporter.note(f"submodule {path} is not part of the pinned tree (gqueue takes the commit's own files)")
    bar = ws.reporter.meter(f"importing {pin.project} {pin.version}", len(members), "files")
    try:
        commit = ws.repo.import_tree(
            ((m.path, m.mode, m.data) for m in _counted(members, bar)),
            f"{pin.project} {pin.version} (pinned upstream)\n"
            + (f"\nupstream commit {pin.commit}\n" if pin.commit else ""),
            ref=f"refs/gqueue/import/{pin.tag_name.rsplit('/', 1)[-1]}",
            tag=pin.tag_name,
        )
    finally:
        bar.close()
    ws.repo.delete_ref(f"refs/gqueue/import/{pin.tag_name.rsplit('/', 1)[-1]}")
    if not key.startswith("refs/tags/"):
        ws.repo.update_ref(key, commit)  # last: a kill before it imports (and verifies) again
    return commit, len(members)


def _counted(members: list[Member], bar: Meter) -> Iterator[Member]:
    for member in members:
        yield member
        bar.advance(1)


def checkout(ws: Workspace) -> CheckoutResult:
    start = time.monotonic()
    pin = ws.pin()
    created = not ws.repo.exists()
    if created:
        fetch_base(pin, meter=ws.reporter.meter, live=ws.reporter.live)  # fetch and verify first: a refused download leaves no empty work/
        ws.repo.init()
        set_up_info(ws.repo.git_dir)
    commit, files = import_pin(ws, pin)
    head = ws.repo.head()
    if head is not None and not ws.repo.is_ancestor(commit, head):
        _follow_pin(ws, pin, head, commit)
    if ws.repo.head() is None:
        # the files first, HEAD last: a checkout killed before HEAD names the commit is redone
        # in full by the next run (one killed after HEAD was set but before the files were
        # written left a tree that looked changed)
        ws.repo.checkout_fresh(commit, show_progress=ws.reporter.live)
        ws.repo.update_ref(BRANCH, commit)
        ws.repo.set_head(BRANCH)
        if files >= SETTLE_FROM:
            ws.repo.settle_index()
    return CheckoutResult(pin.describe(), commit, files, created, time.monotonic() - start)


def _follow_pin(ws: Workspace, pin: Pin, head: str, commit: str) -> None:
    """work/ is on another tree than the pin's (its archive or hash changed since the checkout).
    With nothing applied and nothing changed, move it to the pin's tree; a stack is refused."""
    if ws.repo.rev(f"{head}^") is not None or ws.repo.dirty_paths():  # patches applied, or edits
        raise StateError(
            f"the stack in work/ is built on another tree than {pin.describe()} ({pin.identity}): "
            "the pin's archive or hash changed since it was checked out", path="vendor-pin.txt", line=pin.line or None,
            hint="put the old pin back and 'gqueue pop --all' (refresh first), then change it and run "
                 "'gqueue checkout' again; or move the stack with 'gqueue rebase --pin' from the old pin",
        )
    move(ws, head, commit, op="checkout")
    ws.reporter.note(f"work/ moved to the tree of {pin.describe()} (the pin's archive changed)")
