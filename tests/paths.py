"""Where things are, for tests (a module of its own: several conftest.py files share that name)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
