"""What a build carries: the patched files against the pin, and which patch touched each.

Two sources give the same answer shape: the stack applied in ``work/`` (one commit per
patch, read from git), or a list of series entries applied in memory on the pin's tree
(for ``--profile``), which leaves ``work/`` alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConflictError, StateError
from ..model.patch import PatchFile
from ..model.pin import Pin
from .engine import TreeView, apply_patch
from .workspace import Workspace

COMPILED = "compiled"
SHIPPED = "shipped"
OTHER = "other"
COMPILED_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".cxx", ".c", ".h", ".hpp", ".hip", ".cmake")


def kind_of(path: str, package: str) -> str:
    """compiled (needs a toolchain), shipped (a file of the wheel's package) or other."""
    name = path.rsplit("/", 1)[-1]
    if path.startswith(("csrc/", "cmake/")) or name == "CMakeLists.txt" or name.endswith(COMPILED_SUFFIXES):
        return COMPILED
    if path.startswith(package + "/"):
        return SHIPPED
    return OTHER


@dataclass(frozen=True)
class Selection:
    base: str
    patches: tuple[PatchFile, ...]
    changes: dict[str, tuple[str, bytes] | None]  # path -> (mode, content), None: deleted
    touched: dict[str, tuple[str, ...]]  # path -> names of the patches that touch it, in order
    source: str  # "stack" or "series"

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.patches]

    def files_of(self, name: str) -> list[str]:
        return sorted(p for p, names in self.touched.items() if name in names)

    def by_kind(self, package: str, kind: str) -> list[str]:
        return sorted(p for p in self.changes if kind_of(p, package) == kind)


def from_stack(ws: Workspace) -> Selection:
    """The applied stack: HEAD against the pin's base, attributed commit by commit."""
    stack = ws.stack()
    touched: dict[str, list[str]] = {}
    below = stack.base
    for applied in stack.applied:
        for path in ws.repo.changed_paths(below, applied.commit):
            touched.setdefault(path, []).append(applied.name)
        below = applied.commit
    base_entries = ws.repo.tree_entries(stack.base)
    head_entries = ws.repo.tree_entries(stack.head)
    changes: dict[str, tuple[str, bytes] | None] = {}
    for path in touched:
        old, new = base_entries.get(path), head_entries.get(path)
        if old == new:
            continue
        changes[path] = None if new is None else (new.mode, ws.repo.blob(new.sha))
    pin = ws.pin()
    resolved = (ws.resolve(a.name, pin=pin)[1] for a in stack.applied)
    patches = tuple(p for p in resolved if p is not None)  # one not carried on the pin has an empty commit
    return Selection(stack.base, patches, changes, {p: tuple(n) for p, n in touched.items()}, "stack")


def from_series(ws: Workspace, names: list[str], *, pin: Pin | None = None, base: str | None = None) -> Selection:
    """``names`` (series entries) applied in memory on the tree of ``pin`` (default: the stack's;
    ``base``: its imported commit), each as the file that serves its release; each must apply
    cleanly, and one not carried there is left out."""
    ws.require_work()
    pin = pin or ws.pin()
    base = base or ws.base_commit(pin)
    series = ws.store.read_series()
    view = TreeView(ws.repo, base)
    touched: dict[str, list[str]] = {}
    patches = []
    for name in names:
        if name not in series:
            raise StateError(f"'{name}' is not in the series", path="series")
        entry = series.entries[series.index(name)]
        patch = ws.resolve(name, line=entry.line, pin=pin)[1]
        if patch is None:
            continue  # not carried on the pin
        result = apply_patch(view, patch, strip=entry.strip)
        if not result.ok:
            failure = result.first_failure()
            where = f" ({failure[0].path}: {failure[0].status})" if failure else ""
            raise ConflictError(
                f"{name} does not apply cleanly on {pin.describe()}{where}", path=f"queue/{patch.stored_as}",
                hint="push the series in work/ and refresh the patch",
            )
        for path in result.changes:
            touched.setdefault(path, []).append(name)
        patches.append(patch)
    changes: dict[str, tuple[str, bytes] | None] = {}
    for path, value in view.overlay.items():
        entry_ = view.entries.get(path)
        if value is None:
            if entry_ is not None:
                changes[path] = None
        elif entry_ is None or entry_.mode != value[0] or ws.repo.blob(entry_.sha) != value[1]:
            changes[path] = value
    return Selection(base, tuple(patches), changes, {p: tuple(n) for p, n in touched.items()}, "series")
