"""How operations talk while they run: progress and notes go to a Reporter, never to print."""

from __future__ import annotations

from typing import Protocol

from ..progress import Meter, NullMeter


class Reporter(Protocol):
    def progress(self, message: str) -> None: ...

    def note(self, message: str) -> None: ...

    def meter(self, label: str, total: int | None, unit: str) -> Meter:
        """A progress meter of ``total`` ``unit`` ("bytes" or "files"; None: not known)."""
        ...

    @property
    def live(self) -> bool:
        """True when progress is drawn (a terminal): git may then draw its own."""
        ...


class SilentReporter:
    live = False

    def __init__(self) -> None:
        self.notes: list[str] = []

    def progress(self, message: str) -> None:
        pass

    def note(self, message: str) -> None:
        self.notes.append(message)

    def meter(self, label: str, total: int | None, unit: str) -> Meter:
        return NullMeter()
