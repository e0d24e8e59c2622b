"""A benchmark's table: printed, and written where its --out says."""

from __future__ import annotations

from pathlib import Path


def emit(lines: list[str], out: Path) -> None:
    text = "\n".join(lines) + "\n"
    print(text)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
