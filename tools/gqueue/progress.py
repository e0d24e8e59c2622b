"""Progress meters: how long work (a download, an extraction, an import) says how far it is.

The operations and the download layer only call ``advance``; whether anything is drawn is the
reporter's choice (a bar on a terminal, nothing otherwise).
"""

from __future__ import annotations

from typing import Callable, Protocol


class Meter(Protocol):
    def advance(self, amount: int = 1) -> None: ...

    def close(self) -> None: ...


class NullMeter:
    def advance(self, amount: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


# label, total (None: not known), unit ("bytes" or "files") -> a meter
MeterFactory = Callable[[str, "int | None", str], Meter]


def null_meter(label: str, total: int | None, unit: str) -> Meter:
    return NullMeter()
