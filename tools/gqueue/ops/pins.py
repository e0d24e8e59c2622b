"""pin --record: fill in the sha256s vendor-pin.txt lacks from the package index."""

from __future__ import annotations

from ..upstream.resolve import record_hashes
from .queries import PinsResult, pins_result
from .workspace import Workspace


def record(ws: Workspace, *, wheel: bool = False) -> PinsResult:
    """Every pin's missing sdist sha256 (and, with ``wheel``, its binary wheel's) from the index,
    written back to vendor-pin.txt; every pin, since build --pin needs each one's wheel."""
    pins = ws.store.read_pins()
    for entry in pins.pins:
        pins = pins.with_line(record_hashes(entry, wheel=wheel))
    ws.store.write_pins(pins)
    return pins_result(pins)
