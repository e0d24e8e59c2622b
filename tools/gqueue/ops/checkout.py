"""checkout: the pinned release as a git work tree at work/, its base commit tagged."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator

from ..model.pin import Pin
from ..progress import Meter
from ..upstream.archive import Member
from ..upstream.resolve import base_tree, fetch_base
from ..vcs.git import BRANCH
from .workspace import Workspace

SETTLE_FROM = 1000  # files; re-reading a smaller tree's racy entries costs less than the wait
EXCLUDES = "# gqueue\n__pycache__/\n*.py[cod]\n*.so\n*.egg-info/\n/build/\n"


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
    existing = ws.repo.rev(f"refs/tags/{pin.tag_name}")
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
        (ws.repo.git_dir / "info").mkdir(exist_ok=True)
        (ws.repo.git_dir / "info" / "exclude").write_text(EXCLUDES)
    commit, files = import_pin(ws, pin)
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
