"""The click options several commands share, defined once.

Each is a function that returns the decorator, so a command gives its own help text while the
flag names, the parameter name and the type stay the same everywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import click

from ..model.policies import POLICIES

F = TypeVar("F", bound=Callable[..., Any])


class Decorator(Protocol):
    """What click.option returns: it adds the option to the command function it is given."""

    def __call__(self, f: F, /) -> F: ...


def force(help: str | None = None) -> Decorator:
    """``-f/--force``, a flag, as ``force``."""
    return click.option("-f", "--force", is_flag=True, help=help)


def all_(help: str) -> Decorator:
    """``-a/--all``, a flag, as ``all_``."""
    return click.option("-a", "--all", "all_", is_flag=True, help=help)


def count(help: str, default: int | None = None) -> Decorator:
    """``-n N`` (at least 1), as ``count``."""
    return click.option("-n", "count", type=click.IntRange(min=1), default=default, help=help)


def profile(help: str) -> Decorator:
    """``--profile NAME``, as ``profile``."""
    return click.option("--profile", "profile", help=help)


def policy(help: str = "The plan policy (default: the profile's).") -> Decorator:
    """``--policy`` (one of the plan policies), as ``policy``."""
    return click.option("--policy", "policy", type=click.Choice(POLICIES), help=help)
