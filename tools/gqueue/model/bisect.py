"""Bisection arithmetic over positions 0..N (position k: the first k items applied).

``good`` is a position known good, ``bad`` one known bad, ``good < bad``; the culprit is the
first bad position, somewhere in ``(good, bad]``. Skipped positions are never probed again;
when only skipped positions are left between the two, the culprit is one of them or ``bad``.
Pure: the caller tests positions and feeds verdicts back.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

GOOD = "good"
BAD = "bad"
SKIP = "skip"
VERDICTS = (GOOD, BAD, SKIP)


def verdict_of(exit_code: int) -> str | None:
    """git bisect run's convention: 0 good, 125 skip, 1-127 bad; None aborts (signals, >127)."""
    if exit_code == 0:
        return GOOD
    if exit_code == 125:
        return SKIP
    if 1 <= exit_code <= 127:
        return BAD
    return None


@dataclass(frozen=True)
class Search:
    good: int
    bad: int
    skipped: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        if self.good >= self.bad:
            raise ValueError(f"good position {self.good} must be below bad position {self.bad}")

    @property
    def untested(self) -> list[int]:
        """Positions strictly between good and bad not yet skipped."""
        return [p for p in range(self.good + 1, self.bad) if p not in self.skipped]

    def next_probe(self) -> int | None:
        """The position to test next, or None when the search is over."""
        left = self.untested
        if not left:
            return None
        return min(left, key=lambda p: (abs(p - self.target), p))

    @property
    def target(self) -> int:
        """git bisect's choice on a linear history of ``bad - good`` candidates: the one
        ``n // 2`` above good, except that of three it takes the middle one (its count never
        weighs the lowest candidate), so the probes, and the number of tests, are git's."""
        n = self.bad - self.good
        return self.good + (2 if n == 3 else n // 2)

    def record(self, position: int, verdict: str) -> "Search":
        if not self.good < position < self.bad:
            raise ValueError(f"position {position} is outside ({self.good}, {self.bad})")
        if verdict == GOOD:
            return replace(self, good=position)
        if verdict == BAD:
            return replace(self, bad=position)
        if verdict == SKIP:
            return replace(self, skipped=self.skipped | {position})
        raise ValueError(f"unknown verdict {verdict!r}")

    @property
    def done(self) -> bool:
        return self.next_probe() is None

    @property
    def candidates(self) -> list[int]:
        """Once done: the positions that may be the first bad one (one unless skips hide it)."""
        return [p for p in range(self.good + 1, self.bad) if p in self.skipped] + [self.bad]

    @property
    def culprit(self) -> int | None:
        if not self.done:
            return None
        found = self.candidates
        return found[0] if len(found) == 1 else None


def steps_needed(good: int, bad: int) -> int:
    """Tests a search from ``good`` to ``bad`` needs without skips (ceil(log2(bad - good)))."""
    span, steps = bad - good, 0
    while span > 1:
        span = (span + 1) // 2
        steps += 1
    return steps
