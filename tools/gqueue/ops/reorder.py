"""Moving a patch to another place in the series, the applied ones re-applied in the new order."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ConflictError, UsageError
from ..model.journal import Reorder
from ..model.series import Series
from ..store import QUEUE
from .stackops import check_stack_matches, first_failure_in_order, pop, push, require_clean, require_refreshed
from .workspace import Stack, Workspace


@dataclass(frozen=True)
class MoveResult:
    name: str
    order: list[str]  # the series' names afterwards
    popped: list[str] = field(default_factory=list)
    pushed: list[str] = field(default_factory=list)
    changed: bool = True

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "series": self.order, "popped": self.popped, "pushed": self.pushed,
                "changed": self.changed}


def applied_after(names: list[str], applied: list[str], name: str) -> list[str]:
    """Which patches are applied once ``name`` sits where ``names`` (the new order) has it.

    The others keep their state. The moved patch is applied when it lands below a patch that
    stays applied (the stack is a prefix of the series), and not when it lands above one that
    stays unapplied; where the two meet, it keeps its own state."""
    kept = set(applied) - {name}
    at = names.index(name)
    stays = any(n in kept for n in names[at + 1 :]) or (name in applied and all(n in kept for n in names[:at]))
    wanted = kept | {name} if stays else kept
    out: list[str] = []
    for n in names:
        if n not in wanted:
            break
        out.append(n)
    return out


def move_patch(ws: Workspace, name: str, *, before: str | None = None, after: str | None = None,
               first: bool = False, last: bool = False) -> MoveResult:
    """Move ``name`` right above ``before``, right below ``after``, first or last in the series.

    Applied patches from the lowest one whose place changes are popped and pushed again in the
    new order; that they all apply there is checked in memory first, so a refusal changes
    nothing. Unrefreshed changes in work/ are refused when the stack has to move."""
    series = ws.store.read_series()
    for which in (name, before, after):
        if which is not None and which not in series:
            raise UsageError(f"'{which}' is not in the series")
    if name in (before, after):
        raise UsageError(f"'{name}' cannot move next to itself")
    others = [n for n in series.names if n != name]
    if (first or last) and not others:
        return MoveResult(name, series.names, changed=False)
    if first:
        before = others[0]
    elif last:
        after = others[-1]
    moved = series.move(name, before=before, after=after)
    stack = ws.stack()
    check_stack_matches(stack, series)
    if moved.text() == series.text():
        return MoveResult(name, moved.names, changed=False)
    old = stack.names
    new = applied_after(moved.names, old, name)
    same = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
    popped, pushed = old[same:], new[same:]
    if popped or pushed:
        require_refreshed(ws)
        require_clean(ws, "move a patch across the applied ones")
        _require_applies(ws, moved, stack, same, pushed)
    if not (popped or pushed):
        ws.store.write_series(moved)
        return MoveResult(name, moved.names)
    # pop, series, push: three steps. The journal names both ends, so that a kill in between
    # is finished (the series is the new one) or undone (it is still the old one) next time
    # (recovery.recover_reorder).
    with ws.journaled(Reorder.between(name, series.text(), moved.text(), old, new)):
        if popped:
            pop(ws, count=len(popped), known_clean=True)  # require_clean above, under the lock
        ws.store.write_series(moved)
        if pushed:
            push(ws, target=pushed[-1], count=None, known_clean=True)  # clean: moved only by the pop
    return MoveResult(name, moved.names, popped, pushed)


def _require_applies(ws: Workspace, series: Series, stack: Stack, index: int, names: list[str]) -> None:
    """Every patch in ``names`` applies, in that order, on applied patch number ``index``'s parent."""
    failed = first_failure_in_order(ws, stack.commit_below(index), [series.entries[series.index(n)] for n in names])
    if failed is not None:
        entry, outcome, f = failed
        raise ConflictError(
            f"{entry.name} would not apply in the new order: {outcome.failure_text()}; nothing was changed",
            path=f"{QUEUE}/{entry.name}", line=f.line,
            hint="the patches it would move past change the same lines: fold or edit them first",
        )
