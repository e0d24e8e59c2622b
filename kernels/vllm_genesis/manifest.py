"""The build manifest: which pin, patches and digests this installed vLLM was built from.

``gqueue build`` writes ``gqueue_manifest.json`` beside this module. Read it with
``vllm_genesis.manifest.manifest()`` or print it with ``python -m vllm_genesis.manifest``.
A source checkout (``gqueue develop``) has no manifest: ``manifest()`` returns None.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

FILENAME = "gqueue_manifest.json"


def manifest() -> dict[str, Any] | None:
    """The manifest of the installed build, or None when there is none."""
    try:
        doc: dict[str, Any] = json.loads(Path(__file__).with_name(FILENAME).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    return doc


def patch_ids() -> list[str]:
    """The ids of the patches built in, bottom of the series first."""
    doc = manifest()
    return [str(p["id"]) for p in doc.get("patches", [])] if doc else []


def main() -> int:
    doc = manifest()
    if doc is None:
        print("no gqueue manifest: this vLLM was not built by 'gqueue build'", file=sys.stderr)
        return 1
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
