"""How operations talk while they run: progress and notes go to a Reporter, never to print."""

from __future__ import annotations

from typing import Protocol


class Reporter(Protocol):
    def progress(self, message: str) -> None: ...

    def note(self, message: str) -> None: ...


class SilentReporter:
    def __init__(self) -> None:
        self.notes: list[str] = []

    def progress(self, message: str) -> None:
        pass

    def note(self, message: str) -> None:
        self.notes.append(message)
