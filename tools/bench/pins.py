"""The pin a benchmark's scratch queue is on: one of this repository's vendor-pin.txt pins."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))

from gqueue.model.pin import Pin, format_pin_line, parse_pins  # noqa: E402


def chosen_pin(spec: str | None) -> Pin:
    """vendor-pin.txt's pin ``spec`` (any label; its main pin for None), or exit naming it."""
    pins = parse_pins((REPO / "vendor-pin.txt").read_text())
    found = pins.main if spec is None else pins.find(spec)
    if found is None:
        raise SystemExit(f"vendor-pin.txt has no pin {spec}")
    return found


def main_pin_line(pin: Pin) -> str:
    """``pin`` as the main pin line of a scratch queue's vendor-pin.txt."""
    return format_pin_line(replace(pin, label="pin"))
