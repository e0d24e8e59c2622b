"""``gqueue variant NAME FILE``: take FILE as NAME's patch for the main pin, keeping the file that
serves the other gated pins as their variant (what ``rebase --keep-old`` writes, for a patch
re-authored outside a rebase, or a queue moved to a new main pin by hand).

- FILE makes the same change as queue/NAME (only line numbers and preimage ids differ): one
  file, FILE's text, its range widened to admit both releases;
- FILE has a ``retired:`` field: it replaces queue/NAME (the old diff for the older pins, its
  range below the release it was retired in, as the patch format asks);
- otherwise queue/NAME moves to queue/variants/<release>/NAME, its range cut off below the main
  pin's release, and FILE becomes queue/NAME with a range from the main pin's release on.

Nothing is written when the result does not lint as cleanly as before (lint's rules, as
``header --edit`` checks an edit).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import FormatError, UsageError
from ..model.patch import PatchFile, format_patch, parse_patch, with_fields
from ..model.variants import (admits, bounded_below, from_release, same_change, variant_file, widened,
                              with_vllm_range)
from .lint import lint, new_errors
from .workspace import Workspace


@dataclass(frozen=True)
class VariantResult:
    name: str
    kind: str  # "one-file", "retired" or "variant"
    written: tuple[str, ...]  # paths under queue/

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "kind": self.kind, "written": list(self.written)}

    def render(self) -> str:
        what = {"one-file": "the same change on both pins: one file, its range widened",
                "retired": "retired on the main pin: the file keeps the older pins' diff",
                "variant": "a new diff for the main pin; the old one kept as a variant"}[self.kind]
        return f"{self.name}: {what}\n" + "\n".join(f"  wrote queue/{p}" for p in self.written)


def adopt(ws: Workspace, name: str, source: Path) -> VariantResult:
    store = ws.store
    series = store.read_series()
    if name not in series and name not in series.parked:
        raise UsageError(f"'{name}' is neither in the series nor parked")
    try:
        data = source.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {source}: {exc.strerror}") from None
    new = parse_patch(data, name=name, path=str(source))
    old = store.read_patch(name)
    if new.meta.id != old.meta.id:
        raise FormatError(f"{source} has id '{new.meta.id}', queue/{name} has '{old.meta.id}': a variant keeps its "
                          "patch's id", path=str(source), line=new.meta.line_of("id"))
    pins = store.read_pins()
    main = pins.main
    others = sorted((p for p in pins.pins if p.label != main.label and admits(old.meta.vllm_spec, p.version)),
                    key=lambda p: p.version)
    if not others:
        raise UsageError(f"queue/{name} serves no gated pin but the main one: nothing to keep a variant for",
                         hint="copy the file over queue/NAME instead")
    older = others[0].version
    if new.meta.get("retired") is not None:
        kind, writes = "retired", [new]
    elif same_change(old.body, new.body, series.strip_of(name)):
        wider = widened(new.meta.vllm_spec, older, main.version)
        kind = "one-file"
        writes = [new if wider is None else with_fields(new, {"applies_to": with_vllm_range(new.meta.get("applies_to"), wider)})]
    else:
        rel = variant_file(older, name)
        kept = with_fields(old, {"applies_to": with_vllm_range(old.meta.get("applies_to"),
                                                                bounded_below(old.meta.vllm_spec, main.version))})
        kept = replace(kept, file=rel)
        existing = store.patch_path(rel)
        # the same command killed after it wrote the kept copy left exactly this file: go on
        if existing.exists() and existing.read_bytes() != format_patch(kept):
            raise UsageError(f"queue/{rel} exists already", path=f"queue/{rel}", hint="merge the two by hand")
        fresh = with_fields(new, {"applies_to": with_vllm_range(new.meta.get("applies_to"), from_release(main.version))})
        kind, writes = "variant", [fresh, kept]
    _require_lints(ws, writes)
    for patch in writes:
        store.patch_path(patch.stored_as).parent.mkdir(parents=True, exist_ok=True)
    # the new file first: a kill before the last rename leaves the old diff in queue/NAME or in
    # its kept copy (or both), never in neither; the same command run again finishes the change
    store.write_patches(sorted(writes, key=lambda p: store.patch_path(p.stored_as).exists()))
    return VariantResult(name, kind, tuple(p.stored_as for p in writes))


def _require_lints(ws: Workspace, writes: list[PatchFile]) -> None:
    """Refuse when the files as they would be written give lint an error it did not have."""
    before = lint(ws.store)
    after = lint(ws.store, instead={p.stored_as: format_patch(p) for p in writes})
    added = new_errors(before, after)
    if added:
        first = added[0]
        raise FormatError(f"the result would not lint: {first.path}:{first.line}: [{first.rule}] {first.message}",
                          path=first.path, line=first.line, ref="variant-invalid",
                          hint="nothing was written; fix the file (or the queue) and run it again")
